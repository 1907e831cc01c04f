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
	// AVKey is struct av_key: an AV and a source, the question an AV
	// table answers.
	AVKey = kernAvKey
	// AVVal is struct av_val: the answer (loader.PutAVEntry,
	// internal/xdpmodel).
	AVVal = kernAvVal
	// AVSlot is struct av_slot, one entry of an AV table's forward index.
	AVSlot = kernAvSlot
	// AVAux is struct av_aux, an AV table's per-index entry.
	AVAux = kernAvAux
	// AVHdr is struct av_hdr, an AV table's header line.
	AVHdr = kernAvHdr
	// RevKey is struct rev_key: (AV id, auth-key handle).
	RevKey = kernRevKey
	// AVMeta is struct av_meta, per-AV attributes.
	AVMeta = kernAvMeta
	// AuthKeyVal is struct authkey_val.
	AuthKeyVal = kernAuthkeyVal
	// EPKey is struct ep_key, the endpoint table's key.
	EPKey = kernEpKey
	// EPVal is struct ep_val, the endpoint table's value.
	EPVal = kernEpVal
	// EPSlot is struct ep_slot, an entry of the endpoint index
	// (xdpfab_epslot; loader/epindex.go).
	EPSlot = kernEpSlot
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

// AVFUserID is the av_slot and av_val flag for entries
// whose completions report the user id (XDPFAB_AVF_USER_ID).
const AVFUserID = 0x0001

// EPFStamp is the ep_val flag (EPVal.Flags) that makes the XDP program put
// a wire.StampLen-byte stamp in front of every frame it redirects to the
// endpoint, for measurement (XDPFAB_EPF_STAMP; see wire.MetaStamp).
const EPFStamp = 0x01

// EPFCharged is the ep_val flag that marks an endpoint the agent prepared
// and charged to uid EPVal.OwnerUid: an agent that restarts finds them in
// the table and charges them again (XDPFAB_EPF_CHARGED; XDP ignores it).
const EPFCharged = 0x02

// AV table constants (xdpfab_consts.h; struct av_hdr in xdpfab_structs.h).
const (
	AVMagic = 0x54564158 // XDPFAB_AV_MAGIC: av_hdr.magic
	AVRetry = 4          // XDPFAB_AV_RETRY: XDP's reads of a slot, or of both buckets, that changed meanwhile
	// AVLine is the size of a table line (struct av_line): a bucket of
	// two slots, the header, or four aux entries.
	AVLine = 64
	// AVPageLines is the number of lines in an element of a table's map
	// (struct av_page, XDPFAB_AV_PAGE_LINES); AVPage its size.
	AVPageLines = 64
	AVPage      = AVLine * AVPageLines
)

// AVHash is the XDP program's av_hash of source a under seed: a's two
// buckets among nbuckets are AVBuckets(AVHash(seed, a), nbuckets).
func AVHash(seed uint64, a Addr) uint64 {
	return AVHashWords(seed, binary.NativeEndian.Uint64(a.Addr[0:8]), binary.NativeEndian.Uint64(a.Addr[8:16]),
		uint64(a.Port)|uint64(a.Family)<<16)
}

// AVHashWords is AVHash of a source given as the XDP program reads it: its
// address as two 64-bit words in host order (w0, w1) and its port and
// family as a third (port | family<<16). For callers that hold the source
// in another struct (an AV slot), or on a hot path where passing an Addr
// by value costs a store-forwarding stall.
func AVHashWords(seed, w0, w1, w2 uint64) uint64 {
	return avMix(avMix(avMix(seed, w0), w1), w2)
}

func avMix(h, w uint64) uint64 {
	h ^= w
	h *= 0x9e3779b97f4a7c15
	return h ^ h>>32
}

// AVBuckets maps a hash to a source's two buckets (0-based) among
// nbuckets, as the XDP program does: multiply-shift of each 32-bit half,
// the second moved to the next bucket when both are the same.
func AVBuckets(h uint64, nbuckets uint32) (b1, b2 uint32) {
	b1 = uint32((h & 0xffffffff) * uint64(nbuckets) >> 32)
	b2 = uint32((h >> 32) * uint64(nbuckets) >> 32)
	if b2 == b1 {
		if b2++; b2 == nbuckets {
			b2 = 0
		}
	}
	return b1, b2
}

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

// Counters. Every frame counts in exactly one counter but CounterRX, and
// CounterRX is their sum: the XDP program does not count it, the loader's
// counter readers (loader.Objects.Counters) add it up.
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
	MapAVTab   = kernMapXdpfabAvtab
	MapAVMeta  = kernMapXdpfabAvmeta
	MapAuthKey = kernMapXdpfabAuthkey
	MapEP      = kernMapXdpfabEp
	MapXSKs    = kernMapXdpfabXsks
	MapStats   = kernMapXdpfabStats
	MapAVPool  = kernMapXdpfabAvpool
	MapLocal   = kernMapXdpfabLocal
	// MapScratch is the program's own per-CPU buffer for the UDP checksum
	// of multi-buffer frames (xdpfab_parse.h): neither pinned nor kept by
	// the loader, whose program holds it.
	MapScratch = kernMapXdpfabScratch
	MapEPPort  = kernMapXdpfabEpport
	MapEPSlot  = kernMapXdpfabEpslot
)

// EPSlot.State values (XDPFAB_EPS_*): a free slot, one linked from its
// port's xdpfab_epport entry, one unlinked and waiting for a grace period.
const (
	EPSFree    = 0
	EPSUsed    = 1
	EPSRetired = 2
)

// EPPerPort is how many endpoints an xdpfab_epport entry lists
// (XDPFAB_EP_PER_PORT): 16-bit references, each 1 + an xdpfab_epslot
// element, the lowest bits first, 0 ending the list.
const EPPerPort = 4

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
