package bpf

import (
	"encoding/binary"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Go names for the map key and value structs in xdpfab_structs.h. bpf2go
// generates them from the object's BTF, so they cannot drift from C.
type (
	// Addr is struct xdpfab_addr: a peer or local address and UDP port.
	Addr = xdpfabXdpfabAddr
	// AVKey is struct xdpfab_av_key, the forward AV map's key.
	AVKey = xdpfabXdpfabAvKey
	// AVVal is struct xdpfab_av_val, the forward AV map's value.
	AVVal = xdpfabXdpfabAvVal
	// RevKey is struct xdpfab_rev_key: (AV id, index).
	RevKey = xdpfabXdpfabRevKey
	// RevVal is struct xdpfab_rev_val, the reverse AV table's value.
	RevVal = xdpfabXdpfabRevVal
	// AVMeta is struct xdpfab_av_meta, per-AV attributes.
	AVMeta = xdpfabXdpfabAvMeta
	// AuthKeyVal is struct xdpfab_authkey_val.
	AuthKeyVal = xdpfabXdpfabAuthkeyVal
	// EPKey is struct xdpfab_ep_key, the endpoint table's key.
	EPKey = xdpfabXdpfabEpKey
	// EPVal is struct xdpfab_ep_val, the endpoint table's value.
	EPVal = xdpfabXdpfabEpVal
)

// NameString returns the AV's name (the NUL-terminated Name field).
func (m *AVMeta) NameString() string {
	for i, c := range m.Name {
		if c == 0 {
			return string(m.Name[:i])
		}
	}
	return string(m.Name[:])
}

// Meta is struct xdpfab_meta, the 32 bytes XDP writes in front of every
// redirected frame (ParseMeta decodes it; the C header pins its offsets).
type Meta struct {
	FiAddr     uint64
	UserId     uint64
	EpId       uint32
	Flags      uint16
	L3Off      uint16 // offset of the IP header in the frame
	HdrOff     uint16 // offset of the xdpfab header in the frame
	PayloadLen uint16
	Family     uint8
	Version    uint8
	RxCtx      uint8
}

// Constants mirrored from xdpfab_consts.h (TestConstsMatchC keeps them honest).
const (
	Magic        = 0x58464142
	Version      = 1
	OpMsg        = 1
	OpTagged     = 2
	HdrFlagData  = 0x01
	HdrLen       = 32
	MetaLen      = 32
	MetaVersion  = 1
	MetaKnown    = 0x0001
	MetaSrcErr   = 0x0002
	MetaUserID   = 0x0004
	AVFUserID    = 0x0001
	AFInet       = 2
	AFInet6      = 10
	UDPHeaderLen = 8
)

// Policy is what an endpoint does with datagrams from unknown sources.
type Policy uint8

// Policies (enum xdpfab_policy).
const (
	PolicyNotAvail  Policy = 0 // deliver with FI_ADDR_NOTAVAIL
	PolicySourceErr Policy = 1 // deliver flagged for an EADDRNOTAVAIL completion
	PolicyDrop      Policy = 2 // drop in the kernel, counted
)

// IfindexSlots is the number of ifindexes with counters of their own
// (XDPFAB_IFINDEX_SLOTS); higher ones share slot 0.
const IfindexSlots = 1024

// Counter indexes a row of xdpfab_stats (enum xdpfab_counter).
type Counter uint32

// Counters. Every frame counts in CounterRX and in exactly one other.
const (
	CounterRX Counter = iota
	CounterTranslated
	CounterUnknown
	CounterDropPolicy
	CounterMalformed
	CounterPass
	CounterRedirectFail
	NumCounters
)

var counterNames = [NumCounters]string{
	"rx", "translated", "unknown_source", "dropped_policy", "malformed", "passed", "redirect_failed",
}

// String returns the counter's metric-style name.
func (c Counter) String() string {
	if c < NumCounters {
		return counterNames[c]
	}
	return "unknown"
}

// Map and program names, as bpftool shows them.
const (
	MapAV      = "xdpfab_av"
	MapAVRev   = "xdpfab_avrev"
	MapAVMeta  = "xdpfab_avmeta"
	MapAuthKey = "xdpfab_authkey"
	MapEP      = "xdpfab_ep"
	MapXSKs    = "xdpfab_xsks"
	MapStats   = "xdpfab_stats"
	ProgRX     = "xdpfab_rx"
)

// LoadSpec returns the collection spec of the embedded, precompiled object.
func LoadSpec() (*ebpf.CollectionSpec, error) { return loadXdpfab() }

// MakeAddr converts a netip.AddrPort to the map representation. IPv4 and
// IPv4-mapped IPv6 addresses become AF_INET.
func MakeAddr(ap netip.AddrPort) Addr {
	var a Addr
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		a.Family = AFInet
		b := ip.As4()
		copy(a.Addr[:], b[:])
	} else {
		a.Family = AFInet6
		a.Addr = ip.As16()
	}
	a.Port = hton16(ap.Port())
	return a
}

// AddrPort converts back to a netip.AddrPort.
func (a Addr) AddrPort() netip.AddrPort {
	var ip netip.Addr
	if a.Family == AFInet {
		ip = netip.AddrFrom4([4]byte(a.Addr[:4]))
	} else {
		ip = netip.AddrFrom16(a.Addr)
	}
	return netip.AddrPortFrom(ip, ntoh16(a.Port))
}

// hton16 stores a port the way the kernel sees a __be16 on this (little
// endian) host: map keys compare bytes, not numbers.
func hton16(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

func ntoh16(v uint16) uint16 {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], v)
	return binary.BigEndian.Uint16(b[:])
}

// WireHdr is the decoded xdpfab wire header (docs/wire.md).
type WireHdr struct {
	Op      uint8
	Flags   uint8
	RxCtx   uint8
	Group   uint32
	AuthKey uint32
	Tag     uint64
	CQData  uint64
}

// PutHdr writes h as an xdpfab header (magic and version included) into
// b[:HdrLen] and returns HdrLen. b must hold at least HdrLen bytes.
func PutHdr(b []byte, h WireHdr) int {
	_ = b[HdrLen-1]
	binary.BigEndian.PutUint32(b[0:], Magic)
	b[4] = Version
	b[5] = h.Op
	b[6] = h.Flags
	b[7] = h.RxCtx
	binary.BigEndian.PutUint32(b[8:], h.Group)
	binary.BigEndian.PutUint32(b[12:], h.AuthKey)
	binary.BigEndian.PutUint64(b[16:], h.Tag)
	binary.BigEndian.PutUint64(b[24:], h.CQData)
	return HdrLen
}

// ParseHdr decodes the header at the start of b. ok is false when b is
// short or the magic or version do not match.
func ParseHdr(b []byte) (h WireHdr, ok bool) {
	if len(b) < HdrLen || binary.BigEndian.Uint32(b) != Magic || b[4] != Version {
		return h, false
	}
	return WireHdr{
		Op: b[5], Flags: b[6], RxCtx: b[7],
		Group:   binary.BigEndian.Uint32(b[8:]),
		AuthKey: binary.BigEndian.Uint32(b[12:]),
		Tag:     binary.BigEndian.Uint64(b[16:]),
		CQData:  binary.BigEndian.Uint64(b[24:]),
	}, true
}

// ParseMeta decodes the metadata that precedes a redirected frame.
func ParseMeta(b []byte) (m Meta, ok bool) {
	if len(b) < MetaLen {
		return m, false
	}
	m.FiAddr = binary.NativeEndian.Uint64(b[0:])
	m.UserId = binary.NativeEndian.Uint64(b[8:])
	m.EpId = binary.NativeEndian.Uint32(b[16:])
	m.Flags = binary.NativeEndian.Uint16(b[20:])
	m.L3Off = binary.NativeEndian.Uint16(b[22:])
	m.HdrOff = binary.NativeEndian.Uint16(b[24:])
	m.PayloadLen = binary.NativeEndian.Uint16(b[26:])
	m.Family = b[28]
	m.Version = b[29]
	m.RxCtx = b[30]
	return m, m.Version == MetaVersion
}

// XDPMD is struct xdp_md, the context of BPF_PROG_TEST_RUN for XDP: set
// IngressIfindex and RxQueueIndex to run as if the frame arrived there.
type XDPMD struct {
	Data           uint32
	DataEnd        uint32
	DataMeta       uint32
	IngressIfindex uint32
	RxQueueIndex   uint32
	EgressIfindex  uint32
}
