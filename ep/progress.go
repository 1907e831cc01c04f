package ep

import (
	"time"

	"golang.org/x/sys/unix"
)

// Progress drives the endpoint once: finished sends are completed and
// arrived messages delivered. CQ reads call it (manual progress); call it
// directly to progress without reading.
func (e *Endpoint) Progress() {
	if e.closed.Load() {
		return
	}
	e.dev.tx.progress()
	for _, c := range e.rx {
		c.progress()
	}
}

// autoProgress is the automatic-progress goroutine: it sleeps in poll(2)
// on the receive sockets and progresses when they have frames, or every
// millisecond while sends are outstanding.
func (e *Endpoint) autoProgress() {
	defer close(e.done)
	var fds []unix.PollFd
	for _, c := range e.rx {
		for _, s := range c.socks {
			fds = append(fds, unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN})
		}
	}
	for {
		select {
		case <-e.stop:
			return
		default:
		}
		timeout := 50
		t := &e.dev.tx
		t.mu.Lock()
		if t.outstanding > 0 || len(e.waiting) > 0 {
			timeout = 1
		}
		t.mu.Unlock()
		unix.Poll(fds, timeout)
		e.Progress()
		if timeout == 1 {
			time.Sleep(0)
		}
	}
}
