package wire

import (
	"encoding/binary"
	"net/netip"
)

// maxTemplateHdr is the longest header a Template holds: Ethernet (14),
// IPv6 (40) and UDP (8).
const maxTemplateHdr = 14 + 40 + UDPHeaderLen

// Template is the Ethernet, IP and UDP headers of a Frame written once, for
// a stream of frames that differ only in their xdpfab header and payload:
// a sender's messages to one peer. Its Put writes exactly what Frame.Put
// writes for such a frame, without recomputing the headers: it copies
// them, then patches the two length fields and the checksums from sums
// prepared when the template was made.
//
// Only an ordinary xdpfab frame has a template (no VLAN tags, IP options,
// fragment offset, other protocol or TTL, raw or no xdpfab header, IPv4
// datagrams with a UDP checksum); NewTemplate reports false for others,
// which Frame.Put still writes. The zero Template (and a nil one) matches
// no frame and writes nothing.
type Template struct {
	srcMAC, dstMAC [6]byte
	src, dst       netip.AddrPort
	ok, v4         bool
	n              int    // header length: where the xdpfab header starts
	ipSum          uint32 // IPv4: unfolded sum of the header with total length and checksum zero
	pseudo         uint32 // unfolded pseudo-header sum without the UDP length
	hdr            [maxTemplateHdr]byte
}

// templateable reports whether f is a frame a Template can write.
func (f *Frame) templateable() bool {
	return f != nil && f.plain() && f.Src.Addr().Unmap().Is4() == f.Dst.Addr().Unmap().Is4()
}

// plain reports whether f has none of the options a Template leaves out.
func (f *Frame) plain() bool {
	return len(f.VLANs) == 0 && len(f.IPOptions) == 0 && f.FragOff == 0 &&
		(f.Proto == 0 || f.Proto == 17) && (f.TTL == 0 || f.TTL == 64) &&
		!f.NoHdr && f.RawHdr == nil && !f.NoUDPCsum
}

// NewTemplate makes the template of f's headers; false (and the zero
// Template) when f is not a frame a template can write. f's Hdr, Payload
// and PartialUDPCsum do not matter: Put takes them per frame.
func NewTemplate(f *Frame) (Template, bool) {
	if !f.templateable() {
		return Template{}, false
	}
	g := Frame{SrcMAC: f.SrcMAC, DstMAC: f.DstMAC, Src: f.Src, Dst: f.Dst, PartialUDPCsum: true}
	var t Template
	t.n = g.UDPOffset() + UDPHeaderLen
	var room [maxTemplateHdr + HdrLen]byte
	b := room[:g.Len()]
	g.Put(b)
	copy(t.hdr[:], b[:t.n])
	t.v4 = f.Src.Addr().Unmap().Is4()
	// The lengths and checksums are patched per frame: clear them here.
	u := t.hdr[t.n-UDPHeaderLen : t.n]
	u[4], u[5], u[6], u[7] = 0, 0, 0, 0
	if t.v4 {
		ip := t.hdr[14:34]
		ip[2], ip[3], ip[10], ip[11] = 0, 0, 0, 0
		t.ipSum = sum(ip, 0)
	} else {
		t.hdr[18], t.hdr[19] = 0, 0
	}
	t.pseudo = pseudoSum(&g, 0, 17)
	t.srcMAC, t.dstMAC = f.SrcMAC, f.DstMAC
	t.src, t.dst = f.Src, f.Dst
	t.ok = true
	return t, true
}

// Matches reports whether t writes f's headers: f is a frame a template
// can write, with t's MACs and with t's addresses and ports as they were
// given (an address written another way, IPv4-mapped or with a zone, is
// Frame.Put's).
func (t *Template) Matches(f *Frame) bool {
	return t != nil && t.ok && f != nil && f.Src == t.src && f.Dst == t.dst &&
		f.SrcMAC == t.srcMAC && f.DstMAC == t.dstMAC && f.plain()
}

// Len is the length of the frame Put writes for a payload of n bytes (0
// for a nil or zero Template, which writes nothing).
func (t *Template) Len(n int) int {
	if t == nil || !t.ok {
		return 0
	}
	return t.n + HdrLen + n
}

// Put writes the frame of t's headers, h and payload into b, as Frame.Put
// would for a Frame with them (partial: PartialUDPCsum), and returns its
// length; 0, leaving b alone, when b is short, h is nil or t is nil or
// the zero Template.
func (t *Template) Put(b []byte, h *Hdr, payload []byte, partial bool) int {
	n := t.Len(len(payload))
	if n == 0 || h == nil || len(b) < n {
		return 0
	}
	b = b[:n]
	udpLen := uint32(UDPHeaderLen + HdrLen + len(payload))
	// Fixed-size copies: moves of known length, not a call to memmove.
	if t.v4 {
		*(*[14 + 20 + UDPHeaderLen]byte)(b) = *(*[14 + 20 + UDPHeaderLen]byte)(t.hdr[:])
		ip := b[14:34]
		total := 20 + udpLen
		binary.BigEndian.PutUint16(ip[2:], uint16(total))
		binary.BigEndian.PutUint16(ip[10:], ^fold(t.ipSum+total))
	} else {
		*(*[maxTemplateHdr]byte)(b) = t.hdr
		binary.BigEndian.PutUint16(b[18:], uint16(udpLen))
	}
	u := b[t.n-UDPHeaderLen:]
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	h.put((*[HdrLen]byte)(u[UDPHeaderLen:]))
	copy(u[UDPHeaderLen+HdrLen:], payload)
	if partial {
		binary.BigEndian.PutUint16(u[6:], fold(t.pseudo+udpLen))
		return n
	}
	c := ^fold(sum(u[:udpLen], t.pseudo+udpLen))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(u[6:], c)
	return n
}
