package av

import (
	"fmt"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
)

// Remove removes addresses (fi_av_remove). An address inserted n times
// (duplicates) is freed by its n-th remove. An invalid, unused or removed
// fi_addr fails with EINVAL for that element; the others are still
// removed, and the error names the first failure. With fi.AuthKey the
// elements are auth-key handles (see InsertAuthKey).
//
// When Remove returns, XDP no longer translates the removed sources: the
// forward entries are deleted before the indices are freed.
func (a *AV) Remove(fiAddr []fi.Addr, flags fi.Flags) error {
	if err := a.usable("av remove"); err != nil {
		return err
	}
	unlock := a.lock()
	defer unlock()
	if bad := flags &^ fi.AuthKey; bad != 0 {
		return fmt.Errorf("av remove: flags %v not supported: %w", bad, fi.EINVAL)
	}
	if err := a.begin(true); err != nil {
		return fmt.Errorf("av remove: %w", err)
	}
	if err := a.flushLocked(a.pending.mark()); err != nil {
		return fmt.Errorf("av remove: %w", err)
	}
	if flags&fi.AuthKey != 0 {
		return a.removeKeys(fiAddr)
	}

	// Count removes per index first, so a duplicate fi_addr in one call
	// removes one reference each and fails once none are left.
	var order []uint32
	dec := make(map[uint32]uint32, len(fiAddr))
	failed, first := 0, -1
	for i, fa := range fiAddr {
		idx, ok := a.index(fa)
		if ok && a.entries[idx].refcnt > dec[idx] {
			if dec[idx] == 0 {
				order = append(order, idx)
			}
			dec[idx]++
			continue
		}
		failed++
		if first < 0 {
			first = i
		}
	}

	var fk []bpf.AVKey
	var rk, uk []bpf.RevKey
	var uv []bpf.RevVal
	for _, idx := range order {
		e := a.entries[idx]
		if e.refcnt == dec[idx] {
			fk = append(fk, bpf.AVKey{AvId: a.id, Src: e.addr})
			rk = append(rk, bpf.RevKey{AvId: a.id, Index: idx})
			continue
		}
		e.refcnt -= dec[idx]
		uk = append(uk, bpf.RevKey{AvId: a.id, Index: idx})
		uv = append(uv, bpf.RevVal{UserId: e.userID, Addr: e.addr, Refcnt: e.refcnt, AuthKey: e.authKey, Flags: e.flags})
	}
	// Forward first: XDP stops translating before the index can be reused.
	if err := batchDelete(a.dp.AV, fk); err != nil {
		return a.reloadAfter("av remove", err)
	}
	if err := batchDelete(a.dp.AVRev, rk); err != nil {
		return a.reloadAfter("av remove", err)
	}
	if _, err := batchUpdate(a.dp.AVRev, uk, uv); err != nil {
		return a.reloadAfter("av remove", err)
	}
	for _, idx := range order {
		e := &a.entries[idx]
		e.refcnt -= dec[idx]
		if e.refcnt == 0 {
			delete(a.byAddr, e.addr)
			*e = entry{}
			a.free.push(idx)
		}
	}
	a.dp.ReleaseAVEntries(len(fk))
	if len(order) == 0 {
		// Nothing changed: other processes need not re-read the AV.
	} else if err := a.commit(); err != nil {
		return fmt.Errorf("av remove: %w", err)
	}
	if failed > 0 {
		return fmt.Errorf("av remove: %d of %d failed; element %d (fi_addr %v) is not in the AV: %w",
			failed, len(fiAddr), first, fiAddr[first], fi.EINVAL)
	}
	return nil
}

// reloadAfter handles a map operation that failed part way: the maps are
// the truth, so the cache is rebuilt from them.
func (a *AV) reloadAfter(op string, cause error) error {
	var m bpf.AVMeta
	if err := a.dp.AVMeta.Lookup(a.id, &m); err != nil {
		a.closed = true
		return fmt.Errorf("%s: %w; reading the AV back failed too (%v), the AV is closed", op, cause, err)
	}
	if err := a.load(m); err != nil {
		a.closed = true
		return fmt.Errorf("%s: %w; reading the AV back failed too (%v), the AV is closed", op, cause, err)
	}
	return fmt.Errorf("%s: %w", op, cause)
}

// index returns the in-use index fa names.
func (a *AV) index(fa fi.Addr) (uint32, bool) {
	if fa >= fi.Addr(len(a.entries)) || a.entries[fa].refcnt == 0 {
		return 0, false
	}
	return uint32(fa), true
}
