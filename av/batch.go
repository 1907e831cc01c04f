package av

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
)

// batch is a set of map writes for inserts, applied in the order that keeps
// XDP honest (see flushLocked). Writes to the same key collapse to the last
// value by construction: BatchUpdate applies them in order.
type batch struct {
	revK []bpf.RevKey
	revV []bpf.RevVal
	fwdK []bpf.AVKey
	fwdV []bpf.AVVal
	// fresh are the indices this batch created; prior holds the map values
	// of existing indices it changed. Both only serve a rollback.
	fresh []uint32
	prior []priorEntry
}

type priorEntry struct {
	idx uint32
	e   entry
}

func (b *batch) empty() bool { return len(b.revK) == 0 && len(b.fwdK) == 0 }

func (b *batch) reset() {
	b.revK, b.revV, b.fwdK, b.fwdV = b.revK[:0], b.revV[:0], b.fwdK[:0], b.fwdV[:0]
	b.fresh, b.prior = b.fresh[:0], b.prior[:0]
}

// stage queues the map writes for index idx with the cache's current value.
func (a *AV) stage(idx uint32, fwd bool) {
	e := &a.entries[idx]
	b := &a.pending
	b.revK = append(b.revK, bpf.RevKey{AvId: a.id, Index: idx})
	b.revV = append(b.revV, bpf.RevVal{UserId: e.userID, Addr: e.addr, Refcnt: e.refcnt, AuthKey: e.authKey, Flags: e.flags})
	if fwd {
		b.fwdK = append(b.fwdK, bpf.AVKey{AvId: a.id, Src: e.addr})
		b.fwdV = append(b.fwdV, a.fwdVal(idx, e))
	}
}

func (a *AV) fwdVal(idx uint32, e *entry) bpf.AVVal {
	v := bpf.AVVal{FiAddr: uint64(idx), UserId: e.userID, Flags: e.flags}
	if e.authKey != 0 {
		v.AuthKey = a.keys[e.authKey-1].value
	}
	return v
}

// mark is where a call's writes start in the batch: on failure exactly
// the writes after it are undone.
type mark struct{ rev, fwd, fresh, prior int }

func (b *batch) mark() mark { return mark{len(b.revK), len(b.fwdK), len(b.fresh), len(b.prior)} }

// flushLocked writes the pending inserts.
//
// Ordering (why a packet is never translated to an index whose entry was
// removed before it arrived): an insert writes the reverse table before the
// forward map, so XDP can only produce an index whose reverse entry exists;
// a remove (Remove) deletes the forward entry first and frees the index
// only after, so from the moment a remove returns no packet is translated
// to that index until an insert reuses it, and a reused index names the new
// peer only once its own forward entry exists. Both run under the
// dataplane lock, so no two changes interleave.
//
// If a write fails, the calling insert's own work (staged after m) is
// undone, in the cache and in the maps; what earlier FI_MORE calls staged
// (and reported inserted) stays queued for the next flush. A call that
// staged nothing passes the batch's current mark.
func (a *AV) flushLocked(m mark) error {
	b := &a.pending
	if b.empty() {
		return nil
	}
	if _, err := batchUpdate(a.dp.AVRev, b.revK, b.revV); err != nil {
		return a.undo(m, err)
	}
	if _, err := batchUpdate(a.dp.AV, b.fwdK, b.fwdV); err != nil {
		return a.undo(m, err)
	}
	b.reset()
	return a.commit()
}

// undo takes back the writes staged after m: in the maps, the call's
// changes to existing entries are restored and its new entries deleted;
// in the cache, the changes are reverted newest first, then its new
// indices freed (with their reserved capacity).
func (a *AV) undo(m mark, cause error) error {
	b := &a.pending
	fresh := map[uint32]bool{}
	for _, idx := range b.fresh[m.fresh:] {
		fresh[idx] = true
	}
	var errs []error
	for i := len(b.prior) - 1; i >= m.prior; i-- {
		p := b.prior[i]
		a.entries[p.idx] = p.e
		if fresh[p.idx] {
			continue // created by this call: deleted below
		}
		e := &a.entries[p.idx]
		errs = append(errs, a.dp.AVRev.Put(bpf.RevKey{AvId: a.id, Index: p.idx},
			bpf.RevVal{UserId: e.userID, Addr: e.addr, Refcnt: e.refcnt, AuthKey: e.authKey, Flags: e.flags}))
		errs = append(errs, a.dp.AV.Put(bpf.AVKey{AvId: a.id, Src: e.addr}, a.fwdVal(p.idx, e)))
	}
	for idx := range fresh {
		e := &a.entries[idx]
		errs = append(errs, ignoreMissing(a.dp.AV.Delete(bpf.AVKey{AvId: a.id, Src: e.addr})))
		errs = append(errs, ignoreMissing(a.dp.AVRev.Delete(bpf.RevKey{AvId: a.id, Index: idx})))
		delete(a.byAddr, e.addr)
		*e = entry{}
		a.free.push(idx)
	}
	a.dp.ReleaseAVEntries(len(fresh))
	b.revK, b.revV, b.fwdK, b.fwdV = b.revK[:m.rev], b.revV[:m.rev], b.fwdK[:m.fwd], b.fwdV[:m.fwd]
	b.fresh, b.prior = b.fresh[:m.fresh], b.prior[:m.prior]
	if err := errors.Join(errs...); err != nil {
		a.closed = true
		return fmt.Errorf("AV %d write failed (%w) and so did undoing it; the AV is closed: %w", a.id, cause, err)
	}
	if !b.empty() {
		return fmt.Errorf("AV map write failed; this call's inserts were undone, earlier FI_MORE inserts stay queued: %w", cause)
	}
	return fmt.Errorf("AV map write failed; this call's inserts were undone: %w", cause)
}

func ignoreMissing(err error) error {
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil
	}
	return err
}
