package dataplane

import (
	"sync/atomic"
	"time"
)

// Hooks for the ShareBlock tests (share_test.go): the locks, a scratch
// word, and a fill interrupted by death.

// AgentHolderForTest is the holder id of the block's creator.
const AgentHolderForTest = agentHolder

func holderID(slot int) uint32 {
	if slot < 0 {
		return agentHolder
	}
	return uint32(slot + 1)
}

// LockForTest takes queue q's fill lock as slot (-1: the creator) and
// returns the id it took it over from (0: none).
func (b *ShareBlock) LockForTest(q, slot int) uint32 {
	return b.lock(b.fillLock(q), holderID(slot))
}

// LockWithinForTest is LockForTest giving up after max.
func (b *ShareBlock) LockWithinForTest(q, slot int, max time.Duration) (uint32, bool) {
	return b.lockWithin(b.fillLock(q), holderID(slot), max)
}

// UnlockForTest releases queue q's fill lock, which slot holds.
func (b *ShareBlock) UnlockForTest(q, slot int) { b.unlock(b.fillLock(q), holderID(slot)) }

// ReturnRingForTest writes addrs to slot's return ring as a member of the
// domain can, past the ring's producer index.
func (b *ShareBlock) ReturnRingForTest(slot int, addrs []uint64) {
	s, r := b.slot(slot), b.ret(slot)
	p := s.retProd.Load()
	for _, a := range addrs {
		r[p&uint32(len(r)-1)] = a
		p++
	}
	s.retProd.Store(p)
}

// ScribbleLockForTest makes queue q's fill lock look held by id.
func (b *ShareBlock) ScribbleLockForTest(q int, id uint32) {
	b.fillLock(q).w.Store(id<<1 | 1)
}

// ScratchForTest is a word no one else uses (the last slot's lost count).
func (b *ShareBlock) ScratchForTest() *atomic.Uint32 { return &b.slot(b.cfg.Slots - 1).lost }

// DieInFillForTest does what Fill does as slot up to where a process
// killed inside it would stop: the frames staged and (if publish) on the
// ring, the lock still held, the marks still set.
func (b *ShareBlock) DieInFillForTest(slot int, s *Socket, addrs []uint64, publish bool) {
	sl := b.slot(slot)
	copy(b.staging(slot), addrs)
	b.lock(b.fillLock(s.queue-b.cfg.FirstQueue), uint32(slot+1))
	f := &s.q.fill
	f.cachedProd, f.cachedCons = f.producer.Load(), f.consumer.Load()
	sl.stagingProd.Store(f.cachedProd + uint32(len(addrs)))
	sl.stagingN.Store(uint32(len(addrs)))
	if publish {
		for i, a := range addrs {
			f.put(uint32(i), a)
		}
		f.submit(uint32(len(addrs)))
	}
}

// FillRingForTest returns the entries on s's fill ring the kernel has not
// taken.
func (s *Socket) FillRingForTest() []uint64 {
	f := &s.q.fill
	p, c := f.producer.Load(), f.consumer.Load()
	var out []uint64
	for i := c; i != p; i++ {
		out = append(out, f.elems[i&f.mask])
	}
	return out
}

// OtherProcessForTest is s as another process of a sharing domain sees
// it: the same ring memory, indices cached on its own.
func (s *Socket) OtherProcessForTest() *Socket {
	q := *s.q
	return &Socket{q: &q, queue: s.queue}
}

// CompIndicesForTest returns the completion ring's producer and consumer
// indices.
func (s *Socket) CompIndicesForTest() (prod, cons uint32) {
	return s.q.comp.producer.Load(), s.q.comp.consumer.Load()
}
