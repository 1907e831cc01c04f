package wire

import "encoding/binary"

// The header's constants (bpf/xdpfab_consts.h: XDPFAB_MAGIC, ...).
const (
	// Magic opens every xdpfab header: "XFAB" in network byte order.
	Magic = 0x58464142
	// Version is the header version this package writes and accepts.
	Version = 1
	// HdrLen is the size of the xdpfab header.
	HdrLen = 32
	// UDPHeaderLen is the size of the UDP header in front of it.
	UDPHeaderLen = 8
)

// Operations (Hdr.Op).
const (
	OpMsg    = 1 // fi_send family
	OpTagged = 2 // fi_tsend family
)

// FlagCQData is the Hdr.Flags bit that says CQData carries remote CQ data
// (FI_REMOTE_CQ_DATA).
const FlagCQData = 0x01

// Hdr is the decoded xdpfab header (docs/wire.md). Magic and version are
// not fields: PutHdr writes them and ParseHdr checks them.
type Hdr struct {
	Op      uint8  // OpMsg or OpTagged
	Flags   uint8  // FlagCQData
	RxCtx   uint8  // the target receive context
	Group   uint32 // the sender's peer group
	AuthKey uint32 // the sender's auth key value, 0 when none
	Tag     uint64 // the tag of an OpTagged message
	CQData  uint64 // remote CQ data when Flags has FlagCQData
}

// PutHdr writes h as an xdpfab header (magic and version included) into
// b[:HdrLen] and returns HdrLen. b must hold at least HdrLen bytes: a
// shorter one is left alone and PutHdr returns 0.
func PutHdr(b []byte, h Hdr) int {
	if len(b) < HdrLen {
		return 0
	}
	h.put((*[HdrLen]byte)(b))
	return HdrLen
}

// put is PutHdr into an array: no bounds checks.
func (h *Hdr) put(b *[HdrLen]byte) {
	binary.BigEndian.PutUint32(b[0:], Magic)
	b[4] = Version
	b[5] = h.Op
	b[6] = h.Flags
	b[7] = h.RxCtx
	binary.BigEndian.PutUint32(b[8:], h.Group)
	binary.BigEndian.PutUint32(b[12:], h.AuthKey)
	binary.BigEndian.PutUint64(b[16:], h.Tag)
	binary.BigEndian.PutUint64(b[24:], h.CQData)
}

// ParseHdr decodes the header at the start of b. ok is false when b is
// short or the magic or version do not match.
func ParseHdr(b []byte) (h Hdr, ok bool) {
	ok = h.Decode(b)
	return h, ok
}

// Decode is ParseHdr into h (see Meta.Decode). h nil is false.
func (h *Hdr) Decode(b []byte) bool {
	if h == nil {
		return false
	}
	if len(b) < HdrLen || binary.BigEndian.Uint32(b) != Magic || b[4] != Version {
		*h = Hdr{}
		return false
	}
	h.Op, h.Flags, h.RxCtx = b[5], b[6], b[7]
	h.Group = binary.BigEndian.Uint32(b[8:])
	h.AuthKey = binary.BigEndian.Uint32(b[12:])
	h.Tag = binary.BigEndian.Uint64(b[16:])
	h.CQData = binary.BigEndian.Uint64(b[24:])
	return true
}
