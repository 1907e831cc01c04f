package ep

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Progress drives the endpoint once: finished sends are completed and
// arrived messages delivered. CQ reads call it (manual progress); call it
// directly to progress without reading. On a nil or zero Endpoint it does
// nothing.
func (e *Endpoint) Progress() {
	if e == nil || e.dev == nil {
		return
	}
	e.progress()
}

// progress reports whether a receive context could not take its frames
// for want of room (CQ full, or too many parked frames).
func (e *Endpoint) progress() (blocked bool) {
	if e.closed.Load() {
		return false
	}
	e.dev.tx.progress()
	for _, c := range e.rx {
		blocked = c.progress() || blocked
	}
	blocked = e.shmPoll() || blocked // same-host channels (shm.go)
	return blocked
}

// autoProgress is the automatic-progress goroutine: it sleeps in poll(2)
// on the receive sockets and progresses when they have frames, or every
// millisecond while sends are outstanding. While it cannot take frames
// (the application is not reading its CQ), it sleeps instead of polling
// sockets that stay readable.
func (e *Endpoint) autoProgress() {
	defer close(e.done)
	var fds []unix.PollFd
	for _, c := range e.rx {
		for _, s := range c.socks {
			fds = append(fds, unix.PollFd{Fd: int32(s.FD()), Events: unix.POLLIN})
		}
	}
	nsock := len(fds)
	blocked := false
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
		t.unlock()
		if blocked {
			time.Sleep(time.Duration(timeout) * time.Millisecond)
		} else if e.shmSleep() { // same-host channels: sleeping marked (shm.go)
			if fd := e.shmPollFD(); fd >= 0 {
				fds = append(fds[:nsock], unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
			}
			unix.Poll(fds, timeout)
			e.shmAwake()
		}
		blocked = e.progress()
		// A reader woken by what progress wrote runs on this thread now,
		// before this goroutine blocks in poll(2) again: else the runtime
		// hands the CPU over to another thread it must wake first.
		runtime.Gosched()
	}
}
