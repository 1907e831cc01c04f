package ctl

import (
	"net/netip"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
)

// Op is one operation: its name on the wire and, as type parameters, the
// types of its arguments (A) and result (R). Operations without arguments
// or result use None.
type Op[A, R any] struct{ name string }

// Name is the operation's name on the wire ("av.insert").
func (o Op[A, R]) Name() string { return o.name }

// None is the argument or result of an operation that has none.
type None struct{}

// opInfo is what the package knows of an operation without its types.
type opInfo struct {
	name    string
	newArgs func() any
}

var ops []opInfo

func op[A, R any](name string) Op[A, R] {
	ops = append(ops, opInfo{name, func() any { return new(A) }})
	return Op[A, R]{name}
}

// Ops returns the names of every operation, in declaration order.
func Ops() []string {
	names := make([]string, len(ops))
	for i, o := range ops {
		names[i] = o.name
	}
	return names
}

// NewArgs returns a pointer to a zero value of the named operation's
// argument type, or nil for an unknown operation: for tools that decode
// requests without knowing the operation at compile time.
func NewArgs(name string) any {
	for _, o := range ops {
		if o.name == name {
			return o.newArgs()
		}
	}
	return nil
}

// The operations.
var (
	// OpHello opens a connection: the version handshake.
	OpHello = op[HelloArgs, HelloResult]("hello")

	// OpStatus returns the agent's view of the node.
	OpStatus = op[None, Status]("status")
	// OpStats returns the XDP counters summed over CPUs and interfaces, by
	// name.
	OpStats = op[None, map[string]uint64]("stats")
	// OpDetach removes the XDP program from an interface.
	OpDetach = op[DetachArgs, None]("detach")

	// OpAVCreate opens or creates a named AV in the agent.
	OpAVCreate = op[AVCreateArgs, AVInfo]("av.create")
	// OpAVInsert is fi_av_insert (and fi_av_insertsvc's addresses) on a
	// named AV.
	OpAVInsert = op[AVInsertArgs, InsertResult]("av.insert")
	// OpAVInsertSym is fi_av_insertsym.
	OpAVInsertSym = op[AVInsertSymArgs, InsertResult]("av.insertsym")
	// OpAVRemove is fi_av_remove.
	OpAVRemove = op[AVRemoveArgs, None]("av.remove")
	// OpAVLookup is fi_av_lookup.
	OpAVLookup = op[AVLookupArgs, AVEntry]("av.lookup")
	// OpAVList returns one page of an AV's entries.
	OpAVList = op[AVListArgs, AVInfo]("av.list")
	// OpAVStrAddr is fi_av_straddr.
	OpAVStrAddr = op[StrAddrArgs, string]("av.straddr")
	// OpAVSetUserID is fi_av_set_user_id.
	OpAVSetUserID = op[AVSetUserIDArgs, None]("av.set-user-id")
	// OpAVDestroy removes a named AV and its entries.
	OpAVDestroy = op[AVNameArgs, None]("av.destroy")

	// OpEPOpen prepares an endpoint for the caller; the reply carries the
	// UMEM memfd and the sockets' descriptors (ep.HandoverInfo's order).
	OpEPOpen = op[EPOpenArgs, EPOpenResult]("ep.open")
	// OpEPClose releases an endpoint the caller opened.
	OpEPClose = op[EPCloseArgs, None]("ep.close")
	// OpEPReport carries an application endpoint's CQ statistics to the
	// agent for its metrics.
	OpEPReport = op[EPReportArgs, None]("ep.report")
	// OpMapsOpen returns read-only descriptors of the node's maps
	// (loader.ReadOnlyMaps order), then of the named AV's table (every
	// AV's without a name), then the AV change stamps: how an application
	// reads a named AV when it cannot reach the pins.
	OpMapsOpen = op[MapsOpenArgs, None]("maps.open")
	// OpNeighUse asks the agent to make the kernel resolve a next hop.
	OpNeighUse = op[NeighUseArgs, None]("neigh.use")

	// Same-host channels (types in local.go; see package ep's
	// EnableLocal and LocalBroker).

	// OpLocalAttach makes an endpoint the caller opened reachable by the
	// node's other endpoints; the reply carries its doorbell (a memfd page
	// and the read end of its wake-up pipe, ep.Endpoint.EnableLocal's
	// order).
	OpLocalAttach = op[LocalEPArgs, None]("local.attach")
	// OpLocalConnect sets up a channel from an endpoint the caller opened
	// to the endpoint of the node at Dest; the reply carries the channel's
	// memfd and a write end of the receiver's wake-up pipe, opened for
	// this caller alone.
	OpLocalConnect = op[LocalConnectArgs, ep.LocalChannelInfo]("local.connect")
	// OpLocalAccept returns the channels set up towards an endpoint the
	// caller opened since its last call, with one memfd each.
	OpLocalAccept = op[LocalEPArgs, LocalAcceptResult]("local.accept")
)

// AVCreateArgs opens or creates a named AV in the agent.
type AVCreateArgs struct {
	Name   string `json:"name"`
	Type   string `json:"type,omitempty"` // "table" (default), "map"
	UserID bool   `json:"user_id,omitempty"`
	Count  int    `json:"count,omitempty"`
	// RxCtxBits as in fi_av_attr.
	RxCtxBits int `json:"rx_ctx_bits,omitempty"`
	// Group (name or number) whose members may change the AV besides its
	// creator; the creator must be a member. Empty: none.
	Group string `json:"group,omitempty"`
}

// AVInsertArgs inserts addresses ("198.18.0.1:5000", "[2001:2::1]:5000" or
// FI_ADDR_STR) into a named AV. UserIDs, when set, are per-insert user IDs
// (FI_AV_USER_ID), one per address.
type AVInsertArgs struct {
	Name    string    `json:"name"`
	Addrs   []string  `json:"addrs"`
	UserIDs []fi.Addr `json:"user_ids,omitempty"`
	Flags   fi.Flags  `json:"flags,omitempty"`
}

// AVInsertSymArgs is fi_av_insertsym (NodeCnt = SvcCnt = 1: insertsvc; a
// count of 0, or one left out, inserts nothing, as in libfabric).
type AVInsertSymArgs struct {
	Name    string   `json:"name"`
	Node    string   `json:"node"`
	NodeCnt int      `json:"node_cnt,omitempty"`
	Service string   `json:"service"`
	SvcCnt  int      `json:"svc_cnt,omitempty"`
	Flags   fi.Flags `json:"flags,omitempty"`
}

// InsertResult is the outcome of an insert: one fi_addr (fi.AddrNotAvail
// when it failed) and one errno (0 on success) per address.
type InsertResult struct {
	FiAddrs  []fi.Addr  `json:"fi_addrs"`
	Errnos   []fi.Errno `json:"errnos"`
	Inserted int        `json:"inserted"`
}

// AVRemoveArgs removes fi_addrs from a named AV.
type AVRemoveArgs struct {
	Name    string    `json:"name"`
	FiAddrs []fi.Addr `json:"fi_addrs"`
}

// AVLookupArgs names one entry.
type AVLookupArgs struct {
	Name   string  `json:"name"`
	FiAddr fi.Addr `json:"fi_addr"`
}

// AVSetUserIDArgs is fi_av_set_user_id.
type AVSetUserIDArgs struct {
	Name   string  `json:"name"`
	FiAddr fi.Addr `json:"fi_addr"`
	UserID fi.Addr `json:"user_id"`
}

// AVListArgs asks for one page of an AV's entries, from Offset, at most
// Limit (0: the agent's maximum).
type AVListArgs struct {
	Name   string `json:"name"`
	Offset int    `json:"offset,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// AVNameArgs names an AV.
type AVNameArgs struct {
	Name string `json:"name"`
}

// AVEntry is one address of an AV.
type AVEntry struct {
	FiAddr fi.Addr        `json:"fi_addr"`
	Addr   netip.AddrPort `json:"addr"`
	Str    string         `json:"str"`
	UserID fi.Addr        `json:"user_id"`
	Refs   uint32         `json:"refs"`
}

// AVInfo describes a named AV.
type AVInfo struct {
	Name    string    `json:"name"`
	ID      uint32    `json:"id"`
	Type    string    `json:"type"`
	Flags   fi.Flags  `json:"flags"`
	Entries int       `json:"entries"`
	List    []AVEntry `json:"list,omitempty"`
}

// StrAddrArgs formats an address (fi_av_straddr); Addr is a raw sockaddr.
type StrAddrArgs struct {
	Name string `json:"name"`
	Addr []byte `json:"addr"`
}

// Status is what `xdpfab status` shows.
type Status struct {
	PinRoot     string            `json:"pin_root"`
	Attachments []Attachment      `json:"attachments"`
	Maps        []MapUsage        `json:"maps"`
	AVs         []AVInfo          `json:"avs"`
	Endpoints   []EndpointInfo    `json:"endpoints"`
	Clients     int               `json:"clients"`
	Restarts    uint64            `json:"restarts"`
	Counters    map[string]uint64 `json:"counters"`
	// Queues are the holds on interfaces' rx queues: sharing domains and
	// private endpoints.
	Queues []DomainInfo `json:"queues"`
}

// DomainInfo is one hold on an interface's rx queues: a sharing domain
// (Name set) or a private endpoint.
type DomainInfo struct {
	Iface      string `json:"iface"`
	FirstQueue int    `json:"first_queue"`
	Queues     int    `json:"queues"`
	Holder     string `json:"holder"`
	Name       string `json:"domain,omitempty"`
	Users      int    `json:"users,omitempty"`
	Slots      int    `json:"slots,omitempty"`
	RxFrames   int    `json:"rx_frames,omitempty"`
	TxFrames   int    `json:"tx_frames,omitempty"`
}

// Attachment is the program on one interface.
type Attachment struct {
	Iface   string `json:"iface"`
	Ifindex int    `json:"ifindex"`
	Mode    string `json:"mode"`
	Adopted bool   `json:"adopted"`
}

// MapUsage is one map's size.
type MapUsage struct {
	Name       string `json:"name"`
	MaxEntries uint32 `json:"max_entries"`
	Entries    int    `json:"entries"`
}

// EndpointInfo describes an endpoint in the endpoint table.
type EndpointInfo struct {
	ID       uint32 `json:"id"`
	Local    string `json:"local"`
	AVID     uint32 `json:"av_id"`
	XSKBase  uint32 `json:"xsk_base"`
	RxCtxs   int    `json:"rx_ctxs"`
	Queues   int    `json:"queues"`
	Policy   string `json:"policy"`
	OwnerPID int32  `json:"owner_pid,omitempty"`
}

// DetachArgs names an interface.
type DetachArgs struct {
	Iface string `json:"iface"`
}

// EPOpenArgs asks the agent to prepare an endpoint for the caller.
type EPOpenArgs struct {
	Iface       string   `json:"iface"`
	Local       string   `json:"local"`
	AV          string   `json:"av"`
	Caps        fi.Flags `json:"caps,omitempty"`
	RxContexts  int      `json:"rx_contexts,omitempty"`
	Queues      int      `json:"queues,omitempty"`
	Frames      int      `json:"frames,omitempty"`
	RingSize    int      `json:"ring_size,omitempty"`
	DropUnknown bool     `json:"drop_unknown,omitempty"`
	// FirstQueue and Queues are the rx queues to listen on (Queues 0:
	// from FirstQueue to the interface's last; a sharing domain that
	// exists already: its queues).
	FirstQueue int `json:"first_queue,omitempty"`
	// Private asks for queues and frame memory of the endpoint's own
	// instead of a sharing domain's; Domain names the sharing domain
	// ("": the caller's uid's; "group:NAME": an operator-declared group's).
	Private bool   `json:"private,omitempty"`
	Domain  string `json:"domain,omitempty"`
}

// EPOpenResult is the agent's answer to OpEPOpen, beside the descriptors.
type EPOpenResult struct {
	Handover ep.HandoverInfo `json:"handover"`
}

// MapsOpenArgs names the AV whose table maps.open hands over with the
// maps. Empty asks for every AV's table, which fails (EMSGSIZE) once the
// node has more AVs than one message carries descriptors for.
type MapsOpenArgs struct {
	AV string `json:"av,omitempty"`
}

// EPCloseArgs names an endpoint the caller opened.
type EPCloseArgs struct {
	ID uint32 `json:"id"`
}

// EPReportArgs is one report of an endpoint's CQ statistics.
type EPReportArgs struct {
	ID uint32   `json:"id"`
	TX cq.Stats `json:"tx"`
	RX cq.Stats `json:"rx"`
}

// NeighUseArgs asks the agent to make the kernel resolve a next hop.
type NeighUseArgs struct {
	Ifindex int        `json:"ifindex"`
	IP      netip.Addr `json:"ip"`
}
