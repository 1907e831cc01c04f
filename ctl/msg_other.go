//go:build !linux

package ctl

import "golang.org/x/sys/unix"

// Without MSG_CMSG_CLOEXEC and POLLRDHUP, descriptors are made
// close-on-exec after they arrive, and a shutdown shows as POLLHUP. (The
// agent runs on Linux only: off Linux the protocol is built, for
// applications developed there, more than used.)
const (
	msgCmsgCloexec = 0
	pollRDHUP      = 0
)

func cloexec(fds []int) {
	for _, fd := range fds {
		unix.CloseOnExec(fd)
	}
}
