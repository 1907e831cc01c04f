//go:build linux

package ctl

import "golang.org/x/sys/unix"

// Descriptors arrive close-on-exec (MSG_CMSG_CLOEXEC), and poll reports a
// peer's shutdown (POLLRDHUP).
const (
	msgCmsgCloexec = unix.MSG_CMSG_CLOEXEC
	pollRDHUP      = unix.POLLRDHUP
)

// cloexec: recvmsg did it (msgCmsgCloexec).
func cloexec(fds []int) {}
