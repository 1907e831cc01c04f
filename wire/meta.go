package wire

import (
	"encoding/binary"
	"net/netip"

	"github.com/xdpfab/xdpfab/fi"
)

// The metadata's constants (bpf/xdpfab_consts.h: XDPFAB_META_*).
const (
	// MetaLen is the size of the metadata in front of a redirected frame:
	// the first MetaLen bytes of its receive descriptor (docs/wire.md).
	MetaLen = 32
	// MetaVersion is the metadata version ParseMeta accepts: 2, the
	// metadata in the frame (pushed with bpf_xdp_adjust_head); version 1
	// had it in the kernel's metadata area in front of the descriptor.
	MetaVersion = 2
)

// Meta.Flags bits.
const (
	MetaKnown     = 0x0001 // the source is in the AV: FiAddr and UserID are valid
	MetaSourceErr = 0x0002 // unknown source under the source-error policy
	MetaUserID    = 0x0004 // report UserID in place of FiAddr
	// MetaStamp: the packet starts with StampLen bytes, the time the XDP
	// program redirected it (bpf_ktime_get_ns: CLOCK_MONOTONIC, host byte
	// order), between the metadata and the Ethernet header; L3Off and
	// HdrOff count them. Only endpoints being measured ask for it (bpf.EPFStamp).
	MetaStamp = 0x0008
)

// StampLen is the length of the stamp of a MetaStamp frame.
const StampLen = 8

// Stamp returns the XDP program's stamp (CLOCK_MONOTONIC nanoseconds) at
// the start of frame, if m says the frame has one.
func Stamp(frame []byte, m Meta) (ns int64, ok bool) {
	if m.Flags&MetaStamp == 0 || len(frame) < StampLen {
		return 0, false
	}
	return int64(binary.NativeEndian.Uint64(frame)), true
}

// Address families of Meta.Family, as in Linux.
const (
	AFInet  = 2
	AFInet6 = 10
)

// Meta is struct rx_meta, the 32 bytes the XDP program writes in front of
// every frame it redirects (host byte order; the C header pins the
// offsets ParseMeta reads).
type Meta struct {
	FiAddr     uint64 // the source's AV index, FI_ADDR_NOTAVAIL when unknown
	UserID     uint64 // the source's FI_AV_USER_ID id
	EpID       uint32 // the endpoint the frame is for
	Flags      uint16 // MetaKnown, MetaSourceErr, MetaUserID, MetaStamp
	L3Off      uint16 // offset of the IP header in the frame
	HdrOff     uint16 // offset of the xdpfab header in the frame
	PayloadLen uint16 // bytes after the xdpfab header
	Family     uint8  // AFInet or AFInet6
	Version    uint8  // MetaVersion
	RxCtx      uint8  // the receive context (Hdr.RxCtx)
}

// ParseMeta decodes the metadata that precedes a redirected frame. ok is
// false when b is short or of another metadata version.
func ParseMeta(b []byte) (m Meta, ok bool) {
	ok = m.Decode(b)
	return m, ok
}

// Decode is ParseMeta into m, for the receive path: a Meta is returned on
// the stack (it has more fields than Go returns in registers), and the
// caller's copy of it, wide loads of what the callee had just written with
// narrow stores, stalled on store forwarding (a profile of one message's
// path put a fifth of its frame parsing there). m nil is false.
func (m *Meta) Decode(b []byte) bool {
	if m == nil {
		return false
	}
	if len(b) < MetaLen {
		*m = Meta{}
		return false
	}
	m.FiAddr = binary.NativeEndian.Uint64(b[0:])
	m.UserID = binary.NativeEndian.Uint64(b[8:])
	m.EpID = binary.NativeEndian.Uint32(b[16:])
	m.Flags = binary.NativeEndian.Uint16(b[20:])
	m.L3Off = binary.NativeEndian.Uint16(b[22:])
	m.HdrOff = binary.NativeEndian.Uint16(b[24:])
	m.PayloadLen = binary.NativeEndian.Uint16(b[26:])
	m.Family = b[28]
	m.Version = b[29]
	m.RxCtx = b[30]
	return m.Version == MetaVersion
}

// Source returns the sender's address and UDP port of a redirected frame,
// read at the offsets m gives. ok is false when they do not fit in frame.
func Source(frame []byte, m Meta) (src netip.AddrPort, ok bool) {
	l3, l4 := int(m.L3Off), int(m.HdrOff)-UDPHeaderLen
	if l4 < l3 || l4+2 > len(frame) {
		return src, false
	}
	port := binary.BigEndian.Uint16(frame[l4:])
	var ip netip.Addr
	switch m.Family {
	case AFInet:
		if l3+20 > l4 {
			return src, false
		}
		ip = netip.AddrFrom4([4]byte(frame[l3+12 : l3+16]))
	case AFInet6:
		if l3+40 > l4 {
			return src, false
		}
		ip = netip.AddrFrom16([16]byte(frame[l3+8 : l3+24]))
	default:
		return src, false
	}
	return netip.AddrPortFrom(ip, port), true
}

// AppendSourceSockaddr appends the sender's address (Source) to dst as a
// raw sockaddr_in or sockaddr_in6, the form FI_SOURCE_ERR completions
// report it in. ok is false, and dst is returned as it was, when the
// address does not fit in frame. It does not allocate when dst has room
// for fi.SockaddrIn6Len more bytes.
func AppendSourceSockaddr(dst, frame []byte, m Meta) (_ []byte, ok bool) {
	src, ok := Source(frame, m)
	if !ok {
		return dst, false
	}
	return fi.EncodeSockaddr(dst, src), true
}
