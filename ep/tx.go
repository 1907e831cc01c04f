package ep

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/frame"
)

// txState is the transmit side: one socket, its frames in flight, and
// completions the TX CQ had no room for yet.
type txState struct {
	mu             sync.Mutex
	s              *dataplane.Socket
	cq             *cq.Producer
	hops           hopper
	inflight       []txOp // by frame number: what to complete when the kernel is done
	waiting        []txOp // finished, not yet in the CQ (it was full)
	pending        int    // frames on the TX ring not yet kicked (FI_MORE)
	outstanding    int    // frames given to the kernel, not yet completed
	addrs          []uint64
	descs          []dataplane.Desc
	shift          uint
	injectComplete bool
}

type txOp struct {
	ctx    any
	flags  fi.Flags
	report bool
}

func (t *txState) init(e *Endpoint) {
	t.s = e.rx[0].socks[0]
	t.inflight = make([]txOp, e.attr.Frames)
	t.addrs = make([]uint64, 64)
	t.descs = make([]dataplane.Desc, 1)
	for fs := e.umem.FrameSize(); fs > 1; fs >>= 1 {
		t.shift++
	}
	t.injectComplete = e.attr.OpFlags&fi.INJECT_COMPLETE != 0
}

// Send sends buf to dest with context ctx (fi_send). dest may carry a
// receive context (fi.RxAddr) and a peer group (fi.GroupAddr).
func (e *Endpoint) Send(buf []byte, dest fi.Addr, ctx any) error {
	return e.send(bpf.OpMsg, buf, dest, 0, 0, 0, ctx)
}

// SendData sends buf with remote CQ data (fi_senddata).
func (e *Endpoint) SendData(buf []byte, data uint64, dest fi.Addr, ctx any) error {
	return e.send(bpf.OpMsg, buf, dest, 0, data, fi.REMOTE_CQ_DATA, ctx)
}

// Inject sends buf without a completion (fi_inject); buf may be reused at
// once.
func (e *Endpoint) Inject(buf []byte, dest fi.Addr) error {
	return e.send(bpf.OpMsg, buf, dest, 0, 0, fi.INJECT, nil)
}

// SendMsg sends with flags (fi_sendmsg): fi.REMOTE_CQ_DATA (with data),
// fi.INJECT, fi.MORE (more sends follow: the kernel is woken by the next
// send without it), fi.INJECT_COMPLETE, fi.TRANSMIT_COMPLETE.
func (e *Endpoint) SendMsg(buf []byte, dest fi.Addr, data uint64, ctx any, flags fi.Flags) error {
	return e.send(bpf.OpMsg, buf, dest, 0, data, flags, ctx)
}

// TSend sends a tagged message (fi_tsend).
func (e *Endpoint) TSend(buf []byte, dest fi.Addr, tag uint64, ctx any) error {
	return e.send(bpf.OpTagged, buf, dest, tag, 0, 0, ctx)
}

// TSendData sends a tagged message with remote CQ data (fi_tsenddata).
func (e *Endpoint) TSendData(buf []byte, data uint64, dest fi.Addr, tag uint64, ctx any) error {
	return e.send(bpf.OpTagged, buf, dest, tag, data, fi.REMOTE_CQ_DATA, ctx)
}

// TInject sends a tagged message without a completion (fi_tinject).
func (e *Endpoint) TInject(buf []byte, dest fi.Addr, tag uint64) error {
	return e.send(bpf.OpTagged, buf, dest, tag, 0, fi.INJECT, nil)
}

// TSendMsg is SendMsg for tagged messages (fi_tsendmsg).
func (e *Endpoint) TSendMsg(buf []byte, dest fi.Addr, tag, data uint64, ctx any, flags fi.Flags) error {
	return e.send(bpf.OpTagged, buf, dest, tag, data, flags, ctx)
}

const sendFlags = fi.REMOTE_CQ_DATA | fi.INJECT | fi.MORE | fi.INJECT_COMPLETE | fi.TRANSMIT_COMPLETE

// decode splits dest into AV index, receive context and peer group:
// the top rx_ctx_bits are the context (fi_rx_addr), bits 32 and up below
// them the group (fi_group_addr), the low 32 bits the index.
func (e *Endpoint) decode(dest fi.Addr) (idx fi.Addr, rxCtx uint8, group uint32, err error) {
	bits := e.av.Attr().RxCtxBits
	v := uint64(dest)
	if bits > 0 {
		ctx := v >> (64 - bits)
		if ctx > 255 {
			return 0, 0, 0, fmt.Errorf("receive context %d: %w", ctx, fi.EINVAL)
		}
		rxCtx = uint8(ctx)
		v &^= ^uint64(0) << (64 - bits)
	}
	return fi.Addr(v & 0xffffffff), rxCtx, uint32(v >> 32), nil
}

func (e *Endpoint) send(op uint8, buf []byte, dest fi.Addr, tag, data uint64, flags fi.Flags, ctx any) error {
	switch {
	case e.closed.Load():
		return fmt.Errorf("ep send: endpoint closed: %w", fi.EOPBADSTATE)
	case flags&^sendFlags != 0:
		return fmt.Errorf("ep send: flags %v: %w", flags&^sendFlags, fi.EBADFLAGS)
	case len(buf) > e.maxMsg:
		return fmt.Errorf("ep send: %d bytes, at most %d: %w", len(buf), e.maxMsg, fi.EMSGSIZE)
	case op == bpf.OpTagged && e.attr.Caps&fi.TAGGED == 0, op == bpf.OpMsg && e.attr.Caps&fi.MSG == 0:
		return fmt.Errorf("ep send: endpoint lacks the capability: %w", fi.EOPNOTSUPP)
	}
	idx, rxCtx, group, err := e.decode(dest)
	if err != nil {
		return fmt.Errorf("ep send to %v: %w", dest, err)
	}
	peer, ok := e.av.Resolve(idx)
	if !ok {
		return fmt.Errorf("ep send: fi_addr %v is not in the AV: %w", dest, fi.EINVAL)
	}
	if peer.Addr().Unmap().Is4() != e.attr.Local.Addr().Unmap().Is4() {
		return fmt.Errorf("ep send: %v is not of the endpoint's address family: %w", peer, fi.EADDRNOTAVAIL)
	}
	hop, err := e.tx.hops.Lookup(peer.Addr())
	if err != nil {
		return fmt.Errorf("ep send to %v: %w", peer, err)
	}
	hdr := bpf.WireHdr{Op: op, RxCtx: rxCtx, Group: group, AuthKey: e.authKey, Tag: tag, CQData: data}
	if flags&fi.REMOTE_CQ_DATA != 0 {
		hdr.Flags |= bpf.HdrFlagData
	}
	src := e.attr.Local
	if src.Addr().IsUnspecified() {
		src = netip.AddrPortFrom(hop.SrcIP, src.Port())
	}
	report := flags&fi.INJECT == 0
	injectComplete := e.tx.injectComplete
	if flags&fi.TRANSMIT_COMPLETE != 0 {
		injectComplete = false
	} else if flags&fi.INJECT_COMPLETE != 0 {
		injectComplete = true
	}

	t := &e.tx
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reclaim()
	if report && len(t.waiting) > 0 {
		return fmt.Errorf("ep send: transmit CQ full, read it: %w", fi.EAGAIN)
	}
	if t.umemAlloc(e) == 0 {
		t.kick()
		return fmt.Errorf("ep send: no free transmit frame: %w", fi.EAGAIN)
	}
	addr := t.addrs[0]
	fr := e.umem.Frame(addr)
	spec := frame.Spec{SrcMAC: hop.SrcMAC, DstMAC: hop.DstMAC, Src: src, Dst: peer, Hdr: hdr, Payload: buf}
	n := spec.Put(fr)
	t.descs[0] = dataplane.Desc{Addr: addr, Len: uint32(n)}
	if t.s.Transmit(t.descs) != 1 {
		e.umem.Free(addr)
		t.kick()
		return fmt.Errorf("ep send: transmit ring full: %w", fi.EAGAIN)
	}
	t.pending++
	t.outstanding++
	comp := txOp{ctx: ctx, flags: fi.SEND | fi.MSG, report: report}
	if op == bpf.OpTagged {
		comp.flags = fi.SEND | fi.TAGGED
	}
	if report && injectComplete {
		t.complete(comp) // the data is in the UMEM: buf is the caller's again
		comp.report = false
	}
	t.inflight[addr>>t.shift] = comp
	if flags&fi.MORE == 0 {
		t.kick()
	}
	return nil
}

func (t *txState) umemAlloc(e *Endpoint) int {
	if n := e.umem.Alloc(t.addrs[:1]); n == 1 {
		return 1
	}
	t.reclaim()
	return e.umem.Alloc(t.addrs[:1])
}

// kick wakes the kernel for the frames on the TX ring.
func (t *txState) kick() {
	if t.pending > 0 {
		t.s.Kick()
		t.pending = 0
	}
}

// reclaim takes finished frames off the completion ring, writes their
// completions and frees them. The caller holds t.mu.
func (t *txState) reclaim() {
	if len(t.waiting) > 0 {
		t.flushWaiting()
	}
	for t.outstanding > 0 {
		n := t.s.Complete(t.addrs)
		if n == 0 {
			if t.pending == 0 && t.outstanding > 0 {
				// Copy mode transmits inside sendto, a batch per call:
				// keep kicking until the ring drains.
				t.s.Kick()
				if n = t.s.Complete(t.addrs); n == 0 {
					return
				}
			} else {
				return
			}
		}
		t.outstanding -= n
		umem := t.s.UMEM()
		for _, a := range t.addrs[:n] {
			i := a >> t.shift
			op := t.inflight[i]
			t.inflight[i] = txOp{}
			if op.report {
				t.complete(op)
			}
			umem.Free(a)
		}
	}
}

// complete writes a send completion, or queues it while the CQ is full: a
// sent message is never reported lost.
func (t *txState) complete(op txOp) {
	if len(t.waiting) == 0 {
		if n, err := t.cq.Reserve(1); err == nil && n == 1 {
			t.cq.Write(&cq.Completion{Entry: cq.Entry{OpContext: op.ctx, Flags: op.flags}, Src: fi.AddrNotAvail})
			t.cq.Commit()
			return
		}
	}
	t.waiting = append(t.waiting, op)
}

func (t *txState) flushWaiting() {
	n, err := t.cq.Reserve(len(t.waiting))
	if err != nil || n == 0 {
		return
	}
	for _, op := range t.waiting[:n] {
		t.cq.Write(&cq.Completion{Entry: cq.Entry{OpContext: op.ctx, Flags: op.flags}, Src: fi.AddrNotAvail})
	}
	t.cq.Commit()
	clear(t.waiting[:n])
	t.waiting = t.waiting[n:]
}

// progress reclaims finished sends.
func (t *txState) progress() {
	if !t.mu.TryLock() {
		return
	}
	t.reclaim()
	t.mu.Unlock()
}
