//go:build linux

package dataplane

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// The system interface that only Linux has: AF_XDP sockets, memfds and
// network namespaces. sys_other.go fails each of these with errNotLinux.

// Socket-level options and mmap flags (their values differ between Linux
// architectures).
const (
	soBusyPoll       = unix.SO_BUSY_POLL
	soPreferBusyPoll = unix.SO_PREFER_BUSY_POLL
	soBusyPollBudget = unix.SO_BUSY_POLL_BUDGET
	mapPopulate      = unix.MAP_POPULATE
)

// populateHuge asks for transparent huge pages for a UMEM's frames, then
// faults them all in, as MAP_POPULATE would have (it does not change their
// contents). The system decides: anonymous memory (a private UMEM) gets
// huge pages when /sys/kernel/mm/transparent_hugepage/enabled is "madvise"
// or "always", a memfd (a shared UMEM) when .../shmem_enabled is "advise"
// or "always"; otherwise the pages stay 4 KiB
// (docs/platform.md#huge-pages-for-frames).
func populateHuge(b []byte) {
	_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	if unix.Madvise(b, unix.MADV_POPULATE_WRITE) != nil {
		// Before Linux 5.14: read every page in.
		var sum byte
		for i := 0; i < len(b); i += 4096 {
			sum += b[i]
		}
		populateSink.Store(uint32(sum))
	}
}

// populateSink keeps populateHuge's reads from being compiled away.
var populateSink atomic.Uint32

// xskSocket creates an AF_XDP socket (close-on-exec).
func xskSocket() (int, error) {
	return unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
}

// xskBind binds an AF_XDP socket to sa.
func xskBind(fd int, sa *sockaddrXDP) error {
	return unix.Bind(fd, &unix.SockaddrXDP{Flags: sa.Flags, Ifindex: sa.Ifindex, QueueID: sa.QueueID, SharedUmemFD: sa.SharedUmemFD})
}

// xskCheck fails with EINVAL unless fd is an AF_XDP socket.
func xskCheck(fd int) error {
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return fmt.Errorf("SO_DOMAIN: %w", errnoOf(err))
	}
	if dom != unix.AF_XDP {
		return fmt.Errorf("not an AF_XDP socket (domain %d): %w", dom, fi.EINVAL)
	}
	return nil
}

// sealedMemfd creates a memfd of size bytes (close-on-exec), sealed against
// resizing (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL).
func sealedMemfd(name string, size int) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", errnoOf(err))
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("size memfd to %d bytes: %w", size, errnoOf(err))
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("seal memfd: %w", errnoOf(err))
	}
	return fd, nil
}

// socketNetns asks the kernel for the inode number of a socket's network
// namespace (SIOCGSKNS); it needs CAP_NET_ADMIN in the namespace's owning
// user namespace and fails with EPERM without it.
func socketNetns(fd int) (uint64, error) {
	nsfd, err := unix.IoctlRetInt(fd, unix.SIOCGSKNS)
	if err != nil {
		return 0, err
	}
	defer unix.Close(nsfd)
	var st unix.Stat_t
	if err := unix.Fstat(nsfd, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// ThreadNetns is the inode number of the calling thread's network namespace:
// what tells device queues of equal ifindex in different namespaces apart.
func ThreadNetns() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// Shared (not FUTEX_PRIVATE_FLAG) futex operations (linux/futex.h).
const (
	futexWaitOp = 0
	futexWakeOp = 1
)

// futexWait sleeps while *w == val, at most d (a shared futex: w may be in
// memory other processes map). Spurious wake-ups are the caller's to
// handle.
func futexWait(w *atomic.Uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes up to n sleepers on w.
func futexWake(w *atomic.Uint32, n int) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWakeOp, uintptr(n), 0, 0, 0)
}
