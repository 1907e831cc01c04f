package dataplane

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/prefetch"
	"golang.org/x/sys/unix"
)

// Defaults for UMEMConfig and SocketConfig.
const (
	DefaultFrameSize = 4096
	DefaultNumFrames = 4096
	DefaultRingSize  = 2048
)

// PacketHeadroom is the space the kernel keeps free in front of every packet
// it writes into a UMEM frame (XDP_PACKET_HEADROOM), on top of
// UMEMConfig.Headroom. XDP metadata is copied into its end, immediately
// before the packet; bpf_xdp_adjust_meta allows at most 32 bytes (in
// multiples of 4), so metadata always fits. A program that pushes its
// metadata with bpf_xdp_adjust_head takes it from this headroom as well.
const PacketHeadroom = xdpPacketHeadroom

// UMEMConfig sizes a UMEM. Zero fields take the defaults. It is plain data
// (SocketInfo carries it to the process that adopts a socket).
type UMEMConfig struct {
	// FrameSize is the size of one frame (chunk): a power of two between
	// 2048 and the page size. Default 4096.
	FrameSize int `json:"frame_size"`
	// NumFrames is the number of frames. Default 4096.
	NumFrames int `json:"num_frames"`
	// FillSize and CompSize are the entries of each fill and completion
	// ring made for this UMEM (one pair per device queue), powers of two.
	// They default to NumFrames rounded up: a fill ring smaller than the
	// frame pool starves copy-mode receive (rx_fill_ring_empty drops).
	FillSize int `json:"fill_size"`
	CompSize int `json:"comp_size"`
	// Headroom is extra space the kernel leaves free at the start of each
	// received frame, before PacketHeadroom. Default 0.
	Headroom int `json:"headroom"`
	// TxMetadata reserves TxMetadataLen bytes in front of every
	// transmitted packet for AF_XDP TX metadata (XDP_UMEM_TX_METADATA_LEN,
	// Linux 6.11 and later), through which a send can leave its UDP
	// checksum to the kernel (UMEM.TxChecksum). Every TX descriptor of such
	// a UMEM must then start at least TxMetadataLen bytes into its frame
	// (UMEM.TxOffset). A kernel without the feature registers the UMEM
	// without it, and TxMetadata reads false (UMEM.Config).
	TxMetadata bool `json:"tx_metadata,omitempty"`
	// Shared backs the frames with a memfd (Memfd) instead of anonymous
	// memory, so that another process can map them with AttachUMEM. The
	// memfd is sealed against resizing. AttachUMEM ignores the field (its
	// UMEM is always shared).
	Shared bool `json:"shared"`
}

func (c UMEMConfig) withDefaults() (UMEMConfig, error) {
	if c.FrameSize == 0 {
		c.FrameSize = DefaultFrameSize
	}
	if c.NumFrames == 0 {
		c.NumFrames = DefaultNumFrames
	}
	if c.FillSize == 0 {
		c.FillSize = ceilPow2(c.NumFrames)
	}
	if c.CompSize == 0 {
		c.CompSize = ceilPow2(c.NumFrames)
	}
	switch {
	case !isPow2(c.FrameSize) || c.FrameSize < 2048 || c.FrameSize > os.Getpagesize():
		return c, fmt.Errorf("umem: frame size %d not a power of two in [2048, %d]: %w", c.FrameSize, os.Getpagesize(), fi.EINVAL)
	case c.NumFrames < 1:
		return c, fmt.Errorf("umem: %d frames: %w", c.NumFrames, fi.EINVAL)
	case !isPow2(c.FillSize) || !isPow2(c.CompSize):
		return c, fmt.Errorf("umem: fill ring %d, completion ring %d: sizes must be powers of two: %w", c.FillSize, c.CompSize, fi.EINVAL)
	case c.Headroom < 0 || c.Headroom >= c.FrameSize-PacketHeadroom:
		return c, fmt.Errorf("umem: headroom %d does not leave room in a %d-byte frame: %w", c.Headroom, c.FrameSize, fi.EINVAL)
	}
	return c, nil
}

// UMEM is the packet buffer area shared by user space and the kernel:
// NumFrames frames of FrameSize bytes in anonymous memory (or a memfd, see
// UMEMConfig.Shared), with a free list of frame addresses. Addresses are
// byte offsets into the area.
//
// The kernel registration (XDP_UMEM_REG) happens when the first Socket on
// the UMEM opens, in that socket's network namespace, and lasts while any
// socket on it is open, in any process. Fill and completion rings exist
// once per device queue the UMEM's sockets are bound to.
//
// A UMEM made by AttachUMEM maps another process's registered UMEM and is
// never registered itself: its sockets come from AdoptSocket (or bind with
// XDP_SHARED_UMEM to one of those).
//
// The frame allocator (Alloc, Free, FillFree, CompleteFree) may be used
// from several goroutines; it takes a mutex once per batch.
type UMEM struct {
	cfg        UMEMConfig
	mem        []byte
	memfd      int         // -1 for anonymous memory
	attached   bool        // mapped by AttachUMEM: registered by another socket's owner
	txmd       atomic.Bool // registered with TX metadata (cfg.TxMetadata and the kernel took it)
	registered atomic.Bool // register succeeded (for an attached UMEM: never)
	shift      uint        // log2(FrameSize)

	freeMu  sync.Mutex
	free    []uint64 // stack of free frame addresses
	freeMap []uint64 // bit per frame: set when free; ignores double frees

	mu      sync.Mutex // guards everything below
	sockets []*Socket
	queues  map[queueKey]*queueRings
	closed  bool
}

// queueKey names a device queue: the kernel shares one buffer pool, and so
// one fill and completion ring pair, among sockets of a UMEM bound to it.
type queueKey struct {
	netns   uint64
	ifindex int
	queue   int
}

type queueRings struct {
	key   queueKey
	fill  ring[uint64]
	comp  ring[uint64]
	users int
}

// NewUMEM maps the frame area. It is registered with the kernel when the
// first socket opens on it (Open).
//
// With cfg.Shared the frames live in a memfd (close-on-exec, sealed with
// F_SEAL_SHRINK, F_SEAL_GROW and F_SEAL_SEAL, so no process holding it can
// resize it under the kernel's pinned pages), mapped MAP_SHARED; Memfd
// returns it for AttachUMEM in another process.
func NewUMEM(cfg UMEMConfig) (*UMEM, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	size := cfg.FrameSize * cfg.NumFrames
	if !cfg.Shared {
		mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, fmt.Errorf("umem: mmap %d bytes: %w", size, errnoOf(err))
		}
		populateHuge(mem)
		return newUMEM(cfg, mem, -1), nil
	}
	fd, err := sealedMemfd(memfdName, size)
	if err != nil {
		return nil, fmt.Errorf("umem: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("umem: mmap memfd of %d bytes: %w", size, errnoOf(err))
	}
	populateHuge(mem)
	return newUMEM(cfg, mem, fd), nil
}

// memfdName names a shared UMEM's memfd (/proc/PID/maps shows
// "/memfd:xdpfab-umem (deleted)").
const memfdName = "xdpfab-umem"

// AttachUMEM maps the frames of a UMEM that another process made with
// UMEMConfig.Shared and registered (it opened the UMEM's first socket),
// given its memfd (the creator's Memfd, received with SCM_RIGHTS). cfg must
// describe that UMEM as its Config does: FrameSize, NumFrames, FillSize,
// CompSize and Headroom (SocketInfo.UMEM carries them); the memfd's size
// must be FrameSize * NumFrames.
//
// The UMEM is not registered with the kernel, and never will be: the
// registration belongs to the creator's socket and lives as long as any
// socket of the UMEM, in either process. Its sockets come from AdoptSocket.
// Mapping the memfd needs no capability and is not charged to
// RLIMIT_MEMLOCK; the registration was charged to the creator.
//
// Every frame starts on the free list: the creator hands the UMEM over
// unused (it fills and transmits nothing) and the caller becomes the only
// user of the frames, filling the fill rings itself (FillFree).
//
// On success the UMEM owns memfd (set close-on-exec, closed with the
// memory, returned by Memfd); on failure memfd stays the caller's.
func AttachUMEM(memfd int, cfg UMEMConfig) (*UMEM, error) {
	cfg.Shared = true
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	size := cfg.FrameSize * cfg.NumFrames
	var st unix.Stat_t
	if err := unix.Fstat(memfd, &st); err != nil {
		return nil, fmt.Errorf("umem attach fd %d: %w", memfd, errnoOf(err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != int64(size) {
		return nil, fmt.Errorf("umem attach fd %d: %d bytes (mode %#o), want a memfd of %d frames of %d bytes = %d: %w",
			memfd, st.Size, st.Mode, cfg.NumFrames, cfg.FrameSize, size, fi.EINVAL)
	}
	mem, err := unix.Mmap(memfd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("umem attach fd %d: mmap %d bytes: %w", memfd, size, errnoOf(err))
	}
	populateHuge(mem)
	unix.CloseOnExec(memfd)
	u := newUMEM(cfg, mem, memfd)
	u.attached = true
	u.txmd.Store(cfg.TxMetadata) // as its owner registered it
	return u, nil
}

func newUMEM(cfg UMEMConfig, mem []byte, memfd int) *UMEM {
	u := &UMEM{
		cfg:     cfg,
		mem:     mem,
		memfd:   memfd,
		shift:   uint(bits.TrailingZeros(uint(cfg.FrameSize))),
		free:    make([]uint64, 0, cfg.NumFrames),
		freeMap: make([]uint64, (cfg.NumFrames+63)/64),
		queues:  make(map[queueKey]*queueRings),
	}
	u.resetFree()
	return u
}

// usable fails with fi.EINVAL for a nil *UMEM or one that did not come
// from NewUMEM or AttachUMEM (its zero value, with no frame size).
func (u *UMEM) usable() error {
	switch {
	case u == nil:
		return fmt.Errorf("nil UMEM: %w", fi.EINVAL)
	case u.cfg.FrameSize == 0:
		return fmt.Errorf("UMEM not made by NewUMEM or AttachUMEM (zero value): %w", fi.EINVAL)
	}
	return nil
}

// Memfd returns the memfd holding a shared UMEM's frames (UMEMConfig.Shared
// or AttachUMEM), to pass to AttachUMEM in another process, or -1 for
// anonymous memory (and for a nil or zero UMEM). It stays owned by the UMEM
// and is closed when the memory goes (see Close); the receiver gets its own
// reference.
func (u *UMEM) Memfd() int {
	if u.usable() != nil {
		return -1
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.memfd
}

// Config returns the UMEM's configuration with defaults filled in (the
// zero UMEMConfig for a nil UMEM). Once registered, TxMetadata says whether
// the kernel took it.
func (u *UMEM) Config() UMEMConfig {
	if u == nil {
		return UMEMConfig{}
	}
	c := u.cfg
	if c.TxMetadata && u.registered.Load() {
		c.TxMetadata = u.txmd.Load()
	}
	return c
}

// TxOffset is where a transmitted packet starts in its frame: 0, or
// TxMetadataLen for a UMEM registered with TX metadata.
func (u *UMEM) TxOffset() uint64 {
	if u != nil && u.txmd.Load() {
		return TxMetadataLen
	}
	return 0
}

// TxChecksum asks the kernel to complete the checksum of the packet at
// addr (a TX address at least TxOffset into its frame, of a UMEM
// registered with TX metadata): the 16 bits at csumStart+csumOffset of the
// packet hold the sum of the pseudo header, and the kernel sums from
// csumStart to the end of the packet and stores the checksum there
// (XDP_TXMD_FLAGS_CHECKSUM; in copy mode the packet leaves as a
// CHECKSUM_PARTIAL skb, which a device completes in hardware or the stack
// in software, and which veth hands on without ever computing). The
// descriptor must carry DescTxMetadata. It reports false, writing nothing,
// when the UMEM has no TX metadata or addr is too close to its frame's
// start.
func (u *UMEM) TxChecksum(addr uint64, csumStart, csumOffset uint16) bool {
	if u == nil || u.mem == nil || !u.txmd.Load() || addr > uint64(len(u.mem)) || addr-u.FrameAddr(addr) < TxMetadataLen {
		return false
	}
	m := u.mem[addr-TxMetadataLen : addr] // the kernel's struct, in host order
	binary.NativeEndian.PutUint64(m[0:], txmdFlagsChecksum)
	binary.NativeEndian.PutUint16(m[8:], csumStart)
	binary.NativeEndian.PutUint16(m[10:], csumOffset)
	clear(m[12:])
	return true
}

// FrameSize is the size of one frame in bytes.
func (u *UMEM) FrameSize() int {
	if u == nil {
		return 0
	}
	return u.cfg.FrameSize
}

// NumFrames is the number of frames.
func (u *UMEM) NumFrames() int {
	if u == nil {
		return 0
	}
	return u.cfg.NumFrames
}

// FrameAddr returns the address of the frame containing addr (its first
// byte). Descriptors from the RX ring point PacketHeadroom + Headroom bytes
// into their frame. It is 0 for a nil or zero UMEM.
func (u *UMEM) FrameAddr(addr uint64) uint64 {
	if u == nil || u.cfg.FrameSize == 0 {
		return 0
	}
	return addr &^ (uint64(u.cfg.FrameSize) - 1)
}

// Frame returns the bytes from addr to the end of addr's frame: the buffer
// to write a packet into before transmitting it from addr. It is nil for a
// nil, zero or released UMEM.
func (u *UMEM) Frame(addr uint64) []byte {
	if u == nil || u.mem == nil {
		return nil
	}
	end := u.FrameAddr(addr) + uint64(u.cfg.FrameSize)
	return u.mem[addr:end:end]
}

// Packet returns the bytes a descriptor describes (nil for a nil, zero or
// released UMEM).
func (u *UMEM) Packet(d Desc) []byte {
	if u == nil || u.mem == nil {
		return nil
	}
	end := d.Addr + uint64(d.Len)
	return u.mem[d.Addr:end:end]
}

// Meta returns the n bytes immediately before addr, where the kernel puts
// the metadata an XDP program wrote with bpf_xdp_adjust_meta (in copy and
// zero-copy mode alike), or that a reader moved a descriptor past (package
// ep does so with the metadata xdpfab's program pushes in front of the
// packet). It returns nil if n bytes do not fit between the frame start and
// addr. The length of the metadata is a contract between the
// XDP program and its reader: the descriptor does not carry it.
func (u *UMEM) Meta(addr uint64, n int) []byte {
	if u == nil || u.mem == nil || n <= 0 || addr < uint64(n) || addr-uint64(n) < u.FrameAddr(addr) {
		return nil
	}
	return u.mem[addr-uint64(n) : addr : addr]
}

// Prefetch asks the CPU to start loading what a receiver reads first of a
// received packet: the meta bytes in front of it and its first max bytes.
// The kernel wrote them on another CPU, so each line is a miss; asked for
// together, the misses overlap.
func (u *UMEM) Prefetch(d Desc, meta, max int) {
	if u == nil || u.mem == nil || d.Addr < uint64(meta) || d.Addr+uint64(d.Len) > uint64(len(u.mem)) {
		return
	}
	prefetch.Bytes(u.mem[d.Addr-uint64(meta):d.Addr+uint64(d.Len)], meta+max)
}

// Alloc takes up to len(addrs) free frames, writing their addresses to
// addrs, and returns how many it took (none from a nil or zero UMEM).
func (u *UMEM) Alloc(addrs []uint64) int {
	if u == nil {
		return 0
	}
	u.freeMu.Lock()
	n := u.allocLocked(addrs)
	u.freeMu.Unlock()
	return n
}

func (u *UMEM) allocLocked(addrs []uint64) int {
	return copy(addrs, u.popLocked(min(len(addrs), len(u.free))))
}

// popLocked takes the last n frames off the free list, marks them in use and
// returns them: a view of the free list's array, valid while u.freeMu is
// held.
func (u *UMEM) popLocked(n int) []uint64 {
	top := len(u.free) - n
	got := u.free[top:]
	for _, a := range got {
		i := a >> u.shift
		u.freeMap[i/64] &^= 1 << (i % 64)
	}
	u.free = u.free[:top]
	return got
}

// Free returns frames to the free list. Any address inside a frame frees
// that frame, so RX descriptor and completion addresses can be passed as
// they are. Freeing a frame that is already free has no effect, and so has
// Free on a nil or zero UMEM, which has no frames.
func (u *UMEM) Free(addrs ...uint64) {
	if u == nil || u.cfg.NumFrames == 0 {
		return
	}
	u.freeMu.Lock()
	for _, a := range addrs {
		u.freeLocked(a)
	}
	u.freeMu.Unlock()
}

func (u *UMEM) freeLocked(addr uint64) {
	i := addr >> u.shift
	if i >= uint64(u.cfg.NumFrames) {
		panic(fmt.Sprintf("dataplane: free of address %#x outside the UMEM", addr))
	}
	w, b := i/64, uint64(1)<<(i%64)
	if u.freeMap[w]&b != 0 {
		return
	}
	u.freeMap[w] |= b
	u.free = append(u.free, i<<u.shift)
}

// FreeFrames returns how many frames are on the free list.
func (u *UMEM) FreeFrames() int {
	if u == nil {
		return 0
	}
	u.freeMu.Lock()
	defer u.freeMu.Unlock()
	return len(u.free)
}

// SetFreeRange makes frames first .. first+n-1 the only free ones: the
// user of a slot of a shared UMEM (ShareBlock.TxRange) allocates its own
// frames and never another's. Out-of-range values are EINVAL.
func (u *UMEM) SetFreeRange(first, n int) error {
	if err := u.usable(); err != nil {
		return err
	}
	if first < 0 || n < 0 || first+n > u.cfg.NumFrames {
		return fmt.Errorf("umem: frames %d..%d of %d: %w", first, first+n-1, u.cfg.NumFrames, fi.EINVAL)
	}
	u.freeMu.Lock()
	defer u.freeMu.Unlock()
	u.free = u.free[:0]
	clear(u.freeMap)
	for i := first + n - 1; i >= first; i-- {
		u.free = append(u.free, uint64(i)<<u.shift)
		u.freeMap[i/64] |= 1 << (i % 64)
	}
	return nil
}

// resetFree puts every frame on the free list, lowest address on top.
func (u *UMEM) resetFree() {
	u.freeMu.Lock()
	defer u.freeMu.Unlock()
	u.free = u.free[:0]
	for i := u.cfg.NumFrames - 1; i >= 0; i-- {
		u.free = append(u.free, uint64(i)<<u.shift)
	}
	for i := range u.freeMap {
		u.freeMap[i] = ^uint64(0)
	}
}

// Close releases the UMEM. The memory is unmapped (and a memfd closed) at
// once if no socket uses it, else when the last one closes. Another
// process's mapping of a shared UMEM is unaffected: the memory lives while
// any process maps it, and the kernel's registration keeps its pages
// pinned while any socket of the UMEM is open. Close is idempotent, and
// closing a nil or zero UMEM returns nil: there is nothing to release.
func (u *UMEM) Close() error {
	if u.usable() != nil {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closed = true
	if len(u.sockets) == 0 {
		return u.releaseLocked()
	}
	return nil
}

func (u *UMEM) releaseLocked() error {
	if u.mem == nil {
		return nil
	}
	var errs []error
	if err := unix.Munmap(u.mem); err != nil {
		errs = append(errs, fmt.Errorf("umem: munmap: %w", errnoOf(err)))
	}
	u.mem = nil
	if u.memfd >= 0 {
		if err := unix.Close(u.memfd); err != nil {
			errs = append(errs, fmt.Errorf("umem: close memfd: %w", errnoOf(err)))
		}
		u.memfd = -1
	}
	return errors.Join(errs...)
}

// register makes fd's socket the UMEM's kernel owner (XDP_UMEM_REG).
func (u *UMEM) register(fd int) error {
	reg := xdpUmemReg{
		Addr:     uint64(uintptr(unsafe.Pointer(&u.mem[0]))),
		Len:      uint64(len(u.mem)),
		Size:     uint32(u.cfg.FrameSize),
		Headroom: uint32(u.cfg.Headroom),
	}
	if u.cfg.TxMetadata {
		reg.Flags |= umemTxMetadataLen
		reg.Tx_metadata_len = TxMetadataLen
	}
	err := setsockoptPtr(fd, solXDP, optUmemReg, unsafe.Pointer(&reg), unsafe.Sizeof(reg))
	if errors.Is(err, unix.EINVAL) && u.cfg.TxMetadata {
		// A kernel before 6.11: no TX metadata, checksums in software.
		reg.Flags, reg.Tx_metadata_len = 0, 0
		err = setsockoptPtr(fd, solXDP, optUmemReg, unsafe.Pointer(&reg), unsafe.Sizeof(reg))
	}
	if err == nil {
		u.txmd.Store(reg.Tx_metadata_len != 0)
		u.registered.Store(true)
	}
	if errors.Is(err, unix.ENOBUFS) {
		var lim unix.Rlimit
		_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim)
		return fmt.Errorf("umem: register %d bytes: UMEM larger than RLIMIT_MEMLOCK (%d bytes; raise it with ulimit -l or grant CAP_IPC_LOCK): %w",
			len(u.mem), lim.Cur, fi.ENOBUFS)
	}
	if err != nil {
		return fmt.Errorf("umem: register %d bytes: %w", len(u.mem), errnoOf(err))
	}
	return nil
}

func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }

func ceilPow2(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// errnoOf converts a syscall error into the fi vocabulary.
func errnoOf(err error) error {
	var e unix.Errno
	if errors.As(err, &e) {
		return fi.Errno(e)
	}
	return err
}
