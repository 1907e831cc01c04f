package dataplane

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// SocketInfo describes a bound socket to the process that will adopt it:
// what its creator configured and the kernel does not let the adopter read
// back. It is plain data, for the creator's protocol to encode (as JSON, for
// one) next to the socket's FD and the UMEM's Memfd. Socket.Info makes it;
// the adopter passes UMEM to AttachUMEM and Ifindex, Queue and Socket to
// AdoptSocket.
type SocketInfo struct {
	// Ifindex and Queue name the device queue the socket is bound to,
	// inside the socket's network namespace.
	Ifindex int `json:"ifindex"`
	Queue   int `json:"queue"`
	// ZeroCopy reports a zero-copy binding (else copy mode). AdoptSocket
	// reads it from the socket; it is here for the adopter's information.
	ZeroCopy bool `json:"zero_copy"`
	// UMEM is the socket's UMEM's configuration.
	UMEM UMEMConfig `json:"umem"`
	// Socket is what AdoptSocket needs to know about the socket.
	Socket AdoptConfig `json:"socket"`
}

// AdoptConfig describes a bound AF_XDP socket to AdoptSocket: the facts the
// kernel does not report back (ring sizes, need_wakeup, the socket's
// network namespace without CAP_NET_ADMIN). Take it from the creator's
// SocketInfo; it is plain data.
type AdoptConfig struct {
	// RxSize and TxSize are the entries of the socket's RX and TX rings as
	// its creator set them; 0 means the socket has no such ring. (Unlike
	// SocketConfig there is no default: the rings already exist.)
	RxSize int `json:"rx_size"`
	TxSize int `json:"tx_size"`
	// NeedWakeup says the UMEM's binding on the socket's queue uses
	// XDP_USE_NEED_WAKEUP. Without it Kick makes a syscall every time,
	// which is correct either way.
	NeedWakeup bool `json:"need_wakeup"`
	// MultiBuffer says the socket is bound with XDP_USE_SG (its own
	// binding or its UMEM's): packets longer than a frame come as chains
	// of descriptors (Desc, PktContd).
	MultiBuffer bool `json:"multi_buffer,omitempty"`
	// Netns is the inode number of the socket's network namespace. Sockets
	// of one UMEM on the same (namespace, ifindex, queue) share the
	// queue's fill and completion rings, so AdoptSocket must tell queues
	// of equal ifindex in different namespaces apart. Without
	// CAP_NET_ADMIN it cannot ask the kernel (SIOCGSKNS) and uses Netns;
	// with it, a Netns that disagrees with the kernel is an error. 0 takes
	// the calling thread's namespace, which is right only if the socket
	// lives there.
	Netns uint64 `json:"netns"`
	// Shared says the queue's fill and completion rings are shared with
	// other processes through a ShareBlock: they carry frames already,
	// and this process uses them only through the block (ShareBlock.Fill,
	// Complete), never with the Socket's own Fill and Complete.
	Shared bool `json:"shared,omitempty"`
}

func (c AdoptConfig) validate() error {
	ok := func(n int) bool { return n == 0 || isPow2(n) }
	switch {
	case !ok(c.RxSize) || !ok(c.TxSize):
		return fmt.Errorf("rx ring %d, tx ring %d: sizes must be powers of two (or 0 for none): %w", c.RxSize, c.TxSize, fi.EINVAL)
	case c.RxSize == 0 && c.TxSize == 0:
		return fmt.Errorf("socket needs an rx or a tx ring: %w", fi.EINVAL)
	}
	return nil
}

// Info describes the socket for AdoptSocket in another process (see
// SocketInfo). Call it before Close. A nil or zero Socket has the zero
// SocketInfo.
func (s *Socket) Info() SocketInfo {
	if s == nil || s.umem == nil {
		return SocketInfo{}
	}
	var ns uint64
	if s.q != nil {
		ns = s.q.key.netns
	}
	return SocketInfo{
		Ifindex:  s.ifindex,
		Queue:    s.queue,
		ZeroCopy: s.zeroCopy,
		UMEM:     s.umem.Config(),
		Socket: AdoptConfig{
			RxSize:      int(s.rx.size),
			TxSize:      int(s.tx.size),
			NeedWakeup:  s.wakeup,
			MultiBuffer: s.sg,
			Netns:       ns,
		},
	}
}

// AdoptSocket wraps fd, an AF_XDP socket that another process created,
// configured and bound on umem's memory (received with SCM_RIGHTS), so
// that this process runs its data path. umem comes from AttachUMEM over the
// same UMEM's memfd; ifindex, queue and cfg come from the creator's
// SocketInfo.
//
// AdoptSocket binds nothing and sets no socket option: it reads
// XDP_MMAP_OFFSETS, maps the socket's RX and TX rings, and, if umem has no
// socket on the device queue yet, the queue's fill and completion rings,
// which the kernel maps through any socket bound to the queue's buffer
// pool. Later sockets of the queue, adopted or opened with XDP_SHARED_UMEM,
// share them as with Open, in whatever order they are adopted. None of it
// needs a capability, nor RLIMIT_MEMLOCK: the rings were allocated and the
// UMEM registered and charged by the creator.
//
// The kernel checks a ring size larger than the real one (EINVAL); a
// smaller one it accepts, and AdoptSocket notices only if the real ring
// spans more pages. ifindex and queue cannot be checked (AF_XDP has no
// getsockname): they name the queue in umem's ring table and in errors.
// Zero-copy mode and busy polling are read from the socket.
//
// A socket is adopted unused, as Open left it: every frame of an attached
// UMEM starts free, so rings that already carried frames (the creator
// filled or transmitted, or an earlier adopter ran and died) make
// AdoptSocket fail with EBUSY: their frames cannot be accounted for (in
// zero-copy mode the driver holds some that no ring shows). Hand such a
// queue over again with new sockets, and a new UMEM.
//
// On success the Socket owns fd (set close-on-exec; Close unmaps the rings
// and closes it); on failure fd stays the caller's. The socket lives on in
// the kernel while its creator holds its own descriptor, and the creator
// must not use the data path of its copy (Receive, Fill, Transmit, ...) once
// it has handed the socket over: the rings would have two producers.
func AdoptSocket(fd, ifindex, queue int, umem *UMEM, cfg AdoptConfig) (*Socket, error) {
	err := cfg.validate()
	if err == nil {
		err = umem.usable()
	}
	if err != nil {
		return nil, fmt.Errorf("xsk adopt fd %d ifindex %d queue %d: %w", fd, ifindex, queue, err)
	}
	umem.mu.Lock()
	defer umem.mu.Unlock()
	if umem.closed {
		return nil, fmt.Errorf("xsk adopt fd %d ifindex %d queue %d: umem closed: %w", fd, ifindex, queue, fi.EINVAL)
	}
	s, err := umem.adopt(fd, ifindex, queue, cfg)
	if err != nil {
		return nil, fmt.Errorf("xsk adopt fd %d ifindex %d queue %d: %w", fd, ifindex, queue, err)
	}
	return s, nil
}

func (u *UMEM) adopt(fd, ifindex, queue int, cfg AdoptConfig) (_ *Socket, err error) {
	if err := xskCheck(fd); err != nil {
		return nil, err
	}
	ino, err := inodeOf(fd)
	if err != nil {
		return nil, fmt.Errorf("fstat: %w", errnoOf(err))
	}
	for _, o := range u.sockets {
		if o.ino == ino {
			return nil, fmt.Errorf("socket already on this UMEM as fd %d: %w", o.fd, fi.EEXIST)
		}
	}
	// recvfrom fails with ENXIO on an unbound socket and does nothing
	// that matters on a bound one (a wakeup in zero-copy mode).
	if e := kickRx(fd); e == unix.ENXIO {
		return nil, fmt.Errorf("socket not bound (recvfrom: %w): %w", fi.Errno(e), fi.ENOTCONN)
	}
	ns, err := socketNetns(fd)
	switch {
	case err == nil && cfg.Netns != 0 && cfg.Netns != ns:
		return nil, fmt.Errorf("socket in network namespace %d, described as in %d: %w", ns, cfg.Netns, fi.EINVAL)
	case err == nil:
	case cfg.Netns != 0:
		ns = cfg.Netns
	default:
		if ns, err = ThreadNetns(); err != nil {
			return nil, fmt.Errorf("netns: %w", errnoOf(err))
		}
	}
	key := queueKey{netns: ns, ifindex: ifindex, queue: queue}

	s := &Socket{fd: fd, ino: ino, umem: u, ifindex: ifindex, queue: queue, wakeup: cfg.NeedWakeup, sg: cfg.MultiBuffer}
	q := u.queues[key]
	newQueue := q == nil
	if newQueue {
		q = &queueRings{key: key}
	}
	defer func() {
		if err != nil {
			s.unmapRings(q, newQueue)
		}
	}()

	var off xdpMmapOffsets
	if _, err := getsockoptPtr(fd, solXDP, optMmapOffsets, unsafe.Pointer(&off), unsafe.Sizeof(off)); err != nil {
		return nil, fmt.Errorf("XDP_MMAP_OFFSETS: %w", errnoOf(err))
	}
	if cfg.RxSize > 0 {
		if s.rx, err = mapAdopted[Desc](fd, "rx", pgoffRxRing, cfg.RxSize, off.Rx); err != nil {
			return nil, err
		}
	} else if ringExists(fd, pgoffRxRing) {
		return nil, fmt.Errorf("socket has an rx ring, described as none: %w", fi.EINVAL)
	}
	if cfg.TxSize > 0 {
		if s.tx, err = mapAdopted[Desc](fd, "tx", pgoffTxRing, cfg.TxSize, off.Tx); err != nil {
			return nil, err
		}
	} else if ringExists(fd, pgoffTxRing) {
		return nil, fmt.Errorf("socket has a tx ring, described as none: %w", fi.EINVAL)
	}
	if newQueue {
		if q.fill, err = mapAdopted[uint64](fd, "fill", pgoffUmemFillRing, u.cfg.FillSize, off.Fr); err != nil {
			return nil, err
		}
		if q.comp, err = mapAdopted[uint64](fd, "completion", pgoffUmemCompletionRing, u.cfg.CompSize, off.Cr); err != nil {
			return nil, err
		}
	}
	// Every frame of an attached UMEM starts free, which is true only if
	// nobody put frames into these rings before: a TX ring or a fresh
	// fill or completion ring that moved holds frames of the creator or
	// of an earlier adopter, which this process would hand out again.
	// (RX entries of a queue this UMEM already drives are its own.)
	if s.tx.mem != nil && s.tx.cachedProd != 0 {
		return nil, fmt.Errorf("tx ring used before (%d descriptors produced): its frames are not this process's to reuse: %w", s.tx.cachedProd, fi.EBUSY)
	}
	if newQueue && !cfg.Shared && (q.fill.cachedProd != 0 || q.comp.cachedProd != 0) {
		return nil, fmt.Errorf("fill and completion rings used before (%d and %d entries produced): their frames are not this process's to reuse: %w",
			q.fill.cachedProd, q.comp.cachedProd, fi.EBUSY)
	}
	var opts struct{ flags uint32 }
	if _, err := getsockoptPtr(fd, solXDP, optOptions, unsafe.Pointer(&opts), unsafe.Sizeof(opts)); err == nil {
		s.zeroCopy = opts.flags&optionsZeroCopy != 0
	}
	if usec, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, soBusyPoll); err == nil {
		s.busyPoll = usec > 0
	}
	unix.CloseOnExec(fd)
	u.add(s, q, newQueue)
	return s, nil
}

// ringExists reports whether fd has ring pgoff (the kernel maps a page of
// any ring that exists).
func ringExists(fd int, pgoff int64) bool {
	mem, err := unix.Mmap(fd, pgoff, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return false
	}
	_ = unix.Munmap(mem)
	return true
}

// mapAdopted maps an existing ring of size entries, failing with EINVAL if
// the kernel's ring is visibly larger (see ringLarger).
func mapAdopted[T uint64 | Desc](fd int, name string, pgoff int64, size int, off xdpRingOffset) (ring[T], error) {
	r, err := mapRing[T](fd, pgoff, uint32(size), off)
	if errors.Is(err, unix.EINVAL) {
		return r, fmt.Errorf("mmap %s ring of %d entries: larger than the socket's, or the socket has none: %w", name, size, fi.EINVAL)
	}
	if err != nil {
		return r, fmt.Errorf("mmap %s ring: %w", name, errnoOf(err))
	}
	if ringLarger[T](fd, pgoff, uint32(size), off) {
		r.unmap()
		return ring[T]{}, fmt.Errorf("%s ring larger than the %d entries described: %w", name, size, fi.EINVAL)
	}
	return r, nil
}
