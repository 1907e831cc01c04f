package dataplane

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
	"unsafe"

	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// BindMode chooses between copy and zero-copy AF_XDP. String prints auto,
// copy or zero-copy; an unknown value prints as BindMode(7).
type BindMode int

//go:generate go tool stringer -type BindMode -linecomment -output bindmode_string.go

const (
	// BindAuto tries zero-copy and falls back to copy mode, logging why
	// zero-copy was refused (veth, for one, has no zero-copy support).
	BindAuto BindMode = iota // auto
	// BindCopy forces copy mode (XDP_COPY).
	BindCopy // copy
	// BindZeroCopy forces zero-copy mode (XDP_ZEROCOPY) and fails without it.
	BindZeroCopy // zero-copy
)

// rebindTimeout bounds the EBUSY retries of bind: after an AF_XDP socket
// closes, the kernel releases its buffer pool from a work queue, and the
// device queue stays busy for 10-25 ms on an idle machine; on a loaded
// 2-vCPU VM 200 ms was not always enough.
const rebindTimeout = 2 * time.Second

// SocketConfig configures one AF_XDP socket. Zero fields take defaults.
type SocketConfig struct {
	// RxSize and TxSize are the RX and TX ring entries (powers of two,
	// default DefaultRingSize). -1 leaves the ring out; a socket needs one.
	RxSize, TxSize int
	// Mode is the bind mode of a UMEM's first socket on a device queue.
	// Later sockets sharing a UMEM inherit the first one's mode and
	// need_wakeup setting.
	Mode BindMode
	// DisableNeedWakeup binds without XDP_USE_NEED_WAKEUP: the kernel then
	// never says when it needs a wakeup, so Kick always makes a syscall.
	DisableNeedWakeup bool
	// BusyPoll > 0 enables busy polling: SO_PREFER_BUSY_POLL, SO_BUSY_POLL
	// (rounded to microseconds) and SO_BUSY_POLL_BUDGET. Receive and Kick
	// then make their syscalls whenever they find nothing to do, as those
	// syscalls are what drive the device's NAPI.
	BusyPoll time.Duration
	// BusyPollBudget is the packets per busy poll (default 64).
	BusyPollBudget int
	// TxBudget is the descriptors a copy-mode sendto transmits per call
	// (XDP_MAX_TX_SKB_BUDGET; kernel default 32). 0 keeps the default.
	TxBudget int
	// MultiBuffer binds with XDP_USE_SG (Linux 6.6+ in copy mode): a
	// packet longer than a frame's room (FrameSize - PacketHeadroom -
	// Headroom) is received as a chain of descriptors, and may be sent as
	// one (Desc, PktContd). Without it the kernel drops such a packet and
	// counts it in Stats.RxDropped. Like Mode, it is the UMEM's first
	// socket's: later sockets of the UMEM inherit it (the kernel takes no
	// flags for a shared binding). A kernel that refuses it (EINVAL) gets
	// a binding without it, logged: Socket.MultiBuffer says which.
	MultiBuffer bool
	// Logger receives the zero-copy fallback reason and rebind retries
	// (default slog.Default()).
	Logger *slog.Logger
}

func (c SocketConfig) withDefaults() (SocketConfig, error) {
	if c.RxSize == 0 {
		c.RxSize = DefaultRingSize
	}
	if c.TxSize == 0 {
		c.TxSize = DefaultRingSize
	}
	if c.BusyPoll > 0 && c.BusyPollBudget == 0 {
		c.BusyPollBudget = 64
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	ok := func(n int) bool { return n == -1 || isPow2(n) }
	switch {
	case !ok(c.RxSize) || !ok(c.TxSize):
		return c, fmt.Errorf("rx ring %d, tx ring %d: sizes must be powers of two (or -1 for none): %w", c.RxSize, c.TxSize, fi.EINVAL)
	case c.RxSize == -1 && c.TxSize == -1:
		return c, fmt.Errorf("socket needs an rx or a tx ring: %w", fi.EINVAL)
	case c.Mode < BindAuto || c.Mode > BindZeroCopy:
		return c, fmt.Errorf("bind mode %d: %w", c.Mode, fi.EINVAL)
	}
	return c, nil
}

// Socket is an AF_XDP socket bound to one device queue, with its RX and TX
// rings and (shared with other sockets of its UMEM on the same queue) a fill
// and a completion ring.
//
// A socket has two sides that may run on two goroutines at once: receive
// (Receive, Fill, FillFree, Poll) and transmit (Transmit, Kick, Complete,
// CompleteFree). Each side is single-threaded, and sockets sharing a device
// queue share its fill and completion rings, so their receive (transmit)
// sides must not run concurrently either. FD, Stats and the accessors may be
// called at any time before Close; nothing may run concurrently with Close.
type Socket struct {
	fd       int
	ino      uint64 // the socket's inode: one kernel socket, however many fds
	umem     *UMEM
	q        *queueRings
	rx       ring[Desc]
	tx       ring[Desc]
	ifindex  int
	queue    int
	zeroCopy bool
	wakeup   bool // bound with XDP_USE_NEED_WAKEUP
	sg       bool // bound with XDP_USE_SG (or sharing a UMEM that is)
	busyPoll bool
	pfd      [1]unix.PollFd
}

// Open creates an AF_XDP socket on umem and binds it to queue of the device
// ifindex, in the network namespace of the calling thread.
//
// The first socket of a UMEM registers it; later ones bind with
// XDP_SHARED_UMEM. Sockets of one UMEM on the same device queue share that
// queue's fill and completion rings (the kernel requires it: Fill on any of
// them feeds all); a socket on another queue gets a ring pair of its own.
// An XDP program picks among sockets of one queue through an XSKMAP.
//
// A bind that fails with EBUSY (the queue's previous socket is still being
// released) is retried for up to 2 s.
//
// On a UMEM from AttachUMEM, which must never be registered, Open needs an
// adopted socket to share the registration of (XDP_SHARED_UMEM) and fails
// with EINVAL without one; creating a socket needs CAP_NET_RAW anyway.
func Open(ifindex, queue int, umem *UMEM, cfg SocketConfig) (*Socket, error) {
	cfg, err := cfg.withDefaults()
	if err == nil {
		err = umem.usable()
	}
	if err != nil {
		return nil, fmt.Errorf("xsk open ifindex %d queue %d: %w", ifindex, queue, err)
	}
	umem.mu.Lock()
	defer umem.mu.Unlock()
	if umem.closed {
		return nil, fmt.Errorf("xsk open ifindex %d queue %d: umem closed: %w", ifindex, queue, fi.EINVAL)
	}
	s, err := umem.open(ifindex, queue, cfg)
	if err != nil {
		return nil, fmt.Errorf("xsk open ifindex %d queue %d: %w", ifindex, queue, err)
	}
	return s, nil
}

func (u *UMEM) open(ifindex, queue int, cfg SocketConfig) (_ *Socket, err error) {
	if u.attached && len(u.sockets) == 0 {
		return nil, fmt.Errorf("attached UMEM has no adopted socket to share the registration of (it must not be registered twice): %w", fi.EINVAL)
	}
	fd, err := xskSocket()
	if err != nil {
		return nil, fmt.Errorf("socket: %w", errnoOf(err))
	}
	s := &Socket{fd: fd, umem: u, ifindex: ifindex, queue: queue, busyPoll: cfg.BusyPoll > 0}
	var q *queueRings
	newQueue := false
	defer func() {
		if err != nil {
			s.unmapRings(q, newQueue)
			unix.Close(fd)
		}
	}()

	if s.ino, err = inodeOf(fd); err != nil {
		return nil, fmt.Errorf("fstat: %w", errnoOf(err))
	}
	ns, err := netnsOf(fd)
	if err != nil {
		return nil, fmt.Errorf("socket netns: %w", errnoOf(err))
	}
	key := queueKey{netns: ns, ifindex: ifindex, queue: queue}
	shareFD := -1
	if len(u.sockets) == 0 {
		if err := u.register(fd); err != nil {
			return nil, err
		}
	}
	q = u.queues[key]
	if q == nil {
		q = &queueRings{key: key}
		newQueue = true
		if len(u.sockets) > 0 {
			shareFD = u.sockets[0].fd
		}
		if err := setRingSize(fd, optUmemFillRing, u.cfg.FillSize); err != nil {
			return nil, err
		}
		if err := setRingSize(fd, optUmemCompletionRing, u.cfg.CompSize); err != nil {
			return nil, err
		}
	} else {
		for _, o := range u.sockets {
			if o.q == q {
				shareFD = o.fd
				break
			}
		}
	}
	if cfg.RxSize > 0 {
		if err := setRingSize(fd, optRxRing, cfg.RxSize); err != nil {
			return nil, err
		}
	}
	if cfg.TxSize > 0 {
		if err := setRingSize(fd, optTxRing, cfg.TxSize); err != nil {
			return nil, err
		}
	}
	if err := setSockopts(fd, cfg); err != nil {
		return nil, err
	}

	var off xdpMmapOffsets
	if _, err := getsockoptPtr(fd, solXDP, optMmapOffsets, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return nil, fmt.Errorf("XDP_MMAP_OFFSETS: %w", errnoOf(err))
	}
	if cfg.RxSize > 0 {
		if s.rx, err = mapRing[Desc](fd, pgoffRxRing, uint32(cfg.RxSize), off.Rx); err != nil {
			return nil, fmt.Errorf("mmap rx ring: %w", errnoOf(err))
		}
	}
	if cfg.TxSize > 0 {
		if s.tx, err = mapRing[Desc](fd, pgoffTxRing, uint32(cfg.TxSize), off.Tx); err != nil {
			return nil, fmt.Errorf("mmap tx ring: %w", errnoOf(err))
		}
	}
	if newQueue {
		if q.fill, err = mapRing[uint64](fd, pgoffUmemFillRing, uint32(u.cfg.FillSize), off.Fr); err != nil {
			return nil, fmt.Errorf("mmap fill ring: %w", errnoOf(err))
		}
		if q.comp, err = mapRing[uint64](fd, pgoffUmemCompletionRing, uint32(u.cfg.CompSize), off.Cr); err != nil {
			return nil, fmt.Errorf("mmap completion ring: %w", errnoOf(err))
		}
	}

	if err := s.bind(shareFD, cfg); err != nil {
		return nil, err
	}
	if shareFD >= 0 {
		// A shared binding inherits need_wakeup and multi-buffer from
		// the UMEM's first.
		s.wakeup, s.sg = u.sockets[0].wakeup, u.sockets[0].sg
	}
	var opts struct{ flags uint32 }
	if _, err := getsockoptPtr(fd, solXDP, optOptions, unsafe.Pointer(&opts), unsafe.Sizeof(opts)); err == nil {
		s.zeroCopy = opts.flags&optionsZeroCopy != 0
	}
	u.add(s, q, newQueue)
	return s, nil
}

func setRingSize(fd, opt, size int) error {
	if err := unix.SetsockoptInt(fd, solXDP, opt, size); err != nil {
		return fmt.Errorf("set %s size %d: %w", ringOptName[opt], size, errnoOf(err))
	}
	return nil
}

var ringOptName = map[int]string{
	optRxRing:             "rx ring",
	optTxRing:             "tx ring",
	optUmemFillRing:       "fill ring",
	optUmemCompletionRing: "completion ring",
}

func setSockopts(fd int, cfg SocketConfig) error {
	if cfg.BusyPoll > 0 {
		usec := max(1, int(cfg.BusyPoll/time.Microsecond))
		for _, o := range []struct {
			name     string
			opt, val int
		}{
			{"SO_PREFER_BUSY_POLL", soPreferBusyPoll, 1},
			{"SO_BUSY_POLL", soBusyPoll, usec},
			{"SO_BUSY_POLL_BUDGET", soBusyPollBudget, cfg.BusyPollBudget},
		} {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o.opt, o.val); err != nil {
				return fmt.Errorf("%s %d: %w", o.name, o.val, errnoOf(err))
			}
		}
	}
	if cfg.TxBudget > 0 {
		if err := unix.SetsockoptInt(fd, solXDP, optMaxTxSkbBudget, cfg.TxBudget); err != nil {
			return fmt.Errorf("XDP_MAX_TX_SKB_BUDGET %d: %w", cfg.TxBudget, errnoOf(err))
		}
	}
	return nil
}

// bind binds the socket, sharing shareFD's UMEM if shareFD >= 0, retrying
// EBUSY, and falling back from zero-copy to copy in BindAuto mode.
func (s *Socket) bind(shareFD int, cfg SocketConfig) error {
	sa := &sockaddrXDP{Ifindex: uint32(s.ifindex), QueueID: uint32(s.queue)}
	if shareFD >= 0 {
		// Mode and need_wakeup come from the UMEM's existing binding.
		sa.Flags = sxdpSharedUmem
		sa.SharedUmemFD = uint32(shareFD)
		return s.bindRetry(sa, cfg.Logger)
	}
	var wake uint16
	if !cfg.DisableNeedWakeup {
		wake = sxdpUseNeedWakeup
	}
	s.wakeup = wake != 0
	if cfg.MultiBuffer {
		s.sg = true
		err := s.bindMode(sa, cfg, wake|sxdpUseSG)
		if !errors.Is(err, fi.EINVAL) {
			return err
		}
		cfg.Logger.Info("AF_XDP multi-buffer (XDP_USE_SG) refused, binding without it",
			"ifindex", s.ifindex, "queue", s.queue, "reason", err)
		s.sg = false
	}
	return s.bindMode(sa, cfg, wake)
}

// bindMode binds in cfg.Mode with the flags extra.
func (s *Socket) bindMode(sa *sockaddrXDP, cfg SocketConfig, extra uint16) error {
	switch cfg.Mode {
	case BindCopy:
		sa.Flags = sxdpCopy | extra
		return s.bindRetry(sa, cfg.Logger)
	case BindZeroCopy:
		sa.Flags = sxdpZeroCopy | extra
		return s.bindRetry(sa, cfg.Logger)
	}
	sa.Flags = sxdpZeroCopy | extra
	err := s.bindRetry(sa, cfg.Logger)
	if err == nil || errors.Is(err, fi.EBUSY) || errors.Is(err, fi.ENODEV) {
		return err
	}
	cfg.Logger.Info("AF_XDP zero-copy refused, binding in copy mode",
		"ifindex", s.ifindex, "queue", s.queue, "reason", err)
	sa.Flags = sxdpCopy | extra
	return s.bindRetry(sa, cfg.Logger)
}

func (s *Socket) bindRetry(sa *sockaddrXDP, log *slog.Logger) error {
	start := time.Now()
	pause := 500 * time.Microsecond
	for attempt := 1; ; attempt++ {
		err := xskBind(s.fd, sa)
		if err == nil {
			if attempt > 1 {
				log.Debug("AF_XDP bind succeeded after EBUSY",
					"ifindex", s.ifindex, "queue", s.queue, "attempts", attempt, "waited", time.Since(start))
			}
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Since(start) > rebindTimeout {
			return fmt.Errorf("bind %s (flags %#x) after %d attempts: %w",
				bindModeName(sa.Flags), sa.Flags, attempt, errnoOf(err))
		}
		time.Sleep(pause)
		pause = min(2*pause, 2*time.Millisecond)
	}
}

func bindModeName(flags uint16) string {
	switch {
	case flags&sxdpSharedUmem != 0:
		return "shared-umem"
	case flags&sxdpZeroCopy != 0:
		return "zero-copy"
	case flags&sxdpCopy != 0:
		return "copy"
	}
	return "default"
}

// usable is the guard of the methods with an error result: a nil *Socket,
// or one that did not come from Open or AdoptSocket (its zero value, with
// no UMEM), is fi.EINVAL; a closed one is fi.EBADF.
func (s *Socket) usable(op string) error {
	switch {
	case s == nil:
		return fmt.Errorf("%s: nil socket: %w", op, fi.EINVAL)
	case s.umem == nil:
		return fmt.Errorf("%s: socket not opened (zero value): %w", op, fi.EINVAL)
	case s.fd < 0:
		return fmt.Errorf("%s: socket closed: %w", op, fi.EBADF)
	}
	return nil
}

// FD is the socket's file descriptor, for an XSKMAP entry
// (map.Update(key, uint32(fd))) or an event loop. It stays owned by the
// Socket. It is -1 after Close and for a nil or zero Socket.
func (s *Socket) FD() int {
	if s == nil || s.umem == nil {
		return -1
	}
	return s.fd
}

// UMEM is the UMEM the socket uses (nil for a nil Socket).
func (s *Socket) UMEM() *UMEM {
	if s == nil {
		return nil
	}
	return s.umem
}

// Ifindex and Queue name the device queue the socket is bound to.
func (s *Socket) Ifindex() int {
	if s == nil {
		return 0
	}
	return s.ifindex
}

// Queue is the device queue index the socket is bound to.
func (s *Socket) Queue() int {
	if s == nil {
		return 0
	}
	return s.queue
}

// ZeroCopy reports whether the kernel bound the socket in zero-copy mode.
func (s *Socket) ZeroCopy() bool { return s != nil && s.zeroCopy }

// MultiBuffer reports that the socket is bound with XDP_USE_SG, itself or
// through the UMEM it shares (SocketConfig.MultiBuffer).
func (s *Socket) MultiBuffer() bool { return s != nil && s.sg }

// Fill gives frames to the kernel for receiving, as many of addrs as the
// fill ring has room for, and returns how many it took.
func (s *Socket) Fill(addrs []uint64) int {
	if s == nil || s.q == nil {
		return 0
	}
	f := &s.q.fill
	n := f.free(uint32(len(addrs)))
	for i := range n {
		f.put(i, addrs[i])
	}
	f.submit(n)
	return int(n)
}

// FillFree moves frames from the UMEM's free list to the fill ring until one
// runs out, and returns how many it moved.
func (s *Socket) FillFree() int {
	if s == nil || s.q == nil {
		return 0
	}
	f := &s.q.fill
	room := f.free(f.size)
	if room == 0 {
		return 0
	}
	u := s.umem
	u.freeMu.Lock()
	got := u.popLocked(min(int(room), len(u.free)))
	for i, a := range got {
		f.put(uint32(i), a)
	}
	u.freeMu.Unlock()
	f.submit(uint32(len(got)))
	return len(got)
}

// Receive takes up to len(descs) received packets off the RX ring and
// returns how many. Each packet's frame belongs to the caller until it is
// given back with Fill or UMEM.Free. Receive never blocks; when the ring is
// empty it wakes the kernel (Wake) and looks again.
func (s *Socket) Receive(descs []Desc) int {
	if n := s.Take(descs); n > 0 || !s.Wake() {
		return n
	}
	return s.Take(descs)
}

// Take is Receive without the wake-up: it only reads the RX ring and never
// makes a system call, so a caller may hold a lock around it that it would
// not hold across one.
func (s *Socket) Take(descs []Desc) int { return s.take(nil, 0, descs) }

// take reads the RX ring into descs; with a ShareBlock it marks the frames
// as slot's before the consumer index moves past them (TakeShared).
func (s *Socket) take(b *ShareBlock, slot int, descs []Desc) int {
	if s == nil {
		return 0
	}
	r := &s.rx
	if r.mem == nil {
		return 0
	}
	n := r.avail(uint32(len(descs)))
	for i := range n {
		descs[i] = r.get(i)
	}
	if b != nil {
		b.Mark(slot, descs[:n])
	}
	r.release(n)
	return int(n)
}

// Ready reports whether the RX ring holds descriptors to Take. Like Take,
// it is for the ring's one consumer.
func (s *Socket) Ready() bool {
	if s == nil || s.rx.mem == nil {
		return false
	}
	return s.rx.avail(1) > 0
}

// Wake makes the kernel look at the socket's queue (one recvfrom) if the
// fill ring asks for a wakeup or busy polling is on, and reports whether it
// did.
func (s *Socket) Wake() bool {
	if s == nil || s.q == nil || s.rx.mem == nil || (!s.busyPoll && !s.q.fill.needWakeup()) {
		return false
	}
	kickRx(s.fd)
	return true
}

// Poll waits until the RX ring has packets or timeout passes (a negative
// timeout waits forever), and reports whether packets are ready. It is the
// blocking companion of Receive; an interrupted wait returns false, nil.
func (s *Socket) Poll(timeout time.Duration) (bool, error) {
	if err := s.usable("xsk poll"); err != nil {
		return false, err
	}
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	s.pfd[0] = unix.PollFd{Fd: int32(s.fd), Events: unix.POLLIN}
	n, err := unix.Poll(s.pfd[:], ms)
	if err != nil {
		if errors.Is(err, unix.EINTR) {
			return false, nil
		}
		return false, fmt.Errorf("xsk poll ifindex %d queue %d: %w", s.ifindex, s.queue, errnoOf(err))
	}
	return n > 0 && s.pfd[0].Revents&unix.POLLIN != 0, nil
}

// Transmit puts up to len(descs) packets on the TX ring and returns how
// many it took; their frames belong to the kernel until Complete returns
// them. The packets leave only after Kick (in copy mode, Kick transmits).
func (s *Socket) Transmit(descs []Desc) int {
	if s == nil {
		return 0
	}
	r := &s.tx
	if r.mem == nil {
		return 0
	}
	n := r.free(uint32(len(descs)))
	for i := range n {
		r.put(i, descs[i])
	}
	r.submit(n)
	return int(n)
}

// TransmitPacket puts one packet on the TX ring: a chain of descriptors,
// each but the last with PktContd (on a MultiBuffer socket), all of them
// or, when the ring has no room for all, none (false).
func (s *Socket) TransmitPacket(descs []Desc) bool {
	if s == nil || s.tx.mem == nil || len(descs) == 0 {
		return false
	}
	r := &s.tx
	n := uint32(len(descs))
	if r.free(n) < n {
		return false
	}
	for i := range n {
		r.put(i, descs[i])
	}
	r.submit(n)
	return true
}

// Kick makes the kernel process the TX ring, with a sendto only if the
// kernel asked for a wakeup (or need_wakeup is off, or busy polling is on).
// In copy mode the kernel sends a bounded batch per call (TxBudget), so
// Kick repeats the call while the kernel makes progress. Transient
// conditions (EAGAIN with a full completion ring, EBUSY, ENOBUFS, ENETDOWN)
// are not errors: call Complete and Kick again.
func (s *Socket) Kick() error {
	if s == nil || s.umem == nil {
		return s.usable("xsk tx wakeup")
	}
	r := &s.tx
	if r.mem == nil {
		return nil
	}
	if s.wakeup && !s.busyPoll && !r.needWakeup() {
		return nil
	}
	left := r.pending()
	for {
		switch e := kickTx(s.fd); e {
		case 0:
			return nil
		case unix.EAGAIN:
			now := r.pending()
			if now == 0 || now >= left {
				return nil
			}
			left = now
		case unix.EBUSY, unix.ENOBUFS, unix.ENETDOWN, unix.EINTR:
			return nil
		default:
			return fmt.Errorf("xsk tx wakeup ifindex %d queue %d: %w", s.ifindex, s.queue, fi.Errno(e))
		}
	}
}

// Complete takes up to len(addrs) addresses of transmitted frames off the
// completion ring and returns how many. The frames belong to the caller
// again.
func (s *Socket) Complete(addrs []uint64) int {
	if s == nil || s.q == nil {
		return 0
	}
	c := &s.q.comp
	n := c.avail(uint32(len(addrs)))
	for i := range n {
		addrs[i] = c.get(i)
	}
	c.release(n)
	return int(n)
}

// CompleteFree moves every transmitted frame from the completion ring to
// the UMEM's free list and returns how many it moved.
func (s *Socket) CompleteFree() int {
	if s == nil || s.q == nil {
		return 0
	}
	c := &s.q.comp
	n := c.avail(c.size)
	if n == 0 {
		return 0
	}
	u := s.umem
	u.freeMu.Lock()
	for i := range n {
		u.freeLocked(c.get(i))
	}
	u.freeMu.Unlock()
	c.release(n)
	return int(n)
}

// TxPending is the number of TX descriptors the kernel has not taken yet.
func (s *Socket) TxPending() int {
	if s == nil || s.tx.mem == nil {
		return 0
	}
	return int(s.tx.pending())
}

// NeedWakeup reports the kernel's XDP_RING_NEED_WAKEUP flags on the fill
// ring (receive needs a recvfrom or poll) and the TX ring (transmit needs a
// sendto). They mean something only on a socket bound with need_wakeup
// (the kernel raises the TX flag at bind either way). In copy mode the TX
// flag stays up, as every copy-mode transmission happens inside sendto,
// and the fill flag stays down.
func (s *Socket) NeedWakeup() (fill, tx bool) {
	if s == nil || s.q == nil {
		return false, false
	}
	fill = s.q.fill.needWakeup()
	if s.tx.mem != nil {
		tx = s.tx.needWakeup()
	}
	return fill, tx
}

// Stats are the kernel's per-socket counters (XDP_STATISTICS).
type Stats struct {
	// RxDropped counts packets dropped for want of a frame on the fill
	// ring (full RX rings count in RxRingFull instead).
	RxDropped uint64
	// RxInvalidDescs and TxInvalidDescs count invalid descriptors.
	RxInvalidDescs uint64
	TxInvalidDescs uint64
	// RxRingFull counts packets dropped because the RX ring was full.
	RxRingFull uint64
	// RxFillRingEmptyDescs counts times the fill ring was found empty.
	RxFillRingEmptyDescs uint64
	// TxRingEmptyDescs counts times the TX ring was found empty.
	TxRingEmptyDescs uint64
}

// Stats reads the socket's XDP_STATISTICS.
func (s *Socket) Stats() (Stats, error) {
	var st xdpStatistics
	if err := s.usable("xsk stats"); err != nil {
		return Stats{}, err
	}
	if _, err := getsockoptPtr(s.fd, solXDP, optStatistics, unsafe.Pointer(&st), unsafe.Sizeof(st)); err != nil {
		return Stats{}, fmt.Errorf("xsk stats ifindex %d queue %d: %w", s.ifindex, s.queue, errnoOf(err))
	}
	return Stats{
		RxDropped:            st.Rx_dropped,
		RxInvalidDescs:       st.Rx_invalid_descs,
		TxInvalidDescs:       st.Tx_invalid_descs,
		RxRingFull:           st.Rx_ring_full,
		RxFillRingEmptyDescs: st.Rx_fill_ring_empty_descs,
		TxRingEmptyDescs:     st.Tx_ring_empty_descs,
	}, nil
}

// add records s, now ready, as a socket of u on device queue q (new to u
// when newQueue).
func (u *UMEM) add(s *Socket, q *queueRings, newQueue bool) {
	if newQueue {
		u.queues[q.key] = q
	}
	q.users++
	s.q = q
	u.sockets = append(u.sockets, s)
}

// unmapRings unmaps the socket's rx and tx rings and, with queueToo, the
// fill and completion rings of its device queue q. Rings never mapped are
// skipped.
func (s *Socket) unmapRings(q *queueRings, queueToo bool) error {
	errs := []error{s.rx.unmap(), s.tx.unmap()}
	if queueToo {
		errs = append(errs, q.fill.unmap(), q.comp.unmap())
	}
	return errors.Join(errs...)
}

// Close unmaps the socket's rings and closes it; the device queue becomes
// free once the kernel has released it (see Open's EBUSY retry). The fill
// and completion rings of a device queue are unmapped with the queue's last
// socket: until then the kernel keeps the socket they were mapped through
// alive, so remove a socket from XSKMAPs before closing it. When the UMEM's
// last socket closes, every frame returns to its free list, and a UMEM
// already closed is unmapped. Close is idempotent, and closing a nil or
// zero Socket returns nil: there is nothing to release.
func (s *Socket) Close() error {
	if s == nil || s.umem == nil {
		return nil
	}
	u := s.umem
	u.mu.Lock()
	defer u.mu.Unlock()
	if s.fd < 0 {
		return nil
	}
	last := false
	if q := s.q; q != nil {
		if q.users--; q.users == 0 {
			last = true
			delete(u.queues, q.key)
		}
	}
	errs := []error{s.unmapRings(s.q, last), unix.Close(s.fd)}
	// The fill and completion rings may be unmapped now: the ring methods
	// see a closed socket as one without them.
	s.fd, s.q = -1, nil
	u.sockets = slices.DeleteFunc(u.sockets, func(o *Socket) bool { return o == s })
	if len(u.sockets) == 0 {
		u.resetFree()
		if u.closed {
			errs = append(errs, u.releaseLocked())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("xsk close ifindex %d queue %d: %w", s.ifindex, s.queue, err)
	}
	return nil
}
