//go:build linux

package cq

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// epollOn puts fd in an epoll set, closed when the test ends, and returns a
// function that blocks in epoll_wait until fd is readable: the descriptor
// of WaitFD as an application's event loop uses it.
func epollOn(tb testing.TB, fd int) func() (int, error) {
	tb.Helper()
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { unix.Close(ep) })
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
		tb.Fatal(err)
	}
	events := make([]unix.EpollEvent, 1)
	return func() (int, error) {
		n, err := unix.EpollWait(ep, events, -1)
		if n == 1 && events[0].Fd != int32(fd) {
			return n, fmt.Errorf("event for fd %d, want %d", events[0].Fd, fd)
		}
		return n, err
	}
}
