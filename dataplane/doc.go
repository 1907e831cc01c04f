// Package dataplane is xdpfab's AF_XDP layer: UMEM registration, the fill,
// completion, RX and TX rings, and the socket calls around them, written
// directly on golang.org/x/sys/unix.
//
// It moves frames between a device queue and user space and nothing more:
// which socket an XDP program redirects to (XSKMAP contents), what the
// metadata in front of a frame means, and how packets map to endpoints and
// completions belong to the endpoint layer above (packages av and cq), and
// loading the XDP program belongs to package loader.
//
// # Use
//
// One UMEM holds the packet frames of one or more sockets. Open binds a
// socket to one device queue; the endpoint layer puts its FD into the
// XSKMAP slot its XDP program redirects to:
//
//	umem, _ := dataplane.NewUMEM(dataplane.UMEMConfig{NumFrames: 4096})
//	s, _ := dataplane.Open(ifindex, queue, umem, dataplane.SocketConfig{})
//	_ = xsks.Update(uint32(queue), uint32(s.FD()), ebpf.UpdateAny)
//	s.FillFree() // give the kernel frames to receive into
//
// Receive takes descriptors off the RX ring. A descriptor's frame belongs to
// the caller until it is freed (UMEM.Free) or refilled (Fill). Metadata an
// XDP program pushed in front of the packet with bpf_xdp_adjust_head is
// the descriptor's first bytes; metadata written with bpf_xdp_adjust_meta
// (where the kernel lets XDP programs call it) lies immediately before the
// descriptor, in copy and in zero-copy mode: UMEM.Meta(desc.Addr, n)
// returns it.
// To transmit, write a packet into a free frame (UMEM.Alloc, UMEM.Frame),
// put its descriptor on the TX ring (Transmit), Kick, and later reclaim the
// frame from the completion ring (Complete or CompleteFree).
//
// # Sharing a UMEM
//
// The first socket of a UMEM registers it with the kernel; later sockets
// bind with XDP_SHARED_UMEM. Sockets of one UMEM bound to the same device
// queue share that queue's fill and completion ring (the kernel has one
// buffer pool per queue), which is how several endpoints share one queue
// with the XDP program choosing among them. Sockets on other queues or
// devices get a fill and completion ring of their own over the same frames.
// A device queue can belong to only one UMEM at a time.
//
// # Sharing a UMEM between processes
//
// Processes that receive on one queue share its UMEM and so its fill and
// completion rings, which have one producer and one consumer each. A
// ShareBlock (a sealed memfd every process maps) makes them take turns:
// ShareBlock.Fill and ShareBlock.Complete under per-queue locks that a
// dead member's successor can take over, each user (slot) transmitting
// with frames of its own (TxRange, UMEM.SetFreeRange) and marking the
// receive frames it holds (Socket.TakeShared), so the block's creator can
// give back everything a dead user held (Retire, Reclaim). Adopt the
// shared queue's sockets with AdoptConfig.Shared.
//
// # Handing sockets to an unprivileged process
//
// A privileged agent can create, configure and bind the sockets and
// register the UMEM, and let an application without capabilities run the
// data path. The agent makes a shared UMEM (its frames in a memfd), opens
// the sockets, which registers the UMEM (charging the agent's
// RLIMIT_MEMLOCK), puts them in the XSKMAP, and sends the UMEM's Memfd and
// each socket's FD with SCM_RIGHTS, with each socket's Info, which is plain
// data for its protocol:
//
//	umem, _ := dataplane.NewUMEM(dataplane.UMEMConfig{NumFrames: 4096, Shared: true})
//	s, _ := dataplane.Open(ifindex, queue, umem, dataplane.SocketConfig{})
//	_ = xsks.Update(uint32(queue), uint32(s.FD()), ebpf.UpdateAny)
//	info := s.Info() // with umem.Memfd() and s.FD() to the application
//
// The application maps the same frames, adopts the sockets, and does what
// Open's caller would:
//
//	umem, _ := dataplane.AttachUMEM(memfd, info.UMEM)
//	s, _ := dataplane.AdoptSocket(fd, info.Ifindex, info.Queue, umem, info.Socket)
//	s.FillFree() // every frame is the application's
//	// Receive, Transmit, Kick, CompleteFree, Poll, Stats; at the end:
//	s.Close()
//	umem.Close()
//
// The rules that make this safe:
//
//   - The agent hands sockets over unused: it fills, receives and transmits
//     nothing on them (Open does none of that), so every frame is free and
//     the application's from the start. AdoptSocket refuses rings that
//     already carried frames (EBUSY); after an application dies, hand
//     over new sockets on a new UMEM.
//   - One process drives a device queue's fill and completion rings: give
//     all sockets of one UMEM on one queue to the same application. It may
//     adopt them in any order: the first maps the queue's fill and
//     completion rings (the kernel maps them through any socket bound to
//     the queue), later ones share them, as with Open.
//   - The agent keeps its descriptors and mappings, for the XSKMAP and for
//     cleanup, and does not touch the data path of its copies. Either side
//     may close first: the kernel socket, the UMEM's registration and its
//     memlock charge last until the last descriptor in either process
//     closes (and the pinned pages keep the memory valid for the other
//     side after one side unmaps it).
//
// Nothing the application does needs a capability or locked memory (the
// tests run it as uid 65534 with no capabilities and RLIMIT_MEMLOCK 0):
// mapping the memfd and the four rings, getsockopt of XDP_MMAP_OFFSETS,
// XDP_OPTIONS, XDP_STATISTICS and SO_BUSY_POLL, the recvfrom and sendto
// wakeups, and poll. What it cannot do, SocketInfo carries instead: ring
// sizes cannot be read back (getsockopt XDP_RX_RING and the like is
// EOPNOTSUPP; after bind, setting them is EBUSY), need_wakeup is not
// reported, and SIOCGSKNS, which names a socket's network namespace, needs
// CAP_NET_ADMIN. Creating an AF_XDP socket needs CAP_NET_RAW.
//
// # Other systems
//
// AF_XDP is Linux's. Elsewhere the package builds, so that code above it
// can be written and type-checked there, but Open, AdoptSocket, a shared
// UMEM (NewUMEM with Shared) and ThreadNetns fail with fi.EOPNOTSUPP. The
// AF_XDP ABI the package uses is defined in uapi.go (checked against
// golang.org/x/sys/unix on Linux); the system calls only Linux has are in
// sys_linux.go.
//
// # Costs
//
// Ring indices are atomics on the mmap'd rings (load-acquire and
// store-release); each side caches the index the kernel owns and re-reads it
// only when the cached value says the ring is full or empty. The batch calls
// (Receive, Fill, FillFree, Transmit, Complete, CompleteFree, Alloc, Free)
// allocate nothing and make no syscall, with two exceptions that the kernel
// asks for: Kick's sendto when the TX ring has XDP_RING_NEED_WAKEUP set (in
// copy mode, as on veth, that is every kick: copy-mode transmission runs
// inside sendto, a bounded batch per call), and Receive's recvfrom when the
// RX ring is empty and the fill ring asks for a wakeup (zero-copy drivers)
// or busy polling is on. Poll blocks in poll(2).
//
// # Nil and zero values
//
// Nothing panics on a nil or zero *UMEM or *Socket (one that did not come
// from NewUMEM, AttachUMEM, Open or AdoptSocket). Methods with an error
// result fail with fi.EINVAL on them (Poll, Kick, Stats), and on a closed
// Socket with fi.EBADF; Open and AdoptSocket given a nil or zero UMEM fail
// with fi.EINVAL. The others return zero values: no frames moved, nil
// slices, false, and -1 from FD and Memfd (never descriptor 0). Close on a
// nil or zero value returns nil: there is nothing to release. The batch
// calls pay one predictable branch for it.
//
// # Kernel behaviour worth knowing
//
//   - veth has no zero-copy support: BindAuto falls back to copy mode and
//     logs the reason (EOPNOTSUPP); BindZeroCopy fails.
//   - Closing a socket frees its device queue asynchronously: a new bind of
//     the queue fails with EBUSY for roughly 10-25 ms. Open retries EBUSY for
//     up to 2 s, so close-and-reopen works; a queue held by a live socket
//     still reports EBUSY.
//   - Mapped rings keep a socket alive after close(2): Close unmaps every
//     ring, and the UMEM's memory goes when its last user closes.
//   - A UMEM is charged to RLIMIT_MEMLOCK unless the process has
//     CAP_IPC_LOCK; registration then fails with ENOBUFS, reported as
//     "UMEM larger than RLIMIT_MEMLOCK". The charge goes to the user whose
//     thread registered it and stays until the kernel releases the UMEM,
//     some 10 ms after its last socket, in any process, closes. Mapping a
//     shared UMEM's memfd elsewhere is charged nothing; XDP_UMEM_REG pins
//     the memfd's shmem pages as it pins anonymous memory.
//   - Any socket bound to a device queue's buffer pool maps the pool's
//     fill and completion rings, not only the one that created them. A
//     ring mapping longer than the ring fails with EINVAL; a shorter one
//     succeeds, so a ring's size cannot be probed to the entry.
//   - In copy mode a packet lands PacketHeadroom (256) bytes into its frame
//     (plus UMEMConfig.Headroom); native and generic XDP both keep metadata.
//   - A packet longer than a frame's room reaches only a socket bound with
//     SocketConfig.MultiBuffer (XDP_USE_SG, Linux 6.6+), as a chain of
//     descriptors (PktContd), the metadata in front of the first; a socket
//     without it never sees the packet, which the kernel counts in
//     Stats.RxDropped. Frames larger than a page are not an alternative:
//     XDP_UMEM_REG refuses them (EINVAL), hugetlb-backed or not, on Linux
//     6.18.
package dataplane
