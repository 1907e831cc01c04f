package av

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/procid"
	"github.com/xdpfab/xdpfab/loader"
)

// entry is one in-use AV index, as cached from the reverse table.
type entry struct {
	addr    bpf.Addr
	userID  uint64
	refcnt  uint32 // 0: the index is free
	authKey uint32 // auth-key handle + 1, 0 = none
	flags   uint32 // bpf.AVF*
}

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

	// Guarded by dp.Lock(). The cache of the reverse table.
	gen     uint64
	entries []entry
	byAddr  map[bpf.Addr]uint32
	free    idxHeap
	keys    []authKey
	pending batch // FI_MORE inserts not yet written (private AVs only)
	eq      *EventQueue
	closed  bool

	bound atomic.Int32 // endpoints bound

	// rw guards the cache against Resolve, which takes only its read side.
	// Every other method holds it for writing together with the dataplane
	// lock (see lock).
	rw sync.RWMutex
}

// lock takes the dataplane lock (all AV changes of the node, serialised)
// and the AV's cache lock.
func (a *AV) lock() (unlock func()) {
	dpUnlock := a.dp.Lock()
	a.rw.Lock()
	return func() {
		a.rw.Unlock()
		dpUnlock()
	}
}

// Resolve returns the address at index fa for the transmit path: a read of
// the process's cache under a read lock, with no system call. A named AV
// changed by another process is seen from this process's next other AV
// call on (which re-reads it), or from a miss here: an index this process
// does not know re-reads the AV if another process changed it.
func (a *AV) Resolve(fa fi.Addr) (netip.AddrPort, bool) {
	if a == nil || a.dp == nil {
		return netip.AddrPort{}, false
	}
	a.rw.RLock()
	if a.closed {
		a.rw.RUnlock()
		return netip.AddrPort{}, false
	}
	idx, ok := a.index(fa)
	if ok || !a.shared {
		defer a.rw.RUnlock()
		if !ok {
			return netip.AddrPort{}, false
		}
		return a.entries[idx].addr.AddrPort(), true
	}
	a.rw.RUnlock()
	// A named AV another process changed (the agent inserted a peer for
	// this one): a miss reloads the cache if its generation moved.
	unlock := a.lock()
	defer unlock()
	if a.begin(false) != nil {
		return netip.AddrPort{}, false
	}
	if idx, ok = a.index(fa); !ok {
		return netip.AddrPort{}, false
	}
	return a.entries[idx].addr.AddrPort(), true
}

// maxPending bounds FI_MORE deferral; past it the batch is written.
const maxPending = 4096

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
	// Count is a hint: the cache preallocates no more than the maps hold.
	hint := min(attr.Count, int(dp.Config().AVEntries))
	a := &AV{dp: dp, attr: *attr, byAddr: make(map[bpf.Addr]uint32, hint)}
	if a.attr.Type == TypeUnspec {
		a.attr.Type = TypeTable
	}
	if a.attr.AddrFormat == fi.FormatUnspec {
		a.attr.AddrFormat = fi.FormatSockaddr
	}
	a.attr.MapAddr = 0
	a.entries = make([]entry, 0, hint)
	a.readOnly = attr.Flags&fi.Read != 0
	a.shared = attr.Name != ""

	unlock := dp.Lock()
	defer unlock()
	metas, err := a.readMetas()
	if err != nil {
		return nil, err
	}
	if a.shared {
		for id, m := range metas {
			if m.InUse != 0 && m.NameString() == attr.Name {
				return a.adopt(uint32(id), m, attr)
			}
		}
		if a.readOnly {
			return nil, fmt.Errorf("av open %q read-only: no such AV: %w", attr.Name, fi.ENOENT)
		}
	}
	for id := 1; id < len(metas); id++ {
		if metas[id].InUse == 0 {
			return a.create(uint32(id), attr)
		}
	}
	return nil, fmt.Errorf("av open: all %d AV slots in use: %w", len(metas)-1, fi.ENOSPC)
}

func (a *AV) create(id uint32, attr *Attr) (*AV, error) {
	m := bpf.AVMeta{
		InUse: 1, Type: uint32(a.attr.Type), Flags: uint64(a.attr.Flags &^ (fi.Event | fi.Read)),
		AddrFormat: uint32(a.attr.AddrFormat), RxCtxBits: uint32(a.attr.RxCtxBits),
		Count: uint32(min(a.attr.Count, 1<<31)), Generation: 1,
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
	if err := a.dp.AVMeta.Put(id, &m); err != nil {
		return nil, fmt.Errorf("av open: write AV slot %d: %w", id, err)
	}
	a.id, a.gen = id, m.Generation
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
	n := int(a.dp.AVMeta.MaxEntries())
	keys := make([]uint32, n)
	metas := make([]bpf.AVMeta, n)
	var cursor ebpf.MapBatchCursor
	got, err := a.dp.AVMeta.BatchLookup(&cursor, keys, metas, nil)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return nil, fmt.Errorf("av open: read AV slots: %w", err)
	}
	out := make([]bpf.AVMeta, n)
	for i := range got {
		out[keys[i]] = metas[i]
	}
	return out, nil
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
	case dp.AV == nil || dp.AVRev == nil || dp.AVMeta == nil || dp.AuthKey == nil:
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
// bound. An anonymous AV's entries are removed from the maps (forward map
// first, so XDP stops translating before indices are freed); a named AV's
// entries stay for the other processes and later opens (see Destroy).
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
	if err := a.flushLocked(a.pending.mark()); err != nil {
		return fmt.Errorf("av close: %w", err)
	}
	if !a.shared {
		if err := a.destroyLocked(); err != nil {
			return fmt.Errorf("av close: %w", err)
		}
	}
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
	a := &AV{dp: dp, byAddr: map[bpf.Addr]uint32{}, closed: true}
	metas, err := a.readMetas()
	if err != nil {
		return fmt.Errorf("av destroy %q: %w", name, err)
	}
	for id, m := range metas {
		if m.InUse != 0 && name != "" && m.NameString() == name {
			a.id = uint32(id)
			if err := a.load(m); err != nil {
				return fmt.Errorf("av destroy %q: %w", name, err)
			}
			return a.destroyLocked()
		}
	}
	return fmt.Errorf("av destroy %q: no such AV: %w", name, fi.ENOENT)
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
	for _, m := range metas {
		if m.InUse != 0 && name != "" && m.NameString() == name {
			return Owner{UID: m.OwnerUid, Group: m.GroupGid}, nil
		}
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
	for _, m := range metas {
		if m.InUse != 0 && m.NameString() == name {
			return true
		}
	}
	return false
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
	a := &AV{dp: dp, id: id, byAddr: map[bpf.Addr]uint32{}, closed: true}
	if err := a.load(m); err != nil {
		return fmt.Errorf("av destroy %d: %w", id, err)
	}
	return a.destroyLocked()
}

// destroyLocked deletes every entry, every auth key and the AV's slot.
func (a *AV) destroyLocked() error {
	var fk []bpf.AVKey
	var rk []bpf.RevKey
	for i := range a.entries {
		if e := &a.entries[i]; e.refcnt > 0 {
			fk = append(fk, bpf.AVKey{AvId: a.id, Src: e.addr})
			rk = append(rk, bpf.RevKey{AvId: a.id, Index: uint32(i)})
		}
	}
	if err := batchDelete(a.dp.AV, fk); err != nil {
		return err
	}
	if err := batchDelete(a.dp.AVRev, rk); err != nil {
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
	a.dp.ReturnAVEntries(len(fk)) // a whole AV: back to the node at once, not into this process's reserve
	a.entries, a.byAddr, a.free, a.keys = nil, map[bpf.Addr]uint32{}, nil, nil
	return a.dp.AVMeta.Put(a.id, &bpf.AVMeta{})
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
		a.closed = true
		return fmt.Errorf("AV %q was destroyed: %w", a.attr.Name, fi.EOPBADSTATE)
	}
	if m.Generation == a.gen {
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
	a.gen = m.Generation
	return nil
}

// load rebuilds the cache from the reverse and auth-key tables.
func (a *AV) load(m bpf.AVMeta) error {
	a.entries = a.entries[:0]
	clear(a.byAddr)
	a.free = a.free[:0]
	// Endpoints' use of auth keys is this process's own count: keep it.
	inUse := map[uint32]int{}
	for _, k := range a.keys {
		if k.inUse > 0 {
			inUse[k.value] = k.inUse
		}
	}
	a.keys = a.keys[:0]
	err := forEach(a.dp.AVRev, func(k bpf.RevKey, v bpf.RevVal) {
		if k.AvId != a.id {
			return
		}
		for uint32(len(a.entries)) <= k.Index {
			a.entries = append(a.entries, entry{})
		}
		a.entries[k.Index] = entry{addr: v.Addr, userID: v.UserId, refcnt: v.Refcnt, authKey: v.AuthKey, flags: v.Flags}
		a.byAddr[v.Addr] = k.Index
	})
	if err != nil {
		return fmt.Errorf("read AV %d: %w", a.id, err)
	}
	for i := range a.entries {
		if a.entries[i].refcnt == 0 {
			a.free.push(uint32(i))
		}
	}
	err = forEach(a.dp.AuthKey, func(k bpf.RevKey, v bpf.AuthKeyVal) {
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

func batchUpdate[K, V any](m *ebpf.Map, keys []K, vals []V) (int, error) {
	done := 0
	for done < len(keys) {
		n, err := m.BatchUpdate(keys[done:], vals[done:], nil)
		done += n
		if err != nil {
			return done, fmt.Errorf("write %s: %w", m, err)
		}
	}
	return done, nil
}
