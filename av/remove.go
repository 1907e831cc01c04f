package av

import (
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
)

// Remove removes addresses (fi_av_remove). An address inserted n times
// (duplicates) is freed by its n-th remove. An invalid, unused or removed
// fi_addr fails with EINVAL for that element; the others are still
// removed, and the error names the first failure. With fi.AuthKey the
// elements are auth-key handles (see InsertAuthKey).
//
// When Remove returns, no XDP run that starts translates the removed
// sources: their slots are removed before the indices are freed.
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
		if ok {
			if _, _, refcnt := a.tab.Aux(idx); refcnt > dec[idx] {
				if dec[idx] == 0 {
					order = append(order, idx)
				}
				dec[idx]++
				continue
			}
		}
		failed++
		if first < 0 {
			first = i
		}
	}

	// The slot first: XDP stops translating before the index is free
	// for reuse.
	freed := 0
	for _, idx := range order {
		_, pos, refcnt := a.tab.Aux(idx)
		if refcnt > dec[idx] {
			a.tab.SetRefcnt(idx, refcnt-dec[idx])
			continue
		}
		a.tab.Remove(pos)
		a.free.push(idx)
		freed++
	}
	a.dp.ReleaseAVEntries(freed)
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

// index returns the in-use index fa names.
func (a *AV) index(fa fi.Addr) (uint32, bool) {
	if a.tab == nil || fa >= fi.Addr(a.tab.High()) {
		return 0, false
	}
	if _, _, refcnt := a.tab.Aux(uint32(fa)); refcnt == 0 {
		return 0, false
	}
	return uint32(fa), true
}
