package cq

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
)

// MutexCond is the WaitMutexCond wait object that Control(GetWait)
// returns (struct fi_mutex_cond). Producers broadcast on Cond, holding
// Mutex, when a waiter armed the CQ with TryWait. To wait on it:
//
//	mc.Mutex.Lock()
//	if q.TryWait() == nil {
//		mc.Cond.Wait()
//	}
//	mc.Mutex.Unlock()
//	n, err := q.Read(buf)
//
// TryWait must be called with Mutex held, or a completion that arrives
// between TryWait and Wait can be missed.
type MutexCond struct {
	Mutex *sync.Mutex
	Cond  *sync.Cond
}

// waiter is the wait object behind a CQ or a WaitSet (WaitFD, WaitPollFD
// or WaitMutexCond; WaitYield and WaitNone have none).
//
// Producers wake it only when someone waits, so a completion costs no system
// call or lock unless a reader sleeps: a sleeper increments sleepers, then
// re-checks its condition, then sleeps; a producer publishes, then loads
// sleepers. Go's atomics are sequentially consistent, so either the sleeper
// sees the completion or the producer sees the sleeper. An external waiter
// (TryWait, then epoll on the fd or Wait on the MutexCond) sets armed
// instead, which the next wake clears.
//
// Goroutines blocked in SRead or WaitSet.Wait park on the condition
// variable whatever the wait object: the runtime hands the woken goroutine
// straight to a P, while a thread blocked in poll(2) must be woken by the
// kernel and then find a P, which measured 10-100x slower here (see
// BenchmarkWakeup). The descriptor of WaitFD and WaitPollFD (see wakeFD)
// is written for external waiters only, once per wake-up, never per entry.
type waiter struct {
	kind     WaitObj
	sleepers atomic.Int32
	armed    atomic.Bool
	closed   atomic.Bool

	// Sleepers wait until gen moves (a wake) or close.
	mu     sync.Mutex
	cond   sync.Cond
	gen    atomic.Uint64
	timers sync.Pool // *time.Timer that broadcast cond, for timed waits

	// WaitFD and WaitPollFD.
	fdMu sync.Mutex // orders descriptor writes and drains with close
	fd   wakeFD
}

func newWaiter(kind WaitObj) (*waiter, error) {
	return newWaiterFD(kind, newWakeFD)
}

// newWaiterFD is newWaiter with the descriptor's constructor given (tests
// run the pipe of other systems on Linux too).
func newWaiterFD(kind WaitObj, open func() (wakeFD, error)) (*waiter, error) {
	w := &waiter{kind: kind, fd: wakeFD{r: -1, w: -1}}
	w.cond.L = &w.mu
	w.timers.New = func() any {
		t := time.AfterFunc(time.Hour, w.broadcast)
		t.Stop()
		return t
	}
	switch kind {
	case WaitFD, WaitPollFD:
		fd, err := open()
		if err != nil {
			return nil, err
		}
		w.fd = fd
	case WaitMutexCond:
	default:
		panic("cq: no waiter for " + kind.String())
	}
	return w, nil
}

// hasFD reports whether the wait object is a descriptor.
func (w *waiter) hasFD() bool { return w.kind == WaitFD || w.kind == WaitPollFD }

// wanted reports whether a producer must wake the waiter.
func (w *waiter) wanted() bool {
	return w.sleepers.Load() != 0 || w.armed.Load()
}

// wake wakes every sleeper and every armed external waiter.
func (w *waiter) wake() {
	external := w.armed.Load() && w.armed.Swap(false)
	if external && w.hasFD() {
		w.fdMu.Lock()
		if !w.closed.Load() {
			w.fd.signal()
		}
		w.fdMu.Unlock()
	}
	if w.sleepers.Load() != 0 || (external && w.kind == WaitMutexCond) {
		w.mu.Lock()
		w.gen.Add(1)
		w.cond.Broadcast()
		w.mu.Unlock()
	}
}

func (w *waiter) broadcast() {
	w.mu.Lock()
	w.cond.Broadcast()
	w.mu.Unlock()
}

// arm prepares for an external wait (TryWait): it clears a stale signal,
// so that the descriptor becomes readable only for new completions, then
// arms. The caller re-checks its condition afterwards.
func (w *waiter) arm() {
	if w.hasFD() {
		w.fdMu.Lock()
		if !w.closed.Load() {
			w.fd.drain()
		}
		w.fdMu.Unlock()
	}
	w.armed.Store(true)
}

// await sleeps until a wake, close, or the deadline (if !forever), unless
// done already reports true once the sleeper is registered. Wakes can be
// spurious; callers loop.
func (w *waiter) await(done func() bool, deadline time.Time, forever bool) {
	w.sleepers.Add(1)
	gen := w.gen.Load()
	if !done() && !w.closed.Load() {
		w.sleep(gen, deadline, forever)
	}
	w.sleepers.Add(-1)
}

func (w *waiter) sleep(gen uint64, deadline time.Time, forever bool) {
	var t *time.Timer
	if !forever {
		d := time.Until(deadline)
		if d <= 0 {
			return
		}
		t = w.timers.Get().(*time.Timer)
		t.Reset(d)
	}
	w.mu.Lock()
	for w.gen.Load() == gen && !w.closed.Load() {
		if t != nil && !time.Now().Before(deadline) {
			break
		}
		w.cond.Wait()
	}
	w.mu.Unlock()
	if t != nil {
		t.Stop()
		w.timers.Put(t)
	}
}

// close wakes every sleeper for good and closes the descriptor.
func (w *waiter) close() {
	w.mu.Lock()
	w.closed.Store(true)
	w.cond.Broadcast()
	w.mu.Unlock()
	if w.hasFD() {
		w.fdMu.Lock()
		w.fd.close()
		w.fdMu.Unlock()
	}
}

// getWait stores the wait object in arg (FI_GETWAIT).
func (w *waiter) getWait(arg any) error {
	switch w.kind {
	case WaitFD:
		if p, ok := arg.(*int); ok && p != nil {
			*p = w.fd.r
			return nil
		}
		return fmt.Errorf("FI_GETWAIT on %s: arg is %T, want *int: %w", w.kind, arg, fi.EINVAL)
	case WaitPollFD:
		if p, ok := arg.(*[]unix.PollFd); ok && p != nil {
			*p = []unix.PollFd{{Fd: int32(w.fd.r), Events: unix.POLLIN}}
			return nil
		}
		return fmt.Errorf("FI_GETWAIT on %s: arg is %T, want *[]unix.PollFd: %w", w.kind, arg, fi.EINVAL)
	case WaitMutexCond:
		if p, ok := arg.(*MutexCond); ok && p != nil {
			*p = MutexCond{Mutex: &w.mu, Cond: &w.cond}
			return nil
		}
		return fmt.Errorf("FI_GETWAIT on %s: arg is %T, want *cq.MutexCond: %w", w.kind, arg, fi.EINVAL)
	}
	return fmt.Errorf("FI_GETWAIT on %s: %w", w.kind, fi.ENODATA)
}
