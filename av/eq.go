package av

import (
	"fmt"
	"sync"
	"time"

	"github.com/xdpfab/xdpfab/fi"
)

// EventType is an event queue event (enum fi_eq_event).
type EventType uint32

// AVComplete is FI_AV_COMPLETE: an FI_EVENT insert finished.
const AVComplete EventType = 5

// Event is an entry of an EventQueue: a completion (Err == 0: Data is the
// number of addresses inserted) or an error (Data is the index of the
// failed address in the insert call, Err its errno).
type Event struct {
	Type    EventType
	Context any
	Data    uint64
	Err     fi.Errno
}

// EventQueue is the minimal event queue of the deprecated FI_EVENT mode
// (fi_eq(3) reduced to what AV inserts report). Safe for concurrent use.
// Its zero value is an empty queue, as NewEventQueue returns.
type EventQueue struct {
	mu     sync.Mutex
	events []Event
	bound  int
	closed bool
	posted chan struct{} // closed (and replaced) when events arrive or the queue closes; nil until a reader waits
}

// NewEventQueue returns an empty queue.
func NewEventQueue() *EventQueue { return &EventQueue{} }

// Bind binds eq to the AV (fi_av_bind). flags must be 0.
func (a *AV) Bind(eq *EventQueue, flags fi.Flags) error {
	if err := a.usable("av bind"); err != nil {
		return err
	}
	unlock := a.lock()
	defer unlock()
	switch {
	case a.closed:
		return fmt.Errorf("av bind: %w", fi.EOPBADSTATE)
	case eq == nil:
		return fmt.Errorf("av bind: nil event queue: %w", fi.EINVAL)
	case flags != 0:
		return fmt.Errorf("av bind: flags %v must be 0: %w", flags, fi.EINVAL)
	case a.eq != nil:
		return fmt.Errorf("av bind: an event queue is already bound: %w", fi.EBUSY)
	}
	eq.mu.Lock()
	if eq.closed {
		eq.mu.Unlock()
		return fmt.Errorf("av bind: event queue closed: %w", fi.EBADF)
	}
	eq.bound++
	eq.mu.Unlock()
	a.eq = eq
	return nil
}

func (q *EventQueue) unbind() {
	q.mu.Lock()
	q.bound--
	q.mu.Unlock()
}

// postInsert queues one error event per failed element, then the
// completion: all errors of an insert precede its completion.
func (q *EventQueue) postInsert(ctx any, errnos []fi.Errno, n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, e := range errnos {
		if e != 0 {
			q.events = append(q.events, Event{Type: AVComplete, Context: ctx, Data: uint64(i), Err: e})
		}
	}
	q.events = append(q.events, Event{Type: AVComplete, Context: ctx, Data: uint64(n)})
	q.wakeLocked()
}

// wakeLocked wakes the readers waiting in SRead; q.mu held.
func (q *EventQueue) wakeLocked() {
	if q.posted != nil {
		close(q.posted)
		q.posted = nil
	}
}

// SRead is Read that blocks (fi_eq_sread) until an event is queued or the
// timeout expires: it returns the next completion, or fails with EAVAIL
// when the next event is an error (use ReadErr) and with EAGAIN when none
// arrived in time. timeout 0 polls; a negative timeout waits forever. A
// queue closed meanwhile fails it with EBADF.
func (q *EventQueue) SRead(timeout time.Duration) (Event, error) {
	if q == nil {
		return Event{}, fmt.Errorf("eq sread: nil event queue: %w", fi.EINVAL)
	}
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	for {
		q.mu.Lock()
		switch {
		case q.closed:
			q.mu.Unlock()
			return Event{}, fmt.Errorf("eq sread: event queue closed: %w", fi.EBADF)
		case len(q.events) > 0:
			defer q.mu.Unlock()
			if q.events[0].Err != 0 {
				return Event{}, fmt.Errorf("eq sread: %w", fi.EAVAIL)
			}
			return q.pop(), nil
		case timeout == 0:
			q.mu.Unlock()
			return Event{}, fmt.Errorf("eq sread: %w", fi.EAGAIN)
		}
		if q.posted == nil {
			q.posted = make(chan struct{})
		}
		posted := q.posted
		q.mu.Unlock()
		select {
		case <-posted:
		case <-deadline:
			return Event{}, fmt.Errorf("eq sread: no event within %v: %w", timeout, fi.EAGAIN)
		}
	}
}

// Read pops the next completion. It fails with EAGAIN when the queue is
// empty and with EAVAIL when the next event is an error (use ReadErr).
func (q *EventQueue) Read() (Event, error) {
	if q == nil {
		return Event{}, fmt.Errorf("eq read: nil event queue: %w", fi.EINVAL)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.events) == 0 {
		return Event{}, fmt.Errorf("eq read: %w", fi.EAGAIN)
	}
	if q.events[0].Err != 0 {
		return Event{}, fmt.Errorf("eq read: %w", fi.EAVAIL)
	}
	return q.pop(), nil
}

// ReadErr pops the next event if it is an error, else fails with EAGAIN.
func (q *EventQueue) ReadErr() (Event, error) {
	if q == nil {
		return Event{}, fmt.Errorf("eq readerr: nil event queue: %w", fi.EINVAL)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.events) == 0 || q.events[0].Err == 0 {
		return Event{}, fmt.Errorf("eq readerr: %w", fi.EAGAIN)
	}
	return q.pop(), nil
}

func (q *EventQueue) pop() Event {
	ev := q.events[0]
	q.events[0] = Event{}
	q.events = q.events[1:]
	return ev
}

// Close closes the queue; it fails with EBUSY while an AV is bound to it.
// Closing a nil queue returns nil.
func (q *EventQueue) Close() error {
	if q == nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.bound > 0 {
		return fmt.Errorf("eq close: %d AV(s) bound: %w", q.bound, fi.EBUSY)
	}
	q.closed = true
	q.wakeLocked()
	return nil
}
