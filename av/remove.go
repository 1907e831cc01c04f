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
	// (A short list is counted without a map and without allocating; a
	// long one in scratch space the AV keeps.)
	var counts []count
	var failed, first int
	if len(fiAddr) <= 8 {
		var small [8]count
		counts, failed, first = a.countRemoves(fiAddr, small[:0], nil)
	} else {
		if a.rmAt == nil {
			a.rmAt = map[uint32]int{}
		}
		long, f, fst := a.countRemoves(fiAddr, a.rmCounts[:0], a.rmAt)
		clear(a.rmAt)
		a.rmCounts = long[:0]
		counts, failed, first = long, f, fst
	}

	// The slot first: XDP stops translating before the index is free
	// for reuse.
	freed := 0
	for _, c := range counts {
		_, pos, refcnt := a.tab.Aux(c.idx)
		if refcnt > c.n {
			a.tab.SetRefcnt(c.idx, refcnt-c.n)
			continue
		}
		a.tab.Remove(pos)
		a.free.push(c.idx)
		freed++
	}
	a.dp.ReleaseAVEntries(freed)
	if len(counts) == 0 {
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

// count is how many references a Remove call takes from an index.
type count struct{ idx, n uint32 }

// countRemoves counts the references fiAddr takes from each index, in
// counts (at, when not nil, maps an index to its position there), and
// returns them with the number of elements that name no reference left
// and the position of the first.
func (a *AV) countRemoves(fiAddr []fi.Addr, counts []count, at map[uint32]int) ([]count, int, int) {
	failed, first := 0, -1
	for i, fa := range fiAddr {
		idx, ok := a.index(fa)
		if ok {
			k := -1
			if at != nil {
				if v, ok := at[idx]; ok {
					k = v
				}
			} else {
				for j := range counts {
					if counts[j].idx == idx {
						k = j
						break
					}
				}
			}
			var n uint32
			if k >= 0 {
				n = counts[k].n
			}
			if _, _, refcnt := a.tab.Aux(idx); refcnt > n {
				if k < 0 {
					k = len(counts)
					counts = append(counts, count{idx: idx})
					if at != nil {
						at[idx] = k
					}
				}
				counts[k].n++
				continue
			}
		}
		failed++
		if first < 0 {
			first = i
		}
	}
	return counts, failed, first
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
