package cq

import (
	"encoding/binary"
	"net/netip"
)

// The raw source address format of FI_SOURCE_ERR error entries: Linux struct
// sockaddr_in (16 bytes) and sockaddr_in6 (28 bytes), family in host byte
// order, port and address in network byte order.
const (
	sockaddrInLen  = 16
	sockaddrIn6Len = 28
	afInet         = 2
	afInet6        = 10
)

// decodeSockaddr parses a raw sockaddr_in or sockaddr_in6.
func decodeSockaddr(b []byte) (netip.AddrPort, bool) {
	if len(b) < 2 {
		return netip.AddrPort{}, false
	}
	switch binary.NativeEndian.Uint16(b) {
	case afInet:
		if len(b) == sockaddrInLen {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4])), true
		}
	case afInet6:
		if len(b) == sockaddrIn6Len {
			return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), binary.BigEndian.Uint16(b[2:4])), true
		}
	}
	return netip.AddrPort{}, false
}

// formatAddrStr formats ap as libfabric's FI_ADDR_STR does.
func formatAddrStr(ap netip.AddrPort) string {
	if ap.Addr().Is4() {
		return "fi_sockaddr_in://" + ap.String()
	}
	return "fi_sockaddr_in6://" + ap.String()
}
