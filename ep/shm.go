package ep

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wire"
)

// Same-host peers. A datagram to an address of this host never reaches the
// XDP program (the kernel loops it back), so an endpoint sends to an
// endpoint of the same node through a shared-memory channel instead (see
// shm_ring.go for the layout): one per (sending endpoint, destination
// address:port), set up on the first send by a party that can vouch for
// the sender's address, which the receiver learns from that party and
// never from the channel's bytes:
//
//   - in one process, between endpoints it opened with Open (this file's
//     registry): the process itself;
//   - between endpoints opened through the agent (Adopt and EnableLocal,
//     whatever their processes): the agent, which created both and knows
//     their addresses (LocalBroker).
//
// The receiver translates that address through its own AV as the XDP
// program would (av.SourceOf), applies the same auth-key check and
// unknown-source policy, and hands the message to the same matching as
// frames. Its progress reads one counter per channel (the sender's tail)
// and the doorbell's generation, which announces new channels. A receiver
// that sleeps in poll(2) (automatic progress) marks its channels
// "sleeping" first; a sender that sees the mark writes a byte to the
// receiver's wake-up pipe (a write end of its own: see newWaker).

// MaxShmChannels bounds the channels one endpoint sends on, and those it
// receives on: a further one fails with fi.EDQUOT.
const MaxShmChannels = 64

// shmQuota is MaxShmChannels, lowered by tests.
var shmQuota = MaxShmChannels

// shmMaxParked bounds the same-host messages a receive context holds for
// want of a matching receive, and shmParkBytes the bytes an endpoint's
// contexts hold together beyond parkFloor messages each: past either, the
// oldest unclaimed message is dropped to make room (counted, as rxCtx.park
// does with frames); when every one is claimed the rest wait in their
// channels (whose senders then see EAGAIN).
const (
	shmMaxParked = 256
	shmParkBytes = 4 << 20
)

// shmMaxSpare bounds the buffers of dropped or delivered parked messages a
// context keeps for reuse.
const shmMaxSpare = 16

// LocalChannelInfo describes a same-host channel, as the party that set it
// up (the agent) tells each side, next to the channel's memfd. Plain data,
// for the agent's protocol.
type LocalChannelInfo struct {
	ID uint64 `json:"id"`
	// Src is the sender's address as the receiver's AV would see it on the
	// wire: its endpoint's address, or for a wildcard endpoint the
	// destination address (the kernel's source for a local route) with its
	// port.
	Src netip.AddrPort `json:"src"`
	// Dest is the address:port the sender sends to.
	Dest     netip.AddrPort `json:"dest"`
	Slots    int            `json:"slots"`
	SlotSize int            `json:"slot_size"`
}

// LocalBroker sets up same-host channels for an endpoint opened through the
// agent (package client implements it on the agent's protocol).
type LocalBroker interface {
	// Connect asks for a channel from the endpoint to dest. The
	// descriptors are the channel's memfd and a write end of the
	// receiver's wake-up pipe for this endpoint alone; the endpoint owns
	// them.
	Connect(dest netip.AddrPort) (LocalChannelInfo, []int, error)
	// Accept returns the channels set up towards the endpoint since the
	// last call, with one memfd each, in order; the endpoint owns them.
	Accept() ([]LocalChannelInfo, []int, error)
}

// LocalStats counts an endpoint's same-host channels.
type LocalStats struct {
	// In and Out are the channels it receives and sends on.
	In, Out int
	// Dropped counts messages dropped as the XDP program drops frames:
	// unknown sources under DropUnknown, receive contexts that do not
	// exist.
	Dropped uint64
	// BadChannels counts channels closed because their sender wrote what
	// no honest sender writes (lengths, headers or indexes out of bounds).
	BadChannels uint64
}

// shmState is an endpoint's same-host side.
type shmState struct {
	e      *Endpoint
	broker LocalBroker // nil: channels within this process (the registry)
	evfd   int         // its wake-up pipe's read end: senders write to it while it sleeps
	evw    int         // a write end of that pipe, in-process only (-1: the agent's)
	bell   *atomic.Uint64
	bellB  []byte        // the agent's doorbell page, mapped; nil in-process
	local  atomic.Uint64 // the in-process doorbell
	seen   atomic.Uint64 // the doorbell's value last acted on (stored under rxMu)
	nin    atomic.Int32

	// Sending: the channels by destination, replaced whole under outMu,
	// read without a lock; a channel's state is guarded by the device's
	// tx.mu, like every send.
	outMu    sync.Mutex
	out      atomic.Pointer[map[netip.AddrPort]*shmTx]
	notLocal map[netip.AddrPort]int64 // unroutable, not an endpoint of the node, until (outMu)

	// Receiving, guarded by rxMu.
	rxMu sync.Mutex
	in   []*shmRx

	// In-process channels handed over, not yet taken (pendMu).
	pendMu  sync.Mutex
	pending []*shmRx
	closed  bool // under pendMu

	// Per receive context: messages waiting for a matching receive, and
	// spare buffers, guarded by that context's mu.
	parked  [][]shmParked
	spare   [][][]byte
	pstale  []bool // per context: as rxCtx.stale
	nparked atomic.Int32
	pbytes  atomic.Int64 // the parked messages' buffers' capacity

	dropped, bad atomic.Uint64
}

// shmTx is the sending side of a channel.
type shmTx struct {
	m    shmMem
	tail uint64
	evfd int // a write end of the receiver's wake-up pipe
	dest netip.AddrPort
	own  bool // m.b is a mapping of this process
}

// shmRx is the receiving side of a channel.
type shmRx struct {
	m    shmMem
	head uint64
	src  netip.AddrPort
	own  bool
}

type shmParked struct {
	h     wire.Hdr
	src   shmSrc
	data  []byte
	claim any // FI_PEEK|FI_CLAIM's context, as frameRef.claim
}

// shmSrc is a message's source as the XDP program's metadata would give
// it.
type shmSrc struct {
	fa    fi.Addr
	uid   fi.Addr
	known bool
	user  bool
	addr  netip.AddrPort
}

var (
	errShmFull = fmt.Errorf("ep send: same-host channel full: %w", fi.EAGAIN)
	errShmGone = errors.New("same-host channel closed by its receiver")
)

func newShmState(e *Endpoint, broker LocalBroker) *shmState {
	s := &shmState{e: e, broker: broker, evfd: -1, evw: -1, parked: make([][]shmParked, len(e.rx)), spare: make([][][]byte, len(e.rx)), pstale: make([]bool, len(e.rx))}
	s.bell = &s.local
	return s
}

// shmOpen gives an endpoint this process opened its same-host side and
// makes it reachable by the process's other endpoints.
func (e *Endpoint) shmOpen() error {
	s := newShmState(e, nil)
	var err error
	if s.evfd, s.evw, err = newWaker(); err != nil {
		return fmt.Errorf("ep open: %w", err)
	}
	e.shm.Store(s)
	shmReg.Lock()
	shmReg.m[e.shmKey()] = e
	shmReg.Unlock()
	return nil
}

// EnableLocal lets an endpoint opened through the agent send to and
// receive from endpoints of the same node: b sets channels up, fds are the
// endpoint's doorbell (a memfd page whose first word the agent increments
// when a channel to the endpoint is set up) and the read end of its
// wake-up pipe, which the endpoint owns from now on, whatever the outcome.
// Package client calls it after Adopt.
func (e *Endpoint) EnableLocal(b LocalBroker, fds []int) (err error) {
	defer func() {
		if err != nil {
			for _, fd := range fds {
				closeFD(fd)
			}
		}
	}()
	if err := e.usable("ep enable local"); err != nil {
		return err
	}
	switch {
	case b == nil || len(fds) != 2:
		return fmt.Errorf("ep enable local: need a broker and 2 descriptors, have %d: %w", len(fds), fi.EINVAL)
	case e.closed.Load():
		return fmt.Errorf("ep enable local: endpoint closed: %w", fi.EOPBADSTATE)
	case e.shm.Load() != nil:
		return fmt.Errorf("ep enable local: already enabled: %w", fi.EALREADY)
	}
	if err := checkPipe(fds[1], true); err != nil {
		return fmt.Errorf("ep enable local: %w", err)
	}
	mem, err := mapSealed(fds[0], 4096)
	if err != nil {
		return fmt.Errorf("ep enable local: doorbell: %w", err)
	}
	closeFD(fds[0])
	s := newShmState(e, b)
	s.bellB, s.bell, s.evfd = mem, (*atomic.Uint64)(unsafe.Pointer(&mem[0])), fds[1]
	s.seen.Store(s.bell.Load())
	e.shm.Store(s)
	return nil
}

// LocalStats returns the endpoint's same-host counters (zero for a nil
// endpoint or one without same-host channels).
func (e *Endpoint) LocalStats() LocalStats {
	if e == nil {
		return LocalStats{}
	}
	s := e.shm.Load()
	if s == nil {
		return LocalStats{}
	}
	st := LocalStats{In: int(s.nin.Load()), Dropped: s.dropped.Load(), BadChannels: s.bad.Load()}
	if m := s.out.Load(); m != nil {
		st.Out = len(*m)
	}
	return st
}

// The registry of endpoints this process opened, by network namespace and
// bound address (the unspecified address for a wildcard).
type shmKey struct {
	netns uint64
	addr  netip.AddrPort
}

var shmReg = struct {
	sync.Mutex
	m    map[shmKey]*Endpoint
	next uint64
}{m: map[shmKey]*Endpoint{}}

func (e *Endpoint) shmKey() shmKey {
	l := e.attr.Local
	return shmKey{e.dev.key.netns, netip.AddrPortFrom(l.Addr().Unmap(), l.Port())}
}

// shmFind returns the endpoint of this process that receives datagrams to
// dest in network namespace netns: bound to it, else, if dest is known to
// be a local address (the kernel said so), the family's wildcard on its
// port.
func shmFind(netns uint64, dest netip.AddrPort, local bool) *Endpoint {
	ip := dest.Addr().Unmap()
	shmReg.Lock()
	defer shmReg.Unlock()
	if e := shmReg.m[shmKey{netns, netip.AddrPortFrom(ip, dest.Port())}]; e != nil || !local {
		return e
	}
	wild := netip.IPv6Unspecified()
	if ip.Is4() {
		wild = netip.IPv4Unspecified()
	}
	return shmReg.m[shmKey{netns, netip.AddrPortFrom(wild, dest.Port())}]
}

// ShmSource is the source a channel from an endpoint bound to local
// carries for a send to dest: local, or for a wildcard the destination's
// address with local's port (the kernel's source address on a local
// route).
func ShmSource(local, dest netip.AddrPort) netip.AddrPort {
	if local.Addr().IsUnspecified() {
		return netip.AddrPortFrom(dest.Addr().Unmap(), local.Port())
	}
	return netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
}

// newShmBytes allocates an in-process channel: Go memory, aligned to a
// cache line, freed by the collector once both sides let go.
func newShmBytes(n int) []byte {
	b := make([]byte, n+shmSlotAlign)
	off := int(uintptr(unsafe.Pointer(&b[0])) & (shmSlotAlign - 1))
	if off != 0 {
		off = shmSlotAlign - off
	}
	return b[off : off+n : off+n]
}

// connectInProcess sets up a channel to an endpoint of this process.
func (s *shmState) connectInProcess(dest netip.AddrPort, local bool) (*shmTx, error) {
	e := s.e
	r := shmFind(e.dev.key.netns, dest, local)
	if r == nil {
		return nil, fmt.Errorf("no endpoint of this process at %v (a local address; endpoints of other processes are reachable through the agent): %w", dest, fi.EADDRNOTAVAIL)
	}
	rs := r.shm.Load()
	if rs == nil {
		return nil, fmt.Errorf("endpoint at %v takes no same-host channels: %w", dest, fi.EADDRNOTAVAIL)
	}
	slotSize := shmSlotSize(e.maxMsg)
	m := shmMem{b: newShmBytes(shmSize(ShmSlots, slotSize)), slots: ShmSlots, slotSize: slotSize}
	ev, err := dupFD(rs.evw)
	if err != nil {
		return nil, fmt.Errorf("same-host channel to %v: %w", dest, err)
	}
	if err := rs.hand(&shmRx{m: m, src: ShmSource(e.attr.Local, dest)}); err != nil {
		closeFD(ev)
		return nil, err
	}
	return &shmTx{m: m, evfd: ev, dest: dest}, nil
}

// hand gives the receiver a new in-process channel and wakes it.
func (s *shmState) hand(rx *shmRx) error {
	s.pendMu.Lock()
	defer s.pendMu.Unlock()
	if s.closed {
		return fmt.Errorf("endpoint at %v closed: %w", s.e.attr.Local, fi.EADDRNOTAVAIL)
	}
	if n := int(s.nin.Load()) + len(s.pending); n >= shmQuota {
		return fmt.Errorf("endpoint at %v receives on %d same-host channels, its quota: %w", s.e.attr.Local, n, fi.EDQUOT)
	}
	s.pending = append(s.pending, rx)
	s.local.Add(1)
	signalFD(s.evw)
	return nil
}

// connect returns the channel to dest, setting it up on first use; local
// says the kernel called dest a local address (else it may be a remote
// one the endpoint has no route to).
func (s *shmState) connect(dest netip.AddrPort, local bool) (*shmTx, error) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	if s.e.closed.Load() {
		return nil, errClosed
	}
	old := s.out.Load()
	n := 0
	if old != nil {
		if tx := (*old)[dest]; tx != nil {
			return tx, nil
		}
		n = len(*old)
	}
	if n >= shmQuota {
		return nil, fmt.Errorf("the endpoint sends on %d same-host channels, its quota: %w", n, fi.EDQUOT)
	}
	var tx *shmTx
	if s.broker == nil {
		var err error
		if tx, err = s.connectInProcess(dest, local); err != nil {
			return nil, err
		}
	} else {
		info, fds, err := s.broker.Connect(dest)
		if err != nil {
			return nil, err
		}
		if tx, err = s.mapTx(info, fds); err != nil {
			return nil, err
		}
	}
	if s.e.closed.Load() {
		s.dropTx(tx)
		return nil, errClosed
	}
	m := make(map[netip.AddrPort]*shmTx, n+1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[dest] = tx
	s.out.Store(&m)
	return tx, nil
}

// mapTx maps a channel the agent set up (fds: memfd, a write end of the
// receiver's wake-up pipe of this sender's own).
func (s *shmState) mapTx(info LocalChannelInfo, fds []int) (*shmTx, error) {
	fail := func(err error) (*shmTx, error) {
		for _, fd := range fds {
			closeFD(fd)
		}
		return nil, fmt.Errorf("same-host channel to %v: %w", info.Dest, err)
	}
	if len(fds) != 2 {
		return fail(fmt.Errorf("%d descriptors, want 2: %w", len(fds), fi.EIO))
	}
	if err := checkShmShape(info.Slots, info.SlotSize); err != nil {
		return fail(err)
	}
	if err := checkPipe(fds[1], false); err != nil {
		return fail(err)
	}
	b, err := mapSealed(fds[0], shmSize(info.Slots, info.SlotSize))
	if err != nil {
		return fail(err)
	}
	closeFD(fds[0])
	return &shmTx{m: shmMem{b: b, slots: uint64(info.Slots), slotSize: info.SlotSize}, evfd: fds[1], dest: info.Dest, own: true}, nil
}

// dropTx closes the sending side of a channel. The caller holds the
// device's tx.mu (or the channel was never published).
func (s *shmState) dropTx(tx *shmTx) {
	tx.m.u32(shmSClosed).Store(1)
	closeFD(tx.evfd)
	tx.evfd = -1
	if tx.own {
		unmapShm(tx.m.b)
	}
	tx.m.b = nil
}

// forget removes dest's channel from the map (it is tx). The caller holds
// the device's tx.mu.
func (s *shmState) forget(dest netip.AddrPort, tx *shmTx) {
	s.outMu.Lock()
	defer s.outMu.Unlock()
	old := s.out.Load()
	if old == nil || (*old)[dest] != tx {
		return
	}
	m := make(map[netip.AddrPort]*shmTx, len(*old))
	for k, v := range *old {
		if k != dest {
			m[k] = v
		}
	}
	s.out.Store(&m)
	s.dropTx(tx)
}

// shmOut returns the channel to peer, if the endpoint has one: the send
// path's test for a same-host destination it already knows, one atomic
// load and a map read.
func (e *Endpoint) shmOut(peer netip.AddrPort) *shmTx {
	s := e.shm.Load()
	if s == nil {
		return nil
	}
	m := s.out.Load()
	if m == nil {
		return nil
	}
	return (*m)[peer]
}

// shmWants reports whether a send that neigh refused with err should try
// the same-host path: the destination is a local address (EADDRNOTAVAIL),
// or one the endpoint's interface has no route to (ENETUNREACH,
// EHOSTUNREACH: neigh asks for routes through the endpoint's interface,
// and another interface's address is local but not routed through it),
// unless the latter was found not to be an endpoint of the node within
// the last second.
func (e *Endpoint) shmWants(peer netip.AddrPort, err error) bool {
	s := e.shm.Load()
	switch {
	case s == nil:
		return false
	case errors.Is(err, fi.EADDRNOTAVAIL):
		return true
	case !errors.Is(err, fi.ENETUNREACH) && !errors.Is(err, fi.EHOSTUNREACH):
		return false
	}
	s.outMu.Lock()
	defer s.outMu.Unlock()
	until, ok := s.notLocal[peer]
	return !ok || time.Now().UnixNano() > until
}

// shmSendNew sets up the channel to peer, which neigh refused with hopErr,
// and sends on it. A destination that is no endpoint of the node fails
// with hopErr, unless that says the address is local.
func (e *Endpoint) shmSendNew(peer netip.AddrPort, hopErr error, opcode uint8, buf []byte, rxCtx uint8, group uint32, tag, data uint64, flags fi.Flags, ctx any) error {
	s := e.shm.Load()
	local := errors.Is(hopErr, fi.EADDRNOTAVAIL)
	tx, err := s.connect(peer, local)
	if err != nil {
		if errors.Is(err, fi.EADDRNOTAVAIL) && !local {
			s.outMu.Lock()
			if len(s.notLocal) >= 1024 || s.notLocal == nil {
				s.notLocal = map[netip.AddrPort]int64{}
			}
			s.notLocal[peer] = time.Now().Add(time.Second).UnixNano()
			s.outMu.Unlock()
			return fmt.Errorf("ep send to %v: %w", peer, hopErr)
		}
		return fmt.Errorf("ep send to %v: %w", peer, err)
	}
	return e.shmSend(tx, peer, opcode, buf, rxCtx, group, tag, data, flags, ctx, true)
}

// shmSend sends one message on a same-host channel. It completes like a
// send to a remote peer: a TX CQ entry unless FI_INJECT, EAGAIN while the
// TX CQ holds earlier completions it had no room for, EAGAIN when the
// channel is full. The data is in the receiver's memory when it returns:
// both completion levels are met at once. FI_MORE changes nothing (the
// message is visible to the receiver at once). A channel whose receiver
// went away is dropped and the send set up again (once).
func (e *Endpoint) shmSend(tx *shmTx, peer netip.AddrPort, opcode uint8, buf []byte, rxCtx uint8, group uint32, tag, data uint64, flags fi.Flags, ctx any, fresh bool) error {
	hdr := wire.Hdr{Op: opcode, RxCtx: rxCtx, Group: group, AuthKey: e.authKey, Tag: tag, CQData: data}
	if flags&fi.RemoteCQData != 0 {
		hdr.Flags |= wire.FlagCQData
	}
	report := flags&fi.Inject == 0 && (e.attr.SelectiveCompletion&fi.Transmit == 0 || flags&fi.Completion != 0)
	t := &e.dev.tx
	t.mu.Lock()
	if e.closed.Load() {
		t.unlock()
		return errClosed
	}
	if report && len(e.waiting) > 0 {
		e.flushWaiting()
		if len(e.waiting) > 0 {
			t.unlock()
			return errTxCQFull
		}
	}
	err := tx.put(hdr, buf)
	if err == errShmGone {
		e.shm.Load().forget(peer, tx)
		t.unlock()
		if fresh {
			return fmt.Errorf("ep send to %v: the local endpoint went away: %w", peer, fi.EADDRNOTAVAIL)
		}
		return e.shmSendNew(peer, fi.EADDRNOTAVAIL, opcode, buf, rxCtx, group, tag, data, flags, ctx)
	}
	if err == nil && report {
		op := txOp{e: e, ctx: ctx, flags: fi.Send | fi.Msg}
		if opcode == wire.OpTagged {
			op.flags = fi.Send | fi.Tagged
		}
		e.waiting = append(e.waiting, op)
		e.flushWaiting()
	}
	t.unlock()
	return err
}

// put publishes one message. The receiver's line is checked before use: a
// head that is ahead of the tail, or too far behind, means the receiver
// broke the channel.
func (tx *shmTx) put(h wire.Hdr, payload []byte) error {
	m := &tx.m
	if m.b == nil || m.u32(shmRClosed).Load() != 0 || m.u32(shmAClosed).Load() != 0 {
		return errShmGone
	}
	if len(payload) > m.slotSize-shmSlotHdr {
		return fmt.Errorf("ep send: %d bytes, the same-host channel takes %d: %w", len(payload), m.slotSize-shmSlotHdr, fi.EMSGSIZE)
	}
	used := tx.tail - m.u64(shmHead).Load()
	switch {
	case used > m.slots:
		return errShmGone
	case used == m.slots:
		return errShmFull
	}
	m.put(tx.tail, h, payload)
	tx.tail++
	m.u64(shmTail).Store(tx.tail)
	if m.u32(shmSleeping).Load() != 0 {
		signalFD(tx.evfd)
	}
	return nil
}

// shmPoll delivers what the endpoint's channels hold; see rxCtx.progress
// for blocked. Everything, the doorbell included, is read under rxMu,
// which Close takes before it unmaps anything.
func (e *Endpoint) shmPoll() (blocked bool) {
	s := e.shm.Load()
	if s == nil {
		return false
	}
	// Nothing to take, answered without rxMu: no channel in, and the
	// in-process doorbell (Go memory, never unmapped) not rung since.
	if s.broker == nil && s.nin.Load() == 0 && s.local.Load() == s.seen.Load() {
		return false
	}
	if !s.rxMu.TryLock() {
		return false
	}
	defer s.rxMu.Unlock()
	if e.closed.Load() {
		return false
	}
	if g := s.bell.Load(); g != s.seen.Load() {
		s.seen.Store(g)
		s.accept()
	}
	if len(s.in) == 0 {
		return false
	}
	kept := s.in[:0]
	for _, ch := range s.in {
		keep, full := s.drain(ch)
		blocked = blocked || full
		if keep {
			kept = append(kept, ch)
		} else {
			s.dropRx(ch)
		}
	}
	clear(s.in[len(kept):])
	s.in = kept
	s.nin.Store(int32(len(kept)))
	return blocked
}

// accept takes the channels set up towards the endpoint. The caller holds
// rxMu.
func (s *shmState) accept() {
	if s.broker == nil {
		s.pendMu.Lock()
		s.in = append(s.in, s.pending...)
		clear(s.pending)
		s.pending = s.pending[:0]
		s.pendMu.Unlock()
		s.nin.Store(int32(len(s.in)))
		return
	}
	infos, fds, err := s.broker.Accept()
	if err != nil {
		// The channels stay with the agent: the next ring (a further
		// channel) takes them all.
		s.e.attr.Logger.Warn("same-host channels: accept", "local", s.e.attr.Local, "err", err)
		return
	}
	for i, info := range infos {
		if i >= len(fds) {
			break
		}
		err := checkShmShape(info.Slots, info.SlotSize)
		var b []byte
		if err == nil {
			b, err = mapSealed(fds[i], shmSize(info.Slots, info.SlotSize))
		}
		closeFD(fds[i])
		if err != nil {
			s.bad.Add(1)
			s.e.attr.Logger.Warn("same-host channel refused", "local", s.e.attr.Local, "src", info.Src, "err", err)
			continue
		}
		s.in = append(s.in, &shmRx{m: shmMem{b: b, slots: uint64(info.Slots), slotSize: info.SlotSize}, src: info.Src, own: true})
	}
	for _, fd := range fds[min(len(infos), len(fds)):] {
		closeFD(fd)
	}
	s.nin.Store(int32(len(s.in)))
}

// dropRx closes the receiving side of a channel. The caller holds rxMu.
func (s *shmState) dropRx(ch *shmRx) {
	ch.m.u32(shmRClosed).Store(1)
	ch.m.u32(shmSleeping).Store(0)
	if ch.own {
		unmapShm(ch.m.b)
	}
	ch.m.b = nil
}

// drain delivers what channel ch holds, in order. keep is false when the
// channel is finished (its sender closed it and nothing is left) or
// broken; full when messages stay behind for want of room. The caller
// holds rxMu.
func (s *shmState) drain(ch *shmRx) (keep, full bool) {
	e := s.e
	m := &ch.m
	tail := m.u64(shmTail).Load()
	if tail-ch.head > m.slots {
		return s.broken(ch, "tail out of range"), false
	}
	defer m.u64(shmHead).Store(ch.head)
	for ch.head != tail {
		h, payload, ok := m.get(ch.head)
		if !ok {
			return s.broken(ch, "malformed slot"), false
		}
		if int(h.RxCtx) >= len(e.rx) {
			s.dropped.Add(1) // the XDP program drops it as malformed
			ch.head++
			continue
		}
		src, drop := e.shmSource(ch.src, h)
		if drop {
			s.dropped.Add(1)
			ch.head++
			continue
		}
		if !e.takes(h.Op) {
			e.unmatchable.Add(1) // as rxCtx.deliver: no receive can take it
			ch.head++
			continue
		}
		c := e.rx[h.RxCtx]
		c.mu.Lock()
		if e.closed.Load() || c.cq == nil {
			c.mu.Unlock()
			return true, false
		}
		n, err := c.cq.Reserve(1)
		if err != nil || n == 0 {
			c.mu.Unlock()
			return true, true
		}
		if !c.deliverLocal(h, payload, &src) && !s.park(int(h.RxCtx), h, payload, src) {
			c.cq.Commit()
			c.mu.Unlock()
			return true, true
		}
		c.cq.Commit()
		c.mu.Unlock()
		ch.head++
	}
	if m.u32(shmSClosed).Load() != 0 || m.u32(shmAClosed).Load() != 0 {
		return m.u64(shmTail).Load() != ch.head, false
	}
	return true, false
}

// broken counts and reports a channel whose sender wrote what no honest
// sender writes; it is closed, the others are not affected.
func (s *shmState) broken(ch *shmRx, why string) bool {
	s.bad.Add(1)
	s.e.attr.Logger.Warn("same-host channel closed: its sender broke it", "local", s.e.attr.Local, "src", ch.src, "why", why)
	return false
}

// shmSource translates a message's source as the XDP program does:
// forward lookup in the endpoint's AV, the auth-key check, then the
// unknown-source policy (drop reports true).
func (e *Endpoint) shmSource(addr netip.AddrPort, h wire.Hdr) (shmSrc, bool) {
	v, ok := e.av.SourceOf(addr)
	if ok && e.authKey != 0 && (v.AuthKey != e.authKey || h.AuthKey != e.authKey) {
		ok = false
	}
	if ok {
		return shmSrc{fa: v.FiAddr, uid: v.UserID, known: true, user: v.ReportUser, addr: addr}, false
	}
	if e.attr.Caps&fi.SourceErr == 0 && e.attr.DropUnknown {
		return shmSrc{}, true
	}
	return shmSrc{fa: fi.AddrNotAvail, addr: addr}, false
}

// deliverLocal is deliver (rx.go) for a message that is not in a UMEM
// frame: it matches it to a posted receive, copies it and writes its
// completion into the open reservation, or returns false when no receive
// matches. The completion is the one deliver writes for the same message
// from the same source. The caller holds c.mu.
func (c *rxCtx) deliverLocal(h wire.Hdr, payload []byte, src *shmSrc) bool {
	tagged := h.Op == wire.OpTagged
	q := &c.msgs
	if tagged {
		q = &c.tagged
	}
	i := c.match(*q, tagged, h, src.fa, src.known)
	if i < 0 {
		return false
	}
	comp := c.localComp(h, src)
	c.fill(&(*q)[i], q, i, payload, &comp)
	return true
}

// localComp is frameMsg's completion for a same-host message.
func (c *rxCtx) localComp(h wire.Hdr, src *shmSrc) cq.Completion {
	comp := cq.Completion{Src: src.fa}
	if src.known && src.user {
		comp.Src = src.uid
	}
	if !src.known {
		comp.Src, comp.SrcUnknown = fi.AddrNotAvail, true
		comp.SrcRaw = fi.EncodeSockaddr(c.raw[:0], src.addr)
	}
	msgFlags(&comp, &h)
	return comp
}

// park keeps a copy of a message no posted receive matches, for context
// ci (whose mu the caller holds), dropping the oldest unclaimed one when
// the context or the endpoint holds its limit (shmMaxParked,
// shmParkBytes); false when every one it holds is claimed.
func (s *shmState) park(ci int, h wire.Hdr, payload []byte, src shmSrc) bool {
	for len(s.parked[ci]) >= shmMaxParked ||
		len(s.parked[ci]) >= parkFloor && s.pbytes.Load()+int64(len(payload)) > shmParkBytes {
		p := s.parked[ci]
		i := slices.IndexFunc(p, func(m shmParked) bool { return m.claim == nil })
		if i < 0 {
			return false
		}
		s.e.parkDropped.Add(1)
		s.unpark(ci, i)
	}
	var b []byte
	if sp := s.spare[ci]; len(sp) > 0 {
		b, s.spare[ci] = sp[len(sp)-1], sp[:len(sp)-1]
	}
	b = append(b[:0], payload...)
	s.parked[ci] = append(s.parked[ci], shmParked{h: h, src: src, data: b})
	s.nparked.Add(1)
	s.pbytes.Add(int64(cap(b)))
	return true
}

// unpark removes context ci's parked message i, keeping its buffer for
// reuse (up to shmMaxSpare). The caller holds the context's mu.
func (s *shmState) unpark(ci, i int) {
	p := s.parked[ci]
	b := p[i].data
	s.pbytes.Add(-int64(cap(b)))
	s.nparked.Add(-1)
	if len(s.spare[ci]) < shmMaxSpare {
		s.spare[ci] = append(s.spare[ci], b)
	}
	if i == 0 {
		p[0] = shmParked{}
		s.parked[ci] = p[1:]
		return
	}
	s.parked[ci] = slices.Delete(p, i, i+1)
}

// shmPosted matches parked same-host messages to the receive numbered seq
// just posted on c (rx.go's post calls it, holding c.mu), as parked frames
// are.
func (e *Endpoint) shmPosted(c *rxCtx, seq uint64) {
	s := e.shm.Load()
	if s == nil || s.nparked.Load() == 0 {
		return
	}
	for ci, x := range e.rx {
		if x == c {
			if s.pstale[ci] {
				seq = 0
			}
			s.drainParked(c, ci, seq)
		}
	}
}

// drainParked delivers parked messages of context ci that now match, in
// arrival order; with only, to that receive alone (rxCtx.drainParked).
// A message whose AV entry was removed while it waited is from an unknown
// source now (rxCtx.frameMsg), dropped (counted) where the endpoint drops
// those. The caller holds c.mu.
func (s *shmState) drainParked(c *rxCtx, ci int, only uint64) {
	p := s.parked[ci]
	if len(p) == 0 {
		return
	}
	n, err := c.cq.Reserve(len(p))
	if err != nil || n == 0 {
		s.pstale[ci] = true
		return
	}
	short := false
	for i := 0; i < len(s.parked[ci]); {
		m := &s.parked[ci][i]
		if n == 0 {
			short = true
			break
		}
		if m.claim != nil {
			i++
			continue
		}
		if only != 0 {
			op, tagged := c.postedSeq(only)
			if op == nil {
				break
			}
			if tagged != (m.h.Op == wire.OpTagged) || !opMatches(op, tagged, m.h.Tag, m.h.Group, m.src.fa, m.src.known) {
				i++
				continue
			}
		}
		if m.src.known && !s.e.stillHolds(m.src.fa, m.src.addr) {
			m.src.known = false
			if s.e.dropsUnknown() {
				s.e.unmatchable.Add(1)
				s.unpark(ci, i)
				continue
			}
		}
		if c.deliverLocal(m.h, m.data, &m.src) {
			n--
			s.unpark(ci, i)
			continue
		}
		i++
	}
	if short {
		s.pstale[ci] = true
	} else if only == 0 {
		s.pstale[ci] = false
	}
	c.cq.Commit()
}

// shmStale drains c's parked same-host messages when a drain ran out of
// CQ room (pstale), as progress does for parked frames. The caller holds
// c.mu.
func (e *Endpoint) shmStale(c *rxCtx) {
	s := e.shm.Load()
	if s == nil || s.nparked.Load() == 0 {
		return
	}
	for ci, x := range e.rx {
		if x == c && s.pstale[ci] {
			s.drainParked(c, ci, 0)
		}
	}
}

// shmPollFD is the descriptor automatic progress polls beside the sockets
// (the read end of the endpoint's wake-up pipe), or -1.
func (e *Endpoint) shmPollFD() int {
	if s := e.shm.Load(); s != nil {
		return s.evfd
	}
	return -1
}

// shmSleep prepares the endpoint's channels for a sleep in poll(2): it
// marks them sleeping, so that senders write to its wake-up pipe, then checks
// them again. It reports false, and clears the marks, when something
// arrived meanwhile: do not sleep then.
func (e *Endpoint) shmSleep() bool {
	s := e.shm.Load()
	if s == nil {
		return true
	}
	s.rxMu.Lock()
	defer s.rxMu.Unlock()
	if e.closed.Load() {
		return true
	}
	for _, ch := range s.in {
		ch.m.u32(shmSleeping).Store(1)
	}
	ready := s.bell.Load() != s.seen.Load()
	for _, ch := range s.in {
		ready = ready || ch.m.u64(shmTail).Load() != ch.head
	}
	if ready {
		s.awakeLocked()
	}
	return !ready
}

// shmAwake clears the sleeping marks and drains the wake-up pipe after a
// sleep.
func (e *Endpoint) shmAwake() {
	s := e.shm.Load()
	if s == nil {
		return
	}
	s.rxMu.Lock()
	if !e.closed.Load() {
		s.awakeLocked()
	}
	s.rxMu.Unlock()
}

func (s *shmState) awakeLocked() {
	for _, ch := range s.in {
		ch.m.u32(shmSleeping).Store(0)
	}
	drainFD(s.evfd)
}

// shmClose closes the endpoint's same-host side: no new channels reach it,
// its peers see its channels closed. Endpoint.Close calls it once the
// endpoint is marked closed.
func (e *Endpoint) shmClose() {
	s := e.shm.Load()
	if s == nil {
		return
	}
	if s.broker == nil {
		shmReg.Lock()
		if shmReg.m[e.shmKey()] == e {
			delete(shmReg.m, e.shmKey())
		}
		shmReg.Unlock()
	}
	s.pendMu.Lock()
	s.closed = true
	pending := s.pending
	s.pending = nil
	s.pendMu.Unlock()
	t := &e.dev.tx
	t.mu.Lock()
	s.outMu.Lock()
	if m := s.out.Load(); m != nil {
		for _, tx := range *m {
			s.dropTx(tx)
		}
	}
	s.out.Store(nil)
	s.outMu.Unlock()
	t.unlock()
	s.rxMu.Lock()
	for _, ch := range append(s.in, pending...) {
		s.dropRx(ch)
	}
	s.in = nil
	s.nin.Store(0)
	for _, c := range e.rx {
		c.mu.Lock()
	}
	clear(s.parked)
	clear(s.spare)
	s.nparked.Store(0)
	s.pbytes.Store(0)
	for _, c := range e.rx {
		c.mu.Unlock()
	}
	closeFD(s.evfd)
	closeFD(s.evw)
	unmapShm(s.bellB)
	s.bellB = nil
	s.bell = &s.local
	s.rxMu.Unlock()
}
