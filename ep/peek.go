package ep

import (
	"fmt"
	"reflect"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wire"
)

// Peeking at unexpected messages (fi_tagged(3) FI_PEEK, FI_CLAIM,
// FI_DISCARD). A tagged message that arrives before a matching receive is
// parked by the endpoint (a frame of its UMEM, or a copy of a same-host
// message), within the context's parking limit; these calls look at and
// take those.

const trecvFlags = fi.Completion | fi.Peek | fi.Claim | fi.Discard

// TRecvMsg posts a tagged receive with flags (fi_trecvmsg):
//   - fi.Completion: report success on a selective-completion CQ.
//   - fi.Peek: do not post; look for an unexpected message matching tag,
//     ignore and src and report it (length, tag, CQ data, source) without
//     taking it, or an error completion ENOMSG if there is none. buf is
//     not used.
//   - fi.Peek|fi.Claim: the same, and a message found is kept for the
//     receive that names the same ctx with fi.Claim: no other receive
//     matches it.
//   - fi.Peek|fi.Discard: the same, and a message found is dropped.
//   - fi.Claim: receive into buf the message claimed with ctx (ENOMSG
//     when there is none); with fi.Discard drop it instead (its
//     completion has length 0).
//
// ctx for fi.Claim must be a comparable value (EINVAL otherwise): it is
// what pairs the claim with its peek. Results come as completions, as
// for every receive; a full CQ is EAGAIN and changes nothing.
func (e *Endpoint) TRecvMsg(buf []byte, src fi.Addr, tag, ignore uint64, ctx any, flags fi.Flags) error {
	if e == nil || len(e.rx) == 0 {
		return e.rxErr("ep trecvmsg")
	}
	return e.Rx(0).TRecvMsg(buf, src, tag, ignore, ctx, flags)
}

// TRecvMsg is Endpoint.TRecvMsg on this context.
func (r *RxContext) TRecvMsg(buf []byte, src fi.Addr, tag, ignore uint64, ctx any, flags fi.Flags) error {
	if r == nil || r.c == nil {
		return errNoRxCtx("ep trecvmsg")
	}
	c := r.c
	if bad := flags &^ trecvFlags; bad != 0 {
		return fmt.Errorf("ep trecvmsg: flags %v: %w", bad, fi.EBADFLAGS)
	}
	op := recvOp{buf: buf, src: src, tag: tag, ignore: ignore, ctx: ctx, quiet: c.quiet(flags)}
	if err := c.check(op, true); err != nil {
		return err
	}
	switch {
	case flags&fi.Claim != 0 && (ctx == nil || !reflect.TypeOf(ctx).Comparable()):
		return fmt.Errorf("ep trecvmsg: FI_CLAIM needs a comparable context to pair the claim with its peek: %w", fi.EINVAL)
	case flags&fi.Claim != 0 && flags&fi.Discard != 0 && flags&fi.Peek != 0:
		return fmt.Errorf("ep trecvmsg: FI_PEEK with both FI_CLAIM and FI_DISCARD: %w", fi.EINVAL)
	case flags&fi.Peek != 0:
		return c.peek(op, flags)
	case flags&fi.Claim != 0:
		return c.takeClaimed(op, flags&fi.Discard != 0)
	case flags&fi.Discard != 0:
		return fmt.Errorf("ep trecvmsg: FI_DISCARD needs FI_PEEK or FI_CLAIM: %w", fi.EINVAL)
	}
	return c.post(op, true)
}

// parkedMsg is one parked message as peek sees it: a frame (frame >= 0)
// or a same-host message (local >= 0).
type parkedMsg struct {
	frame, local int
	h            wire.Hdr
	payload      []byte
	comp         cq.Completion
	claim        any
	matchSrc     fi.Addr // what directed receives compare
	known        bool
}

// parkedMsgs lists the context's parked tagged messages, frames first
// (in arrival order), then same-host ones. The caller holds c.mu.
func (c *rxCtx) parkedMsgs() []parkedMsg {
	var out []parkedMsg
	for i := range c.parked {
		f := &c.parked[i]
		var h wire.Hdr
		var comp msgComp
		payload, ok := c.frameMsg(f, true, &h, &comp)
		if !ok || h.Op != wire.OpTagged {
			continue
		}
		m := parkedMsg{frame: i, local: -1, h: h, payload: payload, comp: comp.Completion, claim: f.claim, matchSrc: comp.matchSrc, known: comp.known}
		m.comp.SrcRaw = append([]byte(nil), m.comp.SrcRaw...) // c.raw is reused
		out = append(out, m)
	}
	if s := c.ep.shm.Load(); s != nil {
		for ci, x := range c.ep.rx {
			if x != c {
				continue
			}
			for i := range s.parked[ci] {
				p := &s.parked[ci][i]
				if p.h.Op != wire.OpTagged {
					continue
				}
				m := parkedMsg{frame: -1, local: i, h: p.h, payload: p.data, comp: c.localComp(p.h, &p.src), claim: p.claim,
					matchSrc: p.src.fa, known: p.src.known}
				m.comp.SrcRaw = append([]byte(nil), m.comp.SrcRaw...)
				out = append(out, m)
			}
		}
	}
	return out
}

// peek answers FI_PEEK (with FI_CLAIM or FI_DISCARD).
func (c *rxCtx) peek(op recvOp, flags fi.Flags) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ep.closed.Load() {
		return fmt.Errorf("ep trecvmsg: endpoint closed: %w", fi.EOPBADSTATE)
	}
	if n, err := c.cq.Reserve(1); err != nil || n == 0 {
		return fmt.Errorf("ep trecvmsg: receive CQ full: %w", fi.EAGAIN)
	}
	defer c.flush()
	defer c.cq.Commit()
	for _, m := range c.parkedMsgs() {
		if m.claim != nil || c.match([]recvOp{op}, true, m.h, m.matchSrc, m.known) != 0 {
			continue
		}
		comp := m.comp
		comp.OpContext, comp.Len = op.ctx, len(m.payload)
		c.complete(&op, &comp)
		switch {
		case flags&fi.Claim != 0:
			c.setClaim(m, op.ctx)
		case flags&fi.Discard != 0:
			c.dropParked(m)
		}
		return nil
	}
	c.cq.Write(&cq.Completion{Entry: cq.Entry{OpContext: op.ctx, Flags: fi.Recv | fi.Tagged}, Src: fi.AddrNotAvail, Err: fi.ENOMSG})
	return nil
}

// takeClaimed answers FI_CLAIM: receive (or with discard drop) the message
// claimed with op.ctx.
func (c *rxCtx) takeClaimed(op recvOp, discard bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ep.closed.Load() {
		return fmt.Errorf("ep trecvmsg: endpoint closed: %w", fi.EOPBADSTATE)
	}
	for _, m := range c.parkedMsgs() {
		if m.claim == nil || !sameContext(m.claim, op.ctx) {
			continue
		}
		if n, err := c.cq.Reserve(1); err != nil || n == 0 {
			return fmt.Errorf("ep trecvmsg: receive CQ full: %w", fi.EAGAIN)
		}
		comp := m.comp
		if discard {
			comp.OpContext, comp.Len = op.ctx, 0
			c.complete(&op, &comp)
		} else {
			ops := []recvOp{op}
			c.fill(&ops[0], &ops, 0, m.payload, &comp)
		}
		c.cq.Commit()
		c.dropParked(m)
		c.flush()
		return nil
	}
	return fmt.Errorf("ep trecvmsg: no message claimed with this context: %w", fi.ENOMSG)
}

func (c *rxCtx) setClaim(m parkedMsg, ctx any) {
	if m.frame >= 0 {
		c.parked[m.frame].claim = ctx
		return
	}
	s := c.ep.shm.Load()
	for ci, x := range c.ep.rx {
		if x == c {
			s.parked[ci][m.local].claim = ctx
		}
	}
}

// dropParked removes a parked message: a frame goes back to the fill ring.
func (c *rxCtx) dropParked(m parkedMsg) {
	if m.frame >= 0 {
		c.unpark(c.parked[m.frame])
		c.release(c.parked[m.frame])
		c.parked = append(c.parked[:m.frame], c.parked[m.frame+1:]...)
		return
	}
	s := c.ep.shm.Load()
	for ci, x := range c.ep.rx {
		if x == c {
			s.unpark(ci, m.local)
		}
	}
}
