package cq

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/xdpfab/xdpfab/fi"
)

// Sizes.
const (
	// DefaultSize is the capacity of a CQ opened with Size 0, the same as
	// libfabric's util CQ (UTIL_DEF_CQ_SIZE).
	DefaultSize = 1024
	// MaxSize is the largest capacity Open accepts (about 100 bytes each).
	MaxSize = 1 << 20
)

// Attr holds the attributes of a completion queue: struct fi_cq_attr, field
// for field, then xdpfab's own. The zero value asks for the defaults: 1024
// entries, FormatContext, no wait object, safe for any number of
// producers and consumers.
type Attr struct {
	// Size is the minimum number of entries; 0 picks DefaultSize. The
	// capacity is Size rounded up to a power of two.
	Size int
	// Flags may hold fi.Affinity, which makes SignalingVector valid.
	Flags fi.Flags
	// Format is the completion format.
	Format Format
	// WaitObj is what SRead blocks on.
	WaitObj WaitObj
	// SignalingVector is the CPU that wake-ups should target when Flags
	// has fi.Affinity: 0 <= SignalingVector < runtime.NumCPU(). It is a
	// hint; xdpfab has no interrupts to steer and records it only.
	SignalingVector int
	// WaitCond is the blocking-read condition.
	WaitCond WaitCond
	// WaitSet is the set to signal when WaitObj is WaitSetObj (ignored
	// otherwise).
	WaitSet *WaitSet

	// Threshold is the number of queued entries that satisfies a blocked
	// SRead under CondThreshold (libfabric passes it as sread's cond
	// argument; here it is fixed at open). Values above the capacity are
	// clamped to it. It must be 0 under CondNone.
	Threshold int
	// SingleProducer promises that at most one Producer is bound at a time
	// (Bind enforces it) and that it is used by one goroutine at a time: the
	// CQ then drops its producer lock.
	SingleProducer bool
	// SingleConsumer promises that the application serializes its read
	// calls (libfabric's FI_THREAD_COMPLETION): the CQ then drops its
	// consumer lock, and reads take no lock at all.
	SingleConsumer bool
}

// cacheLine separates the indices that the producer and the consumer write.
type cacheLine [64]byte

// CQ is a completion queue. It is a bounded ring of entries stored by value:
// producers (endpoints, through a Producer) append at the tail, readers take
// from the head. All methods are safe for concurrent use unless Attr promised
// otherwise.
type CQ struct {
	_    cacheLine
	head atomic.Uint64 // index of the oldest entry; advanced by readers
	_    [56]byte
	tail atomic.Uint64 // index after the newest entry; advanced by producers
	_    [56]byte

	prodMu   sync.Mutex // serializes producers (not with SingleProducer)
	prodHead uint64     // producers' cached head
	_        [48]byte

	consMu sync.Mutex // serializes readers (not with SingleConsumer)
	errBuf []byte     // the CQ-owned err_data buffer ReadErr hands out
	_      [32]byte

	ring []slot
	mask uint64
	size uint64
	thr  uint64 // entries that satisfy a wait (Attr.Threshold)
	// callThr holds the thresholds of SReads that passed their own (cond
	// of SReadCond) while they wait; producers wake readers at the lowest.
	callThr thresholds
	attr    Attr
	w       *waiter  // WaitFD, WaitPollFD, WaitMutexCond
	set     *WaitSet // WaitSetObj

	errQueued atomic.Int64 // error entries in the ring
	overrun   atomic.Bool
	closed    atomic.Bool
	signaled  atomic.Bool
	lost      atomic.Uint64
	discarded atomic.Uint64

	mu    sync.Mutex // guards bound, hooks changes and Close
	bound int
	hooks atomic.Pointer[[]*Producer] // bound producers with a progress function
}

// newRing returns a ring of size slots whose every page this process has
// written, so that the first pass of the producer over the ring takes no
// page fault.
//
// A ring larger than a few pages comes from memory the runtime has just
// mapped and never touched. The garbage collector scans it (a slot holds a
// pointer), and its reads map the kernel's shared zero page read-only; the
// producer's first write to each page then faults to replace it, and the
// kernel flushes the page's old translation from every CPU that runs a
// thread of the process: an interrupt for each, in the middle of whatever
// that thread was doing. An application whose receiving thread spins on
// one CPU while its sending thread spins on another lost 10-20 us once per
// page (every 43 completions) on each of them until the ring had wrapped
// once (measured in the benchmarks' ping-pong, whose two sides share a
// process). Writing each slot now, before anything reads it, maps the
// pages writable at Open, where the cost (about 25 us for the default
// 1024 slots) is expected.
func newRing(size uint64) []slot {
	ring := make([]slot, size)
	for i := range ring {
		ring[i].src = fi.AddrNotAvail
	}
	return ring
}

// slot is one ring entry.
type slot struct {
	e     Entry
	src   fi.Addr
	ei    *errInfo // kept for reuse once allocated; valid when isErr
	isErr bool
}

// errInfo holds the fields an error entry adds.
type errInfo struct {
	err       fi.Errno
	provErrno int
	olen      int
	data      []byte
}

// Stats are a CQ's counters, for metrics.
type Stats struct {
	// Capacity is the number of entries the CQ holds.
	Capacity int
	// Depth is the number of entries queued now, errors included.
	Depth int
	// Errors is the number of error entries queued now.
	Errors int
	// Written counts entries ever queued; Read counts entries ever taken
	// (by Read, ReadFrom, SRead, SReadFrom and ReadErr).
	Written, Read uint64
	// Lost counts completions producers could not queue: pushed into a full
	// CQ (which makes it overrun), after the overrun, or by an unbound
	// Producer.
	Lost uint64
	// Discarded counts entries still queued when the CQ was closed.
	Discarded uint64
	// Overrun reports the fatal overrun state.
	Overrun bool
}

// Open creates a completion queue (fi_cq_open). Invalid attributes fail with
// fi.EINVAL; a failure to create the descriptor of WaitFD (an eventfd, or a
// pipe off Linux) is returned as is.
func Open(attr Attr) (*CQ, error) {
	a := attr
	if a.Size < 0 || a.Size > MaxSize {
		return nil, fmt.Errorf("cq open: size %d outside 0..%d: %w", a.Size, MaxSize, fi.EINVAL)
	}
	if bad := a.Flags &^ fi.Affinity; bad != 0 {
		return nil, fmt.Errorf("cq open: unsupported flags %s: %w", bad, fi.EINVAL)
	}
	if a.Flags&fi.Affinity != 0 && (a.SignalingVector < 0 || a.SignalingVector >= runtime.NumCPU()) {
		return nil, fmt.Errorf("cq open: signaling vector %d outside 0..%d: %w",
			a.SignalingVector, runtime.NumCPU()-1, fi.EINVAL)
	}
	switch a.Format {
	case FormatUnspec:
		a.Format = FormatContext
	case FormatContext, FormatMsg, FormatData, FormatTagged:
	default:
		return nil, fmt.Errorf("cq open: %s: %w", a.Format, fi.EINVAL)
	}
	switch a.WaitObj {
	case WaitUnspec:
		a.WaitObj = WaitMutexCond
	case WaitNone, WaitFD, WaitPollFD, WaitMutexCond, WaitYield:
	case WaitSetObj:
		if a.WaitSet == nil {
			return nil, fmt.Errorf("cq open: FI_WAIT_SET without a wait set: %w", fi.EINVAL)
		}
		if a.WaitSet.obj == WaitNone {
			return nil, fmt.Errorf("cq open: FI_WAIT_SET with a wait set not opened (zero value): %w", fi.EINVAL)
		}
	default:
		return nil, fmt.Errorf("cq open: %s: %w", a.WaitObj, fi.EINVAL)
	}
	if a.WaitObj != WaitSetObj {
		a.WaitSet = nil
	}
	switch a.WaitCond {
	case CondNone:
		if a.Threshold != 0 {
			return nil, fmt.Errorf("cq open: threshold %d without FI_CQ_COND_THRESHOLD: %w", a.Threshold, fi.EINVAL)
		}
	case CondThreshold:
		if a.Threshold < 0 {
			return nil, fmt.Errorf("cq open: threshold %d: %w", a.Threshold, fi.EINVAL)
		}
	default:
		return nil, fmt.Errorf("cq open: %s: %w", a.WaitCond, fi.EINVAL)
	}

	if a.Size == 0 {
		a.Size = DefaultSize
	}
	size := uint64(1) << bits.Len(uint(a.Size-1))
	a.Size = int(size)
	thr := uint64(1)
	if a.WaitCond == CondThreshold && a.Threshold > 1 {
		thr = min(uint64(a.Threshold), size)
	}

	q := &CQ{ring: newRing(size), mask: size - 1, size: size, thr: thr, attr: a}
	q.callThr.min.Store(math.MaxUint64)
	switch a.WaitObj {
	case WaitFD, WaitPollFD, WaitMutexCond:
		w, err := newWaiter(a.WaitObj)
		if err != nil {
			return nil, fmt.Errorf("cq open: %w", err)
		}
		q.w = w
	case WaitSetObj:
		if err := a.WaitSet.attach(q); err != nil {
			return nil, fmt.Errorf("cq open: %w", err)
		}
		q.set = a.WaitSet
	}
	return q, nil
}

// usable is the guard of the methods with an error result: a nil *CQ, or
// a CQ that did not come from Open (its zero value, which has no ring), is
// fi.EINVAL. The errors are built only when returned.
func (q *CQ) usable(op string) error {
	switch {
	case q == nil:
		return fmt.Errorf("%s: nil CQ: %w", op, fi.EINVAL)
	case q.ring == nil:
		return fmt.Errorf("%s: CQ not opened (zero value): %w", op, fi.EINVAL)
	}
	return nil
}

// Attr returns the attributes in effect: the rounded size, and the format
// and wait object chosen for UNSPEC. A nil CQ has the zero Attr.
func (q *CQ) Attr() Attr {
	if q == nil {
		return Attr{}
	}
	return q.attr
}

// Stats returns the CQ's counters; the zero Stats for a nil CQ.
func (q *CQ) Stats() Stats {
	if q == nil {
		return Stats{}
	}
	h := q.head.Load()
	t := q.tail.Load()
	return Stats{
		Capacity:  int(q.size),
		Depth:     int(t - h),
		Errors:    int(max(q.errQueued.Load(), 0)),
		Written:   t,
		Read:      h,
		Lost:      q.lost.Load(),
		Discarded: q.discarded.Load(),
		Overrun:   q.overrun.Load(),
	}
}

// Close releases the CQ (fi_close). It fails with fi.EBUSY, changing
// nothing, while producers are bound, so it can be retried after they
// unbind. Entries still queued are discarded (and counted in
// Stats.Discarded); blocked SReads return fi.EBADF. A second Close fails with
// fi.EBADF. Descriptors obtained through GetWait are closed. Reads that
// race Close return fi.EBADF, never an entry counted as discarded; with
// Attr.SingleConsumer, Close is one of the consumer's calls and must not run
// concurrently with its reads. Closing a nil or zero CQ returns nil: there
// is nothing to release.
func (q *CQ) Close() error {
	if q == nil || q.ring == nil {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return fmt.Errorf("cq close: already closed: %w", fi.EBADF)
	}
	if q.bound > 0 {
		return fmt.Errorf("cq close: %d endpoint(s) still bound: %w", q.bound, fi.EBUSY)
	}
	q.closed.Store(true)
	if !q.attr.SingleConsumer {
		q.consMu.Lock()
	}
	h := q.head.Load()
	q.discarded.Store(q.tail.Load() - h)
	// Drop the queued contexts and buffers: nobody can read them now.
	clear(q.ring)
	q.errBuf = nil
	if !q.attr.SingleConsumer {
		q.consMu.Unlock()
	}
	if q.w != nil {
		q.w.close()
	}
	if q.set != nil {
		q.set.detach(q)
	}
	return nil
}

// Signal wakes a thread blocked in SRead or SReadFrom (fi_cq_signal), which
// returns fi.EAGAIN if no entry is ready. The signal is sticky: if no SRead
// is blocked, the next one that would block returns at once. On a WaitSetObj
// CQ it signals the set. It fails with fi.EINVAL under WaitNone.
func (q *CQ) Signal() error {
	if err := q.usable("cq signal"); err != nil {
		return err
	}
	if q.closed.Load() {
		return fmt.Errorf("cq signal: %w", fi.EBADF)
	}
	switch q.attr.WaitObj {
	case WaitNone:
		return fmt.Errorf("cq signal: CQ opened with FI_WAIT_NONE: %w", fi.EINVAL)
	case WaitSetObj:
		q.set.signal()
		return nil
	}
	q.signaled.Store(true)
	if w := q.w; w != nil && w.wanted() {
		w.wake()
	}
	return nil
}

// Control performs a control command (fi_control): GetWait stores the wait
// object in arg (see Command), failing with fi.ENODATA when the CQ has none
// (WaitNone, WaitYield); GetWaitObj stores the WaitObj in arg, a *WaitObj.
// A WaitSetObj CQ answers with its set's wait object. Other commands fail with
// fi.ENOSYS, a wrong arg type with fi.EINVAL.
func (q *CQ) Control(cmd Command, arg any) error {
	if err := q.usable("cq control"); err != nil {
		return err
	}
	if q.closed.Load() {
		return fmt.Errorf("cq control: %w", fi.EBADF)
	}
	switch cmd {
	case GetWait:
		if q.set != nil {
			if err := q.set.getWait(arg); err != nil {
				return fmt.Errorf("cq control: wait set: %w", err)
			}
			return nil
		}
		if q.w == nil {
			return fmt.Errorf("cq control: FI_GETWAIT on a CQ with %s: %w", q.attr.WaitObj, fi.ENODATA)
		}
		if err := q.w.getWait(arg); err != nil {
			return fmt.Errorf("cq control: %w", err)
		}
		return nil
	case GetWaitObj:
		p, ok := arg.(*WaitObj)
		if !ok || p == nil {
			return fmt.Errorf("cq control: FI_GETWAITOBJ: arg is %T, want *cq.WaitObj: %w", arg, fi.EINVAL)
		}
		*p = q.attr.WaitObj
		return nil
	}
	return fmt.Errorf("cq control: %s: %w", cmd, fi.ENOSYS)
}

// TryWait prepares an external wait on the object from Control(GetWait)
// (libfabric's fi_trywait). It returns nil when the caller may block: the
// next completion that satisfies the wait condition (or a Signal) will make
// the descriptor readable, or broadcast the MutexCond. It fails with
// fi.EAGAIN when entries are ready to read, so the caller should read
// instead of blocking, with fi.EINVAL under WaitNone. On a WaitSetObj CQ it
// is the set's TryWait.
func (q *CQ) TryWait() error {
	if err := q.usable("cq trywait"); err != nil {
		return err
	}
	if q.closed.Load() {
		return fmt.Errorf("cq trywait: %w", fi.EBADF)
	}
	switch q.attr.WaitObj {
	case WaitNone:
		return fmt.Errorf("cq trywait: CQ opened with FI_WAIT_NONE: %w", fi.EINVAL)
	case WaitSetObj:
		return q.set.TryWait()
	}
	if q.w != nil {
		q.w.arm()
	}
	if q.ready() {
		return errTryWaitAgain
	}
	return nil
}

var errTryWaitAgain = fmt.Errorf("cq trywait: entries ready: %w", fi.EAGAIN)

// StrError describes provider-specific error information from an ErrEntry
// (fi_cq_strerror): the text of provErrno and, when errData is a raw source
// address (fi.EADDRNOTAVAIL), that address in FI_ADDR_STR form.
func (q *CQ) StrError(provErrno int, errData []byte) string {
	var s string
	if provErrno == 0 {
		s = "Success"
	} else {
		s = fi.StrError(fi.Errno(provErrno))
	}
	if ap, err := fi.DecodeSockaddr(errData); err == nil {
		s += ": source " + fi.FormatAddrStr(ap)
	}
	return s
}

// ready reports whether a blocked reader should wake: the wait condition
// holds for some waiter (the open-time threshold, or the lowest per-call
// one), an error entry is queued or the CQ is overrun.
func (q *CQ) ready() bool {
	return q.readyAt(min(q.thr, q.callThr.min.Load()))
}

// readyAt is ready for a reader whose threshold is thr.
func (q *CQ) readyAt(thr uint64) bool {
	h := q.head.Load() // head first: then t-h cannot underflow
	t := q.tail.Load()
	return t-h >= thr || (t != h && q.errQueued.Load() > 0) || q.overrun.Load()
}

// thresholds is the multiset of the per-call thresholds of waiting SReads,
// with its minimum readable without the lock (math.MaxUint64 when empty).
type thresholds struct {
	mu     sync.Mutex
	counts map[uint64]int
	min    atomic.Uint64
}

func (t *thresholds) add(v uint64) {
	t.mu.Lock()
	if t.counts == nil {
		t.counts = map[uint64]int{}
	}
	t.counts[v]++
	t.update()
	t.mu.Unlock()
}

func (t *thresholds) remove(v uint64) {
	t.mu.Lock()
	if t.counts[v]--; t.counts[v] <= 0 {
		delete(t.counts, v)
	}
	t.update()
	t.mu.Unlock()
}

func (t *thresholds) update() {
	m := uint64(math.MaxUint64)
	for v := range t.counts {
		m = min(m, v)
	}
	t.min.Store(m)
}

// notify wakes whoever waits for this CQ, after producers publish.
func (q *CQ) notify() {
	if w := q.w; w != nil && w.wanted() && q.ready() {
		w.wake()
	}
	if s := q.set; s != nil {
		if w := s.w; w != nil && w.wanted() && q.ready() {
			w.wake()
		}
	}
}

// progress runs the bound producers' progress functions (manual progress).
func (q *CQ) progress() {
	if hs := q.hooks.Load(); hs != nil {
		for _, p := range *hs {
			p.progress()
		}
	}
}
