package ep

import (
	"fmt"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

// Reclaimed is an endpoint-table entry ReclaimDead removed.
type Reclaimed struct {
	ID         uint32
	Local      string
	OwnerPID   uint32
	OwnerStart uint64
}

// ReclaimDead removes from objs' endpoint table every endpoint whose
// owning process is gone (alive reports false for its pid and start
// time), with its XSKMAP slots, so that its address can be bound again and
// its traffic is no longer redirected to sockets nobody reads. The kernel
// closed the process's sockets and its claim on the port when it died;
// only the shared tables remained. The agent calls it periodically.
func ReclaimDead(objs *loader.Objects, alive func(pid uint32, start uint64) bool) ([]Reclaimed, error) {
	if objs == nil || objs.EP == nil || objs.XSKs == nil || alive == nil {
		return nil, fmt.Errorf("ep reclaim: no writable endpoint table: %w", fi.EINVAL)
	}
	unlock := objs.Lock()
	defer unlock()
	var dead []bpf.EPKey
	var vals []bpf.EPVal
	var k bpf.EPKey
	var v bpf.EPVal
	it := objs.EP.Iterate()
	for it.Next(&k, &v) {
		if v.OwnerPid != 0 && !alive(v.OwnerPid, v.OwnerStart) {
			dead = append(dead, k)
			vals = append(vals, v)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("ep reclaim: read the endpoint table: %w", err)
	}
	var out []Reclaimed
	for i, k := range dead {
		v := vals[i]
		if err := objs.DeleteEndpoint(k); err != nil {
			continue // gone meanwhile
		}
		for s := range uint32(v.RxCtxs) * uint32(v.Queues) {
			objs.XSKs.Delete(v.XskBase + s)
		}
		out = append(out, Reclaimed{ID: v.EpId, Local: k.Local.AddrPort().String(), OwnerPID: v.OwnerPid, OwnerStart: v.OwnerStart})
	}
	return out, nil
}

// Entry is an endpoint-table entry (Entries).
type Entry struct {
	ID         uint32
	Local      string
	OwnerPID   uint32
	OwnerStart uint64
	// Slots is how many XSKMAP slots the endpoint holds (receive
	// contexts x queues).
	Slots int
	// Charged: the agent prepared it and counted it against uid
	// ChargedUID (Attr.Charged).
	Charged    bool
	ChargedUID uint32
}

// Entries lists objs' endpoint table: every endpoint of every process on
// the node, whoever opened it (the agent lists those an earlier run of it
// prepared, to charge them to their owners: see agent's inherit).
func Entries(objs *loader.Objects) ([]Entry, error) {
	if objs == nil || objs.EP == nil {
		return nil, fmt.Errorf("ep entries: no endpoint table: %w", fi.EINVAL)
	}
	unlock := objs.Lock()
	defer unlock()
	var out []Entry
	var k bpf.EPKey
	var v bpf.EPVal
	it := objs.EP.Iterate()
	for it.Next(&k, &v) {
		out = append(out, Entry{ID: v.EpId, Local: k.Local.AddrPort().String(), OwnerPID: v.OwnerPid, OwnerStart: v.OwnerStart,
			Slots: int(v.RxCtxs) * int(v.Queues), Charged: v.Flags&bpf.EPFCharged != 0, ChargedUID: v.OwnerUid})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("ep entries: read the endpoint table: %w", err)
	}
	return out, nil
}
