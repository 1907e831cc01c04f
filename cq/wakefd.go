package cq

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// wakeFD is the descriptor of WaitFD and WaitPollFD: the application polls
// r, which becomes readable when wake writes to w. On Linux it is one
// eventfd (r == w; wait_linux.go). Other systems have no eventfd, so there
// it is a pipe (wait_other.go): libfabric's own fd wait objects are a
// descriptor pair too, and a pipe keeps WaitFD working, so an application's
// event loop around Control(GetWait) and TryWait runs and can be tested
// off Linux. Both ends are non-blocking and close-on-exec.
type wakeFD struct {
	r, w int
}

var eventOne = [8]byte{1} // an eventfd increment of 1 (host byte order, little-endian)

// signal makes r readable.
func (f wakeFD) signal() {
	unix.Write(f.w, eventOne[:])
}

// drain reads r until it would block: one read for an eventfd (which
// returns its whole count, 8 bytes, at once), as many as a pipe needs.
func (f wakeFD) drain() {
	var b [64]byte
	for {
		if n, _ := unix.Read(f.r, b[:]); n < len(b) {
			return
		}
	}
}

func (f wakeFD) close() {
	unix.Close(f.r)
	if f.w != f.r {
		unix.Close(f.w)
	}
}

// newPipeFD opens the pipe of WaitFD on systems without eventfd. It is
// built everywhere so that its tests run on Linux too.
func newPipeFD() (wakeFD, error) {
	var p [2]int
	// Hold ForkLock as os.Pipe does where there is no pipe2: no child
	// forked in between inherits the descriptors.
	syscall.ForkLock.RLock()
	err := unix.Pipe(p[:])
	if err == nil {
		unix.CloseOnExec(p[0])
		unix.CloseOnExec(p[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return wakeFD{}, fmt.Errorf("pipe: %w", err)
	}
	for _, fd := range p {
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(p[0])
			unix.Close(p[1])
			return wakeFD{}, fmt.Errorf("pipe: %w", err)
		}
	}
	return wakeFD{r: p[0], w: p[1]}, nil
}
