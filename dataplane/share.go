package dataplane

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// A UMEM shared by several processes on one device queue (a sharing
// domain) shares more than its frames: the kernel gives all sockets of a
// UMEM bound to one queue the same fill and completion rings, which are
// single-producer and single-consumer. ShareBlock is the memory that lets
// the processes take turns on them and account for every frame:
//
//   - per queue, a lock for the fill ring's producer side and one for the
//     completion ring's consumer side: a spinlock that sleeps in a shared
//     futex when contended, and records its holder so that a lock whose
//     holder died can be taken over;
//   - per user (a slot: one endpoint), a range of frames of its own for
//     transmitting (TxRange), a return ring that whoever drains the
//     completion ring fills with the slot's finished frames, and a staging
//     area that makes a fill interrupted by death recoverable;
//   - per frame of the receive pool, the slot holding it (a byte), set when
//     a slot takes a frame off its RX ring and cleared when the frame goes
//     back to the fill ring, so frames of a slot that died are found.
//
// The frames 0 .. RxFrames-1 are the receive pool, filled by the creator
// and passed from slot to slot by the kernel; slot i transmits with frames
// RxFrames+i*TxFrames onwards. Processes of one domain trust each other
// (they map each other's frames): a misbehaving member can corrupt the
// domain, never another domain. The holder of the block (the agent) is the
// authority on who is alive: it marks a slot dead (Retire), which lets
// waiters take its locks over, and returns its frames (Reclaim).
//
// Memory ordering: every index and lock word is a sync/atomic value
// (sequentially consistent in Go on every architecture), plain entries are
// written before the atomic store that publishes them and read after the
// atomic load that found them, as the kernel's rings do.
type ShareBlock struct {
	cfg   ShareConfig
	mem   []byte
	fd    int
	lay   shareLayout
	shift uint // log2 of the frame size
	// agentBusy counts this process's lock calls as the creator
	// (agentHolder) from the call until the unlock: in the creator, a lock
	// naming agentHolder while only the waiter itself is busy was written
	// by a member.
	agentBusy atomic.Int32
}

// ShareConfig sizes a ShareBlock. It is plain data (the creator's protocol
// carries it to the processes that attach).
type ShareConfig struct {
	// FirstQueue and Queues are the device queues the UMEM is bound to:
	// every one has its own fill and completion ring.
	FirstQueue int `json:"first_queue"`
	Queues     int `json:"queues"`
	// Slots is the number of users; each transmits with TxFrames frames.
	Slots    int `json:"slots"`
	TxFrames int `json:"tx_frames"`
	// RxFrames is the size of the receive pool.
	RxFrames int `json:"rx_frames"`
	// FrameSize is the UMEM's frame size.
	FrameSize int `json:"frame_size"`
}

// Limits of a ShareConfig: slots are named by a byte in the owner marks.
const (
	MaxShareSlots = 254
	MaxShareQueue = 256
	stagingMax    = 64 // frames one Fill call hands over under one lock
)

// NumFrames is the UMEM size the configuration needs.
func (c ShareConfig) NumFrames() int { return c.RxFrames + c.Slots*c.TxFrames }

func (c ShareConfig) validate() error {
	switch {
	case c.Queues < 1 || c.FirstQueue < 0 || c.FirstQueue+c.Queues > MaxShareQueue:
		return fmt.Errorf("share: queues %d..%d: %w", c.FirstQueue, c.FirstQueue+c.Queues-1, fi.EINVAL)
	case c.Slots < 1 || c.Slots > MaxShareSlots:
		return fmt.Errorf("share: %d slots, 1 to %d: %w", c.Slots, MaxShareSlots, fi.EINVAL)
	case c.TxFrames < 1 || c.TxFrames > 1<<16:
		return fmt.Errorf("share: %d transmit frames per slot, 1 to 65536: %w", c.TxFrames, fi.EINVAL)
	case c.RxFrames < 1 || c.RxFrames > 1<<22:
		return fmt.Errorf("share: %d receive frames, 1 to %d: %w", c.RxFrames, 1<<22, fi.EINVAL)
	case !isPow2(c.FrameSize):
		return fmt.Errorf("share: frame size %d: %w", c.FrameSize, fi.EINVAL)
	}
	return nil
}

// The block's layout. Every lock and every index another process writes
// has a cache line of its own.
const (
	shareMagic   = 0x31424b4146504458 // "XDPFAKB1"
	shareVersion = 2                  // 2: a lock's holder is in its lock word
	lineSize     = 64
	agentHolder  = uint32(1<<31 - 1) // lock holder id of the block's creator
)

type shareHdr struct {
	magic    uint64
	version  uint32
	queues   uint32
	slots    uint32
	txFrames uint32
	rxFrames uint32
	retSize  uint32
}

// shareLock is one word: 0 when free, else its holder's id (slot+1, or
// agentHolder) shifted left by one, bit 0 set when a waiter may be asleep.
// With the holder in the lock word, a process that dies at any instruction
// leaves the lock either free or naming it, so a waiter can always tell
// who holds it; a member that writes anything else names no slot, and
// loses the lock to the next waiter.
type shareLock struct {
	w atomic.Uint32
	// rel counts releases: a member that sees the creator's id in w for
	// longer than the creator holds a lock takes it over, unless rel moved
	// meanwhile (the creator let go and took it again).
	rel atomic.Uint32
}

// shareSlot is one user's record.
type shareSlot struct {
	state       atomic.Uint32 // slotFree, slotActive, slotDead
	gen         atomic.Uint32
	stagingN    atomic.Uint32 // frames of a fill in progress (0: none)
	stagingProd atomic.Uint32 // the fill ring's producer once they are published
	lost        atomic.Uint32 // completions dropped: return ring full
	_           [lineSize - 20]byte
	retProd     atomic.Uint32 // written by the completion ring's drainer
	_           [lineSize - 4]byte
	retCons     atomic.Uint32 // written by the slot
	_           [lineSize - 4]byte
}

const (
	slotFree uint32 = iota
	slotActive
	slotDead
)

type shareLayout struct {
	queues, slots, staging, rets, marks, size int
	retSize                                   int
}

func layoutOf(c ShareConfig) shareLayout {
	var l shareLayout
	l.retSize = ceilPow2(2 * c.TxFrames)
	l.queues = lineSize
	l.slots = l.queues + c.Queues*2*lineSize
	l.staging = l.slots + c.Slots*int(unsafe.Sizeof(shareSlot{}))
	l.rets = l.staging + c.Slots*stagingMax*8
	l.marks = l.rets + c.Slots*l.retSize*8
	l.size = l.marks + c.NumFrames()
	l.size = (l.size + 4095) &^ 4095
	return l
}

// NewShareBlock makes the block for a UMEM of cfg.NumFrames frames, in a
// sealed memfd (FD) for AttachShareBlock. Every slot starts free.
func NewShareBlock(cfg ShareConfig) (*ShareBlock, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lay := layoutOf(cfg)
	fd, err := sealedMemfd("xdpfab-share", lay.size)
	if err != nil {
		return nil, fmt.Errorf("share: %w", err)
	}
	b, err := mapShare(fd, cfg, lay)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	h := b.hdr()
	*h = shareHdr{magic: shareMagic, version: shareVersion, queues: uint32(cfg.Queues), slots: uint32(cfg.Slots),
		txFrames: uint32(cfg.TxFrames), rxFrames: uint32(cfg.RxFrames), retSize: uint32(lay.retSize)}
	return b, nil
}

// AttachShareBlock maps the block another process made with cfg (received
// with SCM_RIGHTS). It checks the block's header against cfg. On success
// the block owns fd; on failure fd stays the caller's.
func AttachShareBlock(fd int, cfg ShareConfig) (*ShareBlock, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if fd < 0 {
		return nil, fmt.Errorf("share attach: descriptor %d: %w", fd, fi.EINVAL)
	}
	lay := layoutOf(cfg)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("share attach fd %d: %w", fd, errnoOf(err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != int64(lay.size) {
		return nil, fmt.Errorf("share attach fd %d: %d bytes, want %d: %w", fd, st.Size, lay.size, fi.EINVAL)
	}
	b, err := mapShare(fd, cfg, lay)
	if err != nil {
		return nil, err
	}
	h := b.hdr()
	if h.magic != shareMagic || h.version != shareVersion || h.queues != uint32(cfg.Queues) || h.slots != uint32(cfg.Slots) ||
		h.txFrames != uint32(cfg.TxFrames) || h.rxFrames != uint32(cfg.RxFrames) || h.retSize != uint32(lay.retSize) {
		unix.Munmap(b.mem)
		return nil, fmt.Errorf("share attach fd %d: header does not describe %+v: %w", fd, cfg, fi.EINVAL)
	}
	unix.CloseOnExec(fd)
	return b, nil
}

func mapShare(fd int, cfg ShareConfig, lay shareLayout) (*ShareBlock, error) {
	mem, err := unix.Mmap(fd, 0, lay.size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|mapPopulate)
	if err != nil {
		return nil, fmt.Errorf("share: mmap %d bytes: %w", lay.size, errnoOf(err))
	}
	shift := uint(0)
	for 1<<shift < cfg.FrameSize {
		shift++
	}
	return &ShareBlock{cfg: cfg, mem: mem, fd: fd, lay: lay, shift: shift}, nil
}

// ok reports whether b is a mapped block (not nil, not a zero value, not
// closed). Every method of a nil, zero or closed block does nothing and
// fails with fi.EINVAL where it returns an error.
func (b *ShareBlock) ok() bool { return b != nil && b.mem != nil }

var errNoBlock = fmt.Errorf("share: block is nil, closed or not from NewShareBlock or AttachShareBlock: %w", fi.EINVAL)

// FD is the block's memfd, owned by the block (-1 for a nil, zero or
// closed block).
func (b *ShareBlock) FD() int {
	if !b.ok() {
		return -1
	}
	return b.fd
}

// Config is the block's configuration.
func (b *ShareBlock) Config() ShareConfig {
	if b == nil {
		return ShareConfig{}
	}
	return b.cfg
}

// Close unmaps the block and closes its memfd.
func (b *ShareBlock) Close() error {
	if !b.ok() {
		return nil
	}
	err := unix.Munmap(b.mem)
	b.mem = nil
	return errors.Join(errnoOf(err), unix.Close(b.fd))
}

func (b *ShareBlock) hdr() *shareHdr { return (*shareHdr)(unsafe.Pointer(&b.mem[0])) }

func (b *ShareBlock) fillLock(q int) *shareLock {
	return (*shareLock)(unsafe.Pointer(&b.mem[b.lay.queues+q*2*lineSize]))
}

func (b *ShareBlock) compLock(q int) *shareLock {
	return (*shareLock)(unsafe.Pointer(&b.mem[b.lay.queues+q*2*lineSize+lineSize]))
}

func (b *ShareBlock) slot(i int) *shareSlot {
	return (*shareSlot)(unsafe.Pointer(&b.mem[b.lay.slots+i*int(unsafe.Sizeof(shareSlot{}))]))
}

func (b *ShareBlock) staging(i int) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b.mem[b.lay.staging+i*stagingMax*8])), stagingMax)
}

func (b *ShareBlock) ret(i int) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b.mem[b.lay.rets+i*b.lay.retSize*8])), b.lay.retSize)
}

func (b *ShareBlock) marks() []byte { return b.mem[b.lay.marks : b.lay.marks+b.cfg.NumFrames()] }

// TxRange is slot's transmit frames: frame indices first .. first+n-1.
func (b *ShareBlock) TxRange(slot int) (first, n int) {
	if !b.ok() || slot < 0 || slot >= b.cfg.Slots {
		return 0, 0
	}
	return b.cfg.RxFrames + slot*b.cfg.TxFrames, b.cfg.TxFrames
}

// txOwner is the slot whose transmit frame addr is, or -1.
func (b *ShareBlock) txOwner(addr uint64) int {
	f := int(addr >> b.shift)
	if f < b.cfg.RxFrames || f >= b.cfg.NumFrames() {
		return -1
	}
	return (f - b.cfg.RxFrames) / b.cfg.TxFrames
}

// lock takes l for holder id me. A holder that died (its slot retired),
// a holder id no slot has (the block was scribbled on), and the creator's
// id where the creator holds no lock (a member wrote it: the creator sees
// so at once, a member after agentWait, longer than the creator ever holds
// one) lose the lock to the next waiter: lock returns their id then (else
// 0).
func (b *ShareBlock) lock(l *shareLock, me uint32) (stolen uint32) {
	stolen, _ = b.lockWithin(l, me, 0)
	return stolen
}

// agentWait bounds how long the block's creator waits for a lock: a
// member of the domain may hold one for ever (stopped, or hostile), and
// the creator must not hang with it. It also bounds how long the creator
// itself holds one (a few stores, or a reclaim's ring updates), so a
// member that sees the creator's id in a lock for longer takes it over.
const agentWait = time.Second

// lockWithin is lock giving up after max (0: never), ok false then.
func (b *ShareBlock) lockWithin(l *shareLock, me uint32, max time.Duration) (stolen uint32, ok bool) {
	if me == agentHolder {
		b.agentBusy.Add(1)
	}
	mine := me << 1
	for range 64 {
		if l.w.CompareAndSwap(0, mine) {
			return 0, true
		}
		procYield()
	}
	var deadline, agentSince time.Time
	var agentRel uint32
	if max > 0 {
		deadline = time.Now().Add(max)
	}
	for {
		v := l.w.Load()
		if v == 0 {
			// Free. Keep the sleepers bit: others may be waiting.
			if l.w.CompareAndSwap(0, mine|1) {
				return 0, true
			}
			continue
		}
		if v&1 == 0 && !l.w.CompareAndSwap(v, v|1) {
			continue
		}
		v |= 1
		// Sleep until woken or a while passes, then look at the holder.
		futexWait(&l.w, v, 2*time.Millisecond)
		h := v >> 1
		if rel := l.rel.Load(); h != agentHolder || me == agentHolder {
			agentSince = time.Time{}
		} else if agentSince.IsZero() || rel != agentRel {
			agentSince, agentRel = time.Now(), rel
		}
		if l.w.Load() == v && b.stale(h, me, agentSince) && l.w.CompareAndSwap(v, mine|1) {
			return h, true
		}
		if max > 0 && time.Now().After(deadline) {
			if me == agentHolder {
				b.agentBusy.Add(-1)
			}
			return 0, false
		}
	}
}

// stale reports whether holder id h cannot hold a lock any more, as seen
// by waiter me: h names no live slot, or it is the creator's id and either
// the creator itself is waiting and holds no lock, or a member has seen it
// there since agentSince, longer than the creator holds a lock.
func (b *ShareBlock) stale(h, me uint32, agentSince time.Time) bool {
	switch {
	case h == agentHolder && me == agentHolder:
		return b.agentBusy.Load() <= 1
	case h == agentHolder:
		return !agentSince.IsZero() && time.Since(agentSince) > agentWait
	}
	return !b.alive(int(h) - 1)
}

var errStuck = fmt.Errorf("share: a lock of the block is held by a live member of the domain for over %v: %w", agentWait, fi.EBUSY)

// unlock releases l, which me holds.
func (b *ShareBlock) unlock(l *shareLock, me uint32) {
	l.rel.Add(1)
	if l.w.Swap(0)&1 != 0 {
		futexWake(&l.w, 1)
	}
	if me == agentHolder {
		b.agentBusy.Add(-1)
	}
}

// alive reports whether slot may hold a lock: a retired slot may not, nor
// an id that names no slot.
func (b *ShareBlock) alive(slot int) bool {
	return slot >= 0 && slot < b.cfg.Slots && b.slot(slot).state.Load() != slotDead
}

// Activate makes a free slot active for a new user: its return ring is
// reset (late completions of a former user are not its frames: the
// transmit path ignores completions of frames it has not sent). The
// creator calls it before handing the slot over.
func (b *ShareBlock) Activate(slot int) error {
	if !b.ok() {
		return errNoBlock
	}
	if slot < 0 || slot >= b.cfg.Slots {
		return fmt.Errorf("share: slot %d of %d: %w", slot, b.cfg.Slots, fi.EINVAL)
	}
	s := b.slot(slot)
	if st := s.state.Load(); st != slotFree {
		return fmt.Errorf("share: slot %d in use (state %d): %w", slot, st, fi.EBUSY)
	}
	l := b.compLock(0)
	if _, ok := b.lockWithin(l, agentHolder, agentWait); !ok {
		return errStuck
	}
	s.retCons.Store(s.retProd.Load())
	s.stagingN.Store(0)
	s.lost.Store(0)
	s.gen.Add(1)
	s.state.Store(slotActive)
	b.unlock(l, agentHolder)
	return nil
}

// SlotFree reports whether slot can be activated: it is free, not in use
// and not retired with frames the creator could not take back.
func (b *ShareBlock) SlotFree(slot int) bool {
	return b.ok() && slot >= 0 && slot < b.cfg.Slots && b.slot(slot).state.Load() == slotFree
}

// Retire marks slot dead: its user is gone (or gave its frames back and
// will not touch the rings again). Locks it holds pass to their next
// waiter. Call Reclaim next.
func (b *ShareBlock) Retire(slot int) {
	if b.ok() && slot >= 0 && slot < b.cfg.Slots {
		b.slot(slot).state.Store(slotDead)
	}
}

// Mark records that slot holds the frames of descs (taken off its RX
// ring): call it before the ring's consumer index moves past them.
func (b *ShareBlock) Mark(slot int, descs []Desc) {
	if !b.ok() || slot < 0 || slot >= b.cfg.Slots {
		return
	}
	m, me := b.marks(), byte(slot+1)
	for _, d := range descs {
		if f := d.Addr >> b.shift; f < uint64(b.cfg.RxFrames) {
			m[f] = me
		}
	}
}

// Fill gives receive frames back to the fill ring of s's queue (s is any
// socket of the UMEM on that queue) as slot, under the queue's fill lock,
// and returns how many the ring took. The fill ring has room for the
// whole pool, so it takes them all unless something is wrong; the caller
// keeps the rest.
func (b *ShareBlock) Fill(slot int, s *Socket, addrs []uint64) int {
	if !b.ok() || s == nil || s.q == nil {
		return 0
	}
	qi := s.queue - b.cfg.FirstQueue
	if qi < 0 || qi >= b.cfg.Queues || slot < 0 || slot >= b.cfg.Slots {
		return 0
	}
	sl, stage, m := b.slot(slot), b.staging(slot), b.marks()
	me := uint32(slot + 1)
	done := 0
	for done < len(addrs) {
		batch := addrs[done:min(len(addrs), done+stagingMax)]
		copy(stage, batch)
		l := b.fillLock(qi)
		b.lock(l, me)
		f := &s.q.fill
		f.cachedProd, f.cachedCons = f.producer.Load(), f.consumer.Load()
		k := f.free(uint32(len(batch)))
		// Should this process die from here to the end, the staging
		// records say which frames it was handing over and where the
		// producer index would be once they are in (Reclaim).
		sl.stagingProd.Store(f.cachedProd + k)
		sl.stagingN.Store(k)
		for i := range k {
			f.put(i, batch[i])
		}
		f.submit(k)
		for _, a := range batch[:k] {
			if i := a >> b.shift; i < uint64(len(m)) && m[i] == byte(me) {
				m[i] = 0
			}
		}
		sl.stagingN.Store(0)
		b.unlock(l, me)
		done += int(k)
		if int(k) < len(batch) {
			break
		}
	}
	return done
}

// Complete takes slot's finished transmit frames: first those others
// found on the completion ring and left in its return ring, then, under
// the lock of the first queue's completion ring (every user of the block
// transmits on the first queue), the ring's own, passing the other slots'
// frames to their return rings. s is any socket of the UMEM on the first
// queue.
func (b *ShareBlock) Complete(slot int, s *Socket, out []uint64) int {
	if !b.ok() || slot < 0 || slot >= b.cfg.Slots {
		return 0
	}
	n := b.popReturn(slot, out)
	if n == len(out) || s == nil || s.q == nil || s.queue != b.cfg.FirstQueue {
		return n
	}
	c := &s.q.comp
	if c.consumer.Load() == c.producer.Load() {
		return n // nothing to drain: no lock taken
	}
	// Whoever holds the lock drains the whole ring and leaves this slot's
	// frames in its return ring: no need to wait for it, unless it is
	// dead (then take the lock over).
	l, me := b.compLock(0), uint32(slot+1)
	if !l.w.CompareAndSwap(0, me<<1) {
		if v := l.w.Load(); v == 0 || !b.stale(v>>1, me, time.Time{}) {
			return n
		}
		b.lock(l, me)
	}
	// Both indices afresh: other processes moved the consumer index since
	// this one last looked, possibly past the producer index it cached
	// (the difference would wrap, and the drain would read the ring's
	// stale entries as completions).
	c.cachedProd, c.cachedCons = c.producer.Load(), c.consumer.Load()
	avail := c.avail(c.size)
	var i uint32
	for ; i < avail && n < len(out); i++ {
		a := c.get(i)
		switch o := b.txOwner(a); {
		case o == slot:
			out[n] = a
			n++
		case o >= 0:
			b.pushReturn(o, a)
		}
	}
	c.release(i)
	b.unlock(l, me)
	return n
}

// pushReturn hands addr to slot o; the caller holds the completion lock.
func (b *ShareBlock) pushReturn(o int, addr uint64) {
	s, r := b.slot(o), b.ret(o)
	p := s.retProd.Load()
	if p-s.retCons.Load() >= uint32(len(r)) {
		s.lost.Add(1) // cannot happen: twice the slot's frames fit
		return
	}
	r[p&uint32(len(r)-1)] = addr
	s.retProd.Store(p + 1)
}

// popReturn takes slot's frames off its return ring into out. The ring is
// in the block, which every member can write: it takes only addresses of
// slot's own transmit frames, and drops anything else.
func (b *ShareBlock) popReturn(slot int, out []uint64) int {
	s, r := b.slot(slot), b.ret(slot)
	c, p := s.retCons.Load(), s.retProd.Load()
	if p-c > uint32(len(r)) {
		c = p - uint32(len(r)) // indices scribbled on: at most a ring's worth
	}
	n := 0
	for ; c != p && n < len(out); c++ {
		if a := r[c&uint32(len(r)-1)]; b.txOwner(a) == slot {
			out[n] = a
			n++
		}
	}
	s.retCons.Store(c)
	return n
}

// Reclaim returns to the first queue's fill ring every receive frame a
// retired slot held: those it marked, and extra (frames the caller
// drained from the slot's RX rings, which the slot never marked).
// anchors are sockets of the UMEM on the block's queues, in order. It
// takes the fill and completion locks as the creator, over from the slot
// if it died holding one, and repairs what it left half done. The slot is
// free again afterwards. It returns how many frames went back.
func (b *ShareBlock) Reclaim(slot int, anchors []*Socket, extra []uint64) (int, error) {
	if !b.ok() {
		return 0, nil // nothing to take back
	}
	if slot < 0 || slot >= b.cfg.Slots {
		return 0, fmt.Errorf("share: slot %d of %d: %w", slot, b.cfg.Slots, fi.EINVAL)
	}
	sl := b.slot(slot)
	if sl.state.Load() != slotDead {
		return 0, fmt.Errorf("share: reclaim of slot %d, which is not retired: %w", slot, fi.EBUSY)
	}
	if len(anchors) != b.cfg.Queues {
		return 0, fmt.Errorf("share: %d sockets for %d queues: %w", len(anchors), b.cfg.Queues, fi.EINVAL)
	}
	for q, s := range anchors {
		if s == nil || s.q == nil || s.queue != b.cfg.FirstQueue+q {
			return 0, fmt.Errorf("share: reclaim needs a socket on queue %d: %w", b.cfg.FirstQueue+q, fi.EINVAL)
		}
	}
	me, m := byte(slot+1), b.marks()
	seen := make([]bool, b.cfg.RxFrames)
	var back []uint64
	add := func(a uint64) {
		if f := a >> b.shift; f < uint64(b.cfg.RxFrames) && !seen[f] {
			seen[f] = true
			back = append(back, f<<b.shift)
		}
	}
	for _, a := range extra {
		add(a)
	}
	// A fill the slot was inside when it died: if its frames made it onto
	// the ring (the producer is where it would have left it; no one else
	// produced since, as it held the lock), they are the kernel's.
	for q := range b.cfg.Queues {
		l := b.fillLock(q)
		stolen, ok := b.lockWithin(l, agentHolder, agentWait)
		if !ok {
			return 0, errStuck
		}
		if stolen == uint32(slot+1) {
			if n := sl.stagingN.Load(); n > 0 && n <= stagingMax {
				published := anchors[q].q.fill.producer.Load() == sl.stagingProd.Load()
				for _, a := range b.staging(slot)[:n] {
					if f := a >> b.shift; published && f < uint64(len(m)) && m[f] == me {
						m[f] = 0 // in the ring: not the slot's
					}
				}
			}
		}
		sl.stagingN.Store(0)
		b.unlock(l, agentHolder)
	}
	for f := range b.cfg.RxFrames {
		if m[f] == me {
			m[f] = 0
			add(uint64(f) << b.shift)
		}
	}
	l := b.fillLock(0)
	if _, ok := b.lockWithin(l, agentHolder, agentWait); !ok {
		return 0, errStuck
	}
	f := &anchors[0].q.fill
	f.cachedProd, f.cachedCons = f.producer.Load(), f.consumer.Load()
	k := f.free(uint32(len(back)))
	for i := range k {
		f.put(i, back[i])
	}
	f.submit(k)
	b.unlock(l, agentHolder)
	// The completion lock, if the slot died holding it: its drain either
	// released the ring's entries or did not (then the next drain sees
	// them again, and transmit paths ignore completions of frames they
	// did not send).
	cl := b.compLock(0)
	if _, ok := b.lockWithin(cl, agentHolder, agentWait); !ok {
		return int(k), errStuck // the slot stays retired: never reused
	}
	sl.state.Store(slotFree)
	b.unlock(cl, agentHolder)
	if int(k) < len(back) {
		return int(k), fmt.Errorf("share: fill ring took %d of %d reclaimed frames: %w", k, len(back), fi.ENOSPC)
	}
	return int(k), nil
}

// Prime gives the whole receive pool to the fill rings, split evenly over
// the queues, as the creator before any slot is active. anchors are
// sockets of the UMEM on the queues, in order.
func (b *ShareBlock) Prime(anchors []*Socket) error {
	if !b.ok() {
		return errNoBlock
	}
	if len(anchors) != b.cfg.Queues {
		return fmt.Errorf("share: %d sockets for %d queues: %w", len(anchors), b.cfg.Queues, fi.EINVAL)
	}
	per := b.cfg.RxFrames / b.cfg.Queues
	next := 0
	for q, s := range anchors {
		if s == nil || s.q == nil {
			return fmt.Errorf("share: no socket for queue %d: %w", q, fi.EINVAL)
		}
		n := per
		if q == len(anchors)-1 {
			n = b.cfg.RxFrames - next
		}
		addrs := make([]uint64, n)
		for i := range addrs {
			addrs[i] = uint64(next+i) << b.shift
		}
		if got := s.Fill(addrs); got != n {
			return fmt.Errorf("share: fill ring of queue %d took %d of %d frames: %w", s.queue, got, n, fi.ENOSPC)
		}
		next += n
	}
	return nil
}

// Held counts the receive frames slot holds (marked), for statistics and
// tests.
func (b *ShareBlock) Held(slot int) int {
	if !b.ok() || slot < 0 || slot >= b.cfg.Slots {
		return 0
	}
	n, me := 0, byte(slot+1)
	for _, v := range b.marks()[:b.cfg.RxFrames] {
		if v == me {
			n++
		}
	}
	return n
}

// TakeShared is Take for a user of a ShareBlock: it marks the frames as
// slot's before the RX ring's consumer index moves past them, so no frame
// is ever in neither place.
func (s *Socket) TakeShared(b *ShareBlock, slot int, descs []Desc) int {
	if !b.ok() {
		return 0
	}
	return s.take(b, slot, descs)
}

// DrainRx takes every descriptor on the socket's RX ring, wherever
// another process that used the ring left it (the indices are read
// afresh), and returns their addresses. For the creator of a socket whose
// adopter is gone: nothing else may consume the ring meanwhile.
func (s *Socket) DrainRx() []uint64 {
	if s == nil || s.rx.mem == nil {
		return nil
	}
	r := &s.rx
	r.cachedCons, r.cachedProd = r.consumer.Load(), r.producer.Load()
	n := r.avail(r.size)
	out := make([]uint64, n)
	for i := range n {
		out[i] = r.get(i).Addr
	}
	r.release(n)
	return out
}
