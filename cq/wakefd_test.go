package cq

import (
	"testing"

	"golang.org/x/sys/unix"
)

// The pipe that stands in for the eventfd off Linux, tested where the
// suite runs: readable after a wake of an armed waiter only, drained by
// the next arm however many wakes it missed, closed with the waiter.
func TestPipeWaiter(t *testing.T) {
	for _, kind := range []WaitObj{WaitFD, WaitPollFD} {
		t.Run(kind.String(), func(t *testing.T) {
			w, err := newWaiterFD(kind, newPipeFD)
			if err != nil {
				t.Fatal(err)
			}
			if w.fd.r == w.fd.w {
				t.Fatalf("pipe ends %d, %d", w.fd.r, w.fd.w)
			}
			readable := func() bool {
				t.Helper()
				var fds []unix.PollFd
				switch kind {
				case WaitFD:
					var fd int
					if err := w.getWait(&fd); err != nil {
						t.Fatal(err)
					}
					fds = []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				case WaitPollFD:
					if err := w.getWait(&fds); err != nil {
						t.Fatal(err)
					}
				}
				if len(fds) != 1 || fds[0].Fd != int32(w.fd.r) {
					t.Fatalf("GETWAIT = %+v, want the read end %d", fds, w.fd.r)
				}
				n, err := unix.Poll(fds, 0)
				if err != nil {
					t.Fatal(err)
				}
				return n == 1
			}

			w.wake()
			if readable() {
				t.Fatal("readable after a wake nobody armed for")
			}
			w.arm()
			if readable() {
				t.Fatal("readable after arm")
			}
			w.wake()
			if !readable() {
				t.Fatal("not readable after a wake of an armed waiter")
			}
			// Stale signals, more than one read's worth (wakes of external
			// waiters that armed and never read): arm drains them all.
			for range 100 {
				w.armed.Store(true)
				w.wake()
			}
			w.arm()
			if readable() {
				t.Fatal("readable after arm drained 100 wakes")
			}
			w.wake()
			if !readable() {
				t.Fatal("not readable after a wake")
			}

			r, wr := w.fd.r, w.fd.w
			w.close()
			for _, fd := range []int{r, wr} {
				if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
					t.Errorf("fd %d after close: F_GETFD = %v, want EBADF", fd, err)
				}
			}
		})
	}
}
