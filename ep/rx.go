package ep

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wire"
)

// anySource is the index part of a receive source that accepts any peer
// (of the group in the high bits): fi.GroupAddr(AnySource, g).
const AnySource fi.Addr = 0xffffffff

// rxCtx is one receive context: its sockets (one per queue), its posted
// receives and the frames that arrived before a matching receive.
type rxCtx struct {
	ep    *Endpoint
	socks []*dataplane.Socket
	cq    *cq.Producer

	mu     optMutex
	msgs   []recvOp // posted FI_MSG receives, in order
	tagged []recvOp // posted FI_TAGGED receives, in order
	parked []frameRef
	// stale: a parked message may match a posted receive (a drain ran
	// out of CQ room). While it is false none does, so a receive posted
	// next is the only one to compare them with.
	stale  bool
	posts  uint64     // receives posted (recvOp.seq)
	refill [][]uint64 // per queue: frames to give back to its fill ring
	// idleCalls counts progress calls since one took a frame (idleFlush).
	idleCalls int
	// kept, per queue, is how many of refill's frames the device counts
	// as kept back by this context (mayKeep).
	kept  []int
	descs []dataplane.Desc
	// A jumbo frame (AF_XDP multi-buffer) is a chain of descriptors:
	// partial holds, per queue, those of a chain whose last descriptor
	// is still on the ring; bufs are free gather buffers (frameRef.data).
	partial [][]dataplane.Desc
	bufs    [][]byte
	raw     [fi.SockaddrIn6Len]byte
}

type recvOp struct {
	buf         []byte
	off         int // multi-receive: bytes used
	multi       bool
	src         fi.Addr // fi.AddrUnspec: any
	tag, ignore uint64
	ctx         any
	quiet       bool   // selective completion without fi.Completion: errors only
	seq         uint64 // the context's count of posted receives when posted
}

// frameRef is a received frame the endpoint still holds.
type frameRef struct {
	addr  uint64 // descriptor address
	len   uint32
	q     int
	claim any // FI_PEEK|FI_CLAIM's context: kept for its FI_CLAIM receive only
	// data, for a jumbo frame, is the whole frame gathered from its chain
	// of descriptors (the first, at addr, keeps the metadata in front of
	// it and is held; the others went back to the fill ring). nil: the
	// frame is the descriptor's.
	data []byte
	key  parkKey // a parked frame's: what matching compares
	// gone: parked while its AV entry was removed, it is from an unknown
	// source for good (frameMsg), even should the entry come back.
	gone bool
}

// parkKey is what matching compares of a parked message, kept when it is
// parked so that a receive posted later is compared with every parked
// message without parsing their frames again.
type parkKey struct {
	tag    uint64
	group  uint32
	src    fi.Addr // the fi_addr it arrived from (known)
	tagged bool
	known  bool
}

// parkFloor is how many unmatched messages a receive context may always
// keep, whatever the other contexts of its device hold (park).
const parkFloor = 2

// RxContext is one receive context of an endpoint (fi_rx_context): Recv,
// TRecv and Cancel act on it. Endpoint's own methods act on context 0.
type RxContext struct{ c *rxCtx }

// Rx returns receive context i, or nil when there is none (also on a nil
// Endpoint). The methods of a nil *RxContext fail with fi.EINVAL.
func (e *Endpoint) Rx(i int) *RxContext {
	if e == nil || i < 0 || i >= len(e.rx) {
		return nil
	}
	return &RxContext{e.rx[i]}
}

// Recv posts buf to receive one message from src (fi.AddrUnspec: any
// source; a specific fi_addr needs fi.DirectedRecv; fi.GroupAddr(AnySource,
// g) any source of peer group g) with context ctx (fi_recv).
func (e *Endpoint) Recv(buf []byte, src fi.Addr, ctx any) error {
	if e == nil || len(e.rx) == 0 {
		return e.rxErr("ep recv")
	}
	return e.rx[0].post(recvOp{buf: buf, src: src, ctx: ctx, quiet: e.rx[0].quiet(e.opComp())}, false)
}

// RecvMsg posts buf with flags (fi_recvmsg): fi.Completion reports its
// success on a selective-completion CQ (Attr.SelectiveCompletion);
// fi.MultiRecv makes it a multi-receive buffer, filled by consecutive messages until less than
// Attr.MinMultiRecv bytes remain; the completion that releases it has
// fi.MultiRecv set.
func (e *Endpoint) RecvMsg(buf []byte, src fi.Addr, ctx any, flags fi.Flags) error {
	if e == nil || len(e.rx) == 0 {
		return e.rxErr("ep recvmsg")
	}
	return e.Rx(0).RecvMsg(buf, src, ctx, flags)
}

// TRecv posts buf to receive a tagged message whose tag matches tag in
// every bit not set in ignore (fi_trecv).
func (e *Endpoint) TRecv(buf []byte, src fi.Addr, tag, ignore uint64, ctx any) error {
	if e == nil || len(e.rx) == 0 {
		return e.rxErr("ep trecv")
	}
	return e.rx[0].post(recvOp{buf: buf, src: src, tag: tag, ignore: ignore, ctx: ctx, quiet: e.rx[0].quiet(e.opComp())}, true)
}

// Cancel cancels the posted receive with context ctx (fi_cancel): it
// completes with fi.ECANCELED. Contexts are compared with ==; a context
// whose type is not comparable never matches.
func (e *Endpoint) Cancel(ctx any) error {
	if e == nil || len(e.rx) == 0 {
		return e.rxErr("ep cancel")
	}
	return e.rx[0].cancel(ctx)
}

// rxErr is why op cannot act on context 0: the endpoint is nil or zero, or
// (never after Open or Adopt) it has no receive context.
func (e *Endpoint) rxErr(op string) error {
	if err := e.usable(op); err != nil {
		return err
	}
	return errNoRxCtx(op)
}

// errNoRxCtx is what the methods of a nil *RxContext (Rx's answer for a
// context that does not exist) and of a zero one fail with.
func errNoRxCtx(op string) error {
	return fmt.Errorf("%s: no such receive context (nil or zero RxContext; Endpoint.Rx returns nil for a missing one): %w", op, fi.EINVAL)
}

// Recv is Endpoint.Recv on this context.
func (r *RxContext) Recv(buf []byte, src fi.Addr, ctx any) error {
	if r == nil || r.c == nil {
		return errNoRxCtx("ep recv")
	}
	return r.c.post(recvOp{buf: buf, src: src, ctx: ctx, quiet: r.c.quiet(r.c.ep.opComp())}, false)
}

// RecvMsg is Endpoint.RecvMsg on this context.
func (r *RxContext) RecvMsg(buf []byte, src fi.Addr, ctx any, flags fi.Flags) error {
	if r == nil || r.c == nil {
		return errNoRxCtx("ep recvmsg")
	}
	if flags&^(fi.MultiRecv|fi.Completion) != 0 {
		return fmt.Errorf("ep recvmsg: flags %v: %w", flags&^(fi.MultiRecv|fi.Completion), fi.EBADFLAGS)
	}
	return r.c.post(recvOp{buf: buf, src: src, ctx: ctx, multi: flags&fi.MultiRecv != 0, quiet: r.c.quiet(flags)}, false)
}

// TRecv is Endpoint.TRecv on this context.
func (r *RxContext) TRecv(buf []byte, src fi.Addr, tag, ignore uint64, ctx any) error {
	if r == nil || r.c == nil {
		return errNoRxCtx("ep trecv")
	}
	return r.c.post(recvOp{buf: buf, src: src, tag: tag, ignore: ignore, ctx: ctx, quiet: r.c.quiet(r.c.ep.opComp())}, true)
}

// Cancel is Endpoint.Cancel on this context.
func (r *RxContext) Cancel(ctx any) error {
	if r == nil || r.c == nil {
		return errNoRxCtx("ep cancel")
	}
	return r.c.cancel(ctx)
}

// complete writes a receive's completion into the open reservation,
// unless the receive asked for none (quiet) and it is no error (a
// truncation, or an unknown source under FI_SOURCE_ERR).
func (c *rxCtx) complete(op *recvOp, comp *cq.Completion) {
	if !op.quiet || comp.Err != 0 || comp.SrcUnknown && c.ep.attr.Caps&fi.SourceErr != 0 {
		c.cq.Write(comp)
	}
}

// quiet reports whether a receive posted with flags reports only errors:
// the context's CQ is bound with selective completion and flags lack
// fi.Completion.
func (c *rxCtx) quiet(flags fi.Flags) bool {
	return c.ep.attr.SelectiveCompletion&fi.Recv != 0 && flags&fi.Completion == 0
}

// check validates a receive before it is posted (or peeks).
func (c *rxCtx) check(op recvOp, tagged bool) error {
	e := c.ep
	switch {
	case e.closed.Load():
		return fmt.Errorf("ep recv: endpoint closed: %w", fi.EOPBADSTATE)
	case tagged && e.attr.Caps&fi.Tagged == 0, !tagged && e.attr.Caps&fi.Msg == 0:
		return fmt.Errorf("ep recv: endpoint lacks the capability: %w", fi.EOPNOTSUPP)
	case op.src != fi.AddrUnspec && op.src&AnySource != AnySource && e.attr.Caps&fi.DirectedRecv == 0:
		return fmt.Errorf("ep recv: a source address needs FI_DIRECTED_RECV: %w", fi.EINVAL)
	case op.multi && len(op.buf) < e.attr.MinMultiRecv:
		return fmt.Errorf("ep recv: multi-receive buffer of %d bytes, below %d: %w", len(op.buf), e.attr.MinMultiRecv, fi.EINVAL)
	}
	return nil
}

func (c *rxCtx) post(op recvOp, tagged bool) error {
	e := c.ep
	if err := c.check(op, tagged); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.closed.Load() { // Close may have run since the check above
		return fmt.Errorf("ep recv: endpoint closed: %w", fi.EOPBADSTATE)
	}
	if len(c.msgs)+len(c.tagged) >= e.attr.MaxPosted {
		return fmt.Errorf("ep recv: %d receives posted: %w", len(c.msgs)+len(c.tagged), fi.EAGAIN)
	}
	q := &c.msgs
	if tagged {
		q = &c.tagged
	}
	c.posts++
	op.seq = c.posts
	*q = append(*q, op)
	// Messages that arrived before this receive are matched now: with this
	// receive only, unless an earlier drain left some behind.
	if len(c.parked) > 0 {
		only := op.seq
		if c.stale {
			only = 0
		}
		if err := c.drainParked(only); err != nil {
			*q = (*q)[:len(*q)-1]
			return err
		}
	}
	e.shmPosted(c, op.seq) // and same-host messages (shm.go)
	return nil
}

func (c *rxCtx) cancel(ctx any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ep.closed.Load() {
		return fmt.Errorf("ep cancel: endpoint closed: %w", fi.EOPBADSTATE)
	}
	for _, q := range []*[]recvOp{&c.msgs, &c.tagged} {
		for i := range *q {
			if !sameContext((*q)[i].ctx, ctx) {
				continue
			}
			flags := fi.Recv | fi.Msg
			if q == &c.tagged {
				flags = fi.Recv | fi.Tagged
			}
			if n, err := c.cq.Reserve(1); err != nil || n == 0 {
				return fmt.Errorf("ep cancel: receive CQ full: %w", fi.EAGAIN)
			}
			c.cq.Write(&cq.Completion{Entry: cq.Entry{OpContext: ctx, Flags: flags}, Src: fi.AddrNotAvail, Err: fi.ECANCELED})
			c.cq.Commit()
			removeOp(q, i)
			return nil
		}
	}
	return fmt.Errorf("ep cancel: no posted receive with that context: %w", fi.ENOENT)
}

func sameContext(a, b any) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// progress takes frames off the context's RX rings and delivers them. It
// dequeues no more frames than it has room for, both in the CQ and for
// parking unmatched ones, so a slow reader leaves frames in the ring where
// the kernel counts drops.
//
// It reports blocked when it left frames behind for want of room: polling
// the sockets for input would then return at once, again and again.
func (c *rxCtx) progress() (blocked bool) {
	if !c.mu.TryLock() {
		return false // another goroutine is at it
	}
	defer c.mu.Unlock()
	// Received frames go back to the fill ring a batch at a time (up to
	// holdLimit per queue), once that many wait, off this message's path;
	// a larger batch goes back at once, and so does everything after a
	// run of calls that found nothing (an idle context keeps none).
	lim := c.holdLimit()
	if c.idleCalls >= idleFlush {
		c.flush()
	} else {
		c.flushOver(max(lim-1, 0))
	}
	c.idleCalls++
	defer c.flushOver(lim)
	if c.ep.closed.Load() {
		return false
	}
	if c.stale {
		c.drainParked(0)
		if c.stale {
			// Still out of CQ room for kept messages a posted receive
			// may match: new frames wait behind them. A CQ reader on
			// another goroutine may make room between the drain and
			// take, and take would then match a newer message first.
			return true
		}
	}
	c.ep.shmStale(c)
	for q, s := range c.socks {
		got, full := c.take(q, s)
		if got == 0 && !full && s.Wake() {
			// The system call ran outside any CQ reservation, which
			// would hold off the CQ's other producers.
			got, full = c.take(q, s)
		}
		if got > 0 {
			c.idleCalls = 0
		}
		if full {
			return true
		}
	}
	return false
}

// take delivers (or parks) what queue q's ring holds, as far as the CQ
// allows, under one CQ reservation. full reports that there was no room to
// take anything. Parking never stops it (park makes room): a context whose
// parked messages no receive will ever match still takes the ring's.
func (c *rxCtx) take(q int, s *dataplane.Socket) (got int, full bool) {
	if !s.Ready() {
		return 0, false // no CQ reservation (its lock) for an empty ring
	}
	n, err := c.cq.Reserve(len(c.descs))
	if err != nil || n == 0 {
		return 0, true
	}
	if d := c.ep.dev; d.share != nil {
		got = s.TakeShared(d.share, d.slot, c.descs[:n])
	} else {
		got = s.Take(c.descs[:n])
	}
	inFrame(c.descs[:got], len(c.partial[q]) == 0)
	for _, d := range c.descs[:got] {
		c.ep.umem.Prefetch(d, wire.MetaLen, rxPrefetch)
	}
	if c.ep.trace != nil && got > 0 {
		c.ep.traceRx(c.descs[got-1])
	}
	for _, d := range c.descs[:got] {
		f := frameRef{addr: d.Addr, len: d.Len, q: q}
		if d.Options&dataplane.PktContd != 0 || len(c.partial[q]) > 0 {
			c.partial[q] = append(c.partial[q], d)
			if d.Options&dataplane.PktContd != 0 {
				continue // the chain goes on
			}
			f = c.gather(q)
		}
		if !c.deliver(&f, false) {
			c.park(f)
		}
	}
	c.cq.Commit()
	return got, false
}

// inFrame moves each packet's first descriptor past the metadata the XDP
// program pushed in front of the packet (docs/platform.md#xdp-metadata): from here
// on a descriptor is the packet, and UMEM.Meta(d.Addr, wire.MetaLen) its
// metadata, the bytes before it. first says descs[0] starts a packet (no
// chain of its queue is open); a descriptor after one with PktContd
// continues that packet and has no metadata. A first descriptor shorter
// than the metadata (no frame of xdpfab's program) becomes empty, which
// frameMsg refuses.
func inFrame(descs []dataplane.Desc, first bool) {
	for i := range descs {
		d := &descs[i]
		if first {
			if d.Len >= wire.MetaLen {
				d.Addr += wire.MetaLen
				d.Len -= wire.MetaLen
			} else {
				d.Len = 0
			}
		}
		first = d.Options&dataplane.PktContd == 0
	}
}

// park keeps frame f, which no posted receive matches, for one posted
// later. A context keeps at most parkLimit, and at most an equal share of
// its device's parkBudget among the device's contexts (at least
// parkFloor), so that the frames they keep leave the fill rings enough and
// one context flooded with messages nobody receives leaves the others
// their share; nor more than parkFloor while the device's contexts
// together hold the budget (shares change as endpoints come and go); and
// the device's contexts together park at most half a queue's fill share
// from one queue (parkedQ). Past a limit, the oldest unclaimed frame is
// dropped to make room (of f's queue for the last limit), or f itself
// when every kept frame is claimed (FI_CLAIM) or, for the last limit, is
// of another queue. Dropping the oldest
// rather than the newest means messages no receive ever matches cannot
// keep the ones that arrive after them out. Each drop is counted
// (RecvStats.ParkDropped). The caller holds c.mu.
func (c *rxCtx) park(f frameRef) {
	d := c.ep.dev
	victim := func(p frameRef) bool { return p.claim == nil }
	var over bool
	if pq := d.parkedQ; pq != nil {
		// About half the queue's fill share parked (on a device of several
		// queues one flow can reach that long before the device's budget;
		// contexts of a locked device may pass the check together): more
		// would empty the queue's fill ring, and with no frame arriving no
		// drop would ever free one. The oldest of the queue's parked
		// frames here makes room. A context holding fewer than parkFloor
		// parks anyway while seven eighths of the share are not parked:
		// the others' frames cannot take its floor away.
		n := int(pq[f.q].Load())
		if over = n >= d.fillShare/2 && (len(c.parked) >= parkFloor || n >= d.fillShare-d.fillShare/8); over {
			victim = func(p frameRef) bool { return p.claim == nil && p.q == f.q }
		}
	}
	if !over {
		limit := c.ep.parkLimit
		if d.parkBudget > 0 {
			limit = min(limit, max(parkFloor, d.parkBudget/max(int(d.rxCtxs.Load()), 1)))
		}
		over = len(c.parked) >= limit ||
			d.parkBudget > 0 && d.parked.Load() >= int64(d.parkBudget) && len(c.parked) >= parkFloor
	}
	if over {
		c.ep.parkDropped.Add(1)
		i := slices.IndexFunc(c.parked, victim)
		if i < 0 {
			c.release(f)
			return
		}
		c.unpark(c.parked[i])
		c.release(c.parked[i])
		if i == 0 {
			c.parked[0] = frameRef{}
			c.parked = c.parked[1:]
		} else {
			c.parked = slices.Delete(c.parked, i, i+1)
		}
	}
	c.parked = append(c.parked, f)
	c.parkedOne(f)
}

// parkedOne counts a frame the context parked, on its device and its
// queue; unpark counts one that left the parked frames.
func (c *rxCtx) parkedOne(f frameRef) {
	d := c.ep.dev
	d.parked.Add(1)
	if d.parkedQ != nil {
		d.parkedQ[f.q].Add(1)
	}
}

func (c *rxCtx) unpark(f frameRef) {
	d := c.ep.dev
	d.parked.Add(-1)
	if d.parkedQ != nil {
		d.parkedQ[f.q].Add(-1)
	}
}

// rxPrefetch is how much of a received packet take prefetches: headers
// (up to 14+40+8 bytes), the xdpfab header and the start of the payload.
const rxPrefetch = 256

// gather makes one frame of queue q's completed chain of descriptors
// (c.partial[q]): the frame's bytes in a gather buffer, the first
// descriptor held for its metadata, the others given back. One copy of
// the frame more than a frame in one descriptor costs; the buffers are
// reused, so it allocates only until the context has as many as it holds
// jumbo frames at once.
func (c *rxCtx) gather(q int) frameRef {
	chain := c.partial[q]
	u := c.ep.umem
	var buf []byte
	if n := len(c.bufs); n > 0 {
		buf, c.bufs = c.bufs[n-1], c.bufs[:n-1]
	}
	for i, d := range chain {
		buf = append(buf, u.Packet(d)...)
		if i > 0 {
			c.refill[q] = append(c.refill[q], u.FrameAddr(d.Addr))
		}
	}
	c.partial[q] = chain[:0]
	return frameRef{addr: chain[0].Addr, len: chain[0].Len, q: q, data: buf}
}

// drainParked delivers parked frames that now match a posted receive, in
// arrival order. only, when not 0, is the receive just posted (its seq)
// while no parked frame matched another: the frames are compared with it
// alone, by their keys, so posting costs one comparison per parked frame,
// not one per parked frame and posted receive.
func (c *rxCtx) drainParked(only uint64) error {
	if len(c.parked) == 0 {
		c.stale = false
		return nil
	}
	n, err := c.cq.Reserve(len(c.parked))
	if err != nil {
		return fmt.Errorf("ep recv: %w", err)
	}
	kept := c.parked[:0]
	short := false
	for i := range c.parked {
		f := c.parked[i]
		if n == 0 {
			// Out of CQ room: what is left may match a posted receive.
			kept = append(kept, c.parked[i:]...)
			short = true
			break
		}
		if f.claim != nil {
			kept = append(kept, f)
			continue
		}
		if only != 0 {
			op, tagged := c.postedSeq(only)
			if op == nil {
				kept = append(kept, c.parked[i:]...) // it took what it could
				break
			}
			if !keyMatches(op, tagged, f.key) {
				kept = append(kept, f)
				continue
			}
		}
		if c.deliver(&f, true) {
			n--
			c.unpark(f)
		} else {
			kept = append(kept, f)
		}
	}
	if short {
		c.stale = true
	} else if only == 0 {
		c.stale = false
	}
	clear(c.parked[len(kept):])
	c.parked = kept
	c.cq.Commit()
	c.flush()
	return nil
}

// postedSeq finds the posted receive numbered seq, which drainParked's
// callers posted last: the last of its queue, or gone.
func (c *rxCtx) postedSeq(seq uint64) (*recvOp, bool) {
	if n := len(c.msgs); n > 0 && c.msgs[n-1].seq == seq {
		return &c.msgs[n-1], false
	}
	if n := len(c.tagged); n > 0 && c.tagged[n-1].seq == seq {
		return &c.tagged[n-1], true
	}
	return nil, false
}

// keyMatches reports whether a parked message with key k matches posted
// receive op (of the tagged queue or not), as match decides.
func keyMatches(op *recvOp, tagged bool, k parkKey) bool {
	return tagged == k.tagged && opMatches(op, tagged, k.tag, k.group, k.src, k.known)
}

// deliver matches one frame to a posted receive, copies it and writes its
// completion into the open reservation. It returns true when the frame is
// done with: delivered, or dropped (counted) because no receive can ever
// take it (an operation the endpoint lacks the capability for, or, for a
// parked frame, a source that left the AV under DropUnknown); false,
// keeping the frame and setting f.key, when no posted receive matches.
// parked says f was parked (frameMsg checks its source again).
func (c *rxCtx) deliver(f *frameRef, parked bool) bool {
	var h wire.Hdr
	var comp msgComp
	payload, ok := c.frameMsg(f, parked, &h, &comp)
	f.gone = f.gone || comp.gone
	if !ok {
		c.ep.unreadable.Add(1) // not our program's frame: never hold it
		c.release(*f)
		return true
	}
	tagged := h.Op == wire.OpTagged
	if !c.ep.takes(h.Op) || comp.gone && c.ep.dropsUnknown() {
		c.ep.unmatchable.Add(1)
		c.release(*f)
		return true
	}
	q := &c.msgs
	if tagged {
		q = &c.tagged
	}
	i := c.match(*q, tagged, h, comp.matchSrc, comp.known)
	if i < 0 {
		f.key = parkKey{tag: h.Tag, group: h.Group, src: comp.matchSrc, tagged: tagged, known: comp.known}
		return false
	}
	c.fill(&(*q)[i], q, i, payload, &comp.Completion)
	c.release(*f)
	return true
}

// takes reports whether the endpoint receives messages of operation op at
// all: an untagged message needs fi.Msg, a tagged one fi.Tagged (no
// receive of the other kind can be posted: check refuses it).
func (e *Endpoint) takes(op uint8) bool {
	if op == wire.OpTagged {
		return e.attr.Caps&fi.Tagged != 0
	}
	return e.attr.Caps&fi.Msg != 0
}

// dropsUnknown reports whether the endpoint drops messages from sources
// its AV does not hold, as the XDP program does for it.
func (e *Endpoint) dropsUnknown() bool {
	return e.attr.DropUnknown && e.attr.Caps&fi.SourceErr == 0
}

// msgComp is a message's completion before a receive is chosen for it,
// with what matching needs.
type msgComp struct {
	cq.Completion
	matchSrc fi.Addr // the fi_addr directed receives compare
	known    bool
	gone     bool // parked while its AV entry went: now from an unknown source
}

// frameMsg parses a frame the XDP program redirected: its header, its
// payload and its completion's fields from the metadata (source, flags,
// tag, CQ data). ok false: not a frame of this endpoint.
//
// For a parked frame (parked), the AV entry the program found may have
// been removed since, and its index given to another peer (fi_av_remove,
// then an insert takes the lowest free index): the frame counts as from a
// known source only while the entry at its fi_addr still holds its
// source address; once it did not, it is from an unknown source for good
// (comp.gone, then frameRef.gone), as a datagram that arrives after the
// remove is.
//
// The header goes to h and the completion's fields to comp, which the
// caller has zeroed: returned by value, they (some 220 bytes) cost the
// receive path a copy per message.
func (c *rxCtx) frameMsg(f *frameRef, parked bool, h *wire.Hdr, comp *msgComp) (payload []byte, ok bool) {
	u := c.ep.umem
	pkt := f.data
	if pkt == nil {
		pkt = u.Packet(dataplane.Desc{Addr: f.addr, Len: f.len})
	}
	var m wire.Meta
	ok = m.Decode(u.Meta(f.addr, wire.MetaLen))
	if ok && m.EpID == c.ep.id && int(m.HdrOff)+wire.HdrLen+int(m.PayloadLen) <= len(pkt) {
		ok = h.Decode(pkt[m.HdrOff:])
	} else {
		ok = false
	}
	if !ok {
		return nil, false
	}
	payload = pkt[int(m.HdrOff)+wire.HdrLen:][:m.PayloadLen]
	comp.known = m.Flags&wire.MetaKnown != 0
	if parked && comp.known && (f.gone || !c.ep.stillAt(pkt, m)) {
		comp.known, comp.gone = false, true
	}
	comp.matchSrc = fi.Addr(m.FiAddr)
	comp.Src = fi.Addr(m.FiAddr)
	if m.Flags&wire.MetaUserID != 0 {
		comp.Src = fi.Addr(m.UserID)
	}
	if !comp.known {
		comp.Src, comp.SrcUnknown = fi.AddrNotAvail, true
		comp.SrcRaw, _ = wire.AppendSourceSockaddr(c.raw[:0], pkt, m)
	}
	msgFlags(&comp.Completion, h)
	return payload, true
}

// msgFlags sets a received message's completion flags, tag and CQ data.
func msgFlags(comp *cq.Completion, h *wire.Hdr) {
	comp.Flags = fi.Recv | fi.Msg
	if h.Op == wire.OpTagged {
		comp.Flags = fi.Recv | fi.Tagged
		comp.Tag = h.Tag
	}
	if h.Flags&wire.FlagCQData != 0 {
		comp.Flags |= fi.RemoteCQData
		comp.Data = h.CQData
	}
}

// fill copies payload into posted receive op (number i of queue q),
// completes it (comp has the message's fields) and removes it unless it
// is a multi-receive buffer with room left. The caller holds c.mu and a
// CQ reservation.
func (c *rxCtx) fill(op *recvOp, q *[]recvOp, i int, payload []byte, comp *cq.Completion) {
	n := copy(op.buf[op.off:], payload)
	comp.OpContext, comp.Len = op.ctx, n
	if n < len(payload) {
		comp.Err, comp.OLen = fi.ETRUNC, len(payload)-n
	}
	done := true
	if op.multi {
		comp.Buf = op.buf[op.off : op.off+n]
		op.off += n
		if done = len(op.buf)-op.off < c.ep.attr.MinMultiRecv; done {
			comp.Flags |= fi.MultiRecv
		}
	}
	c.complete(op, comp)
	if done {
		removeOp(q, i)
	}
}

// removeOp removes posted receive i. The first is the common case (FIFO
// matching) and costs a reslice; others shift the ones after them. An
// emptied queue keeps its array, so posting again does not allocate.
func removeOp(q *[]recvOp, i int) {
	(*q)[i] = recvOp{}
	if i == 0 {
		if len(*q) == 1 {
			*q = (*q)[:0]
		} else {
			*q = (*q)[1:]
		}
		return
	}
	*q = append((*q)[:i], (*q)[i+1:]...)
}

// match returns the first posted receive the message matches.
func (c *rxCtx) match(ops []recvOp, tagged bool, h wire.Hdr, src fi.Addr, known bool) int {
	for i := range ops {
		if opMatches(&ops[i], tagged, h.Tag, h.Group, src, known) {
			return i
		}
	}
	return -1
}

// opMatches reports whether a message (its tag when tagged, its group, its
// source's fi_addr when known) matches posted receive op.
func opMatches(op *recvOp, tagged bool, tag uint64, group uint32, src fi.Addr, known bool) bool {
	if tagged && (op.tag|op.ignore) != (tag|op.ignore) {
		return false
	}
	g, idx := uint32(0), AnySource
	if op.src != fi.AddrUnspec {
		g, idx = uint32(op.src>>32), op.src&AnySource
	}
	if group != g {
		return false
	}
	return idx == AnySource || known && src == idx
}

// stillAt reports whether the AV entry at a received frame's fi_addr
// (metadata m) still holds the frame's source address. A lock-free read
// of the AV's table (LookupAddr).
func (e *Endpoint) stillAt(pkt []byte, m wire.Meta) bool {
	src, ok := wire.Source(pkt, m)
	return ok && e.stillHolds(fi.Addr(m.FiAddr), src)
}

// stillHolds reports whether the AV entry at fa holds addr: a message that
// waited while the entry at its fi_addr was removed (and the index maybe
// given to another peer) no longer counts as from fa.
func (e *Endpoint) stillHolds(fa fi.Addr, addr netip.AddrPort) bool {
	a, err := e.av.LookupAddr(fa)
	return err == nil && a == addr
}

// drain gives back every frame the context holds: parked ones and those
// still on its sockets' receive rings. The caller holds c.mu and no
// redirect reaches the sockets any more.
func (c *rxCtx) drain() {
	for _, f := range c.parked {
		c.unpark(f)
		c.release(f)
	}
	c.parked = nil
	for q, p := range c.partial {
		for _, d := range p {
			c.release(frameRef{addr: d.Addr, len: d.Len, q: q})
		}
		c.partial[q] = p[:0]
	}
	for q, s := range c.socks {
		for n := s.Receive(c.descs); n > 0; n = s.Receive(c.descs) {
			for _, d := range c.descs[:n] {
				c.release(frameRef{addr: d.Addr, len: d.Len, q: q})
			}
		}
	}
	c.flush()
}

// release queues a frame for its queue's fill ring; flush hands the queued
// frames over, one ring update per queue. The caller holds c.mu.
func (c *rxCtx) release(f frameRef) {
	c.refill[f.q] = append(c.refill[f.q], c.ep.umem.FrameAddr(f.addr))
	if f.data != nil {
		c.bufs = append(c.bufs, f.data[:0])
	}
}

// lazyRefill bounds how many received frames per queue a receive context
// keeps back from its fill ring before it gives them back in one ring
// update: the refill (the ring's producer index and entries, lines the
// kernel's receive path reads, and for a sharing domain its fill lock)
// then costs a fraction of one per message, and comes at the start of a
// later progress call, not between a message's completion and the CQ read
// that returns it. What a context may keep is holdLimit.
const lazyRefill = 16

// idleFlush is how many progress calls in a row that took nothing make a
// context give back every frame it keeps: an idle context holds none.
const idleFlush = 64

// holdLimit is how many frames per queue the context may keep back: a
// sharing domain's endpoint what the agent counted in its share of the
// pool (ShareInfo.Lazy), others lazyRefill, or for a small UMEM an eighth
// of what each queue's fill ring was given; and all contexts of a device
// together keep no more than that eighth per queue (mayKeep): a context
// that stops being progressed holds its part until it is again (idleFlush
// counts calls), and the others refill at once meanwhile.
func (c *rxCtx) holdLimit() int {
	d := c.ep.dev
	if d.share != nil {
		return d.shareLazy
	}
	return min(lazyRefill, d.fillShare/8)
}

// mayKeep records that the context keeps n frames of queue q back, and
// reports false (recording none) when that would take the device's
// contexts together past an eighth of the queue's fill-ring share: so
// many contexts cannot take a queue's frames away, however many there
// are. A sharing domain's endpoint keeps what its share counts.
func (c *rxCtx) mayKeep(q, n int) bool {
	d := c.ep.dev
	if d.share != nil {
		return true
	}
	delta := n - c.kept[q]
	if delta == 0 {
		return true
	}
	if int(d.heldBack[q].Add(int32(delta))) > d.fillShare/8 {
		d.heldBack[q].Add(-int32(n))
		c.kept[q] = 0
		return false
	}
	c.kept[q] = n
	return true
}

func (c *rxCtx) flush() { c.flushOver(0) }

// flushOver refills each queue for which more than keep frames wait.
func (c *rxCtx) flushOver(keep int) {
	for q, addrs := range c.refill {
		if n := len(addrs); n > keep || n > 0 && !c.mayKeep(q, n) {
			c.ep.dev.refill(q, addrs)
			c.refill[q] = addrs[:0]
			if k := c.kept[q]; k != 0 {
				c.ep.dev.heldBack[q].Add(-int32(k))
				c.kept[q] = 0
			}
		}
	}
}
