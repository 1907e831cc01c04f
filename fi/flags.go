package fi

import "strconv"

// Flags are libfabric's operation and capability bits. Some bits carry
// different meanings in different calls (FI_SYNC_ERR and FI_DISCARD share
// bit 58); each constant documents where it applies.
type Flags uint64

// Capability and completion flags (fabric.h).
const (
	Msg        Flags = 1 << 1
	RMA        Flags = 1 << 2
	Tagged     Flags = 1 << 3
	Atomic     Flags = 1 << 4
	Multicast  Flags = 1 << 5
	Collective Flags = 1 << 6

	Read        Flags = 1 << 8
	Write       Flags = 1 << 9
	Recv        Flags = 1 << 10
	Send        Flags = 1 << 11
	Transmit          = Send
	RemoteRead  Flags = 1 << 12
	RemoteWrite Flags = 1 << 13

	MultiRecv    Flags = 1 << 16
	RemoteCQData Flags = 1 << 17
	More         Flags = 1 << 18
	Peek         Flags = 1 << 19
	Trigger      Flags = 1 << 20
	Fence        Flags = 1 << 21
	Priority     Flags = 1 << 22

	Completion       Flags = 1 << 24
	Event                  = Completion
	Inject           Flags = 1 << 25
	InjectComplete   Flags = 1 << 26
	TransmitComplete Flags = 1 << 27
	DeliveryComplete Flags = 1 << 28
	Affinity         Flags = 1 << 29
	CommitComplete   Flags = 1 << 30
	MatchComplete    Flags = 1 << 31

	AVUserID Flags = 1 << 41
	// Peer (FI_PEER) marks peer providers' objects (fi_peer(3)); xdpfab
	// has none and refuses it where a call does not take it.
	Peer Flags = 1 << 43

	SourceErr    Flags = 1 << 50
	LocalComm    Flags = 1 << 51
	RemoteComm   Flags = 1 << 52
	SharedAV     Flags = 1 << 53
	NumericHost  Flags = 1 << 55
	RMAEvent     Flags = 1 << 56
	Source       Flags = 1 << 57
	NamedRxCtx   Flags = 1 << 58
	DirectedRecv Flags = 1 << 59
	// SelectiveCompletion is a CQ binding flag (fi_ep_bind), the same bit
	// as DirectedRecv in libfabric: only operations with Completion
	// report success.
	SelectiveCompletion Flags = 1 << 59
)

// Address-vector flags (fi_domain.h). They reuse high bits with
// call-specific meanings.
const (
	// AuthKey selects auth-key addresses in fi_av_insert / fi_av_remove.
	// It is the same bit as Source, as in libfabric 2.x.
	AuthKey Flags = 1 << 57
	// SyncErr asks fi_av_insert for a per-element status array.
	SyncErr Flags = 1 << 58
	// Universe (FI_UNIVERSE) names the AV set of every address in an AV
	// (fi_av_set); the same bit as Source and AuthKey.
	Universe Flags = 1 << 57
	// Symmetric promises every process inserts addresses in the same order.
	Symmetric Flags = 1 << 59
)

// Tagged-receive flags (fi_tagged.h).
const (
	Discard Flags = 1 << 58
	Claim   Flags = 1 << 59
)

var flagNames = []struct {
	f    Flags
	name string
}{
	{Msg, "FI_MSG"}, {RMA, "FI_RMA"}, {Tagged, "FI_TAGGED"}, {Atomic, "FI_ATOMIC"},
	{Multicast, "FI_MULTICAST"}, {Collective, "FI_COLLECTIVE"},
	{Read, "FI_READ"}, {Write, "FI_WRITE"}, {Recv, "FI_RECV"}, {Send, "FI_SEND"},
	{RemoteRead, "FI_REMOTE_READ"}, {RemoteWrite, "FI_REMOTE_WRITE"},
	{MultiRecv, "FI_MULTI_RECV"}, {RemoteCQData, "FI_REMOTE_CQ_DATA"}, {More, "FI_MORE"},
	{Peek, "FI_PEEK"}, {Trigger, "FI_TRIGGER"}, {Fence, "FI_FENCE"}, {Priority, "FI_PRIORITY"},
	{Completion, "FI_COMPLETION"}, {Inject, "FI_INJECT"}, {InjectComplete, "FI_INJECT_COMPLETE"},
	{TransmitComplete, "FI_TRANSMIT_COMPLETE"}, {DeliveryComplete, "FI_DELIVERY_COMPLETE"},
	{Affinity, "FI_AFFINITY"}, {CommitComplete, "FI_COMMIT_COMPLETE"},
	{MatchComplete, "FI_MATCH_COMPLETE"}, {AVUserID, "FI_AV_USER_ID"}, {Peer, "FI_PEER"},
	{SourceErr, "FI_SOURCE_ERR"}, {LocalComm, "FI_LOCAL_COMM"}, {RemoteComm, "FI_REMOTE_COMM"},
	{SharedAV, "FI_SHARED_AV"}, {NumericHost, "FI_NUMERICHOST"}, {RMAEvent, "FI_RMA_EVENT"},
	{Source, "FI_SOURCE"}, {SyncErr, "FI_SYNC_ERR"}, {Symmetric, "FI_SYMMETRIC"},
}

// String lists the set bits by their libfabric names, joined by "|". Bits
// with several meanings print their most common name.
func (f Flags) String() string {
	if f == 0 {
		return "0"
	}
	s := ""
	rest := f
	for _, n := range flagNames {
		if f&n.f != 0 && rest&n.f != 0 {
			if s != "" {
				s += "|"
			}
			s += n.name
			rest &^= n.f
		}
	}
	if rest != 0 {
		if s != "" {
			s += "|"
		}
		s += "0x" + strconv.FormatUint(uint64(rest), 16)
	}
	return s
}
