package cq

import (
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/prefetch"
)

// opErrors are the errors of one read call, built once so that polling an
// empty CQ does not allocate.
type opErrors struct {
	op                            string
	again, avail, overrun, closed error
}

// newOpErrors builds op's errors; again says why an EAGAIN, "" for the
// bare fi.EAGAIN.
func newOpErrors(op, again string) *opErrors {
	againErr := error(fi.EAGAIN)
	if again != "" {
		againErr = fmt.Errorf("%s: %s: %w", op, again, fi.EAGAIN)
	}
	return &opErrors{
		op:      op,
		again:   againErr,
		avail:   fmt.Errorf("%s: error completion at the head, call ReadErr: %w", op, fi.EAVAIL),
		overrun: fmt.Errorf("%s: completion queue overrun: %w", op, fi.EOVERRUN),
		closed:  fmt.Errorf("%s: closed: %w", op, fi.EBADF),
	}
}

var (
	// An empty CQ is Read's answer to most polls: its error is the bare
	// fi.EAGAIN (as fi_cq_read's -FI_EAGAIN), which errors.Is matches at
	// its first comparison (BenchmarkEmptyPoll 29.5 -> 27.3 ns).
	readErrs    = newOpErrors("cq read", "")
	sreadErrs   = newOpErrors("cq sread", "timed out or signaled")
	readErrErrs = newOpErrors("cq readerr", "no error completion at the head")
)

// of maps a take or ReadErr result to its error.
func (e *opErrors) of(code fi.Errno) error {
	switch code {
	case 0:
		return nil
	case fi.EAGAIN:
		return e.again
	case fi.EAVAIL:
		return e.avail
	case fi.EOVERRUN:
		return e.overrun
	case fi.EBADF:
		return e.closed
	}
	return fmt.Errorf("%s: %w", e.op, code)
}

// Read takes up to len(buf) completions from the head of the CQ without
// blocking (fi_cq_read), filling the fields of buf that the CQ's format has
// (see Entry). It returns the number taken, or an error:
//
//   - fi.EAGAIN when the CQ is empty (also when len(buf) is 0; a non-empty
//     CQ returns 0 for an empty buf), the bare errno: polls ask far more
//     often than entries arrive, and errors.Is matches it at once;
//   - fi.EAVAIL when the head is an error completion: successes queued ahead
//     of an error are returned first, then ReadErr takes the error;
//   - fi.EOVERRUN once an overrun CQ has returned its valid entries;
//   - fi.EBADF after Close.
//
// Read first runs the progress functions of bound producers (manual
// progress). It takes no lock with Attr.SingleConsumer, and never allocates
// or makes a system call.
func (q *CQ) Read(buf []Entry) (int, error) {
	return q.ReadFrom(buf, nil)
}

// ReadFrom is Read that also reports each entry's source (fi_cq_readfrom):
// src[i] is the sender of buf[i], as its fi_addr or, with fi.AVUserID, its
// user ID. It is fi.AddrNotAvail when the producing endpoint lacks
// fi.Source or the sender is not in the address vector. src must be at least
// as long as buf (fi.EINVAL otherwise); nil src is Read.
func (q *CQ) ReadFrom(buf []Entry, src []fi.Addr) (int, error) {
	if q == nil || q.ring == nil {
		return 0, q.usable("cq read")
	}
	if src != nil && len(src) < len(buf) {
		return 0, fmt.Errorf("cq readfrom: %d source slots for %d entries: %w", len(src), len(buf), fi.EINVAL)
	}
	if q.closed.Load() {
		return 0, readErrs.closed
	}
	q.progress()
	n, code := q.take(buf, src)
	return n, readErrs.of(code)
}

// take moves successful entries from the head into buf. It answers
// fi.EBADF once Close has run: Close counts what is left as discarded under
// the same lock.
func (q *CQ) take(buf []Entry, src []fi.Addr) (int, fi.Errno) {
	// An empty CQ answers without the consumer lock: a polling reader
	// asks far more often than entries arrive, and the CQ was empty at
	// the instant of the two loads (head only grows under the lock).
	if h := q.head.Load(); q.tail.Load() == h && !q.overrun.Load() && !q.closed.Load() {
		// The slot the next completion goes to, into the cache: a
		// poller's empty reads keep it there, so that the producer's
		// write (and this read of it) finds it instead of a line the
		// ring last touched Size completions ago (96-byte slots: two
		// lines at most).
		s := uintptr(unsafe.Pointer(&q.ring[h&q.mask]))
		prefetch.Line(s)
		prefetch.Line(s + unsafe.Sizeof(slot{}) - 1)
		return 0, fi.EAGAIN
	}
	for {
		if !q.attr.SingleConsumer {
			q.consMu.Lock()
		}
		if q.closed.Load() {
			if !q.attr.SingleConsumer {
				q.consMu.Unlock()
			}
			return 0, fi.EBADF
		}
		h := q.head.Load()
		t := q.tail.Load()
		if t == h {
			if !q.attr.SingleConsumer {
				q.consMu.Unlock()
			}
			if !q.overrun.Load() {
				return 0, fi.EAGAIN
			}
			// No producer publishes once the CQ is overrun, so an empty
			// ring now stays empty.
			if q.tail.Load() == h {
				return 0, fi.EOVERRUN
			}
			continue
		}
		n := int(min(t-h, uint64(len(buf))))
		i := q.copyOut(buf[:n], h)
		if src != nil {
			for j := range i {
				src[j] = q.ring[(h+uint64(j))&q.mask].src
			}
		}
		if i > 0 {
			q.head.Store(h + uint64(i))
		}
		if !q.attr.SingleConsumer {
			q.consMu.Unlock()
		}
		if i == 0 && n > 0 {
			return 0, fi.EAVAIL
		}
		return i, 0
	}
}

// copyOut copies the successful entries at h, h+1, ... into buf, stopping at
// the first error entry, and returns how many it copied. It drops the
// ring's references to them, so that queued contexts and buffers do not
// outlive their completions.
func (q *CQ) copyOut(buf []Entry, h uint64) int {
	ring, mask := q.ring, q.mask
	switch q.attr.Format {
	case FormatContext:
		for i := range buf {
			s := &ring[(h+uint64(i))&mask]
			if s.isErr {
				return i
			}
			buf[i] = Entry{OpContext: s.e.OpContext}
			s.e.OpContext, s.e.Buf = nil, nil
		}
	case FormatMsg:
		for i := range buf {
			s := &ring[(h+uint64(i))&mask]
			if s.isErr {
				return i
			}
			buf[i] = s.e
			buf[i].Buf, buf[i].Data, buf[i].Tag = nil, 0, 0
			s.e.OpContext, s.e.Buf = nil, nil
		}
	case FormatData:
		for i := range buf {
			s := &ring[(h+uint64(i))&mask]
			if s.isErr {
				return i
			}
			buf[i] = s.e
			buf[i].Tag = 0
			s.e.OpContext, s.e.Buf = nil, nil
		}
	default: // FormatTagged
		for i := range buf {
			s := &ring[(h+uint64(i))&mask]
			if s.isErr {
				return i
			}
			buf[i] = s.e
			s.e.OpContext, s.e.Buf = nil, nil
		}
	}
	return len(buf)
}

// ReadErr takes the error completion at the head of the CQ (fi_cq_readerr)
// into e; see ErrEntry for the two ErrData buffer rules. It fails with
// fi.EAGAIN, changing nothing, when the head is not an error completion,
// with fi.EOVERRUN once an overrun CQ is drained, and with fi.EINVAL for a
// nil e. Like libfabric, it does not run progress.
func (q *CQ) ReadErr(e *ErrEntry) error {
	if q == nil || q.ring == nil {
		return q.usable("cq readerr")
	}
	if e == nil {
		return fmt.Errorf("cq readerr: nil entry: %w", fi.EINVAL)
	}
	if !q.attr.SingleConsumer {
		q.consMu.Lock()
		defer q.consMu.Unlock()
	}
	if q.closed.Load() {
		return readErrErrs.closed
	}
	h := q.head.Load()
	if q.tail.Load() == h {
		if q.overrun.Load() && q.tail.Load() == h {
			return readErrErrs.overrun
		}
		return readErrErrs.again
	}
	s := &q.ring[h&q.mask]
	if !s.isErr {
		return readErrErrs.again
	}
	ei := s.ei
	user := e.ErrData
	*e = ErrEntry{
		OpContext: s.e.OpContext,
		Flags:     s.e.Flags,
		Len:       s.e.Len,
		Buf:       s.e.Buf,
		Data:      s.e.Data,
		Tag:       s.e.Tag,
		OLen:      ei.olen,
		Err:       ei.err,
		ProvErrno: ei.provErrno,
		SrcAddr:   s.src,
	}
	switch {
	case len(user) == 0 || unsafe.SliceData(user) == unsafe.SliceData(q.errBuf):
		// CQ-owned buffer, valid until the next read call.
		if len(ei.data) > 0 {
			q.errBuf = append(q.errBuf[:0], ei.data...)
			e.ErrData = q.errBuf
		}
	default:
		e.ErrData = user[:copy(user, ei.data)]
	}
	s.e.OpContext, s.e.Buf = nil, nil
	q.errQueued.Add(-1)
	q.head.Store(h + 1)
	return nil
}

// SRead is Read that blocks (fi_cq_sread) until the wait condition holds
// (an entry, or Attr.Threshold entries under CondThreshold; an error entry
// or an overrun always ends the wait), the timeout expires, or Signal is
// called. timeout 0 polls; a negative timeout waits forever. On expiry or
// Signal it returns what is queued, or fi.EAGAIN if nothing is. It fails
// with fi.EINVAL under WaitNone and WaitSetObj, and with fi.EBADF if the CQ
// is closed meanwhile. It parks the goroutine (under WaitYield it spins with
// runtime.Gosched instead); producers wake it through the wait object. With
// manual progress it runs the progress functions between sleeps of 20 µs
// growing to 1 ms.
func (q *CQ) SRead(buf []Entry, timeout time.Duration) (int, error) {
	return q.SReadFrom(buf, nil, timeout)
}

// Backoff between progress calls while a manual-progress SRead waits.
const (
	progressBackoffMin = 20 * time.Microsecond
	progressBackoffMax = time.Millisecond
)

// SReadFrom is SRead with sources, as in ReadFrom (fi_cq_sreadfrom).
func (q *CQ) SReadFrom(buf []Entry, src []fi.Addr, timeout time.Duration) (int, error) {
	return q.SReadFromCond(buf, src, 0, timeout)
}

// SReadCond is SRead with fi_cq_sread's cond argument: on a CQ opened with
// CondThreshold, cond > 0 is this call's threshold (the number of queued
// entries that ends the wait, at most the CQ's size) in place of
// Attr.Threshold; cond 0 keeps Attr.Threshold. Under CondNone cond is
// ignored, as in libfabric. A negative cond is fi.EINVAL.
func (q *CQ) SReadCond(buf []Entry, cond int, timeout time.Duration) (int, error) {
	return q.SReadFromCond(buf, nil, cond, timeout)
}

// SReadFromCond is SReadFrom with cond, as SReadCond.
func (q *CQ) SReadFromCond(buf []Entry, src []fi.Addr, cond int, timeout time.Duration) (int, error) {
	if q == nil || q.ring == nil {
		return 0, q.usable("cq sread")
	}
	if cond < 0 {
		return 0, fmt.Errorf("cq sread: cond %d: %w", cond, fi.EINVAL)
	}
	thr := q.thr
	if q.attr.WaitCond == CondThreshold && cond > 0 && uint64(cond) != q.thr {
		thr = min(uint64(cond), q.size)
		q.callThr.add(thr)
		defer q.callThr.remove(thr)
	}
	if src != nil && len(src) < len(buf) {
		return 0, fmt.Errorf("cq sreadfrom: %d source slots for %d entries: %w", len(src), len(buf), fi.EINVAL)
	}
	switch q.attr.WaitObj {
	case WaitNone, WaitSetObj:
		return 0, fmt.Errorf("cq sread: CQ opened with %s: %w", q.attr.WaitObj, fi.EINVAL)
	}
	if q.closed.Load() {
		return 0, sreadErrs.closed
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	backoff := progressBackoffMin
	over := func() bool { return q.readyAt(thr) || q.signaled.Load() || q.closed.Load() }
	for {
		q.progress()
		if q.readyAt(thr) {
			n, code := q.take(buf, src)
			if code != fi.EAGAIN {
				return n, sreadErrs.of(code)
			}
		}
		if q.closed.Load() {
			return 0, sreadErrs.closed
		}
		if (q.signaled.Load() && q.signaled.CompareAndSwap(true, false)) ||
			timeout == 0 || (timeout > 0 && !time.Now().Before(deadline)) {
			n, code := q.take(buf, src)
			return n, sreadErrs.of(code)
		}
		q.block(over, deadline, timeout < 0, &backoff)
	}
}

// block sleeps until something may have changed. With manual progress
// nobody else produces, so the sleep is cut short to run the progress
// functions again.
func (q *CQ) block(over func() bool, deadline time.Time, forever bool, backoff *time.Duration) {
	if q.attr.WaitObj == WaitYield {
		runtime.Gosched()
		return
	}
	if q.hooks.Load() != nil {
		limit := time.Now().Add(*backoff)
		*backoff = min(2**backoff, progressBackoffMax)
		if forever || limit.Before(deadline) {
			deadline, forever = limit, false
		}
	}
	q.w.await(over, deadline, forever)
}
