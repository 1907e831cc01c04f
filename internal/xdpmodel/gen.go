package xdpmodel

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"

	"github.com/xdpfab/xdpfab/wire"
)

// Gen generates frames for the fixture (Fixture): valid xdpfab datagrams
// of every shape, and the same broken in every way the program must
// notice, each labelled with its kind. It is deterministic for a seed.
type Gen struct {
	rng   *rand.Rand
	queue [][]byte // pending frames of the current kind
	qkind string
}

// NewGen returns a generator seeded with seed.
func NewGen(seed uint64) *Gen {
	return &Gen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Kinds of frames, with their weights. A truncated frame is cut at every
// length, some 60 to 200 frames for one draw: a quarter of all frames.
var kinds = []struct {
	name   string
	weight int
	make   func(g *Gen) [][]byte
}{
	{"valid", 60, func(g *Gen) [][]byte { return [][]byte{g.valid()} }},
	{"truncated", 1, (*Gen).truncations},
	{"bad-ip-csum", 12, (*Gen).badIPCsum},
	{"bad-udp-csum", 18, (*Gen).badUDPCsum},
	{"zero-udp-csum", 9, (*Gen).zeroUDPCsum},
	{"partial-csum", 12, (*Gen).partialCsum},
	{"ipv4-options", 12, (*Gen).options},
	{"fragment", 9, (*Gen).fragment},
	{"ipv6-ext-header", 9, (*Gen).extHeader},
	{"vlan", 12, (*Gen).vlan},
	{"version", 12, (*Gen).version},
	{"length-lie", 24, (*Gen).lengthLie},
	{"special-dst", 24, (*Gen).specialDst},
	{"martian-src", 9, (*Gen).martianSrc},
	{"header", 12, (*Gen).header},
	{"ihl", 9, (*Gen).ihl},
	{"big", 6, (*Gen).big},
	{"jumbo", 12, (*Gen).jumbo},
	{"bitflip", 18, (*Gen).bitflip},
	{"random", 12, (*Gen).random},
}

var totalWeight = func() (n int) {
	for _, k := range kinds {
		n += k.weight
	}
	return n
}()

// Kinds lists the kinds of frames Next returns.
func Kinds() []string {
	var out []string
	for _, k := range kinds {
		out = append(out, k.name)
	}
	return out
}

// Next returns the next frame and its kind.
func (g *Gen) Next() (frame []byte, kind string) {
	for len(g.queue) == 0 {
		w := g.rng.IntN(totalWeight)
		for _, k := range kinds {
			if w -= k.weight; w < 0 {
				g.queue, g.qkind = k.make(g), k.name
				break
			}
		}
	}
	frame, g.queue = g.queue[0], g.queue[1:]
	return frame, g.qkind
}

func (g *Gen) pick(a ...netip.AddrPort) netip.AddrPort { return a[g.rng.IntN(len(a))] }
func (g *Gen) chance(p float64) bool                   { return g.rng.Float64() < p }

// dest picks a destination the fixture has an endpoint for (mostly).
func (g *Gen) dest(v6 bool) netip.AddrPort {
	if v6 {
		switch g.rng.IntN(4) {
		case 0:
			return EP6
		case 1:
			return netip.AddrPortFrom(LocalAddrs[3], 7100) // wildcard, local
		case 2:
			return netip.AddrPortFrom(LocalAddrs[2], 7100)
		}
		return netip.AddrPortFrom(LocalAddrs[4], 7100) // link-local
	}
	switch g.rng.IntN(10) {
	case 0, 1:
		return EP4
	case 2:
		return EPDrop
	case 3:
		return EPAuth
	case 4:
		return EPCtx
	case 5:
		return g.pick(EPNoXSK, EPNoAV, EPQ1)
	case 6:
		return netip.AddrPortFrom(LocalAddrs[1], 7100) // wildcard, local
	case 7:
		return EPSpec
	case 8:
		return netip.AddrPortFrom(LocalAddrs[1], 7200) // the wildcard beside EPSpec
	}
	return netip.AddrPortFrom(EP4.Addr(), 7001) // no endpoint
}

func (g *Gen) source(v6 bool) netip.AddrPort {
	if v6 {
		return g.pick(Known6, Known6b, netip.MustParseAddrPort("[2001:2:9::9]:5000"), netip.MustParseAddrPort("[2001:2:1::1]:5001"))
	}
	return g.pick(Known4, Known4, UserIDs, Keyed, Stranger, netip.MustParseAddrPort("198.18.1.1:5001"))
}

// spec is a random valid frame description: untagged and, over IPv4,
// without options (the program leaves the others to the kernel: kinds
// vlan and ipv4-options).
func (g *Gen) spec() wire.Frame {
	v6 := g.chance(0.35)
	f := wire.Frame{
		SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2},
		Src: g.source(v6), Dst: g.dest(v6),
		Hdr: wire.Hdr{Op: uint8(1 + g.rng.IntN(2)), RxCtx: uint8(g.rng.IntN(2)), Group: uint32(g.rng.IntN(3)),
			Tag: g.rng.Uint64(), Flags: uint8(g.rng.IntN(2))},
	}
	if g.chance(0.7) {
		f.Hdr.RxCtx = 0
	}
	if f.Src == Keyed || f.Dst == EPAuth && g.chance(0.5) {
		f.Hdr.AuthKey = AuthKey
		if g.chance(0.2) {
			f.Hdr.AuthKey = g.rng.Uint32()
		}
	}
	if !v6 && g.chance(0.1) {
		f.NoUDPCsum = true
	}
	f.Payload = g.payload(g.payloadLen())
	return f
}

func (g *Gen) tags(n int) [][2]uint16 {
	var t [][2]uint16
	for range n {
		tpid := uint16(0x8100)
		if g.chance(0.5) {
			tpid = 0x88a8
		}
		t = append(t, [2]uint16{tpid, uint16(g.rng.IntN(4096))})
	}
	return t
}

// ipOptions makes IPv4 options, padded to whole words with NOPs: only
// NOPs (valid, harmless), or one of those the kernel refuses or judges
// (source routes, which it drops with accept_source_route off; a length
// of 0 or one too short for the option) or accepts (router alert, a
// timestamp with room).
func (g *Gen) ipOptions() []byte {
	var o []byte
	switch g.rng.IntN(7) {
	case 0:
		o = []byte{0x83, 7, 4, 198, 18, 1, 1} // LSRR
	case 1:
		o = []byte{0x89, 7, 4, 198, 18, 1, 1} // SSRR
	case 2:
		o = []byte{0x44, 0} // timestamp, length 0
	case 3:
		o = []byte{0x44, 2} // timestamp, length 2: no room for its pointer
	case 4:
		o = []byte{0x94, 4, 0, 0} // router alert
	case 5:
		o = []byte{0x44, 12, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0} // timestamp with room
	}
	for n := 4 * (1 + g.rng.IntN(10)); len(o) < n || len(o)%4 != 0; {
		o = append(o, 1) // NOP
	}
	return o
}

// payloadLen favours the sizes at the checksum loop's edges.
func (g *Gen) payloadLen() int {
	switch g.rng.IntN(6) {
	case 0:
		return g.rng.IntN(64)
	case 1: // UDP lengths around multiples of 512
		n := 512*(1+g.rng.IntN(3)) - minUDPLen + g.rng.IntN(9) - 4
		return max(n, 0)
	case 2:
		return g.pick4(64, 1024, 1440, 1472-minUDPLen)
	}
	return g.rng.IntN(1500)
}

func (g *Gen) pick4(a ...int) int { return a[g.rng.IntN(len(a))] }

func (g *Gen) payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.rng.Uint32())
	}
	return b
}

func (g *Gen) valid() []byte {
	b := wire.Build(g.spec())
	if g.chance(0.1) { // Ethernet padding after the datagram
		b = append(b, make([]byte, 1+g.rng.IntN(20))...)
	}
	return b
}

// smallValid is a valid frame short enough to cut at every length.
func (g *Gen) smallValid() []byte {
	s := g.spec()
	s.Payload = g.payload(g.rng.IntN(24))
	return wire.Build(s)
}

func (g *Gen) truncations() [][]byte {
	f := g.smallValid()
	var out [][]byte
	for n := MinFrame; n < len(f); n++ {
		out = append(out, append([]byte(nil), f[:n]...))
	}
	return out
}

func one(f []byte) [][]byte { return [][]byte{f} }

func (g *Gen) badIPCsum() [][]byte {
	s := g.spec()
	s.Src, s.Dst = g.source(false), g.dest(false)
	f := wire.Build(s)
	d, _ := wire.ParseUDP(f)
	if g.chance(0.5) {
		f[d.L3Off+10] ^= byte(1 + g.rng.IntN(255))
	} else {
		f[d.L3Off+8]++ // TTL changed on the way, checksum not
	}
	return one(f)
}

func (g *Gen) badUDPCsum() [][]byte {
	f := g.valid()
	d, _ := wire.ParseUDP(f)
	switch g.rng.IntN(3) {
	case 0:
		binary.BigEndian.PutUint16(f[d.L4Off+6:], uint16(1+g.rng.IntN(0xffff)))
	case 1: // a payload byte corrupted
		n := int(binary.BigEndian.Uint16(f[d.L4Off+4:]))
		f[d.L4Off+8+g.rng.IntN(n-8)] ^= byte(1 + g.rng.IntN(255))
	case 2: // a swapped pair of 16-bit words keeps the sum: not caught
		n := int(binary.BigEndian.Uint16(f[d.L4Off+4:]))
		if n >= 8+8 {
			i := d.L4Off + 8 + 2*g.rng.IntN((n-8)/2-1)
			f[i], f[i+1], f[i+2], f[i+3] = f[i+2], f[i+3], f[i], f[i+1]
		}
	}
	return one(f)
}

func (g *Gen) zeroUDPCsum() [][]byte {
	f := g.valid()
	d, _ := wire.ParseUDP(f)
	f[d.L4Off+6], f[d.L4Off+7] = 0, 0
	return one(f)
}

// partialCsum writes the bare pseudo-header sum, as a kernel socket's
// datagram over veth carries it; sometimes with the payload changed too.
func (g *Gen) partialCsum() [][]byte {
	f := g.valid()
	d, _ := wire.ParseUDP(f)
	n := int(binary.BigEndian.Uint16(f[d.L4Off+4:]))
	ps := wire.PseudoHeaderSum(d.Src.Addr(), d.Dst.Addr(), n)
	binary.BigEndian.PutUint16(f[d.L4Off+6:], wire.Checksum16(nil, ps))
	if g.chance(0.3) {
		f[d.L4Off+8+g.rng.IntN(n-8)] ^= 0x40
	}
	if g.chance(0.2) { // the complement: not partial, not valid
		binary.BigEndian.PutUint16(f[d.L4Off+6:], ^wire.Checksum16(nil, ps))
	}
	return one(f)
}

// options makes IPv4 datagrams with options, which the program leaves to
// the kernel whatever they are.
func (g *Gen) options() [][]byte {
	s := g.spec()
	s.Src, s.Dst = g.source(false), g.dest(false)
	s.IPOptions = g.ipOptions()
	return one(wire.Build(s))
}

func (g *Gen) fragment() [][]byte {
	s := g.spec()
	s.Src, s.Dst = g.source(false), g.dest(false)
	switch g.rng.IntN(4) {
	case 0:
		s.FragOff = 0x2000 // first fragment
	case 1:
		s.FragOff = uint16(1 + g.rng.IntN(0x1fff)) // a later one
	case 2:
		s.FragOff = 0x2000 | uint16(1+g.rng.IntN(0x1fff))
	case 3:
		s.FragOff = 0x4000 // DF only: not a fragment
	}
	return one(wire.Build(s))
}

// extHeader makes an IPv6 datagram with an extension header: either only
// the next-header value changed, or a real 8-byte header inserted.
func (g *Gen) extHeader() [][]byte {
	s := g.spec()
	s.Src, s.Dst = g.source(true), g.dest(true)
	f := wire.Build(s)
	d, _ := wire.ParseUDP(f)
	nh := []byte{0, 43, 44, 60, 59, 135}[g.rng.IntN(6)]
	if g.chance(0.5) {
		f[d.L3Off+6] = nh
		return one(f)
	}
	ext := []byte{17, 0, 1, 4, 0, 0, 0, 0} // next header UDP, 8 bytes of PadN
	out := append(append(append([]byte(nil), f[:d.L4Off]...), ext...), f[d.L4Off:]...)
	out[d.L3Off+6] = nh
	binary.BigEndian.PutUint16(out[d.L3Off+4:], binary.BigEndian.Uint16(out[d.L3Off+4:])+8)
	return one(out)
}

// vlan makes frames behind one to three VLAN tags (802.1Q, 802.1ad, or
// 0x9100, an old QinQ TPID, which is neither a tag nor IP to the program):
// the program leaves every one to the kernel, which delivers a tagged
// frame only through a VLAN device of its own.
func (g *Gen) vlan() [][]byte {
	s := g.spec()
	s.VLANs = g.tags(1 + g.rng.IntN(3))
	if g.chance(0.1) {
		s.VLANs[0][0] = 0x9100
	}
	return one(wire.Build(s))
}

// version puts the other IP version in the header (the checksum fixed).
func (g *Gen) version() [][]byte {
	f := g.valid()
	d, _ := wire.ParseUDP(f)
	v := byte(g.rng.IntN(16))
	if g.chance(0.5) {
		v = map[uint8]byte{wire.AFInet: 6, wire.AFInet6: 4}[d.Family]
	}
	f[d.L3Off] = v<<4 | f[d.L3Off]&0x0f
	FixIPv4Checksum(f, d)
	return one(f)
}

// lengthLie sets the IP total length, IPv6 payload length or UDP length
// to another value, with the checksums fixed (so the length is the only
// defect) or not.
func (g *Gen) lengthLie() [][]byte {
	f := g.valid()
	if g.chance(0.3) {
		f = append(f, make([]byte, g.rng.IntN(40))...)
	}
	d, _ := wire.ParseUDP(f)
	delta := func(v uint16) uint16 {
		switch g.rng.IntN(4) {
		case 0:
			return v + uint16(1+g.rng.IntN(16))
		case 1:
			return v - uint16(1+g.rng.IntN(16))
		case 2:
			return uint16(g.rng.IntN(80))
		}
		return uint16(g.rng.Uint32())
	}
	var at int
	switch g.rng.IntN(2) {
	case 0: // IP length
		at = d.L3Off + 2
		if d.Family == wire.AFInet6 {
			at = d.L3Off + 4
		}
	case 1: // UDP length
		at = d.L4Off + 4
	}
	binary.BigEndian.PutUint16(f[at:], delta(binary.BigEndian.Uint16(f[at:])))
	FixIPv4Checksum(f, d)
	if g.chance(0.7) {
		FixUDPChecksum(f, d)
	}
	return one(f)
}

var specialDsts = []netip.Addr{
	netip.MustParseAddr("255.255.255.255"), netip.MustParseAddr("198.18.100.255"),
	netip.MustParseAddr("224.0.0.1"), netip.MustParseAddr("224.0.0.251"), netip.MustParseAddr("239.255.255.250"),
	netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.9.9.9"), netip.MustParseAddr("0.0.0.0"),
	netip.MustParseAddr("0.1.2.3"), netip.MustParseAddr("240.0.0.1"), netip.MustParseAddr("198.18.200.9"),
	netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("198.18.100.2"),
	netip.MustParseAddr("ff02::1"), netip.MustParseAddr("ff05::fb"), netip.MustParseAddr("::1"),
	netip.MustParseAddr("::"), netip.MustParseAddr("2001:2:200::9"), netip.MustParseAddr("fe80::2"),
	netip.MustParseAddr("::ffff:198.18.100.77"), netip.MustParseAddr("::ffff:127.0.0.1"),
}

// specialDst sends to broadcast, multicast, loopback, unspecified and
// other hosts' addresses, at the ports of specific and wildcard endpoints.
func (g *Gen) specialDst() [][]byte {
	dst := specialDsts[g.rng.IntN(len(specialDsts))]
	port := []uint16{7000, 7100, 7200, 7001}[g.rng.IntN(4)]
	v6 := !dst.Is4()
	s := g.spec()
	s.Src = g.source(v6)
	s.Dst = netip.AddrPortFrom(dst, port)
	return one(g.build(s))
}

var martians = []netip.Addr{
	netip.MustParseAddr("0.0.0.0"), netip.MustParseAddr("0.9.9.9"), netip.MustParseAddr("127.0.0.1"),
	netip.MustParseAddr("224.1.2.3"), netip.MustParseAddr("255.255.255.255"), netip.MustParseAddr("240.1.1.1"),
	netip.MustParseAddr("ff02::1"), netip.MustParseAddr("::1"), netip.MustParseAddr("::"),
	netip.MustParseAddr("::ffff:127.0.0.1"),
}

func (g *Gen) martianSrc() [][]byte {
	src := martians[g.rng.IntN(len(martians))]
	s := g.spec()
	s.Src = netip.AddrPortFrom(src, 5000)
	s.Dst = g.dest(!src.Is4())
	return one(g.build(s))
}

// build writes s, keeping IPv4-mapped IPv6 addresses IPv6 (wire.Frame
// would make an IPv4 frame of them).
func (g *Gen) build(s wire.Frame) []byte {
	src, dst := s.Src, s.Dst
	mapped := src.Addr().Is4In6() || dst.Addr().Is4In6()
	if !mapped {
		return wire.Build(s)
	}
	s.Src = netip.AddrPortFrom(netip.MustParseAddr("2001:2::1"), src.Port())
	s.Dst = netip.AddrPortFrom(netip.MustParseAddr("2001:2::2"), dst.Port())
	s.IPOptions = nil
	f := wire.Build(s)
	d, _ := wire.ParseUDP(f)
	a, b := src.Addr().As16(), dst.Addr().As16()
	copy(f[d.L3Off+8:], a[:])
	copy(f[d.L3Off+24:], b[:])
	d, _ = wire.ParseUDP(f)
	FixUDPChecksum(f, d)
	return f
}

// header breaks the xdpfab header: magic, version, op, receive context.
func (g *Gen) header() [][]byte {
	s := g.spec()
	b := make([]byte, wire.HdrLen)
	wire.PutHdr(b, s.Hdr)
	switch g.rng.IntN(5) {
	case 0:
		b[g.rng.IntN(4)] ^= byte(1 + g.rng.IntN(255))
	case 1:
		b[4] = byte(g.rng.IntN(4))
	case 2:
		b[5] = byte(g.rng.IntN(5))
	case 3:
		b[7] = byte(g.rng.IntN(4))
	case 4: // a plain UDP datagram
		s.NoHdr = true
		b = nil
	}
	s.RawHdr = b
	return one(wire.Build(s))
}

// ihl sets the IPv4 header length field to anything (checksum fixed).
func (g *Gen) ihl() [][]byte {
	s := g.spec()
	s.Src, s.Dst = g.source(false), g.dest(false)
	f := wire.Build(s)
	d, _ := wire.ParseUDP(f)
	f[d.L3Off] = 0x40 | byte(g.rng.IntN(16))
	FixIPv4Checksum(f, d)
	return one(f)
}

// big makes datagrams up to the longest frame a test run shows whole
// (TestLinear), with lengths at every 512-byte chunk boundary of the
// in-place checksum loop.
func (g *Gen) big() [][]byte {
	s := g.spec()
	s.Payload = nil
	room := TestLinear - s.Len()
	n := 512*(1+g.rng.IntN(6)) - minUDPLen + g.rng.IntN(9) - 4
	if g.chance(0.3) {
		n = room - g.rng.IntN(8)
	}
	s.Payload = g.payload(min(max(n, 0), room))
	return one(wire.Build(s))
}

// jumbo makes datagrams longer than a test run's linear part (TestLinear),
// so that their tail lies in fragments: lengths across the linear end, at
// the scratch buffer's 512-byte pieces, the sizes of MTU 9000 and up to
// the longest UDP datagram; some with a defect in the fragments (a
// corrupted byte, an IP or UDP length that reaches past the frame or
// stops short) and the checksums fixed or not.
func (g *Gen) jumbo() [][]byte {
	s := g.spec()
	s.Payload = nil
	hdrs := s.Len() // with the UDP and xdpfab headers
	maxUDP := 0xffff
	if s.Src.Addr().Is4() {
		maxUDP = 0xffff - (hdrs - minUDPLen - 14 - 4*len(s.VLANs)) // IPv4's total length
	}
	var n int
	switch g.rng.IntN(6) {
	case 0: // across the linear end
		n = TestLinear - hdrs + g.rng.IntN(64) - 32
	case 1: // at the edges of the scratch pieces
		n = 512*(7+g.rng.IntN(12)) - minUDPLen + g.rng.IntN(9) - 4
	case 2: // what MTU 9000 carries
		n = g.pick4(4096, 8192, 9000-20-minUDPLen, 9000-40-minUDPLen)
	case 3: // the longest datagrams
		n = maxUDP - minUDPLen - g.rng.IntN(600)
	default:
		n = TestLinear + g.rng.IntN(6000)
	}
	n = min(max(n, 0), maxUDP-minUDPLen)
	s.Payload = g.payload(n)
	f := wire.Build(s)
	d, _ := wire.ParseUDP(f)
	tail := func() int { return TestLinear + g.rng.IntN(len(f)-TestLinear) }
	if len(f) <= TestLinear {
		return one(f)
	}
	switch g.rng.IntN(5) {
	case 0: // a byte in the fragments corrupted
		f[tail()] ^= byte(1 + g.rng.IntN(255))
	case 1: // the UDP length lies
		u := binary.BigEndian.Uint16(f[d.L4Off+4:])
		binary.BigEndian.PutUint16(f[d.L4Off+4:], u+uint16(g.rng.IntN(64))-32)
		if g.chance(0.7) {
			FixUDPChecksum(f, d)
		}
	case 2: // the IP length lies
		at := d.L3Off + 2
		if d.Family == wire.AFInet6 {
			at = d.L3Off + 4
		}
		v := binary.BigEndian.Uint16(f[at:])
		binary.BigEndian.PutUint16(f[at:], v+uint16(g.rng.IntN(64))-32)
		FixIPv4Checksum(f, d)
	case 3: // the frame cut short in its fragments
		f = f[:tail()]
	}
	return one(f)
}

// bitflip flips a few random bits of a valid frame, anywhere.
func (g *Gen) bitflip() [][]byte {
	f := g.valid()
	for range 1 + g.rng.IntN(3) {
		i := g.rng.IntN(min(len(f), 120))
		if g.chance(0.3) {
			i = g.rng.IntN(len(f))
		}
		f[i] ^= 1 << g.rng.IntN(8)
	}
	if g.chance(0.5) {
		if d, ok := wire.ParseUDP(f); ok {
			FixIPv4Checksum(f, d)
			FixUDPChecksum(f, d)
		}
	}
	return one(f)
}

// random is random bytes; sometimes behind a plausible Ethernet and IP
// prefix, so that they get further.
func (g *Gen) random() [][]byte {
	f := g.payload(MinFrame + g.rng.IntN(200))
	if g.chance(0.5) && len(f) > 40 {
		v := g.valid()
		copy(f, v[:min(len(v), 14+g.rng.IntN(30))])
	}
	return one(f)
}

// FixIPv4Checksum rewrites the IPv4 header checksum of the datagram d
// locates in f, if its header is whole; other frames are left alone.
func FixIPv4Checksum(f []byte, d wire.Datagram) {
	if d.Family != wire.AFInet || d.L3Off+20 > len(f) {
		return
	}
	ihl := int(f[d.L3Off]&0x0f) * 4
	if ihl < 20 || d.L3Off+ihl > len(f) {
		return
	}
	h := f[d.L3Off : d.L3Off+ihl]
	h[10], h[11] = 0, 0
	binary.BigEndian.PutUint16(h[10:], wire.IPv4Checksum(h))
}

// FixUDPChecksum rewrites the UDP checksum over the UDP length the header
// says (as far as the frame goes); an IPv4 datagram's 0 stays 0.
func FixUDPChecksum(f []byte, d wire.Datagram) {
	u := f[d.L4Off:]
	if len(u) < 8 || d.Family == wire.AFInet && u[6] == 0 && u[7] == 0 {
		return
	}
	n := int(binary.BigEndian.Uint16(u[4:]))
	m := min(n, len(u))
	u[6], u[7] = 0, 0
	c := ^wire.Checksum16(u[:m], wire.PseudoHeaderSum(d.Src.Addr(), d.Dst.Addr(), n))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(u[6:], c)
}
