//go:build linux

package ep

import (
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

// newWaker creates a receiving endpoint's wake-up pipe (both ends
// non-blocking, close-on-exec): the receiver polls and drains the read
// end, and a sender writes a byte to a write end while it sleeps. A pipe,
// not an eventfd: whoever holds an open file can clear its O_NONBLOCK for
// every other holder, and an eventfd has one open file for all (a hostile
// receiver or sender could fill it and make every other writer, the agent
// included, block for ever); a pipe's write end can be opened anew for
// each writer (reopenWriter), and the receiver holds only the read end.
func newWaker() (r, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return -1, -1, fmt.Errorf("wake-up pipe: %w", err)
	}
	return p[0], p[1], nil
}

// reopenWriter opens the pipe w is a write end of anew: a write end that
// is an open file of its own (non-blocking), for one writer.
func reopenWriter(w int) (int, error) {
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", w), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open a write end of the wake-up pipe (/proc/self/fd): %w", err)
	}
	return fd, nil
}

// checkPipe fails with EINVAL unless fd is a pipe (a wake-up pipe's end
// another process handed over). A read end is made non-blocking: its
// drain reads until the pipe is empty, and must not wait there.
func checkPipe(fd int, read bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return fmt.Errorf("wake-up descriptor %d is not a pipe: %w", fd, fi.EINVAL)
	}
	if read {
		if err := unix.SetNonblock(fd, true); err != nil {
			return fmt.Errorf("wake-up pipe: %w", err)
		}
	}
	return nil
}

func dupFD(fd int) (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) }

// signalFD writes a byte to a wake-up pipe's write end. A full pipe is
// fine: the receiver has a wake-up pending.
func signalFD(fd int) {
	b := [1]byte{1}
	unix.Write(fd, b[:])
}

// drainFD empties a wake-up pipe's read end, or nearly: it reads at most
// drainReads times (more pending costs one more wake-up, nothing else).
func drainFD(fd int) {
	var b [512]byte
	for range drainReads {
		if n, err := unix.Read(fd, b[:]); err != nil || n < len(b) {
			return
		}
	}
}

const drainReads = 16

func closeFD(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}
