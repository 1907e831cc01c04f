package wire

import (
	"encoding/binary"
	"net/netip"
)

// Datagram locates the UDP datagram in an Ethernet frame, as ParseUDP
// found it. Offsets are from the start of the frame.
type Datagram struct {
	// L3Off is the offset of the IP header, L4Off of the UDP header.
	L3Off, L4Off int
	// Family is AFInet or AFInet6, from the ethertype.
	Family uint8
	// Src and Dst are the addresses and UDP ports.
	Src, Dst netip.AddrPort
}

// ParseUDP finds the UDP datagram in frame the way the XDP program
// attributes a frame (bpf/xdpfab_parse.h, parse_udp): an untagged Ethernet
// header, then by the ethertype an IPv4 header of 5 words (no options),
// protocol UDP, not a fragment, or an IPv6 header directly followed by
// UDP, and a whole UDP header. ok is false for anything else, including a
// short frame and a VLAN-tagged one (802.1Q or 802.1ad: the program leaves
// those to the kernel). It checks nothing else: not the IP version,
// lengths or checksums.
func ParseUDP(frame []byte) (d Datagram, ok bool) {
	if len(frame) < 14 {
		return d, false
	}
	proto := binary.BigEndian.Uint16(frame[12:])
	l3 := 14
	var l4 int
	switch proto {
	case EtherIPv4:
		ip := frame[l3:]
		if len(ip) < 20 {
			return d, false
		}
		if ip[9] != 17 || ip[0]&0x0f != 5 || binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 {
			return d, false
		}
		l4 = l3 + 20
		if l4+UDPHeaderLen > len(frame) {
			return d, false
		}
		d.Family = AFInet
		d.Src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), binary.BigEndian.Uint16(frame[l4:]))
		d.Dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[16:20])), binary.BigEndian.Uint16(frame[l4+2:]))
	case EtherIPv6:
		ip := frame[l3:]
		if len(ip) < 40 || ip[6] != 17 {
			return d, false
		}
		l4 = l3 + 40
		if l4+UDPHeaderLen > len(frame) {
			return d, false
		}
		d.Family = AFInet6
		d.Src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[8:24])), binary.BigEndian.Uint16(frame[l4:]))
		d.Dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip[24:40])), binary.BigEndian.Uint16(frame[l4+2:]))
	default:
		return d, false
	}
	d.L3Off, d.L4Off = l3, l4
	return d, true
}

// Checksum16 returns the 16-bit ones' complement sum of b (big-endian
// words, an odd last byte padded with zero) added to acc, folded: the
// Internet checksum's arithmetic. A header or datagram whose checksum is
// right sums to 0xffff.
func Checksum16(b []byte, acc uint32) uint16 { return fold(sum(b, acc)) }

// PseudoHeaderSum is the unfolded sum of the IPv4 or IPv6 pseudo header of
// a UDP datagram of udpLen bytes from src to dst: the start of its
// checksum. Folded (Checksum16(nil, PseudoHeaderSum(...))), it is what a
// sender that leaves the checksum to the device (CHECKSUM_PARTIAL) puts in
// the checksum field.
func PseudoHeaderSum(src, dst netip.Addr, udpLen int) uint32 {
	var acc uint32
	if src.Is4() {
		a, b := src.As4(), dst.As4()
		acc = sum(b[:], sum(a[:], 0))
	} else {
		a, b := src.As16(), dst.As16()
		acc = sum(b[:], sum(a[:], 0))
	}
	return acc + 17 + uint32(udpLen)
}
