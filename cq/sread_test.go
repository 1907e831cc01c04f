package cq

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
)

// The wait objects SRead can block on.
var blockingWaits = []WaitObj{WaitUnspec, WaitFD, WaitPollFD, WaitMutexCond, WaitYield}

// waitAsleep waits until some SRead on q is registered as a sleeper (or, for
// WaitYield, which has no sleepers, lets the reader spin a little).
func waitAsleep(q *CQ) {
	if q.w == nil {
		for range 100 {
			time.Sleep(50 * time.Microsecond)
		}
		return
	}
	for q.w.sleepers.Load() == 0 {
		time.Sleep(20 * time.Microsecond)
	}
}

// fi_cq_sread and docs/semantics.md#sread-and-signal.
func TestSRead(t *testing.T) {
	for _, w := range blockingWaits {
		t.Run(w.String(), func(t *testing.T) {
			q := mustOpen(t, Attr{WaitObj: w, Format: FormatMsg})
			p := mustBind(t, q, BindAttr{})
			buf := make([]Entry, 4)

			// timeout 0 polls.
			_, err := q.SRead(buf, 0)
			wantErr(t, "SRead(0) on empty CQ", err, fi.EAGAIN)

			// An entry already queued returns at once, even with no timeout.
			mustPush(t, p, Completion{Entry: Entry{OpContext: &ctx{1}}})
			if n, err := q.SRead(buf, -1); n != 1 || err != nil || ctxID(buf[0].OpContext) != 1 {
				t.Fatalf("SRead(-1) with an entry queued = %d, %v", n, err)
			}

			// A short timeout expires with EAGAIN.
			_, err = q.SRead(buf, 5*time.Millisecond)
			wantErr(t, "SRead(5ms) on empty CQ", err, fi.EAGAIN)

			// A negative timeout waits until a producer writes.
			done := make(chan error, 1)
			go func() {
				n, err := q.SRead(buf, -1)
				if err == nil && (n != 1 || ctxID(buf[0].OpContext) != 2) {
					err = errors.New("wrong entry")
				}
				done <- err
			}()
			waitAsleep(q)
			mustPush(t, p, Completion{Entry: Entry{OpContext: &ctx{2}}})
			if err := <-done; err != nil {
				t.Fatalf("blocked SRead: %v", err)
			}

			// An error entry wakes the reader, which reports EAVAIL.
			go func() {
				_, err := q.SRead(buf, -1)
				done <- err
			}()
			waitAsleep(q)
			mustPush(t, p, Completion{Err: fi.EIO})
			wantErr(t, "SRead woken by an error entry", <-done, fi.EAVAIL)
		})
	}

	for _, w := range []WaitObj{WaitNone, WaitSetObj} {
		t.Run("invalid under "+w.String(), func(t *testing.T) {
			attr := Attr{WaitObj: w}
			if w == WaitSetObj {
				s, err := OpenWaitSet(WaitUnspec)
				if err != nil {
					t.Fatal(err)
				}
				attr.WaitSet = s
			}
			q := mustOpen(t, attr)
			p := mustBind(t, q, BindAttr{})
			mustPush(t, p, Completion{})
			_, err := q.SRead(make([]Entry, 1), 0)
			wantErr(t, "SRead", err, fi.EINVAL)
			_, err = q.SReadFrom(make([]Entry, 1), make([]fi.Addr, 1), -1)
			wantErr(t, "SReadFrom", err, fi.EINVAL)
			if q.Stats().Depth != 1 {
				t.Fatal("EINVAL consumed an entry")
			}
		})
	}
}

// fi_cq_signal and docs/semantics.md#sread-and-signal: a Signal ends one
// wait with EAGAIN and is sticky until an SRead consumes it.
func TestSignal(t *testing.T) {
	for _, w := range blockingWaits {
		t.Run(w.String(), func(t *testing.T) {
			q := mustOpen(t, Attr{WaitObj: w})
			p := mustBind(t, q, BindAttr{})
			buf := make([]Entry, 4)

			// A blocked reader returns EAGAIN.
			done := make(chan error, 1)
			go func() {
				_, err := q.SRead(buf, -1)
				done <- err
			}()
			waitAsleep(q)
			if err := q.Signal(); err != nil {
				t.Fatal(err)
			}
			wantErr(t, "signaled SRead", <-done, fi.EAGAIN)

			// Sticky: a signal with nobody waiting ends the next wait...
			q.Signal()
			_, err := q.SRead(buf, -1)
			wantErr(t, "SRead after Signal", err, fi.EAGAIN)
			// ...and only one.
			_, err = q.SRead(buf, time.Millisecond)
			wantErr(t, "second SRead after Signal (timeout)", err, fi.EAGAIN)

			// Entries win over a pending signal, which stays pending.
			q.Signal()
			mustPush(t, p, Completion{Entry: Entry{OpContext: &ctx{1}}})
			if n, err := q.SRead(buf, -1); n != 1 || err != nil {
				t.Fatalf("SRead with entry and signal = %d, %v", n, err)
			}
			_, err = q.SRead(buf, -1)
			wantErr(t, "SRead with the signal still pending", err, fi.EAGAIN)
		})
	}
	t.Run("invalid under FI_WAIT_NONE", func(t *testing.T) {
		q := mustOpen(t, Attr{})
		wantErr(t, "Signal", q.Signal(), fi.EINVAL)
	})
}

// fabtests cq_signal: signal, then sread with a 2000 ms timeout returns
// EAGAIN within 1000 ms.
func TestFabtestsCQSignal(t *testing.T) {
	for _, w := range blockingWaits {
		t.Run(w.String(), func(t *testing.T) {
			q := mustOpen(t, Attr{WaitObj: w})
			if err := q.Signal(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, err := q.SRead(make([]Entry, 1), 2000*time.Millisecond)
			elapsed := time.Since(start)
			wantErr(t, "SRead", err, fi.EAGAIN)
			if elapsed >= 1000*time.Millisecond {
				t.Fatalf("SRead returned after %v, want < 1000ms", elapsed)
			}
		})
	}
}

// wait_cond FI_CQ_COND_THRESHOLD: a blocked SRead waits for Threshold
// entries, or an error entry, or a Signal; polling ignores the threshold.
func TestThreshold(t *testing.T) {
	for _, w := range blockingWaits {
		t.Run(w.String(), func(t *testing.T) {
			q := mustOpen(t, Attr{WaitObj: w, WaitCond: CondThreshold, Threshold: 4})
			p := mustBind(t, q, BindAttr{})
			buf := make([]Entry, 8)

			type result struct {
				n   int
				err error
			}
			done := make(chan result, 1)
			sread := func() {
				n, err := q.SRead(buf, -1)
				done <- result{n, err}
			}

			go sread()
			waitAsleep(q)
			for i := range 4 {
				mustPush(t, p, Completion{Entry: Entry{OpContext: &ctx{i}}})
			}
			// Had the reader woken before the fourth entry, it would
			// have returned fewer.
			if r := <-done; r.n != 4 || r.err != nil {
				t.Fatalf("SRead = %d, %v; want 4 entries", r.n, r.err)
			}

			// An error entry ends the wait early.
			go sread()
			waitAsleep(q)
			mustPush(t, p, Completion{Entry: Entry{OpContext: &ctx{10}}})
			mustPush(t, p, Completion{Err: fi.EIO})
			if r := <-done; r.n != 1 || r.err != nil {
				t.Fatalf("SRead = %d, %v; want the success ahead of the error", r.n, r.err)
			}
			if err := q.ReadErr(&ErrEntry{}); err != nil {
				t.Fatal(err)
			}

			// A Signal ends it with what is queued.
			go sread()
			waitAsleep(q)
			mustPush(t, p, Completion{Entry: Entry{OpContext: &ctx{20}}})
			q.Signal()
			if r := <-done; r.n != 1 || r.err != nil {
				t.Fatalf("signaled SRead = %d, %v; want the queued entry", r.n, r.err)
			}

			// Polling and Read ignore the threshold.
			mustPush(t, p, Completion{})
			if n, err := q.SRead(buf, 0); n != 1 || err != nil {
				t.Fatalf("SRead(0) = %d, %v", n, err)
			}
		})
	}
	t.Run("threshold above capacity is clamped", func(t *testing.T) {
		q := mustOpen(t, Attr{Size: 2, WaitObj: WaitMutexCond, WaitCond: CondThreshold, Threshold: 100})
		p := mustBind(t, q, BindAttr{})
		mustPush(t, p, Completion{})
		mustPush(t, p, Completion{})
		if n, err := q.SRead(make([]Entry, 4), -1); n != 2 || err != nil {
			t.Fatalf("SRead = %d, %v", n, err)
		}
	})
}

// fi_control(FI_GETWAIT) and docs/semantics.md#fi_getwait.
func TestControlGetWait(t *testing.T) {
	t.Run("no wait object", func(t *testing.T) {
		for _, w := range []WaitObj{WaitNone, WaitYield} {
			q := mustOpen(t, Attr{WaitObj: w})
			var fd int
			wantErr(t, "GETWAIT on "+w.String(), q.Control(GetWait, &fd), fi.ENODATA)
		}
	})
	t.Run("bad arguments", func(t *testing.T) {
		q := mustOpen(t, Attr{WaitObj: WaitFD})
		var mc MutexCond
		wantErr(t, "GETWAIT with *MutexCond on FD", q.Control(GetWait, &mc), fi.EINVAL)
		wantErr(t, "GETWAIT with nil", q.Control(GetWait, nil), fi.EINVAL)
		wantErr(t, "unknown command", q.Control(4, nil), fi.ENOSYS)
		wantErr(t, "GETWAITOBJ with *int", q.Control(GetWaitObj, new(int)), fi.EINVAL)
	})
	t.Run("GETWAITOBJ", func(t *testing.T) {
		for _, w := range []WaitObj{WaitNone, WaitFD, WaitYield} {
			q := mustOpen(t, Attr{WaitObj: w})
			var got WaitObj = -1
			if err := q.Control(GetWaitObj, &got); err != nil || got != w {
				t.Errorf("GETWAITOBJ = %s, %v; want %s", got, err, w)
			}
		}
	})
	t.Run("FD in poll", func(t *testing.T) {
		q := mustOpen(t, Attr{WaitObj: WaitFD})
		p := mustBind(t, q, BindAttr{})
		var fd int
		if err := q.Control(GetWait, &fd); err != nil {
			t.Fatal(err)
		}
		if err := q.TryWait(); err != nil {
			t.Fatalf("TryWait on empty CQ: %v", err)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(fds, 0); n != 0 {
			t.Fatal("fd readable before any completion")
		}
		go func() {
			if err := p.Push(&Completion{Entry: Entry{OpContext: &ctx{1}}}); err != nil {
				t.Error(err)
			}
		}()
		for {
			n, err := unix.Poll(fds, -1)
			if err == unix.EINTR {
				continue
			}
			if n != 1 || err != nil {
				t.Fatalf("poll = %d, %v", n, err)
			}
			break
		}
		if n, err := q.Read(make([]Entry, 1)); n != 1 || err != nil {
			t.Fatalf("Read after poll = %d, %v", n, err)
		}
		if err := q.TryWait(); err != nil {
			t.Fatalf("TryWait after draining: %v", err)
		}
		if n, _ := unix.Poll(fds, 0); n != 0 {
			t.Fatal("TryWait left the fd readable")
		}
		mustPush(t, p, Completion{})
		wantErr(t, "TryWait with an entry queued", q.TryWait(), fi.EAGAIN)
	})
	t.Run("FD in epoll", func(t *testing.T) {
		q := mustOpen(t, Attr{WaitObj: WaitFD})
		p := mustBind(t, q, BindAttr{})
		var fd int
		if err := q.Control(GetWait, &fd); err != nil {
			t.Fatal(err)
		}
		epollWait := epollOn(t, fd)
		buf := make([]Entry, 8)
		got := 0
		go func() {
			for i := range 100 {
				if err := p.Push(&Completion{Entry: Entry{OpContext: &ctx{i}}}); err != nil {
					t.Error(err)
				}
			}
		}()
		for got < 100 {
			n, err := q.Read(buf)
			if err == nil {
				got += n
				continue
			}
			wantErr(t, "Read", err, fi.EAGAIN)
			if q.TryWait() != nil {
				continue
			}
			for {
				n, err := epollWait()
				if err == unix.EINTR {
					continue
				}
				if n != 1 || err != nil {
					t.Fatalf("epoll_wait = %d, %v", n, err)
				}
				break
			}
		}
	})
	t.Run("POLLFD", func(t *testing.T) {
		q := mustOpen(t, Attr{WaitObj: WaitPollFD})
		p := mustBind(t, q, BindAttr{})
		var fds []unix.PollFd
		if err := q.Control(GetWait, &fds); err != nil || len(fds) != 1 {
			t.Fatalf("GETWAIT = %v, %v", fds, err)
		}
		if err := q.TryWait(); err != nil {
			t.Fatal(err)
		}
		mustPush(t, p, Completion{})
		if n, err := unix.Poll(fds, 0); n != 1 || err != nil {
			t.Fatalf("poll after a completion = %d, %v", n, err)
		}
	})
	t.Run("MUTEX_COND", func(t *testing.T) {
		q := mustOpen(t, Attr{WaitObj: WaitMutexCond})
		p := mustBind(t, q, BindAttr{})
		var mc MutexCond
		if err := q.Control(GetWait, &mc); err != nil || mc.Mutex == nil || mc.Cond == nil {
			t.Fatalf("GETWAIT = %+v, %v", mc, err)
		}
		mc.Mutex.Lock()
		if err := q.TryWait(); err != nil {
			t.Fatal(err)
		}
		go func() {
			if err := p.Push(&Completion{Entry: Entry{OpContext: &ctx{5}}}); err != nil {
				t.Error(err)
			}
		}()
		mc.Cond.Wait() // the push broadcasts: it cannot slip in before Wait, we hold the mutex
		mc.Mutex.Unlock()
		buf := make([]Entry, 1)
		if n, err := q.Read(buf); n != 1 || err != nil || ctxID(buf[0].OpContext) != 5 {
			t.Fatalf("Read = %d, %v", n, err)
		}
	})
	t.Run("TryWait under FI_WAIT_NONE", func(t *testing.T) {
		q := mustOpen(t, Attr{})
		wantErr(t, "TryWait", q.TryWait(), fi.EINVAL)
	})
}

// WaitSetObj: a WaitSet wakes for any member; SRead is invalid on members.
func TestWaitSet(t *testing.T) {
	for _, obj := range []WaitObj{WaitUnspec, WaitFD, WaitPollFD, WaitMutexCond, WaitYield} {
		t.Run(obj.String(), func(t *testing.T) {
			s, err := OpenWaitSet(obj)
			if err != nil {
				t.Fatal(err)
			}
			q1, err := Open(Attr{WaitObj: WaitSetObj, WaitSet: s})
			if err != nil {
				t.Fatal(err)
			}
			q2, err := Open(Attr{WaitObj: WaitSetObj, WaitSet: s, WaitCond: CondThreshold, Threshold: 2})
			if err != nil {
				t.Fatal(err)
			}
			p1, _ := q1.Bind(BindAttr{})
			p2, _ := q2.Bind(BindAttr{})

			wantErr(t, "Wait(0) with nothing queued", s.Wait(0), fi.ETIMEDOUT)
			wantErr(t, "Wait(1ms) with nothing queued", s.Wait(time.Millisecond), fi.ETIMEDOUT)

			// A member's entry wakes a blocked Wait.
			done := make(chan error, 1)
			go func() { done <- s.Wait(-1) }()
			if s.w != nil {
				for s.w.sleepers.Load() == 0 {
					time.Sleep(20 * time.Microsecond)
				}
			}
			mustPush(t, p2, Completion{})
			mustPush(t, p2, Completion{}) // q2's threshold is 2
			if err := <-done; err != nil {
				t.Fatalf("Wait: %v", err)
			}
			if n, err := q2.Read(make([]Entry, 4)); n != 2 || err != nil {
				t.Fatalf("q2.Read = %d, %v", n, err)
			}

			// Signal on a member wakes the set, once.
			if err := q1.Signal(); err != nil {
				t.Fatal(err)
			}
			if err := s.Wait(-1); err != nil {
				t.Fatalf("Wait after Signal: %v", err)
			}
			wantErr(t, "Wait after the signal was consumed", s.Wait(0), fi.ETIMEDOUT)

			// The set's TryWait sees members.
			mustPush(t, p1, Completion{})
			wantErr(t, "TryWait with q1 ready", s.TryWait(), fi.EAGAIN)
			wantErr(t, "q1.TryWait delegates to the set", q1.TryWait(), fi.EAGAIN)
			q1.Read(make([]Entry, 1))

			var got WaitObj
			if err := q1.Control(GetWaitObj, &got); err != nil || got != WaitSetObj {
				t.Fatalf("GETWAITOBJ = %s, %v", got, err)
			}
			if err := s.Control(GetWaitObj, &got); err != nil || got != s.WaitObj() {
				t.Fatalf("set GetWaitObj = %s, %v", got, err)
			}

			wantErr(t, "closing a set with members", s.Close(), fi.EBUSY)
			p1.Unbind()
			p2.Unbind()
			q1.Close()
			q2.Close()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			wantErr(t, "second Close", s.Close(), fi.EBADF)
			wantErr(t, "Wait on a closed set", s.Wait(0), fi.EBADF)
		})
	}
	t.Run("FD in epoll", func(t *testing.T) {
		s, err := OpenWaitSet(WaitFD)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		q := mustOpen(t, Attr{WaitObj: WaitSetObj, WaitSet: s})
		p := mustBind(t, q, BindAttr{})
		var fd, fd2 int
		if err := s.Control(GetWait, &fd); err != nil {
			t.Fatal(err)
		}
		if err := q.Control(GetWait, &fd2); err != nil || fd2 != fd {
			t.Fatalf("member GetWait = %d, %v; want the set's fd %d", fd2, err, fd)
		}
		if err := s.TryWait(); err != nil {
			t.Fatal(err)
		}
		mustPush(t, p, Completion{})
		if n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0); n != 1 {
			t.Fatal("set fd not readable after a member's completion")
		}
	})
	t.Run("bad wait objects", func(t *testing.T) {
		for _, obj := range []WaitObj{WaitNone, WaitSetObj, 9} {
			if _, err := OpenWaitSet(obj); !errors.Is(err, fi.EINVAL) {
				t.Errorf("OpenWaitSet(%s) = %v, want EINVAL", obj, err)
			}
		}
		s, _ := OpenWaitSet(WaitYield)
		var fd int
		wantErr(t, "GETWAIT on a YIELD set", s.Control(GetWait, &fd), fi.ENODATA)
		s.Close()
	})
}

// Progress: manual progress runs the endpoint's function first in every
// read; automatic progress is a goroutine feeding the CQ.
func TestProgress(t *testing.T) {
	t.Run("manual: Read polls the endpoint", func(t *testing.T) {
		q := mustOpen(t, Attr{Format: FormatMsg})
		var p *Producer
		var calls int
		p = mustBind(t, q, BindAttr{Progress: func() {
			calls++
			// The endpoint moves what its ring holds into the CQ.
			n, _ := p.Reserve(2)
			for i := range n {
				p.Write(&Completion{Entry: Entry{OpContext: &ctx{calls*10 + i}, Flags: fi.Recv | fi.Msg}})
			}
			p.Commit()
		}})
		buf := make([]Entry, 4)
		n, err := q.Read(buf)
		if n != 2 || err != nil || calls != 1 || ctxID(buf[0].OpContext) != 10 {
			t.Fatalf("Read = %d, %v after %d progress calls", n, err, calls)
		}
		q.ReadErr(&ErrEntry{}) // readerr does not progress (as in libfabric)
		if calls != 1 {
			t.Fatalf("ReadErr ran progress")
		}
		p.Unbind()
		if _, err := q.Read(buf); !errors.Is(err, fi.EAGAIN) || calls != 1 {
			t.Fatalf("Read after Unbind: %v, %d calls", err, calls)
		}
	})
	for _, w := range blockingWaits {
		t.Run("manual: SRead keeps polling under "+w.String(), func(t *testing.T) {
			q := mustOpen(t, Attr{WaitObj: w})
			var p *Producer
			var calls atomic.Int32
			p = mustBind(t, q, BindAttr{Progress: func() {
				// Data shows up on the tenth poll.
				if calls.Add(1) == 10 {
					p.Push(&Completion{Entry: Entry{OpContext: &ctx{1}}})
				}
			}})
			n, err := q.SRead(make([]Entry, 1), -1)
			if n != 1 || err != nil || calls.Load() < 10 {
				t.Fatalf("SRead = %d, %v after %d polls", n, err, calls.Load())
			}
		})
	}
	t.Run("automatic: a goroutine feeds blocked readers", func(t *testing.T) {
		q := mustOpen(t, Attr{WaitObj: WaitFD, Size: 16})
		p := mustBind(t, q, BindAttr{})
		const total = 10000
		go func() {
			for i := 0; i < total; {
				n, err := p.Reserve(total - i)
				if err != nil {
					panic(err)
				}
				for range n {
					p.Write(&Completion{Entry: Entry{OpContext: &ctx{i}}})
					i++
				}
				p.Commit()
				if n == 0 {
					time.Sleep(10 * time.Microsecond) // back-pressured
				}
			}
		}()
		buf := make([]Entry, 7)
		for next := 0; next < total; {
			n, err := q.SRead(buf, -1)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range buf[:n] {
				if ctxID(e.OpContext) != next {
					t.Fatalf("got %d, want %d", ctxID(e.OpContext), next)
				}
				next++
			}
		}
		if st := q.Stats(); st.Lost != 0 || st.Overrun {
			t.Fatalf("Stats = %+v", st)
		}
	})
}
