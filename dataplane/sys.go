package dataplane

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// Thin wrappers for the socket options x/sys/unix has no typed helper for.

func setsockoptPtr(fd, level, opt int, p unsafe.Pointer, size uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), size, 0)
	if e != 0 {
		return e
	}
	return nil
}

func getsockoptPtr(fd, level, opt int, p unsafe.Pointer, size uintptr) (uintptr, error) {
	l := uint32(size)
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, e
	}
	return uintptr(l), nil
}

// kickTx is sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0): in copy mode it
// transmits (a batch of) the TX ring; in zero-copy mode it wakes the driver.
func kickTx(fd int) unix.Errno {
	_, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// kickRx is recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL, NULL): it wakes the
// driver to refill from the fill ring, and drives NAPI when busy polling.
func kickRx(fd int) unix.Errno {
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// netnsOf identifies the network namespace a socket lives in (SIOCGSKNS),
// which together with ifindex and queue names the device queue it binds to.
// SIOCGSKNS needs CAP_NET_ADMIN; without it, the calling thread's namespace
// is the socket's, as the socket was just created on it (a caller inside
// another namespace holds its thread locked there).
func netnsOf(fd int) (uint64, error) {
	ns, err := socketNetns(fd)
	if err != nil {
		return ThreadNetns()
	}
	return ns, nil
}

// inodeOf is the inode number of fd's file: for a socket, the same for
// every descriptor of it, in any process.
func inodeOf(fd int) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}
