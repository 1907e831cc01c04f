package wire

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/fi"
)

// PutHdr and ParseHdr round-trip every field; ParseHdr refuses short
// buffers, another magic and another version.
func TestHdr(t *testing.T) {
	h := Hdr{Op: OpTagged, Flags: FlagCQData, RxCtx: 3, Group: 0x01020304, AuthKey: 0x0a0b0c0d, Tag: 0x1112131415161718, CQData: 0x2122232425262728}
	b := make([]byte, HdrLen+1)
	if n := PutHdr(b, h); n != HdrLen {
		t.Fatalf("PutHdr wrote %d bytes", n)
	}
	want := []byte{0x58, 0x46, 0x41, 0x42, 1, 2, 1, 3, 1, 2, 3, 4, 0xa, 0xb, 0xc, 0xd,
		0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28}
	if !bytes.Equal(b[:HdrLen], want) {
		t.Errorf("PutHdr: % x\nwant % x", b[:HdrLen], want)
	}
	if got, ok := ParseHdr(b); !ok || got != h {
		t.Errorf("ParseHdr: %+v %v", got, ok)
	}
	for name, bad := range map[string][]byte{
		"short":   b[:HdrLen-1],
		"magic":   append([]byte{0}, b[1:]...),
		"version": append(append([]byte(nil), b[:4]...), append([]byte{2}, b[5:]...)...),
	} {
		if _, ok := ParseHdr(bad); ok {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseMeta(t *testing.T) {
	b := make([]byte, MetaLen)
	binary.NativeEndian.PutUint64(b[0:], 7)
	binary.NativeEndian.PutUint64(b[8:], 8)
	binary.NativeEndian.PutUint32(b[16:], 9)
	binary.NativeEndian.PutUint16(b[20:], MetaKnown|MetaUserID)
	binary.NativeEndian.PutUint16(b[22:], 14)
	binary.NativeEndian.PutUint16(b[24:], 42)
	binary.NativeEndian.PutUint16(b[26:], 100)
	b[28], b[29], b[30] = AFInet, MetaVersion, 2
	want := Meta{FiAddr: 7, UserID: 8, EpID: 9, Flags: MetaKnown | MetaUserID, L3Off: 14, HdrOff: 42, PayloadLen: 100, Family: AFInet, Version: MetaVersion, RxCtx: 2}
	if m, ok := ParseMeta(b); !ok || m != want {
		t.Errorf("ParseMeta: %+v %v", m, ok)
	}
	if _, ok := ParseMeta(b[:MetaLen-1]); ok {
		t.Errorf("short metadata accepted")
	}
	b[29] = MetaVersion + 1
	if _, ok := ParseMeta(b); ok {
		t.Errorf("metadata of another version accepted")
	}
}

// Source reads the sender back from built frames, VLAN tags and IPv4
// options included, and refuses offsets outside the frame.
func TestSource(t *testing.T) {
	for _, f := range []Frame{
		{Src: netip.MustParseAddrPort("198.18.0.1:5000"), Dst: netip.MustParseAddrPort("198.18.0.2:6000")},
		{Src: netip.MustParseAddrPort("198.18.0.1:5000"), Dst: netip.MustParseAddrPort("198.18.0.2:6000"),
			VLANs: [][2]uint16{{Ether8021AD, 1}, {Ether8021Q, 2}}, IPOptions: []byte{1, 1, 1, 0}},
		{Src: netip.MustParseAddrPort("[2001:2::1]:5001"), Dst: netip.MustParseAddrPort("[2001:2::2]:6000")},
	} {
		b := Build(f)
		l3 := 14 + 4*len(f.VLANs)
		m := Meta{L3Off: uint16(l3), Family: AFInet6, HdrOff: uint16(l3 + 40 + UDPHeaderLen)}
		if f.Src.Addr().Is4() {
			m.Family, m.HdrOff = AFInet, uint16(l3+20+len(f.IPOptions)+UDPHeaderLen)
		}
		if src, ok := Source(b, m); !ok || src != f.Src {
			t.Errorf("Source: %v %v, want %v", src, ok, f.Src)
		}
		raw, ok := AppendSourceSockaddr(nil, b, m)
		if got, err := fi.DecodeSockaddr(raw); !ok || err != nil || got != f.Src {
			t.Errorf("AppendSourceSockaddr: %v %v %v", got, ok, err)
		}
		if _, ok := Source(b[:int(m.HdrOff)-UDPHeaderLen+1], m); ok {
			t.Errorf("%v: truncated frame accepted", f.Src)
		}
		m.HdrOff = m.L3Off + UDPHeaderLen + 8
		if _, ok := Source(b, m); ok {
			t.Errorf("%v: IP header shorter than its family's accepted", f.Src)
		}
	}
}

// NoUDPCsum leaves an IPv4 datagram's UDP checksum zero and is ignored for
// IPv6, where the checksum is mandatory. IPv4Checksum verifies the header
// Put wrote: a header with a correct checksum sums to zero.
func TestChecksums(t *testing.T) {
	for _, tc := range []struct {
		src, dst string
		udpOff   int
	}{
		{"198.18.0.1:5000", "198.18.0.2:6000", 14 + 20},
		{"[2001:2::1]:5000", "[2001:2::2]:6000", 14 + 40},
	} {
		f := Frame{Src: netip.MustParseAddrPort(tc.src), Dst: netip.MustParseAddrPort(tc.dst), Payload: []byte("abc")}
		with := Build(f)
		f.NoUDPCsum = true
		without := Build(f)
		csum := func(b []byte) uint16 { return binary.BigEndian.Uint16(b[tc.udpOff+6:]) }
		if csum(with) == 0 {
			t.Errorf("%s: UDP checksum 0 without NoUDPCsum", tc.src)
		}
		v4 := tc.udpOff == 34
		if got := csum(without); v4 && got != 0 || !v4 && got != csum(with) {
			t.Errorf("%s: NoUDPCsum: checksum %#x (with: %#x)", tc.src, got, csum(with))
		}
		if v4 {
			if c := IPv4Checksum(with[14:34]); c != 0 {
				t.Errorf("IPv4 header does not verify: %#x", c)
			}
		}
	}
}

// IPv4Checksum's way for a 20-byte header gives the general sum's value,
// for every header, including those whose sums carry more than once.
func TestIPv4ChecksumFast(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	hs := [][]byte{make([]byte, 20), bytes.Repeat([]byte{0xff}, 20)}
	for range 100000 {
		h := make([]byte, 20)
		for i := range h {
			h[i] = byte(rng.Uint32())
		}
		hs = append(hs, h)
	}
	for _, h := range hs {
		if got, want := IPv4Checksum(h), ^fold(sum(h, 0)); got != want {
			t.Fatalf("IPv4Checksum(% x) = %#x, the general sum %#x", h, got, want)
		}
	}
}

// The transmit path's calls allocate nothing.
func TestPutAllocations(t *testing.T) {
	f := Frame{Src: netip.MustParseAddrPort("[2001:2::1]:5000"), Dst: netip.MustParseAddrPort("[2001:2::2]:6000"),
		Hdr: Hdr{Op: OpMsg}, Payload: make([]byte, 64)}
	buf := make([]byte, 2048)
	m := Meta{L3Off: 14, HdrOff: 14 + 40 + UDPHeaderLen, Family: AFInet6}
	raw := make([]byte, 0, fi.SockaddrIn6Len)
	if n := testing.AllocsPerRun(100, func() {
		n := f.Put(buf)
		PutHdr(buf[n:], f.Hdr)
		raw, _ = AppendSourceSockaddr(raw[:0], buf, m)
	}); n != 0 {
		t.Errorf("%v allocations per run", n)
	}
}

func BenchmarkIPv4Checksum(b *testing.B) {
	h := Build(Frame{Src: netip.MustParseAddrPort("198.18.0.1:5000"), Dst: netip.MustParseAddrPort("198.18.0.2:6000")})[14:34]
	var x uint16
	for b.Loop() {
		x += IPv4Checksum(h)
	}
	_ = x
}
