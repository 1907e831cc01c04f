package xdpmodel_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/xdpmodel"
	"github.com/xdpfab/xdpfab/wire"
)

// FuzzModel runs the model on any frame, from any ingress interface and
// rx queue, against the fixture's tables: it must never panic, and what
// it decides must hold up when checked another way (invariants). The seed
// corpus is frames of every kind the generator makes (make test runs it;
// `go test -fuzz FuzzModel ./internal/xdpmodel` runs it long).
func FuzzModel(f *testing.F) {
	g := xdpmodel.NewGen(1)
	seen := map[string]int{}
	for len(seen) < len(xdpmodel.Kinds()) || len(seenAll(seen)) < 200 {
		fr, kind := g.Next()
		if seen[kind] < 12 {
			seen[kind]++
			f.Add(fr, uint32(1), uint32(0))
		}
	}
	f.Add([]byte{}, uint32(0), uint32(1))
	f.Add(make([]byte, 14), uint32(5000), uint32(0))
	tables := xdpmodel.Fixture()
	f.Fuzz(func(t *testing.T, frame []byte, ifindex, queue uint32) {
		in := append([]byte(nil), frame...)
		r := tables.Run(frame, bpf.XDPMD{IngressIfindex: ifindex, RxQueueIndex: queue % 3})
		if string(in) != string(frame) {
			t.Fatal("the model changed the frame")
		}
		if err := invariants(tables, frame, queue%3, r); err != nil {
			t.Fatalf("%v: %v\nframe % x", r, err, frame)
		}
	})
}

func seenAll(m map[string]int) []int {
	var v []int
	for _, n := range m {
		for range n {
			v = append(v, n)
		}
	}
	return v
}

// invariants checks a result against the frame, mostly through the wire
// package rather than the model's own steps.
func invariants(tb *xdpmodel.Tables, frame []byte, queue uint32, r xdpmodel.Result) error {
	outcomes := map[uint32][]bpf.Counter{
		xdpmodel.Pass:     {bpf.CounterPass, bpf.CounterNotLocal},
		xdpmodel.Drop:     {bpf.CounterDropPolicy, bpf.CounterMalformed, bpf.CounterCsumError, bpf.CounterRedirectFail, bpf.CounterWrongQueue},
		xdpmodel.Redirect: {bpf.CounterTranslated, bpf.CounterUnknown},
	}
	ok := false
	for _, c := range outcomes[r.Action] {
		ok = ok || c == r.Counter
	}
	if !ok {
		return fmt.Errorf("counter %v with action %d", r.Counter, r.Action)
	}
	if r.Row < 0 || r.Row >= bpf.IfindexSlots {
		return fmt.Errorf("counter row %d", r.Row)
	}
	if r.Action == xdpmodel.Redirect && !r.HasMeta || r.HasMeta && r.Action != xdpmodel.Redirect && r.Counter != bpf.CounterRedirectFail {
		return fmt.Errorf("metadata written (%v) with %v", r.HasMeta, r)
	}
	d, isUDP := wire.ParseUDP(frame)
	// A frame to no endpoint's port is the kernel's.
	port := false
	for k := range tb.EPs {
		port = port || isUDP && k.Local.AddrPort().Port() == d.Dst.Port()
	}
	if !port && (r.Action != xdpmodel.Pass || r.Counter != bpf.CounterPass) {
		return fmt.Errorf("no endpoint has port %d (or not UDP), yet %v", d.Dst.Port(), r)
	}
	if !r.HasMeta {
		return nil
	}

	// Metadata: only for a datagram that passes every check. A stamped
	// frame (an endpoint being measured) is the stamp and the frame: the
	// offsets count the stamp.
	m := r.Meta
	stamp, out := 0, frame
	if r.Stamped {
		stamp, out = wire.StampLen, append(make([]byte, wire.StampLen), frame...)
	}
	if r.Stamped != (m.Flags&wire.MetaStamp != 0) {
		return fmt.Errorf("stamped %v, metadata flags %#x", r.Stamped, m.Flags)
	}
	if !isUDP || int(m.L3Off) != d.L3Off+stamp || int(m.HdrOff) != d.L4Off+wire.UDPHeaderLen+stamp || m.Version != wire.MetaVersion {
		return fmt.Errorf("metadata offsets %+v, datagram %+v", m, d)
	}
	if !xdpmodel.DstUnicast(d.Dst.Addr()) || xdpmodel.SrcMartian(d.Src.Addr()) {
		return fmt.Errorf("delivered from %v to %v", d.Src, d.Dst)
	}
	// Never tagged, never with IPv4 options (ParseUDP takes neither, and
	// the frame must start as it says).
	if et := binary.BigEndian.Uint16(frame[12:]); et != wire.EtherIPv4 && et != wire.EtherIPv6 ||
		et == wire.EtherIPv4 && frame[14]&0x0f != 5 {
		return fmt.Errorf("delivered a frame with ethertype %#04x, IP header % x", et, frame[14:15])
	}
	// The fixture has no entry for an IPv4-mapped IPv6 address (bpf.MakeAddr
	// unmaps): the program sees such a destination as IPv6, no endpoint's.
	if d.Dst.Addr().Is4In6() {
		return fmt.Errorf("delivered to %v", d.Dst)
	}
	ep, byAddr := tb.EPs[bpf.EPKey{Local: bpf.MakeAddr(d.Dst)}]
	if !byAddr {
		k := bpf.MakeAddr(d.Dst)
		k.Addr = [16]byte{}
		var wild bool
		ep, wild = tb.EPs[bpf.EPKey{Local: k}]
		if !wild {
			return fmt.Errorf("delivered to %v: no endpoint", d.Dst)
		}
		lk := bpf.MakeAddr(d.Dst)
		lk.Port = 0
		if !tb.Local[lk] {
			return fmt.Errorf("delivered to %v through a wildcard: not local", d.Dst)
		}
	}
	if r.Stamped != (ep.Flags&bpf.EPFStamp != 0) {
		return fmt.Errorf("stamped %v for endpoint %+v", r.Stamped, ep)
	}
	if m.EpID != ep.EpId || uint16(m.RxCtx) >= ep.RxCtxs || queue >= uint32(ep.Queues) {
		return fmt.Errorf("metadata %+v for endpoint %+v", m, ep)
	}
	if r.Slot != ep.XskBase+uint32(m.RxCtx)*uint32(ep.Queues)+queue {
		return fmt.Errorf("slot %d", r.Slot)
	}
	if (r.Action == xdpmodel.Redirect) != tb.XSKs[r.Slot] {
		return fmt.Errorf("redirect to slot %d: socket there %v", r.Slot, tb.XSKs[r.Slot])
	}
	// The IP header as the kernel checks it.
	l3 := frame[d.L3Off:]
	udpLen := int(binary.BigEndian.Uint16(frame[d.L4Off+4:]))
	if d.Family == wire.AFInet {
		ihl := int(l3[0]&0x0f) * 4
		tot := int(binary.BigEndian.Uint16(l3[2:]))
		if l3[0]>>4 != 4 || wire.IPv4Checksum(l3[:ihl]) != 0 || tot > len(l3) || udpLen > tot-ihl {
			return fmt.Errorf("IPv4 header or lengths wrong: % x", l3[:ihl])
		}
	} else {
		if l3[0]>>4 != 6 || 40+int(binary.BigEndian.Uint16(l3[4:])) > len(l3) || udpLen > int(binary.BigEndian.Uint16(l3[4:])) {
			return fmt.Errorf("IPv6 header or lengths wrong: % x", l3[:40])
		}
	}
	// The UDP checksum: valid, none (IPv4), or the pseudo-header sum.
	u := frame[d.L4Off : d.L4Off+udpLen]
	field := binary.BigEndian.Uint16(u[6:])
	ps := wire.PseudoHeaderSum(d.Src.Addr(), d.Dst.Addr(), udpLen)
	switch {
	case field == 0 && d.Family == wire.AFInet:
	case field == wire.Checksum16(nil, ps):
	case wire.Checksum16(u, ps) == 0xffff:
	default:
		return fmt.Errorf("UDP checksum %#04x wrong", field)
	}
	if int(m.PayloadLen) != udpLen-wire.UDPHeaderLen-wire.HdrLen {
		return fmt.Errorf("payload_len %d, UDP length %d", m.PayloadLen, udpLen)
	}
	h, okHdr := wire.ParseHdr(out[m.HdrOff:])
	if !okHdr || h.RxCtx != m.RxCtx || h.Op == 0 || h.Op > wire.OpTagged {
		return fmt.Errorf("xdpfab header %+v (ok %v)", h, okHdr)
	}
	if src, _ := wire.Source(out, m); src != d.Src {
		return fmt.Errorf("wire.Source %v, datagram from %v", src, d.Src)
	}
	// The source's translation.
	av, known := tb.AV[bpf.AVKey{AvId: ep.AvId, Src: bpf.MakeAddr(d.Src)}]
	known = known && ep.AvId != 0 && !d.Src.Addr().Is4In6() &&
		(ep.AuthKey == 0 || av.AuthKey == ep.AuthKey && h.AuthKey == ep.AuthKey)
	if known != (m.Flags&wire.MetaKnown != 0) || known && m.FiAddr != av.FiAddr ||
		!known && (m.FiAddr != ^uint64(0) || (m.Flags&wire.MetaSourceErr != 0) != (ep.Policy == bpf.PolicySourceErr)) {
		return fmt.Errorf("source %v known %v: metadata %+v", d.Src, known, m)
	}
	if !known && ep.Policy == bpf.PolicyDrop {
		return fmt.Errorf("unknown source delivered to a dropping endpoint")
	}
	return nil
}

// Every kind of generated frame reaches each outcome the fixture allows
// for it: the generator's coverage, so the differential test compares
// where it matters. It runs in make test (no privileges needed).
func TestGenCoverage(t *testing.T) {
	tb := xdpmodel.Fixture()
	g := xdpmodel.NewGen(7)
	got := map[bpf.Counter]int{}
	perKind := map[string]map[bpf.Counter]int{}
	for range 20000 {
		f, kind := g.Next()
		r := tb.Run(f, bpf.XDPMD{IngressIfindex: 1})
		got[r.Counter]++
		if perKind[kind] == nil {
			perKind[kind] = map[bpf.Counter]int{}
		}
		perKind[kind][r.Counter]++
		if err := invariants(tb, f, 0, r); err != nil {
			t.Fatalf("%s frame: %v: %v\n% x", kind, r, err, f)
		}
	}
	for c := bpf.CounterTranslated; c < bpf.NumCounters; c++ {
		if got[c] == 0 {
			t.Errorf("no generated frame lands in %v", c)
		}
	}
	for _, k := range xdpmodel.Kinds() {
		if len(perKind[k]) == 0 {
			t.Errorf("kind %s never generated", k)
		}
	}
	t.Logf("outcomes of 20000 frames: %v", got)
	for k, m := range perKind {
		t.Logf("  %-16s %v", k, m)
	}
}
