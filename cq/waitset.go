package cq

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpfab/xdpfab/fi"
)

// WaitSet lets one goroutine wait on several CQs (fi_wait_open and fi_wait,
// for CQs opened with WaitSetObj). It is deliberately small: members are CQs
// only, and Wait reports that some member is ready, not which one.
type WaitSet struct {
	obj      WaitObj
	w        *waiter // nil for WaitYield
	mu       sync.Mutex
	members  atomic.Pointer[[]*CQ]
	closed   atomic.Bool
	signaled atomic.Bool
}

// OpenWaitSet creates a wait set whose own wait object is obj: WaitFD,
// WaitPollFD, WaitMutexCond, WaitYield, or WaitUnspec (which picks
// WaitMutexCond). Other values fail with fi.EINVAL.
func OpenWaitSet(obj WaitObj) (*WaitSet, error) {
	s := &WaitSet{obj: obj}
	switch obj {
	case WaitUnspec:
		s.obj = WaitMutexCond
	case WaitFD, WaitPollFD, WaitMutexCond, WaitYield:
	default:
		return nil, fmt.Errorf("wait set open: %s: %w", obj, fi.EINVAL)
	}
	if s.obj != WaitYield {
		w, err := newWaiter(s.obj)
		if err != nil {
			return nil, fmt.Errorf("wait set open: %w", err)
		}
		s.w = w
	}
	return s, nil
}

// usable is the guard of the methods with an error result: a nil
// *WaitSet, or one that did not come from OpenWaitSet (its zero value,
// whose wait object is WaitNone), is fi.EINVAL.
func (s *WaitSet) usable(op string) error {
	switch {
	case s == nil:
		return fmt.Errorf("%s: nil wait set: %w", op, fi.EINVAL)
	case s.obj == WaitNone:
		return fmt.Errorf("%s: wait set not opened (zero value): %w", op, fi.EINVAL)
	}
	return nil
}

// WaitObj returns the set's wait object kind: WaitNone for a nil or zero
// set.
func (s *WaitSet) WaitObj() WaitObj {
	if s == nil {
		return WaitNone
	}
	return s.obj
}

// Wait blocks until a member CQ has something to read (its wait condition
// holds, an error is queued or it is overrun), a member was signaled, or the
// timeout expires (fi_wait). timeout 0 polls; negative waits forever. It
// returns nil when ready, an error wrapping fi.ETIMEDOUT on expiry, and
// fi.EBADF if the set is closed.
func (s *WaitSet) Wait(timeout time.Duration) error {
	if err := s.usable("wait set wait"); err != nil {
		return err
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	backoff := progressBackoffMin
	for {
		if s.closed.Load() {
			return fmt.Errorf("wait set wait: closed: %w", fi.EBADF)
		}
		manual := false
		if ms := s.members.Load(); ms != nil {
			for _, q := range *ms {
				if q.hooks.Load() != nil {
					manual = true
					q.progress()
				}
			}
		}
		if s.anyReady() {
			return nil
		}
		if s.signaled.Load() && s.signaled.CompareAndSwap(true, false) {
			return nil
		}
		if timeout == 0 || (timeout > 0 && !time.Now().Before(deadline)) {
			return fmt.Errorf("wait set wait: %w", fi.ETIMEDOUT)
		}
		if s.w == nil {
			runtime.Gosched()
			continue
		}
		d, forever := deadline, timeout < 0
		if manual {
			limit := time.Now().Add(backoff)
			backoff = min(2*backoff, progressBackoffMax)
			if forever || limit.Before(d) {
				d, forever = limit, false
			}
		}
		s.w.await(s.waitOver, d, forever)
	}
}

// TryWait prepares an external wait on the set's wait object (see
// CQ.TryWait): nil when the caller may block, fi.EAGAIN when a member is
// ready.
func (s *WaitSet) TryWait() error {
	if err := s.usable("wait set trywait"); err != nil {
		return err
	}
	if s.closed.Load() {
		return fmt.Errorf("wait set trywait: closed: %w", fi.EBADF)
	}
	if s.w != nil {
		s.w.arm()
	}
	if s.anyReady() {
		return fmt.Errorf("wait set trywait: a member is ready: %w", fi.EAGAIN)
	}
	return nil
}

// Control performs GetWait or GetWaitObj on the set, as CQ.Control does.
func (s *WaitSet) Control(cmd Command, arg any) error {
	if err := s.usable("wait set control"); err != nil {
		return err
	}
	if s.closed.Load() {
		return fmt.Errorf("wait set control: closed: %w", fi.EBADF)
	}
	switch cmd {
	case GetWait:
		if err := s.getWait(arg); err != nil {
			return fmt.Errorf("wait set control: %w", err)
		}
		return nil
	case GetWaitObj:
		p, ok := arg.(*WaitObj)
		if !ok || p == nil {
			return fmt.Errorf("wait set control: FI_GETWAITOBJ: arg is %T, want *cq.WaitObj: %w", arg, fi.EINVAL)
		}
		*p = s.obj
		return nil
	}
	return fmt.Errorf("wait set control: %s: %w", cmd, fi.ENOSYS)
}

// Close releases the set. It fails with fi.EBUSY while CQs are attached
// (close them first) and with fi.EBADF the second time. Closing a nil or
// zero set returns nil: there is nothing to release.
func (s *WaitSet) Close() error {
	if s == nil || s.obj == WaitNone {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return fmt.Errorf("wait set close: already closed: %w", fi.EBADF)
	}
	if ms := s.members.Load(); ms != nil && len(*ms) > 0 {
		return fmt.Errorf("wait set close: %d CQ(s) attached: %w", len(*ms), fi.EBUSY)
	}
	s.closed.Store(true)
	if s.w != nil {
		s.w.close()
	}
	return nil
}

func (s *WaitSet) getWait(arg any) error {
	if s.w == nil {
		return fmt.Errorf("FI_GETWAIT on %s: %w", s.obj, fi.ENODATA)
	}
	return s.w.getWait(arg)
}

func (s *WaitSet) attach(q *CQ) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return fmt.Errorf("wait set closed: %w", fi.EINVAL)
	}
	var ms []*CQ
	if old := s.members.Load(); old != nil {
		ms = slices.Clone(*old)
	}
	ms = append(ms, q)
	s.members.Store(&ms)
	return nil
}

func (s *WaitSet) detach(q *CQ) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.members.Load(); old != nil {
		ms := slices.DeleteFunc(slices.Clone(*old), func(x *CQ) bool { return x == q })
		s.members.Store(&ms)
	}
}

func (s *WaitSet) signal() {
	s.signaled.Store(true)
	if s.w != nil && s.w.wanted() {
		s.w.wake()
	}
}

func (s *WaitSet) anyReady() bool {
	if ms := s.members.Load(); ms != nil {
		for _, q := range *ms {
			if q.ready() {
				return true
			}
		}
	}
	return false
}

func (s *WaitSet) waitOver() bool {
	return s.anyReady() || s.signaled.Load() || s.closed.Load()
}
