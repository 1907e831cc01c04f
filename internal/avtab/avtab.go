// Package avtab is the layout and protocol of an AV's table, the memory
// that package av writes and the XDP program reads (struct av_hdr in
// bpf/xdpfab_structs.h; docs/ARCHITECTURE.md#the-av-table): the mapping,
// the cuckoo index, the per-index entries, the sequence numbers. The
// loader creates, installs and opens the table maps; package av decides
// what goes in them.
package avtab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/prefetch"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/wire"
	"golang.org/x/sys/unix"
)

// Table is one AV's table (struct av_hdr in bpf/xdpfab_structs.h): an
// array map of 64-byte lines that this process has memory-mapped, so that
// reads and writes are plain memory accesses, shared with the XDP program
// and with every other process that mapped it.
//
// The table knows the layout (header, forward index, per-index entries),
// the probing and the slot protocol; what an index means (lowest free
// index, duplicates, auth-key handles) is package av's. Writers hold the
// dataplane lock (Objects.Lock): one writer at a time, node-wide. Readers
// take no lock: every read of a slot is a sequence-number read (ReadSlot),
// which never returns one entry's key with another's value.
//
// The memory is not the Go heap's: a Table must not be used after Close,
// which takes the table out of this process's memory. Lock-free readers
// use a Reader instead, which stays safe to read after Close.
type Table struct {
	m     *ebpf.Map
	mem   []byte
	ro    bool
	copy  bool // mem is a copy (Refresh), not a mapping: see OpenTable
	hdr   *bpf.AVHdr
	slots []bpf.AVSlot // 2 * nbuckets
	aux   []bpf.AVAux  // cap
	reg   *region      // the mapping's address range (nil for a copy)
	rd    *Reader      // lock-free view of a mapping (nil for a copy)
	pos   []uint32     // the Reader's slot hints, per index (see Reader)
	hints *region      // pos's memory when it is not the Go heap's (newHints)
	// A copy's change stamp (SetStamp): where the AV's stamp is published
	// (nil: nowhere, the copy is never trusted without a check) and its
	// value when the copy was made.
	stamp *uint64
	at    uint64
}

// region is the address range a table is mapped at. It is given back
// (munmap) only once no Table or Reader refers to it (runtime.AddCleanup):
// Close replaces the table there by memory that reads as zeros, so that a
// Reader still reading it never faults.
type region struct {
	addr   unsafe.Pointer // not the Go heap's: it keeps nothing alive
	size   uintptr
	mapped *atomic.Int64 // a count of mapped bytes to keep (HintBytes), or nil
}

func newRegion(addr unsafe.Pointer, size uintptr, mapped *atomic.Int64) *region {
	r := &region{addr, size, mapped}
	if mapped != nil {
		mapped.Add(int64(size))
	}
	runtime.AddCleanup(r, func(r region) {
		_ = unix.MunmapPtr(r.addr, r.size)
		if r.mapped != nil {
			r.mapped.Add(-int64(r.size))
		}
	}, *r)
	return r
}

// detach replaces the table's pages in the range by anonymous read-only
// memory that reads as zeros, in one system call (mmap MAP_FIXED): a
// reader on another thread sees the table or zeros, never a hole. The
// process lets go of the map's memory now; the range itself goes with
// the region.
func (r *region) detach() error {
	_, err := unix.MmapPtr(-1, 0, r.addr, r.size, unix.PROT_READ,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
	return err
}

// Lines returns the geometry of a table for capacity indices
// (rounded up to a multiple of 4, at least 64): its buckets, its capacity
// and its lines (the array map holds them in elements of bpf.AVPageLines).
// The forward index has 5/4 slots per index, so at most 4/5 of its slots
// are in use when every index is.
func Lines(capacity uint32) (nbuckets, capa, lines uint32) {
	capa = max(capacity, 64)
	capa = min(capa, maxTableCap)
	capa = (capa + 3) &^ 3
	nbuckets = (capa*5 + 7) / 8
	return nbuckets, capa, 1 + nbuckets + capa/4
}

// maxTableCap bounds a table's indices: its lines must fit a uint32 and
// its aux index bpf's 31 bits of fi_addr.
const maxTableCap = 1 << 30

// New creates (but does not install: Install) an empty table for AV id
// with room for capacity indices and a random hash seed. Its memory
// follows capacity: 64 bytes per line, about 56 per index (and 4 bytes
// per index for the Reader's slot hints: newHints).
func New(dp *loader.Objects, id uint32, capacity uint32) (*Table, error) {
	nb, capa, lines := Lines(capacity)
	m, err := dp.NewAVTableMap(lines)
	if err != nil {
		return nil, err
	}
	t, err := mapTable(m, false)
	if err != nil {
		m.Close()
		return nil, err
	}
	t.hdr.Seed = rand.Uint64()
	t.hdr.AvId = id
	t.hdr.Nbuckets = nb
	t.hdr.Cap = capa
	t.hdr.Magic = bpf.AVMagic
	if err := t.layout(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// mapTable memory-maps m, read-only when ro or when the descriptor allows
// no more.
func mapTable(m *ebpf.Map, ro bool) (*Table, error) {
	if m.ValueSize() != bpf.AVPage || m.MaxEntries() < 1 {
		return nil, fmt.Errorf("AV table %v: not a table (value size %d, %d elements): %w", m, m.ValueSize(), m.MaxEntries(), fi.EINVAL)
	}
	size := int(m.MaxEntries()) * bpf.AVPage
	page := os.Getpagesize()
	size = (size + page - 1) / page * page
	prot := unix.PROT_READ
	if !ro {
		prot |= unix.PROT_WRITE
	}
	// MmapPtr, not Mmap: the range is given back by the region's
	// cleanup (munmap of a pointer), not by unix.Munmap's bookkeeping.
	addr, err := unix.MmapPtr(m.FD(), 0, nil, uintptr(size), prot, unix.MAP_SHARED)
	if !ro && (errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)) {
		ro = true
		addr, err = unix.MmapPtr(m.FD(), 0, nil, uintptr(size), unix.PROT_READ, unix.MAP_SHARED)
	}
	if err != nil {
		return nil, fmt.Errorf("map AV table %v: %w", m, err)
	}
	mem := unsafe.Slice((*byte)(addr), size)
	t := &Table{m: m, mem: mem, ro: ro, reg: newRegion(addr, uintptr(size), nil)}
	t.hdr = (*bpf.AVHdr)(unsafe.Pointer(&mem[0]))
	return t, nil
}

// layout checks the header against the map and makes the slot and aux
// views. Table memory is written by privileged processes only, but a
// reader still never trusts it to be in bounds.
func (t *Table) layout() error {
	nb, capa := atomic.LoadUint32(&t.hdr.Nbuckets), atomic.LoadUint32(&t.hdr.Cap)
	lines := uint64(t.m.MaxEntries()) * bpf.AVPageLines
	if atomic.LoadUint32(&t.hdr.Magic) != bpf.AVMagic || nb == 0 || capa == 0 || capa%4 != 0 || 1+uint64(nb)+uint64(capa/4) > lines {
		return fmt.Errorf("AV table %v: bad header (magic %#x, %d buckets, capacity %d, %d lines): %w",
			t.m, t.hdr.Magic, nb, capa, lines, fi.EINVAL)
	}
	t.slots = unsafe.Slice((*bpf.AVSlot)(unsafe.Pointer(&t.mem[bpf.AVLine])), 2*int(nb))
	t.aux = unsafe.Slice((*bpf.AVAux)(unsafe.Pointer(&t.mem[bpf.AVLine*(1+int(nb))])), int(capa))
	// A copy's memory is never written after Refresh made it (a refresh
	// makes new memory and a new Reader), so its Reader is as safe
	// without a lock as a mapping's.
	t.pos, t.hints = newHints(int(capa))
	t.rd = &Reader{hdr: t.hdr, slots: t.slots, aux: t.aux, pos: t.pos, reg: t.reg, hints: t.hints, copy: t.copy, stamp: t.stamp, at: t.at}
	return nil
}

// SetStamp records, for a copy, where the AV's change stamp is published
// (loader.Objects.AVStamp: a page the agent writes and its clients map
// read-only) and the value it had before the copy was read. A copy is
// stale once the stamp moved (Stale), and its Reader then counts as
// retired, so that lock-free readers take the slow way, which re-reads the
// table. Without a published stamp (p nil) a copy's Reader always counts
// as retired: a copy nobody tells about changes cannot be trusted without
// asking the kernel. A mapping needs none of this.
func (t *Table) SetStamp(p *uint64, at uint64) {
	if t == nil || !t.copy {
		return
	}
	t.stamp, t.at = p, at
	if t.rd != nil {
		t.rd.stamp, t.rd.at = p, at
	}
}

// Stale reports whether a copy's published stamp moved since it was made
// (see SetStamp); false for a mapping, and for a copy without a published
// stamp (whose reader asks the kernel for the AV's generation instead:
// package av).
func (t *Table) Stale() bool {
	return t != nil && t.copy && t.stamp != nil && atomic.LoadUint64(t.stamp) != t.at
}

// Close takes the table out of this process's memory and closes this
// process's handle. The table lives on while xdpfab_avtab or a pin holds
// it. A mapped table's pages are replaced by zeros at once (a Reader
// still reading them misses); its address range is given back once no
// Reader refers to it. Closing a nil table returns nil.
func (t *Table) Close() error {
	if t == nil || t.m == nil {
		return nil
	}
	var err error
	if t.reg != nil {
		if err = t.reg.detach(); err != nil {
			err = fmt.Errorf("AV table %v: replace the mapping: %w", t.m, err)
		}
	}
	t.mem, t.hdr, t.slots, t.aux, t.reg, t.rd, t.pos, t.hints = nil, nil, nil, nil, nil, nil, nil, nil
	return errors.Join(err, t.m.Close())
}

// Reader returns the table's lock-free reader (for a copy, of the copy as
// the last Refresh made it), nil for a closed table.
func (t *Table) Reader() *Reader {
	if t == nil {
		return nil
	}
	return t.rd
}

// Map is the table's array map.
func (t *Table) Map() *ebpf.Map { return t.m }

// ReadOnly reports whether this process mapped the table read-only.
func (t *Table) ReadOnly() bool { return t.ro }

// Cap is the number of indices the table holds.
func (t *Table) Cap() uint32 { return uint32(len(t.aux)) }

// Buckets is the number of buckets of the forward index.
func (t *Table) Buckets() uint32 { return uint32(len(t.slots) / 2) }

// Live is the number of slots in use: the AV's addresses.
func (t *Table) Live() uint32 { return atomic.LoadUint32(&t.hdr.Live) }

// High is the number of indices ever handed out: indices at and above it
// were never used.
func (t *Table) High() uint32 { return min(atomic.LoadUint32(&t.hdr.High), t.Cap()) }

// SetHigh records the next never-used index. The caller holds Lock.
// A plain store (see writeBegin): other processes read the mark under
// the lock.
func (t *Table) SetHigh(h uint32) { t.hdr.High = h }

// Retired reports whether the table was replaced (growth): the current
// one is in xdpfab_avtab; OpenTable opens it.
func (t *Table) Retired() bool { return atomic.LoadUint32(&t.hdr.Retired) != 0 }

// Bytes is the table's size in memory.
func (t *Table) Bytes() int { return len(t.mem) }

// Aux returns index idx's entry: user ID, slot, reference count. It is
// the caller's to synchronise: writers hold Lock; another process's
// reader sees each field whole but not the three at one instant (see
// Addr).
func (t *Table) Aux(idx uint32) (userID uint64, slot, refcnt uint32) {
	if idx >= uint32(len(t.aux)) {
		return 0, 0, 0
	}
	x := &t.aux[idx]
	return atomic.LoadUint64(&x.UserId), atomic.LoadUint32(&x.Slot), atomic.LoadUint32(&x.Refcnt)
}

// SetRefcnt sets index idx's reference count (XDP never reads it). The
// caller holds Lock.
func (t *Table) SetRefcnt(idx, refcnt uint32) {
	if idx >= uint32(len(t.aux)) {
		return
	}
	t.aux[idx].Refcnt = refcnt // read under the lock only
}

// ReadSlot reads slot pos consistently: the sequence number before and
// after the fields is the same even value. Readers other than the writer
// retry while the slot changes; ok is false when it kept changing (a
// writer preempted, or killed, inside a write).
func (t *Table) ReadSlot(pos uint32) (s bpf.AVSlot, ok bool) {
	if pos >= uint32(len(t.slots)) {
		return s, false
	}
	p := &t.slots[pos]
	for try := 0; try < 1000; try++ {
		seq := atomic.LoadUint32(&p.Seq)
		if seq&1 != 0 {
			continue
		}
		// Atomic loads: on arm64 (LDAR) they keep their order; on
		// amd64 they are plain moves the compiler does not reorder.
		s.FiAddr = atomic.LoadUint32(&p.FiAddr)
		a := (*[2]uint64)(unsafe.Pointer(&p.Addr))
		binaryPut64(s.Addr[0:8], atomic.LoadUint64(&a[0]))
		binaryPut64(s.Addr[8:16], atomic.LoadUint64(&a[1]))
		pf := atomic.LoadUint32((*uint32)(unsafe.Pointer(&p.Port)))
		s.AuthKey = atomic.LoadUint32(&p.AuthKey)
		if atomic.LoadUint32(&p.Seq) != seq {
			continue
		}
		s.Seq = seq
		unpackPort(&s, pf)
		return s, true
	}
	return s, false
}

// SlotAddr returns slot s's source.
func SlotAddr(s *bpf.AVSlot) bpf.Addr {
	return bpf.Addr{Addr: s.Addr, Port: s.Port, Family: s.Family}
}

// Addr returns the source index idx names, if idx is in use: a
// consistent read of its slot, checked to name idx.
func (t *Table) Addr(idx uint32) (bpf.Addr, bool) {
	for try := 0; try < 3; try++ {
		_, pos, refcnt := t.Aux(idx)
		if refcnt == 0 {
			return bpf.Addr{}, false
		}
		s, ok := t.ReadSlot(pos)
		if ok && s.FiAddr == idx && s.Family != 0 {
			return SlotAddr(&s), true
		}
	}
	return bpf.Addr{}, false
}

// buckets returns src's two buckets.
func (t *Table) buckets(src *bpf.Addr) (b1, b2 uint32) {
	return bpf.AVBuckets(hashAddr(atomic.LoadUint64(&t.hdr.Seed), src), uint32(len(t.slots)/2))
}

// slotBuckets returns the two buckets of the source slot s holds.
func (t *Table) slotBuckets(s *bpf.AVSlot) (b1, b2 uint32) {
	return bpf.AVBuckets(hashSlot(atomic.LoadUint64(&t.hdr.Seed), s), uint32(len(t.slots)/2))
}

// Find returns the slot holding src and its contents. Like XDP, a reader
// that missed while an insert moved entries looks again.
func (t *Table) Find(src *bpf.Addr) (pos uint32, s bpf.AVSlot, ok bool) {
	if len(t.slots) == 0 {
		return 0, s, false
	}
	b1, b2 := t.buckets(src)
	for try := 0; try < 1000; try++ {
		moves := atomic.LoadUint32(&t.hdr.Moves)
		for _, p := range [4]uint32{2 * b1, 2*b1 + 1, 2 * b2, 2*b2 + 1} {
			s, ok := t.ReadSlot(p)
			if ok && s.Family != 0 && s.Family == src.Family && s.Port == src.Port && s.Addr == src.Addr {
				return p, s, true
			}
		}
		if moves&1 == 0 && atomic.LoadUint32(&t.hdr.Moves) == moves {
			break
		}
	}
	return 0, s, false
}

// ErrTableFull is Place's error when no series of moves frees a slot in
// the source's buckets: the table must be rebuilt (another seed, or
// bigger).
var ErrTableFull = errors.New("AV table: no free slot for the source")

// Probe is where a source may live: its two buckets. Writers compute it
// once per insert (Locate) and pass it on to PlaceAt.
type Probe struct {
	src    bpf.Addr
	b1, b2 uint32
	seed   uint64 // the table seed b1 and b2 come from
	ok     bool   // b1 and b2 computed
}

// probe computes p's buckets in t unless p has them under t's seed (a
// table rebuilt since has another).
func (t *Table) probe(p *Probe) {
	seed := atomic.LoadUint64(&t.hdr.Seed)
	if p.ok && p.seed == seed {
		return
	}
	p.b1, p.b2 = bpf.AVBuckets(hashAddr(seed, &p.src), uint32(len(t.slots)/2))
	p.seed, p.ok = seed, true
}

// NewProbe is a probe of src whose buckets LocateProbe or PlaceAt compute.
func NewProbe(src bpf.Addr) Probe { return Probe{src: src} }

// Reset makes p a probe of src whose buckets are not computed yet (as
// NewProbe, in place).
func (p *Probe) Reset(src *bpf.Addr) {
	p.src, p.ok = *src, false
}

// ResetAddrPort is Reset(bpf.MakeAddr(ap)), written field by field: a
// copy of the 20-byte address is two overlapping 16-byte stores, and the
// loads that follow (the hash, the slot compares) would wait for them
// (a store-forwarding stall) on every insert. TestResetAddrPort holds it
// equal to bpf.MakeAddr.
func (p *Probe) ResetAddrPort(ap netip.AddrPort) {
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		b := ip.As4()
		p.src.Addr = [16]byte{b[0], b[1], b[2], b[3]}
		p.src.Family = wire.AFInet
	} else {
		p.src.Addr = ip.As16()
		p.src.Family = wire.AFInet6
	}
	var port [2]byte
	binary.BigEndian.PutUint16(port[:], ap.Port()) // the wire's order, as bpf.MakeAddr
	p.src.Port = binary.NativeEndian.Uint16(port[:])
	p.ok = false
}

// Addr is the probe's source.
func (p *Probe) Addr() bpf.Addr { return p.src }

// Locate finds src for a writer (the caller holds the dataplane lock, so
// no slot changes meanwhile: plain reads, no sequence numbers): the slot
// holding it, or found false and where it may go (PlaceAt).
func (t *Table) Locate(src *bpf.Addr) (p Probe, pos uint32, found bool) {
	p.src = *src
	pos, found = t.LocateProbe(&p)
	return p, pos, found
}

// LocateProbe is Locate for a probe from Touch (its buckets are computed
// again if the table was rebuilt since).
func (t *Table) LocateProbe(p *Probe) (pos uint32, found bool) {
	if len(t.slots) == 0 || t.hdr == nil {
		return 0, false
	}
	t.probe(p)
	src := &p.src
	for _, q := range [4]uint32{2 * p.b1, 2*p.b1 + 1, 2 * p.b2, 2*p.b2 + 1} {
		s := &t.slots[q]
		if s.Family == src.Family && s.Family != 0 && s.Port == src.Port && s.Addr == src.Addr {
			return q, true
		}
	}
	return 0, false
}

// Touch computes p's buckets and starts loading them into the cache (a
// prefetch: it does not wait for them), for a writer about to insert p's
// source (LocateProbe): a batch touches the sources ahead of the one it
// inserts, so that their cache misses overlap.
func (t *Table) Touch(p *Probe) {
	if len(t.slots) == 0 || t.hdr == nil {
		return
	}
	t.probe(p)
	prefetch.Line(uintptr(unsafe.Pointer(&t.slots[2*p.b1])))
	prefetch.Line(uintptr(unsafe.Pointer(&t.slots[2*p.b2])))
}

// Slot returns slot pos's contents for a writer (plain reads; the caller
// holds the dataplane lock).
func (t *Table) Slot(pos uint32) bpf.AVSlot {
	if pos >= uint32(len(t.slots)) {
		return bpf.AVSlot{}
	}
	return t.slots[pos]
}

// Place writes a new entry: src at index idx, with userID in the index's
// entry (Locate then PlaceAt).
func (t *Table) Place(src *bpf.Addr, idx uint32, userID uint64, flags uint8, authKey uint32) (uint32, error) {
	p, _, _ := t.Locate(src)
	return t.PlaceAt(&p, idx, userID, flags, authKey)
}

// PlaceAt writes a new entry: p's source at index idx, with userID in the
// index's entry. The caller holds the dataplane lock, found the source
// absent (Locate gave p), and idx is below Cap and free. The index's entry
// is written before the slot becomes visible, both under the slot's
// sequence number. When both of the source's buckets are full, entries move
// to their other bucket to make room (cuckoo hashing, along the shortest
// path found): each is written to its new slot before its old one is
// freed, all under the header's move count, so that no lookup misses an
// entry for good.
func (t *Table) PlaceAt(p *Probe, idx uint32, userID uint64, flags uint8, authKey uint32) (uint32, error) {
	if t.ro || t.hdr == nil {
		return 0, fmt.Errorf("AV table: mapped read-only: %w", fi.EACCES)
	}
	if idx >= uint32(len(t.aux)) {
		return 0, fmt.Errorf("AV table: index %d beyond capacity %d: %w", idx, len(t.aux), fi.ENOSPC)
	}
	t.probe(p)
	pos, ok := t.freeSlot(p.b1, p.b2)
	if !ok {
		return 0, ErrTableFull
	}
	x := &t.aux[idx]
	s := &t.slots[pos]
	src := &p.src
	seq := writeBegin(&s.Seq) // odd: XDP and readers skip the slot
	x.UserId, x.Slot, x.Refcnt = userID, pos, 1
	s.FiAddr, s.Addr, s.Port, s.Flags, s.AuthKey = idx, src.Addr, src.Port, flags, authKey
	s.Family = src.Family
	writeEnd(&s.Seq, seq) // even: the new entry
	t.setHint(idx, pos)
	t.hdr.Live++
	return pos, nil
}

// maxPath bounds the breadth-first search for a free slot (buckets
// visited): at the table's highest load (4/5 of its slots) the path is a
// few moves.
const maxPath = 256

// freeSlot returns a free slot in bucket b1 or b2, moving entries to make
// one if need be.
func (t *Table) freeSlot(b1, b2 uint32) (uint32, bool) {
	// The emptier bucket: leaving room where there is less keeps the
	// buckets even, so fewer inserts later find both of theirs full.
	f0, f1 := t.slots[2*b1].Family == 0, t.slots[2*b1+1].Family == 0
	f2, f3 := t.slots[2*b2].Family == 0, t.slots[2*b2+1].Family == 0
	switch {
	case f0 && f1:
		return 2 * b1, true
	case f2 && f3:
		return 2 * b2, true
	case f0:
		return 2 * b1, true
	case f1:
		return 2*b1 + 1, true
	case f2:
		return 2 * b2, true
	case f3:
		return 2*b2 + 1, true
	}
	// Most full pairs need one move: one of the four entries to a free
	// slot of its other bucket. Those four buckets are loaded together
	// (their cache misses overlap), then looked at.
	var alt [4]uint32
	for k := range uint32(4) {
		alt[k] = t.altBucket(k, b1, b2)
		prefetch.Line(uintptr(unsafe.Pointer(&t.slots[2*alt[k]])))
	}
	for k := range uint32(4) {
		for j := range uint32(2) {
			if free := 2*alt[k] + j; t.slots[free].Family == 0 {
				from := 2*b1 + k
				if k >= 2 {
					from = 2*b2 + k - 2
				}
				moves := writeBegin(&t.hdr.Moves)
				t.move(from, free)
				writeEnd(&t.hdr.Moves, moves)
				return from, true
			}
		}
	}
	return t.freePath(b1, b2)
}

// altBucket is the other bucket of the entry in slot k of the pair b1, b2
// (0 and 1 in b1, 2 and 3 in b2).
func (t *Table) altBucket(k, b1, b2 uint32) uint32 {
	p, b := 2*b1+k, b1
	if k >= 2 {
		p, b = 2*b2+k-2, b2
	}
	a1, a2 := t.slotBuckets(&t.slots[p])
	if a1 == b {
		return a2
	}
	return a1
}

// freePath is freeSlot's search for a path of more than one move.
func (t *Table) freePath(b1, b2 uint32) (uint32, bool) {
	// Breadth first over buckets: node i is a bucket reached by moving
	// the entry in slot from of its parent's bucket there.
	type node struct {
		bucket uint32
		parent int
		from   uint32 // slot of the parent's bucket whose entry moves here
	}
	queue := make([]node, 2, 16)
	queue[0], queue[1] = node{b1, -1, 0}, node{b2, -1, 0}
	seen := func(b uint32) bool {
		for _, n := range queue {
			if n.bucket == b {
				return true
			}
		}
		return false
	}
	for i := 0; i < len(queue) && i < maxPath; i++ {
		n := queue[i]
		for j := range uint32(2) {
			p := 2*n.bucket + j
			a1, a2 := t.slotBuckets(&t.slots[p])
			alt := a1
			if alt == n.bucket {
				alt = a2
			}
			if seen(alt) {
				continue
			}
			queue = append(queue, node{alt, i, p})
			for k := range uint32(2) {
				if free := 2*alt + k; t.slots[free].Family == 0 {
					// Found: move back along the path, last move first.
					moves := writeBegin(&t.hdr.Moves)
					dst := free
					for m := len(queue) - 1; queue[m].parent >= 0; m = queue[m].parent {
						t.move(queue[m].from, dst)
						dst = queue[m].from
					}
					writeEnd(&t.hdr.Moves, moves)
					return dst, true
				}
			}
		}
	}
	return 0, false
}

// setHint records pos as index idx's slot for the Reader (noHint: none).
func (t *Table) setHint(idx, pos uint32) {
	if idx < uint32(len(t.pos)) {
		storeHint(&t.pos[idx], pos+1)
	}
}

// move copies the entry in slot from to the free slot to, then frees
// from: the entry is in one of them at every instant.
func (t *Table) move(from, to uint32) {
	f, d := &t.slots[from], &t.slots[to]
	seq := writeBegin(&d.Seq)
	d.FiAddr, d.Addr, d.Port, d.Flags, d.AuthKey = f.FiAddr, f.Addr, f.Port, f.Flags, f.AuthKey
	d.Family = f.Family
	writeEnd(&d.Seq, seq)
	if idx := f.FiAddr; idx < uint32(len(t.aux)) {
		t.aux[idx].Slot = to
		t.setHint(idx, to)
	}
	seq = writeBegin(&f.Seq)
	f.Family = 0
	writeEnd(&f.Seq, seq)
}

// Update rewrites the user ID and flags of the entry in slot pos, under
// its sequence number: XDP sees the old pair or the new one. The caller
// holds Lock.
func (t *Table) Update(pos uint32, userID uint64, flags uint8) {
	if pos >= uint32(len(t.slots)) || t.slots[pos].FiAddr >= uint32(len(t.aux)) {
		return
	}
	s := &t.slots[pos]
	seq := writeBegin(&s.Seq)
	t.aux[s.FiAddr].UserId = userID
	s.Flags = flags
	writeEnd(&s.Seq, seq)
}

// Remove removes the entry in slot pos and frees its index's entry. From
// its return on, no XDP run that starts translates the source. The caller
// holds Lock.
func (t *Table) Remove(pos uint32) {
	if pos >= uint32(len(t.slots)) {
		return
	}
	s := &t.slots[pos]
	idx := s.FiAddr
	seq := writeBegin(&s.Seq)
	s.Family = 0
	writeEnd(&s.Seq, seq)
	if idx < uint32(len(t.aux)) {
		x := &t.aux[idx]
		x.Refcnt, x.Slot, x.UserId = 0, 0, 0
		t.setHint(idx, noHint)
	}
	t.hdr.Live--
}

// CopyFrom fills the empty table t with every entry of old (the caller
// holds Lock), for growth: the same indices, user IDs and reference
// counts, placed under t's seed. It fails with ErrTableFull when a source
// finds no slot, and with ENOSPC when old has an index beyond t's
// capacity.
func (t *Table) CopyFrom(old *Table) error {
	high := old.High()
	if high > t.Cap() {
		return fmt.Errorf("AV table: %d indices do not fit %d: %w", high, t.Cap(), fi.ENOSPC)
	}
	for idx := range high {
		uid, pos, refcnt := old.Aux(idx)
		if refcnt == 0 || pos >= uint32(len(old.slots)) {
			continue
		}
		s := old.slots[pos]
		src := SlotAddr(&s)
		if _, err := t.Place(&src, idx, uid, s.Flags, s.AuthKey); err != nil {
			return err
		}
		t.aux[idx].Refcnt = refcnt
	}
	t.hdr.High = high
	return nil
}

// Install makes t AV id's table (loader.Objects.SetAVTable): XDP runs
// that start after it read t. The caller holds the dataplane lock.
func Install(dp *loader.Objects, id uint32, t *Table) error {
	return dp.SetAVTable(id, t.m)
}

// Retire marks t replaced (other processes re-open the current table),
// waits until no XDP run can still be reading it, and closes it. The
// caller holds the dataplane lock and installed the replacement.
func (t *Table) Retire() error {
	if t == nil {
		return nil
	}
	t.MarkRetired(true)
	loader.WaitReaders()
	return t.Close()
}

// MarkRetired marks t replaced or deleted (retired true), or takes the
// mark back (false, when the replacement failed): processes that mapped a
// retired table re-open AV's current table (or find none). The caller
// holds the dataplane lock.
func (t *Table) MarkRetired(retired bool) {
	if t != nil && t.hdr != nil && !t.ro {
		v := uint32(0)
		if retired {
			v = 1
		}
		atomic.StoreUint32(&t.hdr.Retired, v)
	}
}

// Open maps AV id's current table: read-only (PROT_READ, which the
// mapping can never gain) with readOnly or on a read-only dataplane
// (OpenPinned, FromFDs). Linux maps a BPF map only through a descriptor
// opened for writing; a reader that can open the table only read-only (a
// member of the group the pins are shared with, or an application with the
// agent's descriptors) gets a copy instead, which Refresh re-reads: a few
// system calls per change, not per lookup. ENOENT: the AV has no table.
func Open(dp *loader.Objects, id uint32, readOnly bool) (*Table, error) {
	m, writable, err := dp.OpenAVTableMap(id, readOnly)
	if err != nil {
		return nil, err
	}
	var t *Table
	if !writable {
		t, err = copyTable(m)
	} else {
		t, err = mapTable(m, readOnly)
	}
	if err != nil {
		m.Close()
		return nil, err
	}
	if err := t.layout(); err != nil {
		t.Close()
		return nil, err
	}
	if got := atomic.LoadUint32(&t.hdr.AvId); got != id {
		t.Close()
		return nil, fmt.Errorf("open AV table %d: holds AV %d: %w", id, got, fi.EINVAL)
	}
	return t, nil
}

// copyTable reads m into memory of its own (see Open).
func copyTable(m *ebpf.Map) (*Table, error) {
	if m.ValueSize() != bpf.AVPage || m.MaxEntries() < 1 {
		return nil, fmt.Errorf("AV table %v: not a table (value size %d, %d elements): %w", m, m.ValueSize(), m.MaxEntries(), fi.EINVAL)
	}
	t := &Table{m: m, ro: true, copy: true}
	if err := t.Refresh(); err != nil {
		return nil, err
	}
	return t, nil
}

// Copied reports whether the table is a copy (Open), which
// Refresh brings up to date, rather than a mapping.
func (t *Table) Copied() bool { return t.copy }

// Refresh re-reads a copied table (a mapping is always current: nothing to
// do), in batches of lines.
func (t *Table) Refresh() error {
	if !t.copy {
		return nil
	}
	type line [bpf.AVPage]byte
	n := int(t.m.MaxEntries())
	lines := make([]line, n)
	keys := make([]uint32, n)
	var cursor ebpf.MapBatchCursor
	got := 0
	for got < n {
		k, err := t.m.BatchLookup(&cursor, keys[got:], lines[got:], nil)
		got += k
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return fmt.Errorf("read AV table %v: %w", t.m, err)
		}
	}
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&lines[0])), n*bpf.AVPage)
	t.mem = mem
	t.hdr = (*bpf.AVHdr)(unsafe.Pointer(&mem[0]))
	if t.slots != nil {
		return t.layout()
	}
	return nil
}

// Put writes one translation straight into AV id's table, creating the
// table (of room for 1024 indices) if it has none: what XDP tests and
// internal/xdpmodel's fixtures use to state AV contents without package
// av's semantics. v.FiAddr must be below the table's capacity. Not for
// AVs package av manages.
func Put(dp *loader.Objects, id uint32, src bpf.Addr, v bpf.AVVal) error {
	unlock := dp.Lock()
	defer unlock()
	t, err := Open(dp, id, false)
	if errors.Is(err, fi.ENOENT) {
		if t, err = New(dp, id, max(1024, uint32(min(v.FiAddr+1, maxTableCap)))); err == nil {
			if err = Install(dp, id, t); err != nil {
				t.Close()
			}
		}
	}
	if err != nil {
		return err
	}
	defer t.Close()
	if v.FiAddr >= uint64(t.Cap()) {
		return fmt.Errorf("put AV entry: fi_addr %d beyond the table's %d: %w", v.FiAddr, t.Cap(), fi.EINVAL)
	}
	if pos, _, ok := t.Find(&src); ok {
		t.Remove(pos)
	}
	if _, _, refcnt := t.Aux(uint32(v.FiAddr)); refcnt != 0 {
		return fmt.Errorf("put AV entry: fi_addr %d in use: %w", v.FiAddr, fi.EEXIST)
	}
	if _, err := t.Place(&src, uint32(v.FiAddr), v.UserId, uint8(v.Flags), v.AuthKey); err != nil {
		return err
	}
	t.SetHigh(max(t.High(), uint32(v.FiAddr)+1))
	return nil
}

// Entries returns every translation of AV id's table (Put's inverse).
func Entries(dp *loader.Objects, id uint32) (map[bpf.Addr]bpf.AVVal, error) {
	t, err := Open(dp, id, true)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	out := map[bpf.Addr]bpf.AVVal{}
	for idx := range t.High() {
		uid, _, refcnt := t.Aux(idx)
		if refcnt == 0 {
			continue
		}
		_, pos, _ := t.Aux(idx)
		if s, ok := t.ReadSlot(pos); ok && s.FiAddr == idx {
			out[SlotAddr(&s)] = bpf.AVVal{FiAddr: uint64(idx), UserId: uid, AuthKey: s.AuthKey, Flags: uint32(s.Flags)}
		}
	}
	return out, nil
}

func binaryPut64(b []byte, v uint64) {
	*(*uint64)(unsafe.Pointer(&b[0])) = v
}

// unpackPort splits av_slot's port, family and flags (one 32-bit word).
func unpackPort(s *bpf.AVSlot, pf uint32) {
	var b [4]byte
	*(*uint32)(unsafe.Pointer(&b[0])) = pf
	s.Port = *(*uint16)(unsafe.Pointer(&b[0]))
	s.Family, s.Flags = b[2], b[3]
}
