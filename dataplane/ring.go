package dataplane

import (
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Desc is one RX or TX ring descriptor (struct xdp_desc): a packet at UMEM
// offset Addr of Len bytes. On a socket bound with SocketConfig.MultiBuffer
// a packet longer than a frame is a chain of descriptors, consecutive on
// the ring, each but the last with PktContd in Options. On the TX ring,
// DescTxMetadata in Options says TX metadata lies in front of the packet.
// The ring memory is read through this type (uapi_linux.go checks its
// layout).
type Desc struct {
	Addr    uint64
	Len     uint32
	Options uint32
}

// PktContd (XDP_PKT_CONTD) in Desc.Options: the packet continues in the
// next descriptor.
const PktContd = 1

// DescTxMetadata (XDP_TX_METADATA) in a TX descriptor's Options tells the
// kernel to read the TX metadata in front of the packet (UMEM.TxChecksum).
const DescTxMetadata = 1 << 1

// ring is one single-producer single-consumer ring shared with the kernel.
// For the fill and TX rings user space produces and the kernel consumes;
// for the completion and RX rings it is the other way round. The indices
// are free-running uint32 counters. Entries are written before the producer
// index is stored, and read before the consumer index is stored; Go's
// atomics (sequentially consistent) give the release/acquire ordering the
// kernel side (smp_load_acquire/smp_store_release) pairs with.
type ring[T uint64 | Desc] struct {
	producer *atomic.Uint32
	consumer *atomic.Uint32
	flags    *atomic.Uint32
	elems    []T
	mask     uint32
	size     uint32

	// Local copies of the index we own and of the last value read of the
	// index the kernel owns, so most calls touch no shared cache line.
	cachedProd uint32
	cachedCons uint32

	mem []byte // the whole mapping, for munmap
}

// ringBytes is the length of a ring of size entries laid out as off says.
func ringBytes[T uint64 | Desc](size uint32, off xdpRingOffset) int {
	var zero T
	return int(off.Desc) + int(size)*int(unsafe.Sizeof(zero))
}

// mapRing maps ring pgoff of fd with size entries laid out as off says.
// The kernel refuses (EINVAL) a mapping longer than its ring.
func mapRing[T uint64 | Desc](fd int, pgoff int64, size uint32, off xdpRingOffset) (ring[T], error) {
	length := ringBytes[T](size, off)
	mem, err := unix.Mmap(fd, pgoff, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|mapPopulate)
	if err != nil {
		return ring[T]{}, err
	}
	r := ring[T]{
		producer: (*atomic.Uint32)(unsafe.Pointer(&mem[off.Producer])),
		consumer: (*atomic.Uint32)(unsafe.Pointer(&mem[off.Consumer])),
		flags:    (*atomic.Uint32)(unsafe.Pointer(&mem[off.Flags])),
		elems:    unsafe.Slice((*T)(unsafe.Pointer(&mem[off.Desc])), size),
		mask:     size - 1,
		size:     size,
		mem:      mem,
	}
	r.cachedProd = r.producer.Load()
	r.cachedCons = r.consumer.Load()
	return r, nil
}

// ringLarger reports whether the kernel's ring pgoff of fd is larger than
// size entries, as far as mmap can tell: the kernel accepts a mapping up to
// its ring's allocation, which is whole pages, so a ring larger than size
// entries is seen only if it spans more pages than size entries need.
func ringLarger[T uint64 | Desc](fd int, pgoff int64, size uint32, off xdpRingOffset) bool {
	page := os.Getpagesize()
	length := (ringBytes[T](size, off)+page-1)/page*page + page
	mem, err := unix.Mmap(fd, pgoff, length, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return false
	}
	_ = unix.Munmap(mem)
	return true
}

func (r *ring[T]) unmap() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	*r = ring[T]{}
	return err
}

// needWakeup reports whether the kernel set XDP_RING_NEED_WAKEUP.
func (r *ring[T]) needWakeup() bool {
	return r.flags.Load()&ringNeedWakeup != 0
}

// Producer side (fill, TX).

// free returns how many entries can be produced, at most n, refreshing the
// consumer index only when the cached one says there is not enough room.
func (r *ring[T]) free(n uint32) uint32 {
	room := r.size - (r.cachedProd - r.cachedCons)
	if room < n {
		r.cachedCons = r.consumer.Load()
		room = r.size - (r.cachedProd - r.cachedCons)
	}
	return min(room, n)
}

// put writes v at the i-th reserved slot; submit publishes n slots.
func (r *ring[T]) put(i uint32, v T) { r.elems[(r.cachedProd+i)&r.mask] = v }

func (r *ring[T]) submit(n uint32) {
	r.cachedProd += n
	r.producer.Store(r.cachedProd)
}

// pending is how many produced entries the kernel has not consumed yet.
func (r *ring[T]) pending() uint32 {
	r.cachedCons = r.consumer.Load()
	return r.cachedProd - r.cachedCons
}

// Consumer side (completion, RX).

// avail returns how many entries can be consumed, at most n.
func (r *ring[T]) avail(n uint32) uint32 {
	ready := r.cachedProd - r.cachedCons
	if ready < n {
		r.cachedProd = r.producer.Load()
		ready = r.cachedProd - r.cachedCons
	}
	return min(ready, n)
}

// get reads the i-th available entry; release gives n entries back.
func (r *ring[T]) get(i uint32) T { return r.elems[(r.cachedCons+i)&r.mask] }

func (r *ring[T]) release(n uint32) {
	r.cachedCons += n
	r.consumer.Store(r.cachedCons)
}
