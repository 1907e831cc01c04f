//go:build linux

package ep

import (
	"encoding/binary"
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// shmSeals are the seals every shared channel and doorbell carries: nobody
// (a hostile peer included) can shrink the memory under another process's
// mapping, which would turn its next access into SIGBUS.
const shmSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// newSealedMemfd creates a zeroed, sealed memfd of size bytes.
func newSealedMemfd(name string, size int) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("memfd size %d: %w", size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, shmSeals); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("memfd seals: %w", err)
	}
	return fd, nil
}

// mapSealed maps a memfd another process made, after checking that it is
// sealed against shrinking and exactly size bytes long.
func mapSealed(fd, size int) ([]byte, error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("shared memory not sealed against shrinking: %w", fi.EINVAL)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size != int64(size) {
		return nil, fmt.Errorf("shared memory of %d bytes, want %d: %w", st.Size, size, fi.EINVAL)
	}
	b, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map shared memory: %w", err)
	}
	return b, nil
}

func mapFD(fd, size int) ([]byte, error) {
	return unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
}

func unmapShm(b []byte) {
	if b != nil {
		unix.Munmap(b)
	}
}

func newEventFD() (int, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return -1, fmt.Errorf("eventfd: %w", err)
	}
	return fd, nil
}

func dupFD(fd int) (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) }

// signalFD adds one to an eventfd (a full counter is fine: it is readable).
func signalFD(fd int) {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], 1)
	unix.Write(fd, b[:])
}

// drainFD resets an eventfd.
func drainFD(fd int) {
	var b [8]byte
	unix.Read(fd, b[:])
}

func closeFD(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}
