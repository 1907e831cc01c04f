package cq

import (
	"errors"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/fi"
)

// stressEntries scales the number of entries a concurrency test moves:
// all of them normally and under the race detector (the 10-million-entry
// runs take about 8 s each with -race on 2 cores), 1% with -short.
func stressEntries(full int) int {
	if testing.Short() {
		return full / 100
	}
	return full
}

// tracker checks that every entry (producer, seq) arrives exactly once, and
// in each producer's order as seen by any one consumer.
type tracker struct {
	seen [][]uint64 // per producer, a bit per sequence number
	dups atomic.Int64
}

func newTracker(producers, perProducer int) *tracker {
	tr := &tracker{seen: make([][]uint64, producers)}
	for i := range tr.seen {
		tr.seen[i] = make([]uint64, (perProducer+63)/64)
	}
	return tr
}

func entryID(producer, seq int) uint64      { return uint64(producer)<<40 | uint64(seq) }
func splitID(id uint64) (producer, seq int) { return int(id >> 40), int(id & (1<<40 - 1)) }

func (tr *tracker) mark(id uint64) {
	p, s := splitID(id)
	if old := atomic.OrUint64(&tr.seen[p][s/64], 1<<(s%64)); old&(1<<(s%64)) != 0 {
		tr.dups.Add(1)
	}
}

func (tr *tracker) missing() int {
	n := 0
	for _, words := range tr.seen {
		for _, w := range words {
			n += 64 - popcount(w)
		}
	}
	return n
}

func popcount(w uint64) int {
	n := 0
	for ; w != 0; w &= w - 1 {
		n++
	}
	return n
}

// consumerOrder checks per-producer FIFO order within one consumer.
type consumerOrder []int

func (o consumerOrder) check(id uint64) bool {
	p, s := splitID(id)
	if s <= o[p] {
		return false
	}
	o[p] = s
	return true
}

// Producers and consumers on several goroutines, mixing back-pressured
// batches, Push, error entries, SRead, Read and ReadErr: no entry is lost,
// duplicated or reordered.
func TestConcurrentNoLossNoDup(t *testing.T) {
	configs := []struct {
		name                 string
		attr                 Attr
		producers, consumers int
		entries              int
		timeout              time.Duration // for SRead
	}{
		{"MPMC MUTEX_COND", Attr{Size: 1024, WaitObj: WaitMutexCond}, 3, 3, stressEntries(10_000_000), 0},
		{"MPMC FD", Attr{Size: 256, WaitObj: WaitFD}, 2, 3, stressEntries(1_000_000), 0},
		{"MPMC YIELD", Attr{Size: 64, WaitObj: WaitYield}, 2, 2, stressEntries(1_000_000), 0},
		{"MPMC FD threshold", Attr{Size: 512, WaitObj: WaitFD, WaitCond: CondThreshold, Threshold: 48}, 2, 2, stressEntries(1_000_000), time.Millisecond},
		{"SPSC lock-free FD", Attr{Size: 1024, WaitObj: WaitFD, SingleProducer: true, SingleConsumer: true}, 1, 1, stressEntries(10_000_000), 0},
		{"SPSC lock-free MUTEX_COND", Attr{Size: 64, WaitObj: WaitMutexCond, SingleProducer: true, SingleConsumer: true}, 1, 1, stressEntries(1_000_000), 0},
	}
	for _, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			cfg.attr.Format = FormatTagged
			q := mustOpen(t, cfg.attr)
			per := cfg.entries / cfg.producers
			total := per * cfg.producers
			tr := newTracker(cfg.producers, per)
			var consumed atomic.Int64
			var pushMu sync.RWMutex // Push excludes Reserve..Commit

			var prodWG sync.WaitGroup
			for pi := range cfg.producers {
				p, err := q.Bind(BindAttr{})
				if err != nil {
					t.Fatal(err)
				}
				prodWG.Add(1)
				go func() {
					defer prodWG.Done()
					defer p.Unbind()
					rng := rand.New(rand.NewPCG(uint64(pi), 1))
					var c Completion
					for seq := 0; seq < per; {
						c = Completion{Entry: Entry{Flags: fi.Recv | fi.Tagged, Data: entryID(pi, seq), Tag: uint64(seq)}}
						if rng.IntN(1000) == 0 {
							c.Err = fi.ECANCELED
						}
						if rng.IntN(8) == 0 {
							// Push cannot be back-pressured: push only
							// into room no other producer can take.
							pushMu.Lock()
							if q.Stats().Depth < cfg.attr.Size {
								if err := p.Push(&c); err != nil {
									t.Error(err)
								}
								seq++
							}
							pushMu.Unlock()
							continue
						}
						pushMu.RLock()
						n, err := p.Reserve(min(1+rng.IntN(64), per-seq))
						if err != nil {
							t.Error(err)
							return
						}
						for i := range n {
							c.Data, c.Tag = entryID(pi, seq+i), uint64(seq+i)
							if err := p.Write(&c); err != nil {
								t.Error(err)
							}
						}
						seq += p.Commit()
						pushMu.RUnlock()
						if n == 0 {
							runtime.Gosched()
						}
					}
				}()
			}

			timeout := time.Duration(-1)
			if cfg.timeout != 0 {
				timeout = cfg.timeout // threshold: the last entries may never reach it
			}
			var consWG sync.WaitGroup
			for ci := range cfg.consumers {
				consWG.Add(1)
				go func() {
					defer consWG.Done()
					order := make(consumerOrder, cfg.producers)
					for i := range order {
						order[i] = -1
					}
					buf := make([]Entry, []int{64, 1, 32}[ci%3])
					blocking := ci%3 != 2 // every third consumer polls with Read
					var e ErrEntry
					for {
						var n int
						var err error
						if blocking {
							n, err = q.SRead(buf, timeout)
						} else {
							n, err = q.Read(buf)
						}
						for _, en := range buf[:n] {
							if !order.check(en.Data) || en.Tag != en.Data&(1<<40-1) {
								t.Errorf("entry %x out of order or corrupt (tag %d)", en.Data, en.Tag)
								return
							}
							tr.mark(en.Data)
						}
						consumed.Add(int64(n))
						switch {
						case err == nil:
						case errors.Is(err, fi.EAVAIL):
							if q.ReadErr(&e) == nil {
								if e.Err != fi.ECANCELED || !order.check(e.Data) {
									t.Errorf("error entry %+v", e)
									return
								}
								tr.mark(e.Data)
								consumed.Add(1)
							}
						case errors.Is(err, fi.EAGAIN):
							if consumed.Load() == int64(total) {
								return
							}
							runtime.Gosched()
						case errors.Is(err, fi.EBADF):
							return
						default:
							t.Errorf("read: %v", err)
							return
						}
					}
				}()
			}

			prodWG.Wait()
			for consumed.Load() < int64(total) && !t.Failed() {
				time.Sleep(time.Millisecond)
			}
			if err := q.Close(); err != nil { // wakes the consumers blocked in SRead
				t.Fatal(err)
			}
			consWG.Wait()
			if got := consumed.Load(); got != int64(total) {
				t.Errorf("consumed %d of %d", got, total)
			}
			if d, m := tr.dups.Load(), tr.missing()-(len(tr.seen[0])*64-per)*cfg.producers; d != 0 || m != 0 {
				t.Errorf("%d duplicated, %d missing", d, m)
			}
			if st := q.Stats(); st.Written != uint64(total) || st.Read != uint64(total) || st.Lost != 0 || st.Discarded != 0 {
				t.Errorf("Stats = %+v", st)
			}
		})
	}
}

// Producers that cannot be back-pressured overrun the CQ; every completion
// is either read exactly once or counted as lost.
func TestConcurrentOverrunAccounting(t *testing.T) {
	const producers = 3
	const filler = ^uint64(0)
	per := stressEntries(1_000_000) / producers
	q := mustOpen(t, Attr{Size: 128, WaitObj: WaitMutexCond, Format: FormatData})
	tr := newTracker(producers, per)
	var attempted, pushed atomic.Int64
	var wg sync.WaitGroup
	for pi := range producers {
		p := mustBind(t, q, BindAttr{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range per {
				attempted.Add(1)
				err := p.Push(&Completion{Entry: Entry{Data: entryID(pi, seq)}})
				if err == nil {
					pushed.Add(1)
				} else if !errors.Is(err, fi.EOVERRUN) {
					t.Error(err)
					return
				}
			}
		}()
	}
	var read atomic.Int64
	var consWG sync.WaitGroup
	for range 2 {
		consWG.Add(1)
		go func() {
			defer consWG.Done()
			buf := make([]Entry, 16)
			for {
				n, err := q.SRead(buf, -1)
				for _, e := range buf[:n] {
					if e.Data != filler {
						tr.mark(e.Data)
					}
				}
				read.Add(int64(n))
				if errors.Is(err, fi.EOVERRUN) {
					return
				}
				if err != nil {
					t.Errorf("SRead: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if !q.Stats().Overrun {
		// The readers kept up: push filler until the CQ overruns, so that
		// they finish and the accounting below covers the overrun too.
		t.Log("readers kept up with 3 producers; forcing the overrun")
		p := mustBind(t, q, BindAttr{})
		for {
			attempted.Add(1)
			err := p.Push(&Completion{Entry: Entry{Data: filler}})
			if err != nil {
				if !errors.Is(err, fi.EOVERRUN) {
					t.Fatal(err)
				}
				break
			}
			pushed.Add(1)
		}
	}
	consWG.Wait()
	st := q.Stats()
	if tr.dups.Load() != 0 {
		t.Errorf("%d duplicates", tr.dups.Load())
	}
	if read.Load() != pushed.Load() || uint64(pushed.Load()) != st.Written {
		t.Errorf("read %d, pushed %d, written %d", read.Load(), pushed.Load(), st.Written)
	}
	if uint64(attempted.Load()) != st.Written+st.Lost {
		t.Errorf("attempted %d != written %d + lost %d", attempted.Load(), st.Written, st.Lost)
	}
}

// Signal racing SRead: every Signal ends exactly one blocked SRead with
// EAGAIN; with data flowing too, no entry is lost and nothing hangs.
func TestSignalRacesSRead(t *testing.T) {
	signals := 200
	if raceEnabled || testing.Short() {
		signals = 50
	}
	for _, w := range blockingWaits {
		t.Run(w.String(), func(t *testing.T) {
			// Room for every entry: Push has no back-pressure, and slow
			// consumers (a loaded machine) must not overrun the CQ.
			q := mustOpen(t, Attr{WaitObj: w, Format: FormatData, Size: 8192})
			eagain := make(chan struct{}, 16)
			var consWG sync.WaitGroup
			var got atomic.Int64
			for range 3 {
				consWG.Add(1)
				go func() {
					defer consWG.Done()
					buf := make([]Entry, 4)
					for {
						n, err := q.SRead(buf, -1)
						got.Add(int64(n))
						switch {
						case err == nil:
						case errors.Is(err, fi.EAGAIN):
							eagain <- struct{}{}
						case errors.Is(err, fi.EBADF):
							return
						default:
							t.Errorf("SRead: %v", err)
							return
						}
					}
				}()
			}

			// Exact phase: no data, so each Signal must produce one EAGAIN.
			for range signals {
				if err := q.Signal(); err != nil {
					t.Fatal(err)
				}
				<-eagain
			}
			if n := len(eagain); n != 0 {
				t.Fatalf("%d signals ended %d SReads", signals, signals+n)
			}

			// With data: signals race entries.
			p, err := q.Bind(BindAttr{})
			if err != nil {
				t.Fatal(err)
			}
			entries := 20 * signals
			sent := 0
			stop := make(chan struct{})
			var sigWG sync.WaitGroup
			sigWG.Add(1)
			go func() {
				defer sigWG.Done()
				for {
					select {
					case <-stop:
						return
					case <-eagain:
					default:
						q.Signal()
						runtime.Gosched()
					}
				}
			}()
			for i := range entries {
				if err := p.Push(&Completion{Entry: Entry{Data: uint64(i)}}); err != nil {
					t.Fatal(err)
				}
				sent++
				if i%10 == 0 {
					runtime.Gosched()
				}
			}
			for got.Load() < int64(sent) {
				time.Sleep(100 * time.Microsecond)
			}
			close(stop)
			sigWG.Wait()
			p.Unbind()
			q.Close()
			consWG.Wait()
			if got.Load() != int64(sent) {
				t.Fatalf("read %d of %d", got.Load(), sent)
			}
		})
	}
}

// Close racing SRead: a Close while readers block (or are about to) wakes
// them all with EBADF, and leaves no descriptor open.
func TestCloseRacesSRead(t *testing.T) {
	rounds := 100
	if raceEnabled || testing.Short() {
		rounds = 20
	}
	fdsBefore := openFDs()
	for _, w := range blockingWaits {
		t.Run(w.String(), func(t *testing.T) {
			for r := range rounds {
				q, err := Open(Attr{WaitObj: w})
				if err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				for i := range 4 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						buf := make([]Entry, 1)
						timeout := time.Duration(-1)
						if i%2 == 1 {
							timeout = time.Millisecond
						}
						for {
							_, err := q.SRead(buf, timeout)
							if errors.Is(err, fi.EBADF) {
								return
							}
							if !errors.Is(err, fi.EAGAIN) {
								t.Errorf("SRead: %v", err)
								return
							}
						}
					}()
				}
				if r%2 == 0 {
					time.Sleep(time.Duration(r%7) * 50 * time.Microsecond)
				}
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
				wg.Wait()
			}
		})
	}
	if after := openFDs(); fdsBefore >= 0 && after > fdsBefore {
		t.Errorf("%d descriptors open before, %d after", fdsBefore, after)
	}
}

func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}
