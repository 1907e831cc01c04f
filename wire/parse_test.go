package wire

import (
	"net/netip"
	"testing"
)

// ParseUDP takes what the XDP program attributes and nothing else: an
// untagged frame with an IPv4 header without options, or an IPv6 header
// followed by UDP. The same datagram behind a VLAN tag (802.1Q, 802.1ad,
// both) or with IPv4 options, even NOPs, is not one: the program leaves
// those to the kernel.
func TestParseUDP(t *testing.T) {
	src4, dst4 := netip.MustParseAddrPort("198.18.0.1:5000"), netip.MustParseAddrPort("198.18.0.2:6000")
	src6, dst6 := netip.MustParseAddrPort("[2001:2::1]:5000"), netip.MustParseAddrPort("[2001:2::2]:6000")
	for _, tc := range []struct {
		name string
		f    Frame
		ok   bool
		l4   int
	}{
		{"IPv4", Frame{Src: src4, Dst: dst4}, true, 14 + 20},
		{"IPv6", Frame{Src: src6, Dst: dst6}, true, 14 + 40},
		{"802.1Q", Frame{Src: src4, Dst: dst4, VLANs: [][2]uint16{{Ether8021Q, 10}}}, false, 0},
		{"802.1Q VLAN 0", Frame{Src: src4, Dst: dst4, VLANs: [][2]uint16{{Ether8021Q, 0}}}, false, 0},
		{"802.1ad", Frame{Src: src6, Dst: dst6, VLANs: [][2]uint16{{Ether8021AD, 20}}}, false, 0},
		{"QinQ", Frame{Src: src4, Dst: dst4, VLANs: [][2]uint16{{Ether8021AD, 20}, {Ether8021Q, 10}}}, false, 0},
		{"IPv4 NOP options", Frame{Src: src4, Dst: dst4, IPOptions: []byte{1, 1, 1, 1}}, false, 0},
		{"IPv4 LSRR", Frame{Src: src4, Dst: dst4, IPOptions: []byte{0x83, 7, 4, 198, 18, 1, 1, 1}}, false, 0},
	} {
		d, ok := ParseUDP(Build(tc.f))
		if ok != tc.ok {
			t.Errorf("%s: ok %v, want %v", tc.name, ok, tc.ok)
			continue
		}
		if ok && (d.L3Off != 14 || d.L4Off != tc.l4 || d.Src != tc.f.Src || d.Dst != tc.f.Dst) {
			t.Errorf("%s: %+v", tc.name, d)
		}
	}
}
