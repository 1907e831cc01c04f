package loader

import (
	"fmt"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
)

// The forward and reverse AV maps are preallocated hashes of AVEntries
// elements shared by every AV of the dataplane, in every process. An insert
// that was reported successful must not fail for lack of room when its
// (possibly deferred, FI_MORE) map write happens, so room is reserved up
// front (a write that fails for another reason stays queued: see
// av.flushLocked):
// xdpfab_avmeta slot 0 counts the entries reserved node-wide, and each
// process takes room from it in chunks to keep the syscall off the per-call
// path.
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
	g.Count += uint32(take)
	if err := d.AVMeta.Put(uint32(0), &g); err != nil {
		return fmt.Errorf("reserve AV entries: %w", err)
	}
	d.pool += take - n
	return nil
}

// ReleaseAVEntries returns room for n entries. The caller holds Lock. On a
// nil or zero Objects it does nothing.
func (d *Objects) ReleaseAVEntries(n int) {
	if d.loaded("") != nil {
		return
	}
	d.pool += n
	if d.pool > 2*reserveChunk {
		d.returnPool(d.pool - reserveChunk)
	}
}

// returnPool gives k pooled entries back to the node-wide count.
func (d *Objects) returnPool(k int) {
	g, err := d.globalMeta()
	if err != nil {
		return // keep them pooled; nothing is lost
	}
	g.Count -= uint32(min(k, int(g.Count)))
	if d.AVMeta.Put(uint32(0), &g) == nil {
		d.pool -= k
	}
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
