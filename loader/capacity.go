package loader

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
)

// AVEntries bounds the AV entries of the node, every AV in every process
// together (nothing is preallocated for it: each AV's table follows its
// own size). Each new index reserves room before it is written:
// xdpfab_avmeta slot 0 counts the entries reserved node-wide, and each
// process takes room from it in chunks to keep the syscall off the per-call
// path. What a process holds in reserve is recorded in xdpfab_avpool under
// its procid (pid and start time), so that the agent can give back the
// reserve of a process that died (ReclaimPools).
const reserveChunk = 1024

// ReserveAVEntries claims room for n more AV entries. The caller holds
// Lock. It fails with ENOSPC when the maps cannot hold them.
func (d *Objects) ReserveAVEntries(n int) error {
	if err := d.loaded("reserve AV entries"); err != nil {
		return err
	}
	if n <= d.pool {
		d.pool -= n
		return nil
	}
	need := n - d.pool
	g, err := d.globalMeta()
	if err != nil {
		return err
	}
	free := int(d.cfg.AVEntries) - int(g.Count)
	if need > free {
		return fmt.Errorf("AV maps full: %d entries of %d in use, %d more needed: %w",
			int(d.cfg.AVEntries)-free, d.cfg.AVEntries, n, fi.ENOSPC)
	}
	take := min(max(need, reserveChunk), free)
	if !d.recordPool(d.pool + take - n) {
		take = need // no record, no reserve: exactly what is needed
	}
	g.Count += uint32(take)
	if err := d.AVMeta.Put(uint32(0), &g); err != nil {
		d.recordPool(d.pool)
		return fmt.Errorf("reserve AV entries: %w", err)
	}
	d.pool += take - n
	return nil
}

// recordPool writes this process's reserve of pool entries to
// xdpfab_avpool (deleting the record at 0) and reports whether the record
// holds it. The caller holds Lock.
func (d *Objects) recordPool(pool int) bool {
	if d.AVPool == nil {
		return pool == 0
	}
	key := bpf.ProcID{Pid: d.self.PID, Start: d.self.Start}
	if pool == 0 {
		err := d.AVPool.Delete(key)
		ok := err == nil || errors.Is(err, ebpf.ErrKeyNotExist)
		if ok {
			d.recorded = 0
		}
		return ok
	}
	ok := d.AVPool.Put(key, bpf.PoolVal{Entries: uint32(pool)}) == nil
	if ok {
		d.recorded = pool
	}
	return ok
}

// ReleaseAVEntries returns room for n entries. The caller holds Lock. On a
// nil or zero Objects it does nothing. The record is rewritten only when
// the reserve outgrows it: inserts take from the reserve without rewriting
// it, so under churn (inserts and removes alike) the record stays at or
// above the reserve without a system call per remove.
func (d *Objects) ReleaseAVEntries(n int) {
	if d.loaded("") != nil {
		return
	}
	d.pool += n
	switch {
	case d.pool > 2*reserveChunk:
		d.returnPool(d.pool - reserveChunk)
	case d.pool <= d.recorded:
		// The record still covers the reserve (inserts took from it
		// without rewriting it): no system call. The record is never
		// below the reserve, as before.
	case !d.recordPool(d.pool):
		d.returnPool(d.pool - reserveChunk)
	}
}

// ReturnAVEntries gives room for n entries straight back to the node-wide
// count instead of this process's reserve: for removals that free much at
// once (a destroyed AV). The caller holds Lock.
func (d *Objects) ReturnAVEntries(n int) {
	if d.loaded("") != nil || n <= 0 {
		return
	}
	d.pool += n
	d.returnPool(n)
}

// returnPool gives k pooled entries back to the node-wide count.
func (d *Objects) returnPool(k int) {
	g, err := d.globalMeta()
	if err != nil {
		return // keep them pooled; nothing is lost
	}
	k = max(0, min(k, d.pool))
	g.Count -= uint32(min(k, int(g.Count)))
	if d.AVMeta.Put(uint32(0), &g) == nil {
		d.pool -= k
		if !d.recordPool(d.pool) {
			d.returnAll(g)
		}
	}
}

// returnAll gives the whole reserve back when it cannot be recorded.
func (d *Objects) returnAll(g bpf.AVMeta) {
	g.Count -= uint32(min(d.pool, int(g.Count)))
	if d.AVMeta.Put(uint32(0), &g) == nil {
		d.pool = 0
		d.recordPool(0)
	}
}

// ReclaimPools gives back the AV capacity that processes which are gone
// held in reserve: alive reports whether a recorded process still runs.
// It returns the entries given back. Only the agent calls it.
func (d *Objects) ReclaimPools(alive func(pid uint32, start uint64) bool) (int, error) {
	if err := d.loaded("reclaim AV capacity"); err != nil {
		return 0, err
	}
	if d.AVPool == nil {
		return 0, nil
	}
	unlock := d.Lock()
	defer unlock()
	var dead []bpf.ProcID
	freed := 0
	var k bpf.ProcID
	var v bpf.PoolVal
	it := d.AVPool.Iterate()
	for it.Next(&k, &v) {
		if !alive(k.Pid, k.Start) {
			dead = append(dead, k)
			freed += int(v.Entries)
		}
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("reclaim AV capacity: %w", err)
	}
	if freed == 0 {
		for _, k := range dead {
			d.AVPool.Delete(k)
		}
		return 0, nil
	}
	g, err := d.globalMeta()
	if err != nil {
		return 0, err
	}
	g.Count -= uint32(min(freed, int(g.Count)))
	if err := d.AVMeta.Put(uint32(0), &g); err != nil {
		return 0, fmt.Errorf("reclaim AV capacity: %w", err)
	}
	for _, k := range dead {
		d.AVPool.Delete(k)
	}
	return freed, nil
}

func (d *Objects) globalMeta() (bpf.AVMeta, error) {
	var g bpf.AVMeta
	if err := d.AVMeta.Lookup(uint32(0), &g); err != nil {
		return g, fmt.Errorf("read AV capacity: %w", err)
	}
	return g, nil
}

// AVEntriesInUse reports the node-wide reserved count (entries plus the
// room processes hold in reserve).
func (d *Objects) AVEntriesInUse() (int, error) {
	if err := d.loaded("read AV capacity"); err != nil {
		return 0, err
	}
	unlock := d.Lock()
	defer unlock()
	g, err := d.globalMeta()
	return int(g.Count), err
}
