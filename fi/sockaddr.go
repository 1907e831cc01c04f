package fi

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// AddrFormat is libfabric's address format (fi_info.addr_format). String
// prints libfabric's names; an unknown value prints as AddrFormat(7).
type AddrFormat uint32

//go:generate go tool stringer -type AddrFormat -linecomment -output addrformat_string.go

// Address formats xdpfab understands, with libfabric's values.
const (
	// FormatUnspec: sockaddr_in or sockaddr_in6.
	FormatUnspec AddrFormat = 0 // FI_FORMAT_UNSPEC
	// FormatSockaddr: either family.
	FormatSockaddr AddrFormat = 1 // FI_SOCKADDR
	// FormatSockaddrIn: IPv4 only.
	FormatSockaddrIn AddrFormat = 2 // FI_SOCKADDR_IN
	// FormatSockaddrIn6: IPv6 only.
	FormatSockaddrIn6 AddrFormat = 3 // FI_SOCKADDR_IN6
	// FormatStr: "fi_sockaddr_in://a.b.c.d:port".
	FormatStr AddrFormat = 9 // FI_ADDR_STR
)

// Sizes of the raw address encodings (struct sockaddr_in / sockaddr_in6).
const (
	SockaddrInLen  = 16
	SockaddrIn6Len = 28
)

const (
	afInet  = 2
	afInet6 = 10
)

// EncodeSockaddr appends ap as a Linux struct sockaddr_in (IPv4, including
// IPv4-mapped IPv6) or sockaddr_in6, the raw format libfabric's sockets-based
// providers store in their AVs and report in FI_SOURCE_ERR err_data.
func EncodeSockaddr(dst []byte, ap netip.AddrPort) []byte {
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		var b [SockaddrInLen]byte
		binary.NativeEndian.PutUint16(b[0:], afInet)
		binary.BigEndian.PutUint16(b[2:], ap.Port())
		a := ip.As4()
		copy(b[4:8], a[:])
		return append(dst, b[:]...)
	}
	var b [SockaddrIn6Len]byte
	binary.NativeEndian.PutUint16(b[0:], afInet6)
	binary.BigEndian.PutUint16(b[2:], ap.Port())
	a := ip.As16()
	copy(b[8:24], a[:])
	return append(dst, b[:]...)
}

// DecodeSockaddr parses a raw sockaddr_in or sockaddr_in6.
func DecodeSockaddr(b []byte) (netip.AddrPort, error) {
	if len(b) < 2 {
		return netip.AddrPort{}, fmt.Errorf("sockaddr of %d bytes: %w", len(b), EINVAL)
	}
	switch binary.NativeEndian.Uint16(b) {
	case afInet:
		if len(b) < SockaddrInLen {
			return netip.AddrPort{}, fmt.Errorf("sockaddr_in of %d bytes: %w", len(b), EINVAL)
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:])), nil
	case afInet6:
		if len(b) < SockaddrIn6Len {
			return netip.AddrPort{}, fmt.Errorf("sockaddr_in6 of %d bytes: %w", len(b), EINVAL)
		}
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])), binary.BigEndian.Uint16(b[2:])), nil
	}
	return netip.AddrPort{}, fmt.Errorf("sockaddr family %d: %w", binary.NativeEndian.Uint16(b), EINVAL)
}

// FormatAddrStr formats ap in libfabric's FI_ADDR_STR form:
// fi_sockaddr_in://1.2.3.4:5000 or fi_sockaddr_in6://[::1]:5000.
func FormatAddrStr(ap netip.AddrPort) string {
	if ap.Addr().Unmap().Is4() {
		return "fi_sockaddr_in://" + netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	return "fi_sockaddr_in6://" + ap.String()
}

// ParseAddrStr parses an FI_ADDR_STR address (see FormatAddrStr). The
// family prefix must agree with the address.
func ParseAddrStr(s string) (netip.AddrPort, error) {
	proto, rest, ok := strings.Cut(s, "://")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q: want fi_sockaddr_in://host:port: %w", s, EINVAL)
	}
	ap, err := netip.ParseAddrPort(rest)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: %v: %w", s, err, EINVAL)
	}
	switch {
	case proto == "fi_sockaddr_in" && ap.Addr().Is4():
	case proto == "fi_sockaddr_in6" && ap.Addr().Is6():
	case proto == "fi_sockaddr" && (ap.Addr().Is4() || ap.Addr().Is6()):
	default:
		return netip.AddrPort{}, fmt.Errorf("address %q: %s does not match the address: %w", s, proto, EINVAL)
	}
	return ap, nil
}
