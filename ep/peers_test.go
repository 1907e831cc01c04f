package ep_test

import "net/netip"

// peersN returns n addresses no test host uses (distractor AV entries).
func peersN(n int) []netip.AddrPort {
	out := make([]netip.AddrPort, n)
	for i := range out {
		out[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, 250, byte(i + 1)}), 9)
	}
	return out
}

func netipAddrPort(a netip.Addr, p uint16) netip.AddrPort { return netip.AddrPortFrom(a, p) }
