package av

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/avtab"
	"github.com/xdpfab/xdpfab/internal/procid"
	"github.com/xdpfab/xdpfab/loader"
)

// authKey is one auth-key handle.
type authKey struct {
	value  uint32 // 0: the handle is free
	userID uint64
	key    []byte
	inUse  int // endpoints enabled with the key, this process
}

// AV is an open address vector. Its methods are safe for concurrent use.
type AV struct {
	dp       *loader.Objects
	id       uint32
	attr     Attr
	shared   bool // named: other processes may change it
	readOnly bool

	// Guarded by dp.Lock(). The table is the AV (shared with XDP and
	// other processes); the process keeps only the free indices below the
	// table's high mark and the auth keys.
	gen    uint64
	tab    *avtab.Table
	free   freeSet
	keys   []authKey
	eq     *EventQueue
	closed bool
	grown  int // tables this handle replaced (growth, rebuilds)
	// The last rebuild for want of a slot (reseed): when it ended and
	// what it took.
	reseedAt   time.Time
	reseedCost time.Duration
	// Scratch space kept between calls: Remove's for long lists,
	// insert's per-address results.
	rmAt      map[uint32]int
	rmCounts  []count
	insErrnos []fi.Errno

	// fast is the lock-free readers' view of tab (Lookup, LookupAddr,
	// Resolve, SourceOf): set with tab (for a copy, again at each
	// refresh), nil while the AV is closed. Readers load it and read the table without a lock
	// or a locked instruction; whatever they miss they ask again under
	// the lock (see avtab.Reader for why a Reader may outlive its table).
	fast atomic.Pointer[avtab.Reader]

	bound atomic.Int32 // endpoints bound
}

// lock takes the dataplane lock, which serialises all AV changes of the
// node and guards the AV's fields.
func (a *AV) lock() (unlock func()) {
	return a.dp.Lock()
}

// setTab makes t the AV's table, for the writers and the lock-free
// readers. The caller holds the lock.
func (a *AV) setTab(t *avtab.Table) {
	a.tab = t
	a.fast.Store(t.Reader())
}

// Resolve returns the address at index fa for the transmit path: a
// lock-free read of the AV's table (avtab.Reader), with no system call.
// Another process's change to a named AV is seen at once, unless it
// replaced the table (growth), or this process reads a copy of the table:
// then from this process's next other AV call on, which re-opens or
// re-reads it, or from a miss here, which does the same.
func (a *AV) Resolve(fa fi.Addr) (netip.AddrPort, bool) {
	if a == nil || a.dp == nil {
		return netip.AddrPort{}, false
	}
	if r := a.fast.Load(); r != nil && fa <= fi.Addr(^uint32(0)) && !r.Retired() {
		if addr, ok := r.Addr(uint32(fa)); ok {
			return addr.AddrPort(), true
		}
	}
	// A miss: the index is not in use, or a named AV another process
	// changed in a way this process does not see yet (it grew the table,
	// or this process reads a copy: an application's view through the
	// agent, where the agent just inserted the peer), or the slot kept
	// changing. Under the lock, a named AV is re-read if it changed.
	unlock := a.lock()
	defer unlock()
	if a.begin(false) != nil {
		return netip.AddrPort{}, false
	}
	return a.resolveLocked(fa)
}

func (a *AV) resolveLocked(fa fi.Addr) (netip.AddrPort, bool) {
	idx, ok := a.index(fa)
	if !ok {
		return netip.AddrPort{}, false
	}
	addr, ok := a.tab.Addr(idx)
	if !ok {
		return netip.AddrPort{}, false
	}
	return addr.AddrPort(), true
}

// Open opens an address vector on dp (fi_av_open). attr.Type UNSPEC is
// replaced by the type chosen. A named AV is created unless it exists; with
// fi.Read it must exist and is opened read-only.
func Open(dp *loader.Objects, attr *Attr) (*AV, error) {
	if attr == nil {
		return nil, fmt.Errorf("av open: nil attributes: %w", fi.EINVAL)
	}
	if err := checkDataplane("av open", dp); err != nil {
		return nil, err
	}
	if err := attr.validate(); err != nil {
		return nil, err
	}
	a := &AV{dp: dp, attr: *attr}
	if a.attr.Type == TypeUnspec {
		a.attr.Type = TypeTable
	}
	if a.attr.AddrFormat == fi.FormatUnspec {
		a.attr.AddrFormat = fi.FormatSockaddr
	}
	a.attr.MapAddr = 0
	a.readOnly = attr.Flags&fi.Read != 0
	a.shared = attr.Name != ""

	unlock := dp.Lock()
	defer unlock()
	metas, err := a.readMetas()
	if err != nil {
		return nil, err
	}
	if a.shared {
		if id, ok := findNamed(metas, attr.Name); ok {
			return a.adopt(id, metas[id], attr)
		}
		if a.readOnly {
			return nil, fmt.Errorf("av open %q read-only: no such AV: %w", attr.Name, fi.ENOENT)
		}
	}
	for id := 1; id < len(metas); id++ {
		if metas[id].InUse == 0 {
			return a.create(uint32(id), attr, metas[id].Generation)
		}
	}
	return nil, fmt.Errorf("av open: all %d AV slots in use: %w", len(metas)-1, fi.ENOSPC)
}

// create makes AV id in a free slot whose last generation was gen (kept by
// destroyLocked): the new AV's generations go on from there, so that a
// reader of an AV destroyed and made again under its name in the same
// slot never takes the new one's state for the old one's.
func (a *AV) create(id uint32, attr *Attr, gen uint64) (*AV, error) {
	m := bpf.AVMeta{
		InUse: 1, Type: uint32(a.attr.Type), Flags: uint64(a.attr.Flags &^ (fi.Event | fi.Read)),
		AddrFormat: uint32(a.attr.AddrFormat), RxCtxBits: uint32(a.attr.RxCtxBits),
		Count: uint32(min(a.attr.Count, 1<<31)), Generation: gen + 1,
	}
	if !a.shared {
		self := procid.Self()
		m.OwnerPid, m.OwnerStart = self.PID, self.Start
	}
	m.OwnerUid, m.GroupGid = uint32(os.Geteuid()), NoGroup
	if o := attr.Owner; o != nil {
		m.OwnerUid, m.GroupGid = o.UID, o.Group
	}
	copy(m.Name[:], a.attr.Name)
	// The table: sized by the count hint, bounded by the node's AV
	// capacity (nothing is reserved for it until inserts: capacity.go).
	hint := uint32(min(max(a.attr.Count, 0), MaxIndex+1))
	if limit := a.dp.Config().AVEntries; limit > 0 {
		hint = min(hint, limit)
	}
	t, err := avtab.New(a.dp, id, hint)
	if err != nil {
		return nil, fmt.Errorf("av open: %w", err)
	}
	if err := avtab.Install(a.dp, id, t); err != nil {
		t.Close()
		return nil, fmt.Errorf("av open: %w", err)
	}
	if err := a.dp.AVMeta.Put(id, &m); err != nil {
		a.dp.DeleteAVTable(id)
		t.Close()
		return nil, fmt.Errorf("av open: write AV slot %d: %w", id, err)
	}
	a.dp.PublishAV(id)
	a.id, a.gen = id, m.Generation
	a.setTab(t)
	attr.Type, attr.AddrFormat, attr.MapAddr = a.attr.Type, a.attr.AddrFormat, 0
	return a, nil
}

// adopt opens an existing named AV. Its stored attributes win: a writer
// must ask for the same shape (the type unless UNSPEC, FI_AV_USER_ID,
// FI_SYMMETRIC, rx_ctx_bits, address format) or fail with EINVAL; a reader
// (FI_READ) cannot change the AV and takes whatever shape it has. The per-opener flags (FI_EVENT,
// FI_READ) are the opener's. attr reports the AV as opened.
func (a *AV) adopt(id uint32, m bpf.AVMeta, attr *Attr) (*AV, error) {
	const shape = fi.AVUserID | fi.Symmetric
	stored, format := fi.Flags(m.Flags)&shape, fi.AddrFormat(m.AddrFormat)
	if attr.Flags&fi.Read == 0 {
		switch {
		case attr.Type != TypeUnspec && attr.Type != Type(m.Type):
			return nil, fmt.Errorf("av open %q: exists with type %v, asked for %v: %w", attr.Name, Type(m.Type), attr.Type, fi.EINVAL)
		case stored != attr.Flags&shape:
			return nil, fmt.Errorf("av open %q: exists with flags %v, asked for %v: %w",
				attr.Name, stored, attr.Flags&shape, fi.EINVAL)
		case attr.RxCtxBits != int(m.RxCtxBits):
			return nil, fmt.Errorf("av open %q: exists with rx_ctx_bits %d: %w", attr.Name, m.RxCtxBits, fi.EINVAL)
		case attr.AddrFormat != fi.FormatUnspec && attr.AddrFormat != format:
			return nil, fmt.Errorf("av open %q: exists with address format %v: %w", attr.Name, format, fi.EINVAL)
		}
	}
	a.id = id
	a.attr.Type, a.attr.AddrFormat, a.attr.RxCtxBits = Type(m.Type), format, int(m.RxCtxBits)
	a.attr.Flags = a.attr.Flags&^shape | stored
	if err := a.load(m); err != nil {
		return nil, err
	}
	attr.Type, attr.AddrFormat, attr.RxCtxBits, attr.Flags, attr.MapAddr = a.attr.Type, format, a.attr.RxCtxBits, a.attr.Flags, 0
	return a, nil
}

func (a *AV) readMetas() ([]bpf.AVMeta, error) {
	out, err := readMetas(a.dp)
	if err != nil {
		return nil, fmt.Errorf("av open: %w", err)
	}
	return out, nil
}

// readMetas reads every AV slot's metadata in one batch, indexed by AV id
// (slot 0 is the node's record, not an AV).
func readMetas(dp *loader.Objects) ([]bpf.AVMeta, error) {
	n := int(dp.AVMeta.MaxEntries())
	keys := make([]uint32, n)
	metas := make([]bpf.AVMeta, n)
	var cursor ebpf.MapBatchCursor
	got, err := dp.AVMeta.BatchLookup(&cursor, keys, metas, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, fmt.Errorf("read AV slots: %w", err)
	}
	out := make([]bpf.AVMeta, n)
	for i := range got {
		out[keys[i]] = metas[i]
	}
	return out, nil
}

// Slots calls fn for every AV in use on dp (named or anonymous), in id
// order, with its metadata (owner, name, generation), read in one batch:
// for the agent's listings, quotas and garbage collection. A nil or zero
// dp is EINVAL.
func Slots(dp *loader.Objects, fn func(id uint32, m *bpf.AVMeta)) error {
	if err := checkDataplane("av slots", dp); err != nil {
		return err
	}
	metas, err := readMetas(dp)
	if err != nil {
		return fmt.Errorf("av slots: %w", err)
	}
	for id := 1; id < len(metas); id++ {
		if metas[id].InUse != 0 {
			fn(uint32(id), &metas[id])
		}
	}
	return nil
}

// usable is the guard at the top of every method with an error result: a
// nil *AV, or an AV that did not come from Open (its zero value), is
// EINVAL. A closed AV is EOPBADSTATE, which begin reports.
func (a *AV) usable(op string) error {
	switch {
	case a == nil:
		return fmt.Errorf("%s: nil AV: %w", op, fi.EINVAL)
	case a.dp == nil:
		return fmt.Errorf("%s: AV not opened (zero value): %w", op, fi.EINVAL)
	}
	return nil
}

// checkDataplane fails with EINVAL unless dp is a loaded dataplane with
// the maps an AV uses: not nil, not a zero loader.Objects.
func checkDataplane(op string, dp *loader.Objects) error {
	switch {
	case dp == nil:
		return fmt.Errorf("%s: nil dataplane: %w", op, fi.EINVAL)
	case dp.AVTab == nil || dp.AVMeta == nil || dp.AuthKey == nil:
		return fmt.Errorf("%s: dataplane not loaded (zero loader.Objects or missing AV maps): %w", op, fi.EINVAL)
	}
	return nil
}

// ID is the AV's id in the dataplane maps (xdpfab_ep_val.av_id); 0 for a
// nil or zero AV.
func (a *AV) ID() uint32 {
	if a == nil {
		return 0
	}
	return a.id
}

// Attr returns the attributes the AV was opened with, as resolved; the
// zero Attr for a nil AV.
func (a *AV) Attr() Attr {
	if a == nil {
		return Attr{}
	}
	return a.attr
}

// BindEndpoint records an endpoint using the AV: Close fails with EBUSY
// until the matching UnbindEndpoint.
func (a *AV) BindEndpoint() error {
	if err := a.usable("av bind endpoint"); err != nil {
		return err
	}
	unlock := a.lock()
	defer unlock()
	if a.closed {
		return fmt.Errorf("av bind endpoint: %w", fi.EOPBADSTATE)
	}
	a.bound.Add(1)
	return nil
}

// UnbindEndpoint undoes BindEndpoint. On a nil AV it does nothing.
func (a *AV) UnbindEndpoint() {
	if a == nil {
		return
	}
	if a.bound.Add(-1) < 0 {
		a.bound.Add(1)
	}
}

// Close closes the AV (fi_close). It fails with EBUSY while endpoints are
// bound. An anonymous AV's table is removed (XDP stops translating its
// sources); a named AV's entries stay for the other processes and later
// opens (see Destroy).
// Closing a closed AV returns nil, and so does closing a nil or zero AV
// (there is nothing to release).
func (a *AV) Close() error {
	if a == nil || a.dp == nil {
		return nil
	}
	unlock := a.lock()
	defer unlock()
	if a.closed {
		return nil
	}
	if n := a.bound.Load(); n > 0 {
		return fmt.Errorf("av close: %d endpoint(s) still bound: %w", n, fi.EBUSY)
	}
	if !a.shared {
		if err := a.destroyLocked(); err != nil {
			return fmt.Errorf("av close: %w", err)
		}
	}
	a.fast.Store(nil)
	a.tab.Close()
	a.tab = nil
	a.closed = true
	if a.eq != nil {
		a.eq.unbind()
	}
	return nil
}

// Destroy removes the named AV name and all its entries from dp. Processes
// that have it open see EOPBADSTATE on their next call.
func Destroy(dp *loader.Objects, name string) error {
	if err := checkDataplane(fmt.Sprintf("av destroy %q", name), dp); err != nil {
		return err
	}
	// Find, read and delete under one lock: no other process changes the
	// AV in between.
	unlock := dp.Lock()
	defer unlock()
	a := &AV{dp: dp, closed: true}
	metas, err := a.readMetas()
	if err != nil {
		return fmt.Errorf("av destroy %q: %w", name, err)
	}
	id, ok := findNamed(metas, name)
	if !ok {
		return fmt.Errorf("av destroy %q: no such AV: %w", name, fi.ENOENT)
	}
	a.id = id
	if err := a.load(metas[id]); err != nil && !errors.Is(err, fi.ENOENT) {
		return fmt.Errorf("av destroy %q: %w", name, err)
	}
	defer a.tab.Close()
	return a.destroyLocked()
}

// OwnerOf returns the owner recorded for the named AV in dp.
func OwnerOf(dp *loader.Objects, name string) (Owner, error) {
	if dp == nil || dp.AVMeta == nil {
		return Owner{}, fmt.Errorf("av owner: no loader objects: %w", fi.EINVAL)
	}
	metas, err := (&AV{dp: dp}).readMetas()
	if err != nil {
		return Owner{}, fmt.Errorf("av owner %q: %w", name, err)
	}
	if id, ok := findNamed(metas, name); ok {
		return Owner{UID: metas[id].OwnerUid, Group: metas[id].GroupGid}, nil
	}
	return Owner{}, fmt.Errorf("av owner %q: no such AV: %w", name, fi.ENOENT)
}

// Exists reports whether dp holds a named AV called name.
func Exists(dp *loader.Objects, name string) bool {
	if checkDataplane("", dp) != nil || name == "" {
		return false
	}
	metas, err := (&AV{dp: dp}).readMetas()
	if err != nil {
		return false
	}
	_, ok := findNamed(metas, name)
	return ok
}

// findNamed is the one scan of the AV slots for a named AV (Open,
// Destroy, OwnerOf, Exists): the slot of the AV in use called name; false
// for none, and for the empty name (anonymous AVs have no name to find).
func findNamed(metas []bpf.AVMeta, name string) (uint32, bool) {
	if name == "" {
		return 0, false
	}
	for id := 1; id < len(metas); id++ {
		if metas[id].InUse != 0 && metas[id].NameString() == name {
			return uint32(id), true
		}
	}
	return 0, false
}

// DestroyOrphan removes the anonymous AV id if the process pid, started at
// start (see Attr.OwnerStart of package ep), still owns it: the agent's
// clean-up after processes that died without closing their AVs. It fails
// with ENOENT when the slot holds anything else by now.
func DestroyOrphan(dp *loader.Objects, id, pid uint32, start uint64) error {
	if err := checkDataplane(fmt.Sprintf("av destroy %d", id), dp); err != nil {
		return err
	}
	unlock := dp.Lock()
	defer unlock()
	var m bpf.AVMeta
	if err := dp.AVMeta.Lookup(id, &m); err != nil {
		return fmt.Errorf("av destroy %d: %w", id, err)
	}
	if m.InUse == 0 || m.OwnerPid != pid || m.OwnerStart != start || m.NameString() != "" {
		return fmt.Errorf("av destroy %d: not an anonymous AV of pid %d: %w", id, pid, fi.ENOENT)
	}
	a := &AV{dp: dp, id: id, closed: true}
	if err := a.load(m); err != nil && !errors.Is(err, fi.ENOENT) {
		return fmt.Errorf("av destroy %d: %w", id, err)
	}
	defer a.tab.Close()
	return a.destroyLocked()
}

// destroyLocked deletes the AV's table (XDP stops translating its
// sources), its auth keys and its slot, and gives its entries' capacity
// back to the node. Other processes that mapped the table see it retired.
func (a *AV) destroyLocked() error {
	// The slot keeps its generation (create goes on from it): read first,
	// so that a failure changes nothing.
	var m bpf.AVMeta
	if err := a.dp.AVMeta.Lookup(a.id, &m); err != nil {
		return err
	}
	gen := m.Generation
	live := 0
	if a.tab != nil {
		live = int(a.tab.Live())
		a.tab.MarkRetired(true)
	}
	if err := a.dp.DeleteAVTable(a.id); err != nil {
		return err
	}
	var kk []bpf.RevKey
	for h := range a.keys {
		if a.keys[h].value != 0 {
			kk = append(kk, bpf.RevKey{AvId: a.id, Index: uint32(h)})
		}
	}
	if err := batchDelete(a.dp.AuthKey, kk); err != nil {
		return err
	}
	a.dp.ReturnAVEntries(live) // a whole AV: back to the node at once, not into this process's reserve
	a.free, a.keys = freeSet{}, nil
	err := a.dp.AVMeta.Put(a.id, &bpf.AVMeta{Generation: gen + 1})
	a.dp.PublishAV(a.id)
	return err
}

// begin is the prologue of every call: it checks the AV is usable and, for
// a named AV, re-reads it when another process changed it. The caller holds
// the dataplane lock.
func (a *AV) begin(write bool) error {
	if a.closed {
		return fi.EOPBADSTATE
	}
	if write && a.readOnly {
		return fmt.Errorf("AV %q opened read-only (FI_READ): %w", a.attr.Name, fi.EACCES)
	}
	if !a.shared {
		return nil
	}
	var m bpf.AVMeta
	if err := a.dp.AVMeta.Lookup(a.id, &m); err != nil {
		return fmt.Errorf("read AV slot: %w", err)
	}
	if m.InUse == 0 || m.NameString() != a.attr.Name {
		// Closed for good: its table too (a lock-free reader still on it
		// reads zeros, then misses), which the handle's Close would not
		// release any more.
		a.closed = true
		a.fast.Store(nil)
		a.tab.Close()
		a.tab = nil
		return fmt.Errorf("AV %q was destroyed: %w", a.attr.Name, fi.EOPBADSTATE)
	}
	if m.Generation == a.gen && a.tab != nil && !a.tab.Retired() && !a.tab.Stale() {
		return nil
	}
	return a.load(m)
}

// commit publishes a change of a named AV to the other processes.
func (a *AV) commit() error {
	if !a.shared {
		return nil
	}
	var m bpf.AVMeta
	if err := a.dp.AVMeta.Lookup(a.id, &m); err != nil {
		return err
	}
	m.Generation++
	if err := a.dp.AVMeta.Put(a.id, &m); err != nil {
		return err
	}
	a.dp.PublishAV(a.id)
	a.gen = m.Generation
	return nil
}

// load (re-)reads what the process keeps of a named AV: the table's
// mapping (re-opened when it was replaced), the free indices and the auth
// keys.
func (a *AV) load(m bpf.AVMeta) error {
	// A copy answers lock-free only while the AV's change stamp keeps the
	// value it had before the copy was read (avtab.Table.SetStamp).
	stamp := a.dp.AVStamp(a.id)
	var at uint64
	if stamp != nil {
		at = atomic.LoadUint64(stamp)
	}
	if a.tab != nil {
		if err := a.tab.Refresh(); err != nil {
			return fmt.Errorf("read AV %d: %w", a.id, err)
		}
		a.tab.SetStamp(stamp, at)
		a.fast.Store(a.tab.Reader()) // a copy's new reader (a mapping's is the same)
	}
	if a.tab == nil || a.tab.Retired() {
		t, err := avtab.Open(a.dp, a.id, a.readOnly)
		if err != nil {
			return fmt.Errorf("read AV %d: %w", a.id, err)
		}
		t.SetStamp(stamp, at)
		old := a.tab
		a.setTab(t)
		old.Close()
	}
	a.free.reset()
	for idx := range a.tab.High() {
		if _, _, refcnt := a.tab.Aux(idx); refcnt == 0 {
			a.free.push(idx)
		}
	}
	// Endpoints' use of auth keys is this process's own count: keep it.
	inUse := map[uint32]int{}
	for _, k := range a.keys {
		if k.inUse > 0 {
			inUse[k.value] = k.inUse
		}
	}
	a.keys = a.keys[:0]
	err := forEach(a.dp.AuthKey, func(k bpf.RevKey, v bpf.AuthKeyVal) {
		if k.AvId != a.id {
			return
		}
		for uint32(len(a.keys)) <= k.Index {
			a.keys = append(a.keys, authKey{})
		}
		a.keys[k.Index] = authKey{value: v.Value, userID: v.UserId, key: append([]byte(nil), v.Key[:min(v.Len, uint32(len(v.Key)))]...),
			inUse: inUse[v.Value]}
	})
	if err != nil {
		return fmt.Errorf("read AV %d auth keys: %w", a.id, err)
	}
	a.gen = m.Generation
	return nil
}

// forEach visits every element of a hash map in batches.
func forEach[K, V any](m *ebpf.Map, fn func(K, V)) error {
	const chunk = 4096
	keys := make([]K, chunk)
	vals := make([]V, chunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			fn(keys[i], vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func batchDelete[K any](m *ebpf.Map, keys []K) error {
	for len(keys) > 0 {
		n, err := m.BatchDelete(keys, nil)
		if err != nil {
			return fmt.Errorf("delete from %s: %w", m, err)
		}
		keys = keys[n:]
	}
	return nil
}
