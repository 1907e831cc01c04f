package cq

import (
	"errors"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/fi"
)

// fi_cq_sread's cond per call: on a CondThreshold CQ a call's own
// threshold replaces Attr.Threshold for that call; 0 keeps it; under
// CondNone cond is ignored; negative is EINVAL.
func TestSReadCondPerCall(t *testing.T) {
	for _, w := range blockingWaits {
		t.Run(w.String(), func(t *testing.T) {
			q := mustOpen(t, Attr{Size: 16, Format: FormatContext, WaitObj: w, WaitCond: CondThreshold, Threshold: 4})
			p := mustBind(t, q, BindAttr{})
			buf := make([]Entry, 16)

			// A waiter for 2 entries wakes at the second, although the
			// CQ's threshold is 4: producers wake at the lowest waiting
			// threshold.
			got := make(chan int, 1)
			go func() {
				n, err := q.SReadCond(buf, 2, 10*time.Second)
				if err != nil {
					t.Error(err)
				}
				got <- n
			}()
			waitAsleep(q)
			mustPush(t, p, Completion{})
			select {
			case n := <-got:
				t.Fatalf("woke after one entry with cond 2: %d", n)
			case <-time.After(20 * time.Millisecond):
			}
			mustPush(t, p, Completion{})
			select {
			case n := <-got:
				if n != 2 {
					t.Fatalf("cond 2 read %d entries", n)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("cond 2 did not wake at two entries")
			}

			// cond 0: the open-time threshold (4): 3 entries do not end the
			// wait before the timeout, which returns what is queued.
			for range 3 {
				mustPush(t, p, Completion{})
			}
			start := time.Now()
			if n, err := q.SReadCond(buf, 0, 50*time.Millisecond); n != 3 || err != nil || time.Since(start) < 40*time.Millisecond {
				t.Fatalf("cond 0 with 3 of 4: %d %v after %v", n, err, time.Since(start))
			}
			// A cond above the CQ's size is capped at it.
			for range 16 {
				mustPush(t, p, Completion{})
			}
			if n, err := q.SReadCond(buf, 1000, time.Second); n != 16 || err != nil {
				t.Fatalf("cond 1000 on a CQ of 16: %d %v", n, err)
			}
			if _, err := q.SReadCond(buf, -1, 0); !errors.Is(err, fi.EINVAL) {
				t.Fatalf("negative cond: %v", err)
			}
			if q.callThr.min.Load() != ^uint64(0) {
				t.Fatalf("per-call thresholds left registered: %d", q.callThr.min.Load())
			}
		})
	}
}

func TestSReadCondIgnoredUnderCondNone(t *testing.T) {
	q := mustOpen(t, Attr{Size: 16, WaitObj: WaitMutexCond})
	p := mustBind(t, q, BindAttr{})
	mustPush(t, p, Completion{})
	if n, err := q.SReadCond(make([]Entry, 4), 3, time.Second); n != 1 || err != nil {
		t.Fatalf("cond 3 under CondNone: %d %v (want the one entry at once)", n, err)
	}
}
