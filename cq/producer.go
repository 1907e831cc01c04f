package cq

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/xdpfab/xdpfab/fi"
)

// BindAttr describes an endpoint binding to a CQ.
type BindAttr struct {
	// Caps are the endpoint's capabilities that change what the CQ
	// reports: fi.Source and fi.SourceErr (which requires fi.Source).
	// Other bits are ignored.
	Caps fi.Flags
	// Progress, if set, is called at the start of every read call on the
	// CQ and between sleeps of a blocking one: manual progress, where the
	// application's reads drive the endpoint (for example by polling its
	// socket ring and writing completions). It may be called from several
	// goroutines at once unless the CQ has Attr.SingleConsumer. Leave it nil
	// for automatic progress, where a goroutine of the endpoint writes
	// completions on its own.
	Progress func()
}

// Producer is an endpoint's binding to a CQ and the way it writes
// completions. Bind returns it; Unbind ends it. A Producer must be used by
// one goroutine at a time; producers bound to the same CQ may run
// concurrently.
//
// Completions are written in one of two ways:
//
//   - With back-pressure: Reserve claims room, Write fills it, Commit
//     publishes. A receive path reserves before it takes frames from its
//     socket ring and takes no more frames than it got room for, so a full
//     CQ leaves packets in the ring, where the kernel counts drops.
//   - Without: Push writes one completion now. If the CQ is full, it enters
//     the fatal overrun state (fi_cq(3) NOTES): readers get the valid
//     entries, then fi.EOVERRUN, and this and every later completion is
//     counted in Stats.Lost.
type Producer struct {
	q        *CQ
	caps     fi.Flags
	progress func()
	unbound  atomic.Bool

	// The open reservation, guarded by q.prodMu (held from Reserve to
	// Commit) or owned by the single producer.
	reserving bool
	start     uint64
	n, used   int
	errs      int64
}

// Bind attaches an endpoint to the CQ. While any Producer is bound, Close
// fails with fi.EBUSY. With Attr.SingleProducer a second Bind fails with
// fi.EBUSY. fi.SourceErr without fi.Source fails with fi.EINVAL.
func (q *CQ) Bind(attr BindAttr) (*Producer, error) {
	if err := q.usable("cq bind"); err != nil {
		return nil, err
	}
	if attr.Caps&fi.SourceErr != 0 && attr.Caps&fi.Source == 0 {
		return nil, fmt.Errorf("cq bind: FI_SOURCE_ERR requires FI_SOURCE: %w", fi.EINVAL)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return nil, fmt.Errorf("cq bind: closed: %w", fi.EBADF)
	}
	if q.attr.SingleProducer && q.bound > 0 {
		return nil, fmt.Errorf("cq bind: CQ opened for a single producer, which is bound: %w", fi.EBUSY)
	}
	p := &Producer{q: q, caps: attr.Caps & (fi.Source | fi.SourceErr), progress: attr.Progress}
	q.bound++
	if p.progress != nil {
		var hs []*Producer
		if old := q.hooks.Load(); old != nil {
			hs = slices.Clone(*old)
		}
		hs = append(hs, p)
		q.hooks.Store(&hs)
	}
	return p, nil
}

// Unbind detaches the endpoint. It fails with fi.EBUSY while a reservation
// is open and with fi.EBADF if already unbound. On a nil or zero Producer
// (bound to nothing) it returns nil.
func (p *Producer) Unbind() error {
	if p == nil || p.q == nil {
		return nil
	}
	if p.reserving {
		return fmt.Errorf("cq unbind: reservation open, Commit first: %w", fi.EBUSY)
	}
	q := p.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if p.unbound.Load() {
		return fmt.Errorf("cq unbind: not bound: %w", fi.EBADF)
	}
	p.unbound.Store(true)
	q.bound--
	if p.progress != nil {
		hs := slices.DeleteFunc(slices.Clone(*q.hooks.Load()), func(x *Producer) bool { return x == p })
		if len(hs) == 0 {
			q.hooks.Store(nil)
		} else {
			q.hooks.Store(&hs)
		}
	}
	return nil
}

// CQ returns the CQ the producer is bound to; nil for a nil or zero
// Producer.
func (p *Producer) CQ() *CQ {
	if p == nil {
		return nil
	}
	return p.q
}

// usable is the guard of the methods with an error result: a nil
// *Producer, or one that did not come from Bind (its zero value), is
// fi.EINVAL. The errors are built only when returned.
func (p *Producer) usable(op string) error {
	switch {
	case p == nil:
		return fmt.Errorf("%s: nil producer: %w", op, fi.EINVAL)
	case p.q == nil:
		return fmt.Errorf("%s: producer not bound (zero value, not from CQ.Bind): %w", op, fi.EINVAL)
	}
	return nil
}

var (
	errOverrun       = fmt.Errorf("cq push: completion queue overrun, completion lost: %w", fi.EOVERRUN)
	errReserveOver   = fmt.Errorf("cq reserve: completion queue overrun: %w", fi.EOVERRUN)
	errPushUnbound   = fmt.Errorf("cq push: producer unbound, completion lost: %w", fi.EBADF)
	errReserveUnbnd  = fmt.Errorf("cq reserve: producer unbound: %w", fi.EBADF)
	errReserveOpen   = fmt.Errorf("cq reserve: reservation already open, Commit first: %w", fi.EINVAL)
	errPushReserving = fmt.Errorf("cq push: reservation open, Commit first: %w", fi.EINVAL)
	errWriteNoRoom   = fmt.Errorf("cq write: no reserved slot left: %w", fi.EINVAL)
)

// Reserve claims room for up to n completions and returns how many slots it
// claimed: 0 when the CQ is full (nothing to commit then). While slots are
// claimed, the producer holds the CQ's producer lock, so it must Write and
// Commit promptly and must not Reserve or Push again before Commit. It fails
// with fi.EOVERRUN once the CQ is overrun, fi.EBADF after Unbind, and
// fi.EINVAL for a negative n or a reservation already open.
func (p *Producer) Reserve(n int) (int, error) {
	if p == nil || p.q == nil {
		return 0, p.usable("cq reserve")
	}
	if n < 0 {
		return 0, fmt.Errorf("cq reserve: %d slots: %w", n, fi.EINVAL)
	}
	if p.reserving {
		return 0, errReserveOpen
	}
	if p.unbound.Load() {
		return 0, errReserveUnbnd
	}
	if n == 0 {
		return 0, nil
	}
	q := p.q
	if !q.attr.SingleProducer {
		q.prodMu.Lock()
	}
	if q.overrun.Load() {
		if !q.attr.SingleProducer {
			q.prodMu.Unlock()
		}
		return 0, errReserveOver
	}
	t := q.tail.Load()
	free := q.size - (t - q.prodHead)
	if free < uint64(n) {
		q.prodHead = q.head.Load()
		free = q.size - (t - q.prodHead)
	}
	k := int(min(free, uint64(n)))
	if k == 0 {
		if !q.attr.SingleProducer {
			q.prodMu.Unlock()
		}
		return 0, nil
	}
	p.reserving, p.start, p.n, p.used, p.errs = true, t, k, 0, 0
	return k, nil
}

// Write fills the next reserved slot with c (copied; c may be reused). It
// fails with fi.EINVAL, using no slot, for an invalid completion or when no
// reserved slot is left.
func (p *Producer) Write(c *Completion) error {
	if p == nil || p.q == nil {
		return p.usable("cq write")
	}
	if !p.reserving || p.used == p.n {
		return errWriteNoRoom
	}
	if err := p.check(c); err != nil {
		return err
	}
	q := p.q
	if q.fill(&q.ring[(p.start+uint64(p.used))&q.mask], c, p.caps) {
		p.errs++
	}
	p.used++
	return nil
}

// Commit publishes the completions written since Reserve, returns their
// number, releases the unused reserved slots and the producer lock, and
// wakes waiting readers if the wait condition now holds. Without an open
// reservation (or on a nil Producer) it does nothing.
func (p *Producer) Commit() int {
	if p == nil || !p.reserving {
		return 0
	}
	q := p.q
	n := p.used
	p.reserving = false
	if n > 0 {
		if p.errs > 0 {
			q.errQueued.Add(p.errs)
		}
		q.tail.Store(p.start + uint64(n))
	}
	if !q.attr.SingleProducer {
		q.prodMu.Unlock()
	}
	if n > 0 {
		q.notify()
	}
	return n
}

// Push writes one completion without back-pressure. If the CQ is full it
// becomes overrun (fatal): Push counts the completion in Stats.Lost and
// fails with fi.EOVERRUN, as it does for every later one. It fails with
// fi.EINVAL, changing nothing, for an invalid completion or an open
// reservation, and with fi.EBADF (counting the completion as lost) after
// Unbind.
func (p *Producer) Push(c *Completion) error {
	if p == nil || p.q == nil {
		return p.usable("cq push")
	}
	if err := p.check(c); err != nil {
		return err
	}
	if p.reserving {
		return errPushReserving
	}
	q := p.q
	if p.unbound.Load() {
		q.lost.Add(1)
		return errPushUnbound
	}
	if !q.attr.SingleProducer {
		q.prodMu.Lock()
	}
	if q.overrun.Load() {
		q.lost.Add(1)
		if !q.attr.SingleProducer {
			q.prodMu.Unlock()
		}
		return errOverrun
	}
	t := q.tail.Load()
	if t-q.prodHead >= q.size {
		q.prodHead = q.head.Load()
		if t-q.prodHead >= q.size {
			q.overrun.Store(true)
			q.lost.Add(1)
			if !q.attr.SingleProducer {
				q.prodMu.Unlock()
			}
			q.notify()
			return errOverrun
		}
	}
	if q.fill(&q.ring[t&q.mask], c, p.caps) {
		q.errQueued.Add(1)
	}
	q.tail.Store(t + 1)
	if !q.attr.SingleProducer {
		q.prodMu.Unlock()
	}
	q.notify()
	return nil
}

// check validates a completion before it uses any slot.
func (p *Producer) check(c *Completion) error {
	switch {
	case c == nil:
		return fmt.Errorf("cq write: nil completion: %w", fi.EINVAL)
	case c.Err < 0:
		return fmt.Errorf("cq write: negative err %d, want a positive errno: %w", int(c.Err), fi.EINVAL)
	case c.Len < 0 || c.OLen < 0:
		return fmt.Errorf("cq write: negative length (len %d, olen %d): %w", c.Len, c.OLen, fi.EINVAL)
	case c.Err == 0 && (c.OLen != 0 || c.ProvErrno != 0 || len(c.ErrData) != 0):
		return fmt.Errorf("cq write: olen, prov_errno or err_data on a successful completion: %w", fi.EINVAL)
	case c.Err == 0 && c.SrcUnknown && p.caps&fi.SourceErr != 0 && len(c.SrcRaw) == 0:
		return fmt.Errorf("cq write: unknown source without its raw address (FI_SOURCE_ERR): %w", fi.EINVAL)
	}
	return nil
}

// fill writes c into s as seen by an endpoint with caps, and reports
// whether s became an error entry. This is where FI_SOURCE and
// FI_SOURCE_ERR apply.
func (q *CQ) fill(s *slot, c *Completion, caps fi.Flags) bool {
	s.e = c.Entry
	s.src = fi.AddrNotAvail
	if caps&fi.Source != 0 && !c.SrcUnknown {
		s.src = c.Src
	}
	err, prov, data := c.Err, c.ProvErrno, c.ErrData
	if err == 0 {
		if !c.SrcUnknown || caps&fi.SourceErr == 0 {
			s.isErr = false
			return false
		}
		// The data arrived; its sender is not in the AV. The entry
		// becomes an error whose err_data is the sender's address.
		err, prov, data = fi.EADDRNOTAVAIL, int(fi.EADDRNOTAVAIL), c.SrcRaw
	}
	ei := s.ei
	if ei == nil {
		ei = new(errInfo)
		s.ei = ei
	}
	ei.err, ei.provErrno, ei.olen = err, prov, c.OLen
	ei.data = append(ei.data[:0], data...)
	s.isErr = true
	return true
}
