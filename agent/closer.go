package agent

import (
	"net"
	"sync"

	"golang.org/x/sys/unix"
)

// Clients send the agent no descriptors, and the agent refuses them where
// the kernel can (refuseRights). Whatever arrives anyway (a kernel before
// SO_PASSRIGHTS), and a connection that may still hold some in messages
// nobody read (closeConn), is closed by the stray closer, never where the
// agent serves: the last close of a file can wait for as long as its other end
// likes (a TCP socket lingering with unsent data towards a peer that does
// not read, a FUSE file whose daemon does not answer), and a connection's
// goroutine, a refusal slot or shutdown waiting on it is what such a file
// is sent to achieve.

// closeWorkers bounds the goroutines closing strays at once: a flood of
// blocking files holds these and no more. What waits meanwhile is a list
// of descriptors the agent holds anyway (its descriptor limit bounds it).
const closeWorkers = 4

// strays closes the descriptors clients attached. Shutdown does not wait
// for it: a close that blocks ends with the process.
var strays fdCloser

type fdCloser struct {
	mu      sync.Mutex
	queue   []int
	workers int
}

// add hands fds over to be closed; it never waits.
func (c *fdCloser) add(fds []int) {
	if len(fds) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queue = append(c.queue, fds...)
	for c.workers < closeWorkers && c.workers < len(c.queue) {
		c.workers++
		go c.work()
	}
}

func (c *fdCloser) work() {
	for {
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.workers--
			c.queue = nil // let a flood's backlog go
			c.mu.Unlock()
			return
		}
		fd := c.queue[0]
		c.queue = c.queue[1:]
		c.mu.Unlock()
		unix.Close(fd)
	}
}

// pending is how many descriptors wait to be closed or are being closed
// right now (for tests).
func (c *fdCloser) pending() (queued, workers int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue), c.workers
}

// closeConn closes a client's connection without waiting on what the
// client left in it: messages it sent that the agent never read may carry
// descriptors (on a kernel that does not refuse them), which the socket's
// last close closes in turn. So the last close is the stray closer's: a
// duplicate of the socket outlives c.Close, then goes to strays. The
// client sees the end at once all the same (shutdown).
func closeConn(c *net.UnixConn) {
	dup := -1
	if raw, err := c.SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) {
			unix.Shutdown(int(fd), unix.SHUT_RDWR)
			if d, err := unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0); err == nil {
				dup = d
			}
		})
	}
	c.Close()
	if dup >= 0 {
		strays.add([]int{dup})
	}
}

// refuseRights makes the kernel refuse descriptors sent to the socket fd
// (SO_PASSRIGHTS off, Linux 6.16 and later: a sender's sendmsg with
// SCM_RIGHTS fails with EPERM). Connections inherit it from the listening
// socket at connect. It reports false on a kernel without it, where
// strays closes what arrives.
func refuseRights(fd int) bool {
	return askRefusal && unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PASSRIGHTS, 0) == nil
}

// askRefusal is whether refuseRights asks the kernel: tests turn it off to
// see the agent on a kernel that lets descriptors through.
var askRefusal = true
