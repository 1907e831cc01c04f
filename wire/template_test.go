package wire

import (
	"bytes"
	"net/netip"
	"testing"
)

// TestTemplatePut holds Template.Put to Frame.Put: for IPv4 and IPv6, full
// and partial checksums and payloads from empty to jumbo, the same bytes.
func TestTemplatePut(t *testing.T) {
	frames := map[string]Frame{
		"ipv4": {SrcMAC: [6]byte{2, 1, 2, 3, 4, 5}, DstMAC: [6]byte{2, 9, 8, 7, 6, 5},
			Src: netip.MustParseAddrPort("198.18.0.1:7000"), Dst: netip.MustParseAddrPort("198.18.0.2:7001")},
		"ipv6": {SrcMAC: [6]byte{2, 1, 2, 3, 4, 5}, DstMAC: [6]byte{2, 9, 8, 7, 6, 5},
			Src: netip.MustParseAddrPort("[2001:2::1]:7000"), Dst: netip.MustParseAddrPort("[2001:2::ffff:2]:65535")},
		"ipv4-mapped": {Src: netip.MustParseAddrPort("[::ffff:198.18.0.1]:1"), Dst: netip.MustParseAddrPort("198.18.255.254:2")},
	}
	hdr := Hdr{Op: OpTagged, Flags: FlagCQData, RxCtx: 3, Group: 0xdeadbeef, AuthKey: 7, Tag: 1 << 60, CQData: 42}
	for name, f := range frames {
		tm, ok := NewTemplate(&f)
		if !ok {
			t.Fatalf("%s: no template", name)
		}
		for _, n := range []int{0, 1, 63, 64, 1024, 1471, 8000, 65000 - 100} {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(i*7 + n)
			}
			for _, partial := range []bool{false, true} {
				g := f
				g.Hdr, g.Payload, g.PartialUDPCsum = hdr, p, partial
				if !tm.Matches(&g) {
					t.Fatalf("%s: the template does not match its own frame", name)
				}
				want := Build(g)
				got := make([]byte, len(want)+3)
				if k := tm.Put(got, &g.Hdr, p, partial); k != len(want) || tm.Len(n) != len(want) {
					t.Fatalf("%s %d B partial=%v: Put %d, Len %d, want %d", name, n, partial, k, tm.Len(n), len(want))
				}
				if !bytes.Equal(got[:len(want)], want) {
					t.Fatalf("%s %d B partial=%v:\n got %x\nwant %x", name, n, partial, got[:80], want[:80])
				}
			}
		}
		if k := tm.Put(make([]byte, tm.Len(10)-1), &hdr, make([]byte, 10), true); k != 0 {
			t.Errorf("%s: Put into a short buffer wrote %d", name, k)
		}
	}
}

// TestTemplateMatches: a template answers only for its own addressing and
// for frames it can write; the rest are Frame.Put's.
func TestTemplateMatches(t *testing.T) {
	f := Frame{SrcMAC: [6]byte{2, 1}, DstMAC: [6]byte{2, 2},
		Src: netip.MustParseAddrPort("198.18.0.1:7000"), Dst: netip.MustParseAddrPort("198.18.0.2:7000")}
	tm, _ := NewTemplate(&f)
	// refused: no template can write such a frame at all.
	for name, c := range map[string]struct {
		change  func(*Frame)
		refused bool
	}{
		"dst port":  {func(g *Frame) { g.Dst = netip.AddrPortFrom(g.Dst.Addr(), 7001) }, false},
		"dst addr":  {func(g *Frame) { g.Dst = netip.MustParseAddrPort("198.18.0.3:7000") }, false},
		"src port":  {func(g *Frame) { g.Src = netip.AddrPortFrom(g.Src.Addr(), 1) }, false},
		"src addr":  {func(g *Frame) { g.Src = netip.MustParseAddrPort("198.18.0.9:7000") }, false},
		"dst mac":   {func(g *Frame) { g.DstMAC[5] = 1 }, false},
		"src mac":   {func(g *Frame) { g.SrcMAC[5] = 1 }, false},
		"vlan":      {func(g *Frame) { g.VLANs = [][2]uint16{{Ether8021Q, 5}} }, true},
		"options":   {func(g *Frame) { g.IPOptions = []byte{1, 1, 1, 0} }, true},
		"fragment":  {func(g *Frame) { g.FragOff = 0x2000 }, true},
		"proto":     {func(g *Frame) { g.Proto = 6 }, true},
		"ttl":       {func(g *Frame) { g.TTL = 1 }, true},
		"no header": {func(g *Frame) { g.NoHdr = true }, true},
		"raw":       {func(g *Frame) { g.RawHdr = []byte{1} }, true},
		"no csum":   {func(g *Frame) { g.NoUDPCsum = true }, true},
		"family":    {func(g *Frame) { g.Dst = netip.MustParseAddrPort("[2001:2::2]:7000") }, true},
	} {
		g := f
		c.change(&g)
		if tm.Matches(&g) {
			t.Errorf("%s: matched", name)
		}
		if _, ok := NewTemplate(&g); ok == c.refused {
			t.Errorf("%s: a template made: %v, want %v", name, ok, !c.refused)
		}
	}
	var zero Template
	if zero.Matches(&f) || zero.Put(make([]byte, 200), &Hdr{}, nil, true) != 0 {
		t.Error("the zero Template matched or wrote")
	}
	if _, ok := NewTemplate(nil); ok {
		t.Error("a template of nil")
	}
}

// BenchmarkTemplatePut is a send's header work for a 64-byte message to
// the template's destination: the match and the write.
func BenchmarkTemplatePut(b *testing.B) {
	f := Frame{Src: netip.MustParseAddrPort("198.18.0.1:7000"), Dst: netip.MustParseAddrPort("198.18.0.2:7000")}
	tm, _ := NewTemplate(&f)
	p, buf := make([]byte, 64), make([]byte, 2048)
	h := Hdr{Op: OpMsg}
	for b.Loop() {
		g := f
		g.Payload = p
		if !tm.Matches(&g) {
			b.Fatal("no match")
		}
		tm.Put(buf, &h, p, true)
	}
}
