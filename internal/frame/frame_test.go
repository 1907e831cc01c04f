package frame

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

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
		s := Spec{Src: netip.MustParseAddrPort(tc.src), Dst: netip.MustParseAddrPort(tc.dst), Payload: []byte("abc")}
		with := Build(s)
		s.NoUDPCsum = true
		without := Build(s)
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
