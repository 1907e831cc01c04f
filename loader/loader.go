package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/procid"
	"golang.org/x/sys/unix"
)

// Config sizes and places the dataplane's kernel objects.
type Config struct {
	// PinRoot is a directory on (or to be mounted as) bpffs. Empty: nothing
	// is pinned and the objects live as long as the process holds them.
	PinRoot string
	// AVEntries bounds the AV entries of the node, every AV together
	// (capacity.go). Nothing is preallocated for it: each AV's table
	// (avtable.go) follows that AV's size. Default 262144.
	AVEntries uint32
	// MaxAVs bounds the number of AVs open at once. Default 256.
	MaxAVs uint32
	// MaxEndpoints bounds endpoints (and auth keys). Default 1024.
	MaxEndpoints uint32
	// XSKSlots is the XSKMAP size. Default 1024.
	XSKSlots uint32
}

func (c *Config) defaults() {
	if c.AVEntries == 0 {
		c.AVEntries = 1 << 18
	}
	if c.MaxAVs == 0 {
		c.MaxAVs = 256
	}
	if c.MaxEndpoints == 0 {
		c.MaxEndpoints = 1024
	}
	if c.XSKSlots == 0 {
		c.XSKSlots = 1024
	}
}

// Objects holds the loaded program and maps.
type Objects struct {
	// Program is the XDP program xdpfab_rx.
	Program *ebpf.Program
	// The maps of bpf/xdpfab_maps.h. AVTab holds each AV's table
	// (avtable.go).
	AVTab, AVMeta, AuthKey, EP, XSKs, Stats *ebpf.Map
	// AVPool records the AV capacity each process holds in reserve
	// (capacity.go); only writers open it.
	AVPool *ebpf.Map
	// Local holds the host's unicast addresses, which wildcard endpoints
	// receive on (local.go); only writers open it.
	Local *ebpf.Map
	// EPPort and EPSlot are the endpoint index, XDP's fast path in front
	// of EP (epindex.go); only writers open them, and write EP through
	// PutEndpoint and DeleteEndpoint.
	EPPort, EPSlot *ebpf.Map

	cfg    Config
	pinned bool
	mu     sync.Mutex // serialises users of lockFile within the process
	// unlockFn is Lock's result, made once (guarded by mu).
	unlockFn func()
	// lockFile is the writers' lock (lock.go), flock'ed for cross-process
	// changes; nil where this process may not take it.
	lockFile *os.File
	// Callers of Lock waiting (for the process's mutex, for the writers'
	// lock), and the times it was taken: LockProgress.
	lockWaiters  atomic.Int32
	flockWaiters atomic.Int32
	lockTaken    atomic.Uint64
	pool         int // AV entries reserved by this process, unused (capacity.go)
	// recorded is what this process's xdpfab_avpool record says (never
	// below pool).
	recorded int
	// Handed-over AV tables (FromFDs) by AV id, and where to fetch new
	// ones (SetTableSource); guarded by tabMu.
	fromFDs bool
	// AV change stamps (stamps.go): the agent's page it publishes in, or
	// a client's read-only view of one (FromFDs).
	stampPage   *StampPage
	stamps      atomic.Pointer[[]uint64]
	tabMu       sync.Mutex
	tables      map[uint32]*ebpf.Map
	tableSource func() ([]int, error)
	// avTabInner is the AV tables' map spec (xdpfab_avtab's inner map);
	// nil for read-only dataplanes, which create none.
	avTabInner *ebpf.MapSpec
	self       procid.ID // this process, for its xdpfab_avpool record
	epIdx      *epIndex  // the endpoint index, mapped (under Lock)
	generic    generic   // the program for generic-mode attachments (generic.go)
}

// loaded is the guard of the methods with an error result: a nil
// *Objects, or one that did not come from Load, OpenPinned or FromFDs (its
// zero value, which has no maps), is fi.EINVAL.
func (d *Objects) loaded(op string) error {
	switch {
	case d == nil:
		return fmt.Errorf("%s: nil dataplane (*loader.Objects): %w", op, fi.EINVAL)
	case d.AVMeta == nil:
		return fmt.Errorf("%s: dataplane not loaded (zero value, not from Load, OpenPinned or FromFDs): %w", op, fi.EINVAL)
	}
	return nil
}

// Config returns the configuration the dataplane was loaded with (defaults
// filled in); the zero Config for a nil Objects.
func (d *Objects) Config() Config {
	if d == nil {
		return Config{}
	}
	return d.cfg
}

// Pinned reports whether the dataplane's objects are pinned (shared).
func (d *Objects) Pinned() bool { return d != nil && d.pinned }

// Load loads the dataplane, or re-opens the pinned one under cfg.PinRoot.
// Maps that are already pinned keep their contents; a pinned map whose
// definition differs (say, another AVEntries) is an error, never replaced.
// It sizes and loads the object through bpf2go's typed bindings
// (bpf.Specs, bpf.Objects): no map is looked up by name.
func Load(cfg Config) (*Objects, error) {
	if err := checkOS(); err != nil {
		return nil, err
	}
	cfg.defaults()
	spec, err := bpf.LoadSpec()
	if err != nil {
		return nil, fmt.Errorf("load xdpfab object: %w", err)
	}
	var specs bpf.Specs
	if err := spec.Assign(&specs); err != nil {
		return nil, fmt.Errorf("xdpfab object does not match its bindings: %w: %w", fi.EINVAL, err)
	}
	specs.XdpfabAvtab.MaxEntries = cfg.MaxAVs
	specs.XdpfabAvmeta.MaxEntries = cfg.MaxAVs
	specs.XdpfabAuthkey.MaxEntries = cfg.MaxEndpoints
	specs.XdpfabEp.MaxEntries = cfg.MaxEndpoints
	specs.XdpfabEpslot.MaxEntries = 2 * cfg.MaxEndpoints
	specs.XdpfabXsks.MaxEntries = cfg.XSKSlots

	// The maps are pinned by name in C (xdpfab_maps.h): under the pin
	// root's maps/ directory, where a map already pinned is re-opened, or
	// refused when its definition differs. Without a pin root nothing is.
	d := &Objects{cfg: cfg, self: procid.Self()}
	if specs.XdpfabAvtab.InnerMap == nil {
		return nil, fmt.Errorf("xdpfab object: xdpfab_avtab has no inner map: %w", fi.EINVAL)
	}
	d.avTabInner = specs.XdpfabAvtab.InnerMap.Copy()
	var opts ebpf.CollectionOptions
	if cfg.PinRoot != "" {
		if err := ensureBPFFS(cfg.PinRoot); err != nil {
			return nil, err
		}
		mapDir := filepath.Join(cfg.PinRoot, "maps")
		if err := os.MkdirAll(mapDir, 0o700); err != nil {
			return nil, fmt.Errorf("create pin directory %s: %w", mapDir, err)
		}
		opts.Maps.PinPath = mapDir
		// Pins of an xdpfab from before the AV tables (its forward and
		// reverse AV maps): their AVs have no tables, and their link runs
		// the old program. Refuse them as any changed map layout.
		for _, old := range []string{"xdpfab_av", "xdpfab_avrev"} {
			if _, err := os.Stat(filepath.Join(mapDir, old)); err == nil {
				return nil, fmt.Errorf("load xdpfab dataplane: %s holds pins of an xdpfab from before the AV tables (%s); "+
					"remove the pins: %w", mapDir, old, fi.EEXIST)
			}
		}
		d.pinned = true
		if d.lockFile, err = openWriterLock(cfg.PinRoot); err != nil {
			return nil, fmt.Errorf("load xdpfab dataplane: %w", err)
		}
	} else {
		for _, ms := range spec.Maps {
			ms.Pinning = ebpf.PinNone
		}
	}

	var objs bpf.Objects
	if err := spec.LoadAndAssign(&objs, &opts); err != nil {
		d.closeLock()
		return nil, loadError(err)
	}
	d.Program = objs.XdpfabRx
	d.generic.spec = spec
	d.AVTab, d.AVMeta, d.AuthKey = objs.XdpfabAvtab, objs.XdpfabAvmeta, objs.XdpfabAuthkey
	d.EP, d.XSKs, d.Stats, d.AVPool = objs.XdpfabEp, objs.XdpfabXsks, objs.XdpfabStats, objs.XdpfabAvpool
	d.Local = objs.XdpfabLocal
	d.EPPort, d.EPSlot = objs.XdpfabEpport, objs.XdpfabEpslot
	// The checksum's scratch buffer is the program's alone: it holds
	// the map.
	objs.XdpfabScratch.Close()
	if err := d.fixAVEntries(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// fixAVEntries records the node's AV entry limit in xdpfab_avmeta slot 0
// at the first load, and refuses a later load of the pinned maps that asks
// for another: the limit is node-wide, like a map size.
func (d *Objects) fixAVEntries() error {
	if !d.pinned {
		return nil
	}
	unlock := d.Lock()
	defer unlock()
	g, err := d.globalMeta()
	if err != nil {
		return err
	}
	switch uint64(d.cfg.AVEntries) {
	case g.Flags:
		return nil
	default:
		if g.Flags != 0 {
			return fmt.Errorf("load xdpfab dataplane: the pinned maps hold %d AV entries, asked for %d; "+
				"remove the pins or load with the same Config: %w", g.Flags, d.cfg.AVEntries, fi.EEXIST)
		}
	}
	g.Flags = uint64(d.cfg.AVEntries)
	return d.AVMeta.Put(uint32(0), &g)
}

func loadError(err error) error {
	var verr *ebpf.VerifierError
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("load xdpfab dataplane: needs CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN (run as root) (%v): %w", err, fi.EPERM)
	case errors.Is(err, ebpf.ErrMapIncompatible):
		return fmt.Errorf("load xdpfab dataplane: a pinned map has another definition (sizes changed?); "+
			"remove the pins or load with the same Config: %w: %w", fi.EEXIST, err)
	case errors.As(err, &verr):
		if strings.Contains(verr.Error(), "!root") {
			return fmt.Errorf("load xdpfab dataplane: the verifier needs CAP_PERFMON for this program (%v): %w", verr, fi.EPERM)
		}
		return fmt.Errorf("load xdpfab dataplane: verifier rejected the program: %w: %+v", fi.EINVAL, verr)
	}
	return fmt.Errorf("load xdpfab dataplane: %w", err)
}

// Close releases this process's handles. Pinned objects stay. Closing a
// nil or zero Objects returns nil: there is nothing to release.
func (d *Objects) Close() error {
	if d == nil {
		return nil
	}
	if d.pool > 0 && d.AVMeta != nil {
		unlock := d.Lock()
		d.returnPool(d.pool)
		unlock()
	}
	errs := []error{d.unmapEPIndex(), d.generic.close()}
	for _, c := range []interface{ Close() error }{d.Program, d.AVTab, d.AVMeta, d.AuthKey, d.EP, d.XSKs, d.Stats, d.AVPool, d.Local, d.EPPort, d.EPSlot} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	d.tabMu.Lock()
	for _, m := range d.tables {
		errs = append(errs, m.Close())
	}
	d.tables = nil
	d.tabMu.Unlock()
	d.closeLock()
	errs = append(errs, d.stampPage.Close())
	return errors.Join(errs...)
}

// Unpin removes the pinned maps (not links: see Detach). Processes holding
// the maps keep them until they close. An unpinned, nil or zero Objects
// has nothing to unpin: nil.
func (d *Objects) Unpin() error {
	if d == nil || !d.pinned {
		return nil
	}
	var errs []error
	for _, m := range []*ebpf.Map{d.AVTab, d.AVMeta, d.AuthKey, d.EP, d.XSKs, d.Stats, d.AVPool, d.Local, d.EPPort, d.EPSlot} {
		if m == nil {
			continue
		}
		errs = append(errs, m.Unpin())
	}
	tables, _ := filepath.Glob(filepath.Join(d.cfg.PinRoot, "maps", avTablePrefix+"*"))
	for _, p := range tables {
		errs = append(errs, os.Remove(p))
	}
	_ = os.Remove(filepath.Join(d.cfg.PinRoot, "maps"))
	return errors.Join(errs...)
}

// Counters returns the program's counters summed over CPUs and
// interfaces.
func (d *Objects) Counters() ([bpf.NumCounters]uint64, error) {
	var out [bpf.NumCounters]uint64
	err := d.eachCounter(func(ifindex int, c bpf.Counter, v uint64) { out[c] += v })
	return out, err
}

// CountersByIfindex returns the counters of every ingress ifindex that saw
// a frame, summed over CPUs. Key 0 holds ifindexes at or above
// bpf.IfindexSlots. Ifindexes are per network namespace: interfaces of
// different namespaces with one ifindex share a row.
func (d *Objects) CountersByIfindex() (map[int][bpf.NumCounters]uint64, error) {
	out := map[int][bpf.NumCounters]uint64{}
	err := d.eachCounter(func(ifindex int, c bpf.Counter, v uint64) {
		if v == 0 {
			return
		}
		row := out[ifindex]
		row[c] += v
		out[ifindex] = row
	})
	return out, err
}

// eachCounter visits every (ifindex, counter) summed over CPUs, reading
// the per-CPU array in batches. Every frame counts in exactly one counter
// but RX, which the program leaves alone (bpf/xdpfab_consts.h): each other
// counter is visited a second time as RX, so that callers adding the
// values up get RX as their sum.
func (d *Objects) eachCounter(fn func(ifindex int, c bpf.Counter, v uint64)) error {
	if err := d.stats("read counters"); err != nil {
		return err
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	const chunk = 1024
	keys := make([]uint32, chunk)
	vals := make([]uint64, chunk*ncpu)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := d.Stats.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			var sum uint64
			for _, v := range vals[i*ncpu : (i+1)*ncpu] {
				sum += v
			}
			row, c := int(keys[i])/int(bpf.NumCounters), bpf.Counter(keys[i]%uint32(bpf.NumCounters))
			if c == bpf.CounterRX {
				continue // the program does not count it: the sum below is RX
			}
			fn(row, c, sum)
			fn(row, bpf.CounterRX, sum)
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read counters: %w", err)
		}
	}
}

// stats is loaded for the counter calls, which also need the counter map.
func (d *Objects) stats(op string) error {
	if err := d.loaded(op); err != nil {
		return err
	}
	if d.Stats == nil {
		return fmt.Errorf("%s: dataplane has no counter map: %w", op, fi.EINVAL)
	}
	return nil
}

// ResetCounters zeroes every counter (tests and `xdpfab stats --reset`).
func (d *Objects) ResetCounters() error {
	if err := d.stats("reset counters"); err != nil {
		return err
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	n := int(d.Stats.MaxEntries())
	keys := make([]uint32, n)
	for i := range keys {
		keys[i] = uint32(i)
	}
	if _, err := d.Stats.BatchUpdate(keys, make([]uint64, n*ncpu), nil); err != nil {
		return fmt.Errorf("reset counters: %w", err)
	}
	return nil
}
