package ep

import (
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wire"
)

// txState is a device's transmit side: the socket of queue 0, the frames
// in flight and whose they are. Guarded by mu, with each endpoint's
// transmit CQ producer and completion backlog.
type txState struct {
	mu optMutex
	// busy mirrors, for progress's look without mu, whether reclaim has
	// anything to do: frames outstanding or completions waiting for room
	// in a TX CQ. unlock writes it; a progress that reads false while
	// another goroutine sends skips, as when TryLock fails, and the next
	// one sees the send.
	busy        atomic.Bool
	s           *dataplane.Socket
	umem        *dataplane.UMEM
	inflight    []txOp // by frame number: what to complete when the kernel is done
	eps         []*Endpoint
	pending     int // frames on the TX ring not yet kicked (FI_MORE)
	outstanding int // frames given to the kernel, not yet completed
	addrs       []uint64
	descs       []dataplane.Desc
	shift       uint
	// txOff is where a packet starts in its frame; csumOffload asks the
	// kernel to complete UDP checksums (a copy-mode socket on a UMEM with
	// TX metadata: the packet leaves as a CHECKSUM_PARTIAL skb).
	txOff       uint64
	csumOffload bool
	// spare holds frames the completion ring gave back, for the next
	// sends: no lock of the UMEM's free list per message, and the frame
	// just sent (cache-hot) is the next one built. Not for a sharing
	// domain's endpoint, whose frames may be reported twice after a
	// drainer died (the UMEM's free list ignores the second).
	spare []uint64
	// A frame longer than a UMEM frame (a jumbo message) is built in
	// jumbo, then copied into a chain of frames (chain) sent as one
	// packet of several descriptors (AF_XDP multi-buffer).
	jumbo []byte
	chain []uint64
	// A sharing domain's endpoint transmits on a socket of its own (s)
	// and takes its finished frames through the domain's block, from the
	// completion ring of comp's queue.
	share *dataplane.ShareBlock
	slot  int
	comp  *dataplane.Socket
	// tmpl holds the headers of the frames to the last destination sent
	// to twice in a row (lastDst): a ping-pong's or a stream's sends
	// copy them instead of building them (wire.Template).
	tmpl    wire.Template
	lastDst netip.AddrPort
}

// udpCsumField is the UDP checksum's offset in the UDP header.
const udpCsumField = 6

type txOp struct {
	e     *Endpoint // nil: nothing to report
	ctx   any
	flags fi.Flags
}

func (t *txState) init(d *device, frames int) {
	t.s, t.umem = d.anchors[0], d.umem
	if d.txSock != nil {
		t.s, t.share, t.slot, t.comp = d.txSock, d.share, d.slot, d.anchors[0]
	}
	t.inflight = make([]txOp, frames)
	t.addrs = make([]uint64, 64)
	t.descs = make([]dataplane.Desc, 1)
	t.shift = uint(bits.TrailingZeros(uint(d.umem.FrameSize())))
	t.txOff = d.umem.TxOffset()
	if t.share == nil {
		t.spare = make([]uint64, 0, txSpare)
	}
	t.csumOffload = t.txOff > 0 && !t.s.ZeroCopy()
}

func (t *txState) add(e *Endpoint) {
	t.mu.Lock()
	t.eps = append(t.eps, e)
	t.unlock()
}

// unlock releases mu after bringing busy in step. Every holder of mu
// releases it here: each may have changed what busy mirrors.
func (t *txState) unlock() {
	b := t.outstanding > 0
	for _, e := range t.eps {
		if b {
			break
		}
		b = len(e.waiting) > 0
	}
	if t.busy.Load() != b {
		t.busy.Store(b)
	}
	t.mu.Unlock()
}

// remove forgets e: its sends still in flight complete silently, as
// fi_close(3) allows for an endpoint's outstanding operations.
func (t *txState) remove(e *Endpoint) {
	t.mu.Lock()
	defer t.unlock()
	t.eps = slices.DeleteFunc(t.eps, func(x *Endpoint) bool { return x == e })
	for i := range t.inflight {
		if t.inflight[i].e == e {
			t.inflight[i] = txOp{}
		}
	}
	e.waiting = nil
}

// Send sends buf to dest with context ctx (fi_send). dest may carry a
// receive context (fi.RxAddr) and a peer group (fi.GroupAddr).
func (e *Endpoint) Send(buf []byte, dest fi.Addr, ctx any) error {
	return e.send(wire.OpMsg, buf, dest, 0, 0, e.opComp(), ctx)
}

// SendData sends buf with remote CQ data (fi_senddata).
func (e *Endpoint) SendData(buf []byte, data uint64, dest fi.Addr, ctx any) error {
	return e.send(wire.OpMsg, buf, dest, 0, data, fi.RemoteCQData|e.opComp(), ctx)
}

// Inject sends buf without a completion (fi_inject); buf may be reused at
// once.
func (e *Endpoint) Inject(buf []byte, dest fi.Addr) error {
	return e.send(wire.OpMsg, buf, dest, 0, 0, fi.Inject, nil)
}

// SendMsg sends with flags (fi_sendmsg): fi.RemoteCQData (with data),
// fi.Inject, fi.More (more sends follow: the kernel is woken by the next
// send without it), fi.InjectComplete, fi.TransmitComplete, fi.Completion
// (report success on a selective-completion CQ; Attr.SelectiveCompletion).
func (e *Endpoint) SendMsg(buf []byte, dest fi.Addr, data uint64, ctx any, flags fi.Flags) error {
	return e.send(wire.OpMsg, buf, dest, 0, data, flags, ctx)
}

// TSend sends a tagged message (fi_tsend).
func (e *Endpoint) TSend(buf []byte, dest fi.Addr, tag uint64, ctx any) error {
	return e.send(wire.OpTagged, buf, dest, tag, 0, e.opComp(), ctx)
}

// TSendData sends a tagged message with remote CQ data (fi_tsenddata).
func (e *Endpoint) TSendData(buf []byte, data uint64, dest fi.Addr, tag uint64, ctx any) error {
	return e.send(wire.OpTagged, buf, dest, tag, data, fi.RemoteCQData|e.opComp(), ctx)
}

// TInject sends a tagged message without a completion (fi_tinject).
func (e *Endpoint) TInject(buf []byte, dest fi.Addr, tag uint64) error {
	return e.send(wire.OpTagged, buf, dest, tag, 0, fi.Inject, nil)
}

// TSendMsg is SendMsg for tagged messages (fi_tsendmsg).
func (e *Endpoint) TSendMsg(buf []byte, dest fi.Addr, tag, data uint64, ctx any, flags fi.Flags) error {
	return e.send(wire.OpTagged, buf, dest, tag, data, flags, ctx)
}

// TxCompletion is the completion level the endpoint's sends report by
// default: fi.InjectComplete (the data is in the socket's memory) or
// fi.TransmitComplete (the kernel sent the frame). An unreliable endpoint
// offers nothing stronger; fi.DeliveryComplete is not available. A nil
// Endpoint has none (0).
func (e *Endpoint) TxCompletion() fi.Flags {
	if e == nil {
		return 0
	}
	return e.attr.OpFlags
}

// The transmit path's EAGAIN errors are made once: a caller retrying a
// busy send must not allocate per attempt.
var (
	errClosed     = fmt.Errorf("ep send: endpoint closed: %w", fi.EOPBADSTATE)
	errNilEP      = fmt.Errorf("ep send: nil endpoint: %w", fi.EINVAL)
	errZeroEP     = fmt.Errorf("ep send: endpoint not opened (zero value, not from Open or Adopt): %w", fi.EINVAL)
	errTxCQFull   = fmt.Errorf("ep send: transmit CQ full, read it: %w", fi.EAGAIN)
	errNoFrame    = fmt.Errorf("ep send: no free transmit frame: %w", fi.EAGAIN)
	errTxRingFull = fmt.Errorf("ep send: transmit ring full: %w", fi.EAGAIN)
)

const sendFlags = fi.RemoteCQData | fi.Inject | fi.More | fi.InjectComplete | fi.TransmitComplete | fi.Completion

// opComp is the fi.Completion of the operations without a flags argument:
// the endpoint's OpFlags'.
func (e *Endpoint) opComp() fi.Flags {
	if e == nil {
		return 0
	}
	return e.attr.OpFlags & fi.Completion
}

// decode splits dest into AV index, receive context and peer group:
// the top rx_ctx_bits are the context (fi_rx_addr), bits 32 and up below
// them the group (fi_group_addr), the low 32 bits the index.
func (e *Endpoint) decode(dest fi.Addr) (idx fi.Addr, rxCtx uint8, group uint32, err error) {
	n := e.rxCtxBits
	v := uint64(dest)
	if n > 0 {
		ctx := v >> (64 - n)
		if ctx > 255 {
			return 0, 0, 0, fmt.Errorf("receive context %d: %w", ctx, fi.EINVAL)
		}
		rxCtx = uint8(ctx)
		v &^= ^uint64(0) << (64 - n)
	}
	return fi.Addr(v & 0xffffffff), rxCtx, uint32(v >> 32), nil
}

func (e *Endpoint) send(opcode uint8, buf []byte, dest fi.Addr, tag, data uint64, flags fi.Flags, ctx any) error {
	switch {
	case e == nil:
		return errNilEP
	case e.dev == nil:
		return errZeroEP
	case e.closed.Load():
		return fmt.Errorf("ep send: endpoint closed: %w", fi.EOPBADSTATE)
	case flags&^sendFlags != 0:
		return fmt.Errorf("ep send: flags %v: %w", flags&^sendFlags, fi.EBADFLAGS)
	case len(buf) > e.maxMsg:
		return fmt.Errorf("ep send: %d bytes, at most %d: %w", len(buf), e.maxMsg, fi.EMSGSIZE)
	case opcode == wire.OpTagged && e.attr.Caps&fi.Tagged == 0, opcode == wire.OpMsg && e.attr.Caps&fi.Msg == 0:
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
	if tx := e.shmOut(peer); tx != nil { // a same-host peer (shm.go)
		return e.shmSend(tx, peer, opcode, buf, rxCtx, group, tag, data, flags, ctx, false)
	}
	hop, err := e.hops.Lookup(peer.Addr())
	if err != nil {
		if e.shmWants(peer, err) {
			return e.shmSendNew(peer, err, opcode, buf, rxCtx, group, tag, data, flags, ctx)
		}
		return fmt.Errorf("ep send to %v: %w", peer, err)
	}
	hdr := wire.Hdr{Op: opcode, RxCtx: rxCtx, Group: group, AuthKey: e.authKey, Tag: tag, CQData: data}
	if flags&fi.RemoteCQData != 0 {
		hdr.Flags |= wire.FlagCQData
	}
	src := e.attr.Local
	if src.Addr().IsUnspecified() {
		src = netip.AddrPortFrom(hop.SrcIP, src.Port())
	}
	// A selective-completion CQ hears of a success only when asked.
	report := flags&fi.Inject == 0 && (e.attr.SelectiveCompletion&fi.Transmit == 0 || flags&fi.Completion != 0)
	injectComplete := e.attr.OpFlags&fi.InjectComplete != 0
	if flags&fi.TransmitComplete != 0 {
		injectComplete = false
	} else if flags&fi.InjectComplete != 0 {
		injectComplete = true
	}

	fr := wire.Frame{SrcMAC: hop.SrcMAC, DstMAC: hop.DstMAC, Src: src, Dst: peer, Hdr: hdr, Payload: buf}
	return e.transmit(&fr, opcode, flags, report, injectComplete, ctx)
}

// transmit puts fr on the TX ring and kicks the kernel unless flags has
// fi.More: send's part under the device's tx lock (a method of its own so
// that its one defer is open-coded: send's many returns made it a deferred
// call record, whose runtime calls were 9% of the send path's samples in a
// profile of the bench's ping-pong).
func (e *Endpoint) transmit(fr *wire.Frame, opcode uint8, flags fi.Flags, report, injectComplete bool, ctx any) error {
	t := &e.dev.tx
	t.mu.Lock()
	defer t.unlock()
	if e.closed.Load() {
		// Close ran during the next-hop lookup; it has removed (or will
		// remove, after this) the endpoint from the device under t.mu.
		return errClosed
	}
	t.reclaim()
	if report && len(e.waiting) > 0 {
		return errTxCQFull
	}
	fr.PartialUDPCsum = t.csumOffload
	var addr uint64
	if fr.Len() > t.umem.FrameSize()-int(t.txOff) {
		// A jumbo frame: a chain of frames.
		var err error
		if addr, err = t.sendChain(fr); err != nil {
			return err
		}
	} else {
		if t.alloc() == 0 {
			t.kick()
			return errNoFrame
		}
		addr = t.addrs[0] + t.txOff
		n := t.put(fr, t.umem.Frame(addr))
		t.descs[0] = dataplane.Desc{Addr: addr, Len: uint32(n)}
		t.checksum(fr, t.umem.Frame(addr), &t.descs[0])
		if t.s.Transmit(t.descs[:1]) != 1 {
			t.umem.Free(addr)
			t.kick()
			return errTxRingFull
		}
	}
	if e.trace != nil {
		e.traceTx()
	}
	t.pending++
	t.outstanding++
	op := txOp{e: e, ctx: ctx, flags: fi.Send | fi.Msg}
	if opcode == wire.OpTagged {
		op.flags = fi.Send | fi.Tagged
	}
	switch {
	case !report:
		op.e = nil
	case injectComplete:
		// The data is in the UMEM: buf is the caller's again.
		e.waiting = append(e.waiting, op)
		e.flushWaiting()
		op.e = nil
	}
	t.inflight[addr>>t.shift] = op
	if flags&fi.More == 0 {
		t.kick()
		if e.trace != nil {
			e.traceKick()
		}
	}
	return nil
}

// put writes fr into b, from the template of its headers when there is
// one, and returns its length. A destination sent to twice in a row gets
// the template; alternating destinations are built by Frame.Put, each
// frame once. The caller holds t.mu.
func (t *txState) put(fr *wire.Frame, b []byte) int {
	if t.tmpl.Matches(fr) {
		return t.tmpl.Put(b, &fr.Hdr, fr.Payload, fr.PartialUDPCsum)
	}
	if fr.Dst == t.lastDst {
		if tm, ok := wire.NewTemplate(fr); ok {
			t.tmpl = tm
			return t.tmpl.Put(b, &fr.Hdr, fr.Payload, fr.PartialUDPCsum)
		}
	}
	t.lastDst = fr.Dst
	return fr.Put(b)
}

// checksum asks the kernel to complete the UDP checksum of the packet
// that starts at d (built from fr into pkt with a partial sum) when the
// device does (csumOffload), or fills in the full sum itself.
func (t *txState) checksum(fr *wire.Frame, pkt []byte, d *dataplane.Desc) {
	if !t.csumOffload {
		return
	}
	if t.umem.TxChecksum(d.Addr, uint16(fr.UDPOffset()), udpCsumField) {
		d.Options |= dataplane.DescTxMetadata
		return
	}
	// Cannot happen with txOff from the UMEM; never send a partial sum.
	fr.PartialUDPCsum = false
	fr.Put(pkt)
	if d.Options&dataplane.PktContd != 0 { // a chain: the first piece holds the checksum field
		copy(t.umem.Frame(d.Addr), pkt[:d.Len])
	}
}

// txSpare is how many completed frames a device keeps for its next sends.
const txSpare = 64

// sendChain puts a frame longer than a UMEM frame on the TX ring as one
// packet of several frames, and returns the address of the last: the
// completion of the message is recorded there (the others complete
// without a report). The caller holds t.mu.
func (t *txState) sendChain(fr *wire.Frame) (last uint64, err error) {
	fsz := t.umem.FrameSize() - int(t.txOff) // each piece behind its frame's TX metadata room
	n := fr.Len()
	k := (n + fsz - 1) / fsz
	if k > len(t.addrs) {
		return 0, fmt.Errorf("ep send: a %d-byte frame in %d UMEM frames: %w", n, k, fi.EMSGSIZE)
	}
	got := t.umem.Alloc(t.addrs[:k])
	if got < k {
		t.umem.Free(t.addrs[:got]...)
		t.reclaim()
		if got = t.umem.Alloc(t.addrs[:k]); got < k {
			t.umem.Free(t.addrs[:got]...)
			t.kick()
			return 0, errNoFrame
		}
	}
	t.chain = append(t.chain[:0], t.addrs[:k]...)
	if cap(t.jumbo) < n {
		t.jumbo = make([]byte, n)
	}
	b := t.jumbo[:n]
	fr.Put(b)
	t.descs = t.descs[:0]
	for i, a := range t.chain {
		piece := b[i*fsz : min((i+1)*fsz, n)]
		copy(t.umem.Frame(a+t.txOff), piece)
		d := dataplane.Desc{Addr: a + t.txOff, Len: uint32(len(piece))}
		if i < k-1 {
			d.Options = dataplane.PktContd
		}
		t.descs = append(t.descs, d)
	}
	// The first descriptor carries the packet's TX metadata.
	t.checksum(fr, b, &t.descs[0])
	if !t.s.TransmitPacket(t.descs) {
		t.umem.Free(t.chain...)
		t.kick()
		return 0, errTxRingFull
	}
	// Each frame is outstanding on its own; only the last reports.
	t.pending += k - 1
	t.outstanding += k - 1
	for _, a := range t.chain[:k-1] {
		t.inflight[a>>t.shift] = txOp{}
	}
	return t.chain[k-1], nil
}

func (t *txState) alloc() int {
	if t.takeSpare() {
		return 1
	}
	if n := t.umem.Alloc(t.addrs[:1]); n == 1 {
		return 1
	}
	t.reclaim()
	if t.takeSpare() {
		return 1
	}
	return t.umem.Alloc(t.addrs[:1])
}

// takeSpare puts the last spare frame in t.addrs[0].
func (t *txState) takeSpare() bool {
	n := len(t.spare)
	if n == 0 {
		return false
	}
	t.addrs[0] = t.spare[n-1]
	t.spare = t.spare[:n-1]
	return true
}

// free gives finished frames back: to the spare ones while there is room,
// the rest to the UMEM.
func (t *txState) free(addrs []uint64) {
	if t.share == nil {
		k := min(len(addrs), cap(t.spare)-len(t.spare))
		for _, a := range addrs[:k] {
			t.spare = append(t.spare, t.umem.FrameAddr(a))
		}
		addrs = addrs[k:]
	}
	if len(addrs) > 0 {
		t.umem.Free(addrs...)
	}
}

// complete takes finished frames into t.addrs.
func (t *txState) complete() int {
	if t.share != nil {
		return t.share.Complete(t.slot, t.comp, t.addrs)
	}
	return t.s.Complete(t.addrs)
}

// kick wakes the kernel for the frames on the TX ring.
func (t *txState) kick() {
	if t.pending > 0 {
		t.s.Kick()
		t.pending = 0
	}
}

// reclaim takes finished frames off the completion ring, frees them and
// reports them to the endpoints that sent them, each endpoint's in one CQ
// reservation. The caller holds t.mu.
func (t *txState) reclaim() {
	for t.outstanding > 0 {
		n := t.complete()
		if n == 0 && t.pending == 0 {
			// Copy mode transmits inside sendto, a batch per call: keep
			// kicking until the ring drains.
			t.s.Kick()
			n = t.complete()
		}
		if n == 0 {
			break
		}
		// A domain's completion drainer that died may leave a frame to be
		// reported twice: the second report finds nothing in flight (and
		// Free ignores a free frame).
		t.outstanding = max(t.outstanding-n, 0)
		for _, a := range t.addrs[:n] {
			i := a >> t.shift
			if op := t.inflight[i]; op.e != nil {
				op.e.waiting = append(op.e.waiting, op)
			}
			t.inflight[i] = txOp{}
		}
		t.free(t.addrs[:n])
	}
	for _, e := range t.eps {
		if len(e.waiting) > 0 {
			e.flushWaiting()
		}
	}
}

// flushWaiting writes the endpoint's finished sends to its TX CQ, as many
// as it has room for; the rest wait for the next call: a sent message is
// never reported lost. The caller holds the device's tx.mu.
func (e *Endpoint) flushWaiting() {
	n, err := e.txcq.Reserve(len(e.waiting))
	if err != nil || n == 0 {
		return
	}
	for _, op := range e.waiting[:n] {
		e.txcq.Write(&cq.Completion{Entry: cq.Entry{OpContext: op.ctx, Flags: op.flags}, Src: fi.AddrNotAvail})
	}
	e.txcq.Commit()
	// Keep the array (no allocation per message): move the rest to its
	// start.
	left := copy(e.waiting, e.waiting[n:])
	clear(e.waiting[left:])
	e.waiting = e.waiting[:left]
}

// progress reclaims finished sends, unless there are none or another
// goroutine is at it. A polling reader calls it far more often than it
// sends: when nothing is outstanding it takes no lock.
func (t *txState) progress() {
	if !t.busy.Load() || !t.mu.TryLock() {
		return
	}
	t.reclaim()
	t.unlock()
}
