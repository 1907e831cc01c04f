package main

// Section 5: the completion queue: batched read throughput with a producer
// and a consumer goroutine, and SRead wake-up latency per wait object,
// beside a buffered Go channel.

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/fi"
)

type benchCtx struct{ n int }

func cqEntry() cq.Entry {
	return cq.Entry{OpContext: &benchCtx{1}, Flags: fi.Recv | fi.Msg, Len: 64, Data: 7}
}

// cqThroughput moves n completions from a producer goroutine (Reserve,
// Write, Commit in batches of 64) to a reader (SRead, 64 at a time).
func cqThroughput(cfg *config, attr cq.Attr, n int) (float64, error) {
	q, err := cq.Open(attr)
	if err != nil {
		return 0, err
	}
	defer q.Close()
	p, err := q.Bind(cq.BindAttr{})
	if err != nil {
		return 0, err
	}
	defer p.Unbind()
	c := cq.Completion{Entry: cqEntry()}
	prod := goPlain(func() error {
		for left := n; left > 0; {
			k, err := p.Reserve(min(left, 64))
			if err != nil {
				return err
			}
			for range k {
				p.Write(&c)
			}
			p.Commit()
			left -= k
			if k == 0 {
				runtime.Gosched()
			}
		}
		return nil
	})
	var elapsed time.Duration
	err = plain(func() error {
		buf := make([]cq.Entry, 64)
		t0 := time.Now()
		for got := 0; got < n; {
			k, err := q.SRead(buf, -1)
			if err != nil && !errors.Is(err, fi.EAGAIN) {
				return err
			}
			got += k
		}
		elapsed = time.Since(t0)
		return nil
	})
	if err := errors.Join(err, <-prod); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds() / 1e6, nil
}

// chanThroughput is the Go peer: a buffered channel of the same capacity,
// one send and one receive per completion.
func chanThroughput(cfg *config, n int) (float64, error) {
	ch := make(chan cq.Entry, cq.DefaultSize)
	e := cqEntry()
	prod := goPlain(func() error {
		for range n {
			ch <- e
		}
		return nil
	})
	var elapsed time.Duration
	var sink cq.Entry
	err := plain(func() error {
		t0 := time.Now()
		for range n {
			sink = <-ch
		}
		elapsed = time.Since(t0)
		return nil
	})
	_ = sink
	if err := errors.Join(err, <-prod); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds() / 1e6, nil
}

// wakeup measures how long a reader asleep in recv takes to return after
// send: the sender waits until the reader announced itself and then 50 µs
// more (so it really sleeps) before each send.
func wakeup(cfg *config, samples int, recv func() uint64, send func(stamp uint64)) (p50, p99 time.Duration, err error) {
	base := time.Now()
	lat := make([]time.Duration, samples)
	clear(lat) // written now, not by the timed loop (see samples)
	var asleep atomic.Bool
	rd := goPlain(func() error {
		for i := range samples {
			asleep.Store(true)
			stamp := recv()
			lat[i] = time.Since(base) - time.Duration(stamp)
		}
		return nil
	})
	err = plain(func() error {
		for range samples {
			for !asleep.Load() {
				runtime.Gosched()
			}
			asleep.Store(false)
			time.Sleep(50 * time.Microsecond)
			send(uint64(time.Since(base)))
		}
		return nil
	})
	if err := errors.Join(err, <-rd); err != nil {
		return 0, 0, err
	}
	slices.Sort(lat)
	return percentile(lat, 0.5), percentile(lat, 0.99), nil
}

func runCQ(r *results, cfg *config) error {
	n, samples := 4_000_000, 2000
	if cfg.quick {
		n, samples = 500_000, 300
	}
	type tcase struct {
		key, title string
		attr       *cq.Attr
	}
	tcases := []tcase{
		{"cq", "xdpfab CQ (FORMAT_MSG, locks)", &cq.Attr{Format: cq.FormatMsg, WaitObj: cq.WaitMutexCond}},
		{"cq-spsc", "xdpfab CQ, SingleProducer+SingleConsumer", &cq.Attr{Format: cq.FormatMsg, WaitObj: cq.WaitMutexCond, SingleProducer: true, SingleConsumer: true}},
		{"chan", "buffered Go channel (1024) of cq.Entry", nil},
	}
	for _, c := range tcases {
		v, err := reps(cfg.reps, func(int) (float64, error) {
			if c.attr == nil {
				return chanThroughput(cfg, n)
			}
			return cqThroughput(cfg, *c.attr, n)
		})
		if err != nil {
			return fmt.Errorf("throughput %s: %w", c.key, err)
		}
		r.add("cq", "cq/throughput/"+c.key, "M entries/s", v, map[string]string{"impl": c.title})
		fmt.Printf("  throughput %-8s %7.2f M entries/s\n", c.key, median(v))
	}
	r.Setup["cq_entries"] = fmt.Sprint(n)
	r.Setup["cq_wakeup_samples"] = fmt.Sprint(samples)

	type wcase struct {
		key  string
		wait cq.WaitObj
	}
	for _, w := range []wcase{{"WAIT_FD", cq.WaitFD}, {"WAIT_MUTEX_COND", cq.WaitMutexCond}, {"WAIT_YIELD", cq.WaitYield}, {"chan", -1}} {
		var p50s, p99s []float64
		for range cfg.reps {
			var p50, p99 time.Duration
			var err error
			if w.wait < 0 {
				ch := make(chan cq.Entry, cq.DefaultSize)
				p50, p99, err = wakeup(cfg, samples, func() uint64 { return (<-ch).Data }, func(s uint64) { ch <- cq.Entry{Data: s} })
			} else {
				p50, p99, err = cqWakeup(cfg, w.wait, samples)
			}
			if err != nil {
				return fmt.Errorf("wakeup %s: %w", w.key, err)
			}
			p50s, p99s = append(p50s, us(p50)), append(p99s, us(p99))
		}
		r.add("cq", "cq/wakeup/"+w.key+"/p50", "us", p50s, map[string]string{"wait": w.key})
		r.add("cq", "cq/wakeup/"+w.key+"/p99", "us", p99s, map[string]string{"wait": w.key})
		fmt.Printf("  wake-up %-16s p50 %6.1f us  p99 %6.1f us\n", w.key, median(p50s), median(p99s))
	}
	return nil
}

func cqWakeup(cfg *config, w cq.WaitObj, samples int) (time.Duration, time.Duration, error) {
	q, err := cq.Open(cq.Attr{WaitObj: w, Format: cq.FormatData})
	if err != nil {
		return 0, 0, err
	}
	defer q.Close()
	p, err := q.Bind(cq.BindAttr{})
	if err != nil {
		return 0, 0, err
	}
	defer p.Unbind()
	buf := make([]cq.Entry, 1)
	var perr atomic.Value
	p50, p99, err := wakeup(cfg, samples,
		func() uint64 {
			for {
				n, err := q.SRead(buf, -1)
				if n == 1 {
					return buf[0].Data
				}
				if err != nil && !errors.Is(err, fi.EAGAIN) {
					perr.Store(err)
					return 0
				}
			}
		},
		func(stamp uint64) {
			if err := p.Push(&cq.Completion{Entry: cq.Entry{Data: stamp}}); err != nil {
				perr.Store(err)
			}
		})
	if e, ok := perr.Load().(error); ok {
		return 0, 0, e
	}
	return p50, p99, err
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// The CQ measurements run on ordinary goroutines (GOMAXPROCS = CPUs, not
// pinned): a locked, pinned thread that blocks must be woken by its own
// futex, which is not how a Go application waits on a CQ.
func goPlain(fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- fn() }()
	return ch
}

func plain(fn func() error) error { return fn() }
