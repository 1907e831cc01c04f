package main

// A trimmed copy of internal/frame (not importable from this module):
// Ethernet + IPv4/IPv6 + UDP + xdpfab header + payload.

import (
	"encoding/binary"
	"net/netip"

	"github.com/xdpfab/xdpfab/bpf"
)

type frameSpec struct {
	SrcMAC, DstMAC [6]byte
	Src, Dst       netip.AddrPort
	Hdr            bpf.WireHdr
	Payload        []byte
	// NoUDPCsum leaves the IPv4 UDP checksum 0 ("none"), so the
	// injector's rewriter may change the source port.
	NoUDPCsum bool
}

func (s *frameSpec) udpLen() int { return 8 + bpf.HdrLen + len(s.Payload) }

func buildFrame(s frameSpec) []byte {
	v4 := s.Src.Addr().Unmap().Is4()
	ipLen := 40
	if v4 {
		ipLen = 20
	}
	b := make([]byte, 14+ipLen+s.udpLen())
	copy(b[0:6], s.DstMAC[:])
	copy(b[6:12], s.SrcMAC[:])
	ip := b[14:]
	udpLen := s.udpLen()
	if v4 {
		binary.BigEndian.PutUint16(b[12:], 0x0800)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+udpLen))
		ip[8], ip[9] = 64, 17
		src, dst := s.Src.Addr().Unmap().As4(), s.Dst.Addr().Unmap().As4()
		copy(ip[12:16], src[:])
		copy(ip[16:20], dst[:])
		binary.BigEndian.PutUint16(ip[10:], ipv4Csum(ip[:20]))
	} else {
		binary.BigEndian.PutUint16(b[12:], 0x86dd)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6], ip[7] = 17, 64
		src, dst := s.Src.Addr().As16(), s.Dst.Addr().As16()
		copy(ip[8:24], src[:])
		copy(ip[24:40], dst[:])
	}
	u := ip[ipLen:]
	binary.BigEndian.PutUint16(u[0:], s.Src.Port())
	binary.BigEndian.PutUint16(u[2:], s.Dst.Port())
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	bpf.PutHdr(u[8:], s.Hdr)
	copy(u[8+bpf.HdrLen:], s.Payload)
	if !(v4 && s.NoUDPCsum) {
		binary.BigEndian.PutUint16(u[6:], udpCsum(&s, u[:udpLen]))
	}
	return b
}

// wirePayload is the UDP payload of a frame: xdpfab header + payload. The
// socket peers send and receive exactly these bytes.
func wirePayload(h bpf.WireHdr, payload []byte) []byte {
	b := make([]byte, bpf.HdrLen+len(payload))
	bpf.PutHdr(b, h)
	copy(b[bpf.HdrLen:], payload)
	return b
}

func ipv4Csum(h []byte) uint16 { return ^fold(sum(h, 0)) }

func udpCsum(s *frameSpec, udp []byte) uint16 {
	var acc uint32
	if a := s.Src.Addr().Unmap(); a.Is4() {
		x, y := a.As4(), s.Dst.Addr().Unmap().As4()
		acc = sum(y[:], sum(x[:], acc))
	} else {
		x, y := s.Src.Addr().As16(), s.Dst.Addr().As16()
		acc = sum(y[:], sum(x[:], acc))
	}
	acc += 17 + uint32(len(udp))
	c := ^fold(sum(udp, acc))
	if c == 0 {
		c = 0xffff
	}
	return c
}

func sum(b []byte, acc uint32) uint32 {
	for len(b) >= 2 {
		acc += uint32(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint32(b[0]) << 8
	}
	return acc
}

func fold(acc uint32) uint16 {
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return uint16(acc)
}
