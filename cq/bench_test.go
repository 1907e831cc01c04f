package cq

import (
	"errors"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/fi"
)

const benchBatch = 64

var benchFormats = []Format{FormatContext, FormatMsg, FormatData, FormatTagged}

// BenchmarkRead measures batched read throughput: a producer goroutine
// writes b.N completions in batches (Reserve/Write/Commit, back-pressured),
// the benchmark goroutine reads them 64 at a time with SRead. "cq" is the
// default CQ (producer and consumer locks), "cq-spsc" the lock-free
// SingleProducer/SingleConsumer ring, "chan" the obvious Go alternative: a
// buffered channel of Entry of the same capacity, one send and one receive
// per entry.
func BenchmarkRead(b *testing.B) {
	for _, f := range benchFormats {
		b.Run(f.String()[len("FI_CQ_FORMAT_"):], func(b *testing.B) {
			b.Run("cq", func(b *testing.B) { benchCQPipeline(b, Attr{Format: f, WaitObj: WaitMutexCond}) })
			b.Run("cq-spsc", func(b *testing.B) {
				benchCQPipeline(b, Attr{Format: f, WaitObj: WaitMutexCond, SingleProducer: true, SingleConsumer: true})
			})
			b.Run("chan", benchChanPipeline)
		})
	}
}

func benchEntry() Entry {
	return Entry{OpContext: &ctx{1}, Flags: fi.Recv | fi.Tagged, Len: 64, Data: 7, Tag: 9}
}

func benchCQPipeline(b *testing.B, attr Attr) {
	q := mustOpen(b, attr)
	p := mustBind(b, q, BindAttr{})
	c := Completion{Entry: benchEntry()}
	buf := make([]Entry, benchBatch)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for left := b.N; left > 0; {
			n, err := p.Reserve(min(left, benchBatch))
			if err != nil {
				panic(err)
			}
			for range n {
				p.Write(&c)
			}
			p.Commit()
			left -= n
			if n == 0 {
				runtime.Gosched() // full: back-pressure
			}
		}
	}()
	for got := 0; got < b.N; {
		n, err := q.SRead(buf, -1)
		if err != nil {
			b.Fatal(err)
		}
		got += n
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

func benchChanPipeline(b *testing.B) {
	ch := make(chan Entry, DefaultSize)
	e := benchEntry()
	var sink Entry
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		for range b.N {
			ch <- e
		}
	}()
	for range b.N {
		sink = <-ch
	}
	b.StopTimer()
	_ = sink
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkReadLocal is the cost of the CQ alone, with no goroutine hand-off:
// one goroutine writes a batch of 64 and reads it back.
func BenchmarkReadLocal(b *testing.B) {
	for _, f := range benchFormats {
		b.Run(f.String()[len("FI_CQ_FORMAT_"):], func(b *testing.B) {
			for _, single := range []bool{false, true} {
				name := "cq"
				if single {
					name = "cq-spsc"
				}
				b.Run(name, func(b *testing.B) {
					q := mustOpen(b, Attr{Format: f, SingleProducer: single, SingleConsumer: single})
					p := mustBind(b, q, BindAttr{})
					c := Completion{Entry: benchEntry()}
					buf := make([]Entry, benchBatch)
					b.ReportAllocs()
					b.ResetTimer()
					for left := b.N; left > 0; {
						n, _ := p.Reserve(min(left, benchBatch))
						for range n {
							p.Write(&c)
						}
						p.Commit()
						q.Read(buf)
						left -= n
					}
					b.StopTimer()
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
				})
			}
			b.Run("chan", func(b *testing.B) {
				ch := make(chan Entry, benchBatch)
				e := benchEntry()
				var sink Entry
				b.ReportAllocs()
				for left := b.N; left > 0; {
					n := min(left, benchBatch)
					for range n {
						ch <- e
					}
					for range n {
						sink = <-ch
					}
					left -= n
				}
				_ = sink
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
			})
		})
	}
}

// BenchmarkWakeup measures how long a reader asleep in SRead takes to return
// after a producer writes one completion, per wait object, beside a
// goroutine asleep receiving from a channel, and beside a thread asleep in
// epoll_wait on the WaitFD descriptor (FD-epoll). The producer waits until
// the reader has gone to sleep (it sleeps 50 µs after the reader announces
// itself) before each write; p50 and p99 are reported in ns.
func BenchmarkWakeup(b *testing.B) {
	for _, w := range []WaitObj{WaitFD, WaitMutexCond, WaitYield} {
		b.Run(w.String()[len("FI_WAIT_"):], func(b *testing.B) {
			q := mustOpen(b, Attr{WaitObj: w, Format: FormatData})
			p := mustBind(b, q, BindAttr{})
			buf := make([]Entry, 1)
			benchWakeup(b,
				func() uint64 {
					if _, err := q.SRead(buf, -1); err != nil && !errors.Is(err, fi.EAGAIN) {
						panic(err)
					}
					return buf[0].Data
				},
				func(stamp uint64) {
					if err := p.Push(&Completion{Entry: Entry{Data: stamp}}); err != nil {
						panic(err)
					}
				})
		})
	}
	// The eventfd as an application's own event loop uses it: TryWait,
	// then a thread blocked in epoll_wait, then Read.
	b.Run("FD-epoll", func(b *testing.B) {
		q := mustOpen(b, Attr{WaitObj: WaitFD, Format: FormatData})
		p := mustBind(b, q, BindAttr{})
		var fd int
		if err := q.Control(GetWait, &fd); err != nil {
			b.Fatal(err)
		}
		epollWait := epollOn(b, fd)
		buf := make([]Entry, 1)
		benchWakeup(b,
			func() uint64 {
				for {
					if n, _ := q.Read(buf); n == 1 {
						return buf[0].Data
					}
					if q.TryWait() == nil {
						epollWait() // EINTR just loops
					}
				}
			},
			func(stamp uint64) {
				if err := p.Push(&Completion{Entry: Entry{Data: stamp}}); err != nil {
					panic(err)
				}
			})
	})
	b.Run("chan", func(b *testing.B) {
		ch := make(chan Entry, DefaultSize)
		benchWakeup(b,
			func() uint64 { return (<-ch).Data },
			func(stamp uint64) { ch <- Entry{Data: stamp} })
	})
}

func benchWakeup(b *testing.B, recv func() uint64, send func(stamp uint64)) {
	base := time.Now()
	lat := make([]time.Duration, b.N)
	var asleep atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range b.N {
			asleep.Store(true)
			stamp := recv()
			lat[i] = time.Since(base) - time.Duration(stamp)
		}
	}()
	b.ResetTimer()
	for range b.N {
		for !asleep.Load() {
			runtime.Gosched()
		}
		asleep.Store(false)
		time.Sleep(50 * time.Microsecond)
		send(uint64(time.Since(base)))
	}
	<-done
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}
