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
//
// kickTx and kickRx are raw system calls: both never wait for an event
// (MSG_DONTWAIT; the kernel does a bounded batch, or one busy-poll pass),
// so they skip the runtime's syscall bookkeeping. That saves its entry and
// exit on every message, and, where the CPU is shared (several polling
// applications on one core), it keeps sysmon from seeing the P "in a
// system call" while the thread waits for the CPU, taking the P away and
// waking another thread for it: measured, 8 polling processes on one CPU
// made about 330,000 context switches a second, most of them the runtime's
// own threads (docs/platform.md#raw-system-calls-for-kicks).
func kickTx(fd int) unix.Errno {
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	return e
}

// kickRx is recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL, NULL): it wakes the
// driver to refill from the fill ring, and drives NAPI when busy polling.
// A raw system call, as kickTx.
func kickRx(fd int) unix.Errno {
	_, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
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
