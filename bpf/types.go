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
	// Addr is struct udp_addr: a peer or local address and UDP port.
	Addr = kernUdpAddr
	// AVKey is struct av_key, the forward AV map's key.
	AVKey = kernAvKey
	// AVVal is struct av_val, the forward AV map's value.
	AVVal = kernAvVal
	// RevKey is struct rev_key: (AV id, index).
	RevKey = kernRevKey
	// RevVal is struct rev_val, the reverse AV table's value.
	RevVal = kernRevVal
	// AVMeta is struct av_meta, per-AV attributes.
	AVMeta = kernAvMeta
	// AuthKeyVal is struct authkey_val.
	AuthKeyVal = kernAuthkeyVal
	// EPKey is struct ep_key, the endpoint table's key.
	EPKey = kernEpKey
	// EPVal is struct ep_val, the endpoint table's value.
	EPVal = kernEpVal
	// ProcID is struct proc_id: a process by pid and start time.
	ProcID = kernProcId
	// PoolVal is struct pool_val: AV capacity a process holds in reserve.
	PoolVal = kernPoolVal
)

// NoGroup in AVMeta.GroupGid: no group may change the AV.
const NoGroup = ^uint32(0)

// Specs and Objects are bpf2go's typed views of the object, before and
// after loading: a field per map and program, tagged with its name. The
// loader resizes the maps through Specs (ebpf.CollectionSpec.Assign) and
// loads into Objects (LoadAndAssign) instead of looking names up.
type (
	Specs   = kernSpecs
	Objects = kernObjects
)

// NameString returns the AV's name (the NUL-terminated Name field); ""
// for a nil *AVMeta.
func (m *AVMeta) NameString() string {
	if m == nil {
		return ""
	}
	for i, c := range m.Name {
		if c == 0 {
			return string(m.Name[:i])
		}
	}
	return string(m.Name[:])
}

// AVFUserID is the av_val and rev_val flag for entries
// whose completions report the user id (XDPFAB_AVF_USER_ID).
const AVFUserID = 0x0001

// EPFStamp is the ep_val flag (EPVal.Flags) that makes the XDP program put
// a wire.StampLen-byte stamp in front of every frame it redirects to the
// endpoint, for measurement (XDPFAB_EPF_STAMP; see wire.MetaStamp).
const EPFStamp = 0x01

// Policy is what an endpoint does with datagrams from unknown sources
// (enum policy, generated from the object's BTF).
type Policy = kernPolicy

// Policies.
const (
	PolicyNotAvail  Policy = kernPolicyUNKNOWN_NOTAVAIL   // deliver with FI_ADDR_NOTAVAIL
	PolicySourceErr Policy = kernPolicyUNKNOWN_SOURCE_ERR // deliver flagged for an EADDRNOTAVAIL completion
	PolicyDrop      Policy = kernPolicyUNKNOWN_DROP       // drop in the kernel, counted
)

// IfindexSlots is the number of ifindexes with counters of their own
// (XDPFAB_IFINDEX_SLOTS); higher ones share slot 0.
const IfindexSlots = 1024

// Counter indexes a row of xdpfab_stats (enum counter, generated from the
// object's BTF). String gives its metric-style name (the line comments
// below; counter_string.go is stringer's).
type Counter = kernCounter

// Counters. Every frame counts in CounterRX and in exactly one other.
const (
	CounterRX           Counter = kernCounterSTAT_RX            // rx
	CounterTranslated   Counter = kernCounterSTAT_TRANSLATED    // translated
	CounterUnknown      Counter = kernCounterSTAT_UNKNOWN       // unknown_source
	CounterDropPolicy   Counter = kernCounterSTAT_DROP_POLICY   // dropped_policy
	CounterMalformed    Counter = kernCounterSTAT_MALFORMED     // malformed
	CounterPass         Counter = kernCounterSTAT_PASS          // passed
	CounterRedirectFail Counter = kernCounterSTAT_REDIRECT_FAIL // redirect_failed
	CounterCsumError    Counter = kernCounterSTAT_CSUM_ERROR    // csum_error
	CounterNotLocal     Counter = kernCounterSTAT_NOT_LOCAL     // not_local
	CounterWrongQueue   Counter = kernCounterSTAT_WRONG_QUEUE   // wrong_queue
)

// NumCounters is the number of counters (STAT_MAX).
const NumCounters = kernCounterSTAT_MAX

// Map names, as bpftool shows them and as the pins under <root>/maps are
// named (bpf2go's constants).
const (
	MapAV      = kernMapXdpfabAv
	MapAVRev   = kernMapXdpfabAvrev
	MapAVMeta  = kernMapXdpfabAvmeta
	MapAuthKey = kernMapXdpfabAuthkey
	MapEP      = kernMapXdpfabEp
	MapXSKs    = kernMapXdpfabXsks
	MapStats   = kernMapXdpfabStats
	MapAVPool  = kernMapXdpfabAvpool
	MapLocal   = kernMapXdpfabLocal
)

// LoadSpec returns the collection spec of the embedded, precompiled object.
func LoadSpec() (*ebpf.CollectionSpec, error) { return loadKern() }

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
