package fi

import "strconv"

// Flags are libfabric's operation and capability bits. Some bits carry
// different meanings in different calls (FI_SYNC_ERR and FI_DISCARD share
// bit 58); each constant documents where it applies.
type Flags uint64

// Capability and completion flags (fabric.h).
const (
	MSG        Flags = 1 << 1
	RMA        Flags = 1 << 2
	TAGGED     Flags = 1 << 3
	ATOMIC     Flags = 1 << 4
	MULTICAST  Flags = 1 << 5
	COLLECTIVE Flags = 1 << 6

	READ         Flags = 1 << 8
	WRITE        Flags = 1 << 9
	RECV         Flags = 1 << 10
	SEND         Flags = 1 << 11
	TRANSMIT           = SEND
	REMOTE_READ  Flags = 1 << 12
	REMOTE_WRITE Flags = 1 << 13

	MULTI_RECV     Flags = 1 << 16
	REMOTE_CQ_DATA Flags = 1 << 17
	MORE           Flags = 1 << 18
	PEEK           Flags = 1 << 19
	TRIGGER        Flags = 1 << 20
	FENCE          Flags = 1 << 21
	PRIORITY       Flags = 1 << 22

	COMPLETION        Flags = 1 << 24
	EVENT                   = COMPLETION
	INJECT            Flags = 1 << 25
	INJECT_COMPLETE   Flags = 1 << 26
	TRANSMIT_COMPLETE Flags = 1 << 27
	DELIVERY_COMPLETE Flags = 1 << 28
	AFFINITY          Flags = 1 << 29
	COMMIT_COMPLETE   Flags = 1 << 30
	MATCH_COMPLETE    Flags = 1 << 31

	AV_USER_ID Flags = 1 << 41

	SOURCE_ERR    Flags = 1 << 50
	LOCAL_COMM    Flags = 1 << 51
	REMOTE_COMM   Flags = 1 << 52
	SHARED_AV     Flags = 1 << 53
	NUMERICHOST   Flags = 1 << 55
	RMA_EVENT     Flags = 1 << 56
	SOURCE        Flags = 1 << 57
	NAMED_RX_CTX  Flags = 1 << 58
	DIRECTED_RECV Flags = 1 << 59
)

// Address-vector flags (fi_domain.h). They reuse high bits with
// call-specific meanings.
const (
	// AUTH_KEY selects auth-key addresses in fi_av_insert / fi_av_remove.
	// It is the same bit as SOURCE, as in libfabric 2.x.
	AUTH_KEY Flags = 1 << 57
	// SYNC_ERR asks fi_av_insert for a per-element status array.
	SYNC_ERR Flags = 1 << 58
	// SYMMETRIC promises every process inserts addresses in the same order.
	SYMMETRIC Flags = 1 << 59
)

// Tagged-receive flags (fi_tagged.h).
const (
	DISCARD Flags = 1 << 58
	CLAIM   Flags = 1 << 59
)

var flagNames = []struct {
	f    Flags
	name string
}{
	{MSG, "FI_MSG"}, {RMA, "FI_RMA"}, {TAGGED, "FI_TAGGED"}, {ATOMIC, "FI_ATOMIC"},
	{MULTICAST, "FI_MULTICAST"}, {COLLECTIVE, "FI_COLLECTIVE"},
	{READ, "FI_READ"}, {WRITE, "FI_WRITE"}, {RECV, "FI_RECV"}, {SEND, "FI_SEND"},
	{REMOTE_READ, "FI_REMOTE_READ"}, {REMOTE_WRITE, "FI_REMOTE_WRITE"},
	{MULTI_RECV, "FI_MULTI_RECV"}, {REMOTE_CQ_DATA, "FI_REMOTE_CQ_DATA"}, {MORE, "FI_MORE"},
	{PEEK, "FI_PEEK"}, {TRIGGER, "FI_TRIGGER"}, {FENCE, "FI_FENCE"}, {PRIORITY, "FI_PRIORITY"},
	{COMPLETION, "FI_COMPLETION"}, {INJECT, "FI_INJECT"}, {INJECT_COMPLETE, "FI_INJECT_COMPLETE"},
	{TRANSMIT_COMPLETE, "FI_TRANSMIT_COMPLETE"}, {DELIVERY_COMPLETE, "FI_DELIVERY_COMPLETE"},
	{AFFINITY, "FI_AFFINITY"}, {COMMIT_COMPLETE, "FI_COMMIT_COMPLETE"},
	{MATCH_COMPLETE, "FI_MATCH_COMPLETE"}, {AV_USER_ID, "FI_AV_USER_ID"},
	{SOURCE_ERR, "FI_SOURCE_ERR"}, {LOCAL_COMM, "FI_LOCAL_COMM"}, {REMOTE_COMM, "FI_REMOTE_COMM"},
	{SHARED_AV, "FI_SHARED_AV"}, {NUMERICHOST, "FI_NUMERICHOST"}, {RMA_EVENT, "FI_RMA_EVENT"},
	{SOURCE, "FI_SOURCE"}, {SYNC_ERR, "FI_SYNC_ERR"}, {SYMMETRIC, "FI_SYMMETRIC"},
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
