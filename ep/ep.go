package ep

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/procid"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/wire"
)

// Endpoint is an open datagram endpoint. Its methods are safe for
// concurrent use, unless it was opened with fi.ThreadDomain and manual
// progress (Attr.Threading; Threading reports it): then the application
// serializes every call on the endpoints of its domain.
type Endpoint struct {
	dp        *loader.Objects
	av        *av.AV
	attr      Attr
	id        uint32
	key       bpf.EPKey
	xskBase   uint32
	queues    int
	authKey   uint32 // wire value, 0 = none
	maxMsg    int    // largest payload
	parkLimit int    // frames a receive context keeps for unmatched messages
	rxCtxBits int    // the AV's, read per send

	// Messages dropped on receipt (RecvStats).
	parkDropped, unmatchable, unreadable atomic.Uint64

	dev  *device
	umem *dataplane.UMEM
	rx   []*rxCtx
	hops hopper

	// Guarded by dev.tx.mu.
	txcq    *cq.Producer
	waiting []txOp // send completions the TX CQ had no room for yet

	claim      *os.File     // the kernel socket holding Local's port (claimPort); nil when adopted
	registered bool         // this process wrote the endpoint table and XSKMAP
	unwatch    func()       // a wildcard's hold on the local-address watch (local_linux.go)
	release    func() error // adopted: tells the agent the endpoint is gone

	// Same-host channels (shm.go); nil: none.
	shm atomic.Pointer[shmState]

	trace *Trace // SetTrace's; nil: not measured (trace.go)

	closed  atomic.Bool
	closeMu sync.Mutex
	stop    chan struct{}
	done    chan struct{}
}

// Open opens an endpoint. Call it from a goroutine whose thread is in the
// network namespace of attr.Ifname.
func Open(dp *loader.Objects, attr Attr) (_ *Endpoint, err error) {
	if err := checkDataplane(dp); err != nil {
		return nil, err
	}
	if err := attr.validate(); err != nil {
		return nil, err
	}
	if attr.Charged {
		return nil, fmt.Errorf("ep open: Charged is for endpoints the agent prepares (Prepare): %w", fi.EINVAL)
	}
	e, undo, err := setup(dp, attr, acquireDevice)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	if err := e.start(&undo, nil); err != nil {
		return nil, err
	}
	if err := e.shmOpen(); err != nil {
		return nil, err
	}
	undo.add(e.shmClose)
	if err := e.register(); err != nil {
		return nil, err
	}
	e.registered = true
	return e, nil
}

// checkDataplane fails with EINVAL unless dp is a loaded dataplane with
// the maps an endpoint registers in: not nil, not a zero loader.Objects,
// not a read-only view (OpenPinned, FromFDs: no XSKMAP).
func checkDataplane(dp *loader.Objects) error {
	switch {
	case dp == nil:
		return fmt.Errorf("ep open: nil dataplane: %w", fi.EINVAL)
	case dp.EP == nil || dp.XSKs == nil:
		return fmt.Errorf("ep open: dataplane not loaded (zero loader.Objects, or a read-only view without the XSKMAP): %w", fi.EINVAL)
	}
	return nil
}

// usable is the guard of the methods with an error result: a nil
// *Endpoint, or one that did not come from Open or Adopt (its zero value,
// which has no device), is EINVAL. A closed one is EOPBADSTATE, which the
// methods report themselves.
func (e *Endpoint) usable(op string) error {
	switch {
	case e == nil:
		return fmt.Errorf("%s: nil endpoint: %w", op, fi.EINVAL)
	case e.dev == nil:
		return fmt.Errorf("%s: endpoint not opened (zero value, not from Open or Adopt): %w", op, fi.EINVAL)
	}
	return nil
}

// undoList undoes a half-made endpoint, last step first.
type undoList []func()

func (u *undoList) add(f func()) { *u = append(*u, f) }

func (u undoList) run() {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]()
	}
}

// setup makes what every endpoint of this process needs before its data
// path: the checks, the interface, the AV binding, the device and the
// receive sockets. mk makes or finds the device: the process's
// (acquireDevice), one of the endpoint's own with a memfd-backed UMEM for
// handing over to another process (newPrivateDevice), or a sharing
// domain's (Domain.Prepare).
func setup(dp *loader.Objects, attr Attr, mk deviceMaker) (e *Endpoint, _ undoList, err error) {
	// A local list: error returns set the result to nil, and the deferred
	// undo must still see what was done.
	var undo undoList
	if err := checkDataplane(dp); err != nil {
		return nil, nil, err
	}
	attr.defaults()
	iface, err := net.InterfaceByName(attr.Ifname)
	if err != nil {
		return nil, nil, fmt.Errorf("ep open: interface %q: %w", attr.Ifname, fi.ENODEV)
	}
	e = &Endpoint{dp: dp, av: attr.AV, attr: attr, queues: attr.Queues}
	have := 0 // the interface's rx queues, where the kernel says
	if l, err := netlink.LinkByIndex(iface.Index); err == nil {
		have = l.Attrs().NumRxQueues
	}
	if have > 0 && attr.FirstQueue+max(attr.Queues, 1) > have {
		return nil, nil, fmt.Errorf("ep open: queues %d..%d, interface %s has %d: %w",
			attr.FirstQueue, attr.FirstQueue+max(attr.Queues, 1)-1, attr.Ifname, have, fi.EINVAL)
	}
	if e.queues == 0 {
		e.queues = min(max(have-attr.FirstQueue, 1), MaxQueues)
	}
	e.parkLimit = e.attr.Frames / 4
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	claim, err := claimPort(attr.Local)
	if err != nil {
		return nil, nil, fmt.Errorf("ep open: %w", err)
	}
	e.claim = claim
	undo.add(func() { claim.Close() }) // not e.claim: e is nil once setup fails
	if err := e.av.BindEndpoint(); err != nil {
		return nil, nil, fmt.Errorf("ep open: %w", err)
	}
	undo.add(e.av.UnbindEndpoint)
	if attr.AuthKey != 0 {
		if e.authKey, err = e.av.AcquireAuthKey(attr.AuthKey); err != nil {
			return nil, nil, fmt.Errorf("ep open: %w", err)
		}
		undo.add(func() { e.av.ReleaseAuthKey(attr.AuthKey) })
	}
	if e.dev, err = mk(iface.Index, e.queues, &e.attr); err != nil {
		return nil, nil, fmt.Errorf("ep open: interface %s: %w", attr.Ifname, err)
	}
	if attr.Queues == 0 {
		e.queues = e.dev.queues // the queues the device could bind
	}
	e.umem = e.dev.umem
	e.setMaxMsg(maxMsgFor(iface.MTU, attr.Local.Addr(), e.dev.multiBuffer(), e.umem.FrameSize()))
	undo.add(func() { releaseDevice(e.dev) })
	undo.add(e.uncountRx)
	undo.add(e.closeSockets) // before opening: closes those that did open
	if err := e.openSockets(iface.Index); err != nil {
		return nil, nil, err
	}
	return e, undo, nil
}

// maxMsgFor is the largest message a link of MTU carries: the MTU less
// the IP, UDP and xdpfab headers when the device's sockets are
// multi-buffer (a frame longer than a UMEM frame is a chain of them), else
// what one UMEM frame of frameSize holds behind the kernel's headroom and
// the Ethernet header.
func maxMsgFor(mtu int, local netip.Addr, multiBuffer bool, frameSize int) int {
	if !multiBuffer {
		mtu = min(mtu, frameSize-dataplane.PacketHeadroom-14)
	}
	return mtu - ipHeaderLen(local) - wire.UDPHeaderLen - wire.HdrLen
}

func (e *Endpoint) setMaxMsg(maxMsg int) {
	e.maxMsg = maxMsg
	if e.attr.MinMultiRecv == 0 {
		e.attr.MinMultiRecv = e.maxMsg
	}
}

// start gives a set-up endpoint its data path: next-hop resolution (use,
// if set, triggers neighbour resolution instead of NTF_USE), the CQ
// bindings, the device's transmit path and automatic progress.
func (e *Endpoint) start(undo *undoList, use func(int, netip.Addr) error) (err error) {
	e.rxCtxBits = e.av.Attr().RxCtxBits
	if e.hops, err = newHopper(e.dev.key.ifindex, e.attr.Local.Addr(), use); err != nil {
		return fmt.Errorf("ep open: %w", err)
	}
	undo.add(func() { e.hops.Close() })
	if err := e.bindCQs(); err != nil {
		return err
	}
	undo.add(e.unbindCQs)
	e.dev.tx.add(e)
	undo.add(func() { e.dev.tx.remove(e) })
	if e.attr.Progress == ProgressAuto {
		e.stop, e.done = make(chan struct{}), make(chan struct{})
		go e.autoProgress()
		undo.add(func() { close(e.stop); <-e.done })
	}
	return nil
}

func ipHeaderLen(a netip.Addr) int {
	if a.Unmap().Is4() {
		return 20
	}
	return 40
}

// uncountRx takes the endpoint's receive contexts out of its device's count
// (newRxCtx counts them: park shares the device's budget among them).
func (e *Endpoint) uncountRx() {
	e.dev.rxCtxs.Add(-int32(len(e.rx)))
}

// openSockets opens one receive socket per (receive context, queue) on
// the device's UMEM.
func (e *Endpoint) openSockets(ifindex int) error {
	cfg := e.dev.sockConfig(&e.attr, e.attr.Logger)
	for c := range len(e.attr.RxCQs) {
		rc := e.newRxCtx()
		e.rx = append(e.rx, rc)
		for q := range e.queues {
			s, err := dataplane.Open(ifindex, e.dev.first+q, e.umem, cfg)
			if err != nil {
				return fmt.Errorf("ep open: socket for context %d queue %d: %w", c, q, err)
			}
			rc.socks[q] = s
		}
	}
	return nil
}

func (e *Endpoint) newRxCtx() *rxCtx {
	e.dev.rxCtxs.Add(1)
	c := &rxCtx{ep: e, socks: make([]*dataplane.Socket, e.queues), descs: make([]dataplane.Desc, 64), refill: make([][]uint64, e.queues),
		kept: make([]int, e.queues), partial: make([][]dataplane.Desc, e.queues)}
	c.mu.off = e.dev.unlocked
	return c
}

func (e *Endpoint) closeSockets() {
	for _, rc := range e.rx {
		for _, s := range rc.socks {
			if s != nil {
				s.Close()
			}
		}
	}
}

func (e *Endpoint) bindCQs() error {
	var progress func()
	if e.attr.Progress == ProgressManual {
		progress = e.Progress
	}
	p, err := e.attr.TxCQ.Bind(cq.BindAttr{Progress: progress})
	if err != nil {
		return fmt.Errorf("ep open: bind transmit CQ: %w", err)
	}
	e.txcq = p
	caps := e.attr.Caps & (fi.Source | fi.SourceErr)
	for i, rc := range e.rx {
		if rc.cq, err = e.attr.RxCQs[i].Bind(cq.BindAttr{Caps: caps, Progress: progress}); err != nil {
			e.unbindCQs()
			return fmt.Errorf("ep open: bind receive CQ of context %d: %w", i, err)
		}
	}
	return nil
}

func (e *Endpoint) unbindCQs() {
	if e.txcq != nil {
		e.txcq.Unbind()
		e.txcq = nil
	}
	for _, rc := range e.rx {
		if rc.cq != nil {
			rc.cq.Unbind()
			rc.cq = nil
		}
	}
}

// register allocates the endpoint's id and XSKMAP slots, fills the slots,
// and publishes the endpoint-table entry last, so the XDP program never
// redirects to an empty slot.
func (e *Endpoint) register() error {
	unlock := e.dp.Lock()
	defer unlock()
	n := uint32(len(e.rx) * e.queues)
	used := map[uint32]bool{}
	type span struct{ lo, hi uint32 }
	var spans []span
	var k bpf.EPKey
	var v bpf.EPVal
	for it := e.dp.EP.Iterate(); it.Next(&k, &v); {
		used[v.EpId] = true
		spans = append(spans, span{v.XskBase, v.XskBase + uint32(v.RxCtxs)*uint32(v.Queues)})
	}
	id := uint32(1)
	for used[id] {
		id++
	}
	slots := e.dp.XSKs.MaxEntries()
	limit := slots
	if b := e.attr.XSKBelow; b > 0 && b < slots {
		limit = b
	}
	// find is the first run of n free slots from from up, false when it
	// would end past limit.
	find := func(from uint32) (uint32, bool) {
		base := from
		for again := true; again; {
			again = false
			for _, s := range spans {
				if base < s.hi && s.lo < base+n {
					base, again = s.hi, true
				}
			}
		}
		return base, base+n <= limit
	}
	base, ok := find(min(e.attr.XSKFrom, limit))
	if !ok && e.attr.XSKFrom > 0 {
		base, ok = find(0)
	}
	if !ok {
		return fmt.Errorf("ep open: no %d free adjacent XSKMAP slots below %d (of %d): %w", n, limit, slots, fi.ENOSPC)
	}
	for c, rc := range e.rx {
		for q, s := range rc.socks {
			slot := base + uint32(c*e.queues+q)
			if err := e.dp.XSKs.Update(slot, uint32(s.FD()), ebpf.UpdateAny); err != nil {
				e.clearSlots(base, n)
				return fmt.Errorf("ep open: XSKMAP slot %d: %w", slot, err)
			}
		}
	}
	e.id, e.xskBase = id, base
	e.key = bpf.EPKey{Local: bpf.MakeAddr(e.attr.Local)} // 0.0.0.0 and :: are the all-zero wildcard
	policy := bpf.PolicyNotAvail
	switch {
	case e.attr.Caps&fi.SourceErr != 0:
		policy = bpf.PolicySourceErr
	case e.attr.DropUnknown:
		policy = bpf.PolicyDrop
	}
	owner := procid.Self()
	if e.attr.OwnerPID != 0 {
		owner = procid.ID{PID: uint32(e.attr.OwnerPID), Start: e.attr.OwnerStart}
	}
	if e.attr.Local.Addr().IsUnspecified() {
		// A wildcard endpoint receives on the host's addresses: XDP must
		// know them before the entry below is published.
		var err error
		if e.unwatch, err = watchLocal(e.dp); err != nil {
			e.clearSlots(base, n)
			return fmt.Errorf("ep open: %w", err)
		}
	}
	val := bpf.EPVal{EpId: id, AvId: e.av.ID(), XskBase: base, RxCtxs: uint16(len(e.rx)), Queues: uint16(e.queues), FirstQueue: uint16(e.dev.first),
		Policy: policy, AuthKey: e.authKey, OwnerPid: owner.PID, OwnerStart: owner.Start}
	if e.attr.Charged {
		val.Flags |= bpf.EPFCharged
		val.OwnerUid = e.attr.ChargedUID
	}
	if err := e.dp.PutEndpoint(e.key, val, ebpf.UpdateNoExist); err != nil {
		e.clearSlots(base, n)
		if e.unwatch != nil {
			e.unwatch()
		}
		if errors.Is(err, ebpf.ErrKeyExist) {
			return fmt.Errorf("ep open: %v is bound by another endpoint: %w", e.attr.Local, fi.EADDRINUSE)
		}
		return fmt.Errorf("ep open: endpoint table: %w", err)
	}
	return nil
}

func (e *Endpoint) clearSlots(base, n uint32) {
	for i := range n {
		e.dp.XSKs.Delete(base + i)
	}
}

// Queues is the number of rx queues the endpoint listens on (0 for a nil
// Endpoint).
func (e *Endpoint) Queues() int {
	if e == nil {
		return 0
	}
	return e.queues
}

// Closed reports whether Close has been called, or the endpoint was never
// opened (a nil or zero Endpoint): whether it is unusable.
func (e *Endpoint) Closed() bool { return e == nil || e.dev == nil || e.closed.Load() }

// ID is the endpoint's id in the XDP program's endpoint table (the ep_id
// of the metadata in front of its frames); 0 for a nil Endpoint.
func (e *Endpoint) ID() uint32 {
	if e == nil {
		return 0
	}
	return e.id
}

// MaxMsgSize is the largest message the endpoint sends or receives (0 for
// a nil Endpoint), fi_info's max_msg_size: the interface's MTU when the
// endpoint opened less the IP, UDP and xdpfab headers (through the agent,
// the value the agent computed: HandoverInfo.MaxMsg).
func (e *Endpoint) MaxMsgSize() int {
	if e == nil {
		return 0
	}
	return e.maxMsg
}

// Threading reports the threading model the endpoint provides (0 for a
// nil or zero Endpoint): fi.ThreadDomain when it runs without locks
// (Attr.Threading), else fi.ThreadSafe.
func (e *Endpoint) Threading() fi.Threading {
	switch {
	case e == nil || e.dev == nil:
		return fi.ThreadUnspec
	case e.dev.unlocked:
		return fi.ThreadDomain
	}
	return fi.ThreadSafe
}

// RecvStats counts messages an endpoint dropped after taking them off its
// rings or channels (the kernel counts those it dropped before: Stats).
type RecvStats struct {
	// ParkDropped counts messages that arrived before a matching receive
	// and were dropped because their receive context, or the endpoint's
	// device, kept as many such messages as it may: the oldest unclaimed
	// one goes (or the new one, when every kept one is claimed).
	ParkDropped uint64
	// Unmatchable counts messages no receive could ever take: an
	// operation the endpoint lacks the capability for (a tagged message
	// without fi.Tagged, an untagged one without fi.Msg), or a kept
	// message whose AV entry was removed while it waited, on an endpoint
	// that drops messages from unknown sources.
	Unmatchable uint64
	// Unreadable counts received frames whose metadata or xdpfab header
	// the endpoint could not read: no frame of this release's XDP program,
	// e.g. of another metadata version (an interface still running the
	// program of an xdpfab release before or after this library's:
	// docs/OPERATIONS.md#the-pin-root-and-what-survives-a-restart).
	Unreadable uint64
}

// RecvStats returns the endpoint's receive drop counters (zero for a nil
// endpoint).
func (e *Endpoint) RecvStats() RecvStats {
	if e == nil {
		return RecvStats{}
	}
	return RecvStats{ParkDropped: e.parkDropped.Load(), Unmatchable: e.unmatchable.Load(), Unreadable: e.unreadable.Load()}
}

// Stats returns the sockets' kernel statistics summed.
func (e *Endpoint) Stats() (dataplane.Stats, error) {
	var sum dataplane.Stats
	if err := e.usable("ep stats"); err != nil {
		return sum, err
	}
	for _, rc := range e.rx {
		for _, s := range rc.socks {
			st, err := s.Stats()
			if err != nil {
				return sum, err
			}
			sum.RxDropped += st.RxDropped
			sum.RxInvalidDescs += st.RxInvalidDescs
			sum.TxInvalidDescs += st.TxInvalidDescs
			sum.RxRingFull += st.RxRingFull
			sum.RxFillRingEmptyDescs += st.RxFillRingEmptyDescs
			sum.TxRingEmptyDescs += st.TxRingEmptyDescs
		}
	}
	return sum, nil
}

// Close closes the endpoint: the endpoint-table entry goes first (no more
// redirects), then the XSKMAP slots, then the sockets, then the bindings.
// Posted receives are dropped without completions, as fi_close(3) allows.
// An adopted endpoint asks the agent to do the first two. Closing a closed
// endpoint returns nil, and so does closing a nil or zero one (nothing to
// release).
func (e *Endpoint) Close() error {
	if e == nil || e.dev == nil {
		return nil
	}
	e.closeMu.Lock()
	defer e.closeMu.Unlock()
	if e.closed.Swap(true) {
		return nil
	}
	if e.stop != nil {
		close(e.stop)
		<-e.done
	}
	e.shmClose()
	var errs []error
	if e.registered {
		errs = append(errs, e.deregister())
	}
	if e.claim != nil {
		e.claim.Close() // the address is free once XDP no longer redirects it
	}
	// A sharing domain's endpoint gives its frames back before the agent
	// takes back the rest (release, below); others let the agent stop
	// the redirects first.
	shared := e.dev.share != nil
	if e.release != nil && !shared {
		errs = append(errs, e.release())
	}
	if e.txcq != nil {
		e.dev.tx.remove(e)
	}
	// Wait out concurrent progress and posts (they re-check closed under
	// the context's lock) before the rings go away. Frames the endpoint
	// holds, parked or still on its receive rings, are the device's UMEM's:
	// they go back to their queues' fill rings, which outlive this endpoint.
	for _, rc := range e.rx {
		rc.mu.Lock()
		rc.drain()
		rc.msgs, rc.tagged = nil, nil
		if rc.cq != nil {
			rc.cq.Unbind()
			rc.cq = nil
		}
	}
	e.closeSockets()
	for _, rc := range e.rx {
		rc.mu.Unlock()
	}
	e.unbindCQs()
	if e.hops != nil {
		errs = append(errs, e.hops.Close())
	}
	e.uncountRx()
	errs = append(errs, releaseDevice(e.dev))
	if e.release != nil && shared {
		errs = append(errs, e.release())
	}
	if e.attr.AuthKey != 0 {
		e.av.ReleaseAuthKey(e.attr.AuthKey)
	}
	e.av.UnbindEndpoint()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ep close: %w", err)
	}
	return nil
}

// deregister removes the endpoint from the XDP program's tables.
func (e *Endpoint) deregister() error {
	unlock := e.dp.Lock()
	defer unlock()
	var err error
	// Only what is still this endpoint's: ReclaimDead may have taken it
	// (its owner process looked dead) and given its address, id and socket
	// slots to another endpoint since; deleting them would cut that one
	// off.
	var cur bpf.EPVal
	if lerr := e.dp.EP.Lookup(e.key, &cur); lerr != nil || cur.EpId != e.id || cur.XskBase != e.xskBase {
		if e.unwatch != nil {
			e.unwatch()
		}
		return nil
	}
	if derr := e.dp.DeleteEndpoint(e.key); derr != nil && !errors.Is(derr, ebpf.ErrKeyNotExist) {
		err = fmt.Errorf("endpoint table: %w", derr)
	}
	e.clearSlots(e.xskBase, uint32(len(e.rx)*e.queues))
	if e.unwatch != nil {
		e.unwatch()
	}
	return err
}
