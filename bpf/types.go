package bpf

import (
	"encoding/binary"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/wire"
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

// AVFUserID is the xdpfab_av_val and xdpfab_rev_val flag for entries
// whose completions report the user id (XDPFAB_AVF_USER_ID).
const AVFUserID = 0x0001

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
		a.Family = wire.AFInet
		b := ip.As4()
		copy(a.Addr[:], b[:])
	} else {
		a.Family = wire.AFInet6
		a.Addr = ip.As16()
	}
	a.Port = hton16(ap.Port())
	return a
}

// AddrPort converts back to a netip.AddrPort.
func (a Addr) AddrPort() netip.AddrPort {
	var ip netip.Addr
	if a.Family == wire.AFInet {
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
