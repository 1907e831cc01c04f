//go:build linux

package av_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/xdptest"
	"github.com/xdpfab/xdpfab/wire"
	"golang.org/x/sys/unix"
)

// churnDuration is how long each churn test runs: XDPFAB_CHURN_SECONDS, or
// 2 s (make test).
func churnDuration(tb testing.TB) time.Duration {
	if s := os.Getenv("XDPFAB_CHURN_SECONDS"); s != "" {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			tb.Fatalf("XDPFAB_CHURN_SECONDS=%q: %v", s, err)
		}
		return time.Duration(v * float64(time.Second))
	}
	return 2 * time.Second
}

// The XDP program translates frames from many sources on every CPU while a
// writer removes entries and inserts other sources at full speed, which
// take the freed indices (lowest free index): every translated frame's
// (source, fi_addr, user ID) must be one the table held for that source at
// some point. Each insert carries a user ID of its own (FI_AV_USER_ID per
// insert), recorded before the insert, so a frame that combined one
// entry's key with another's index or user ID would match no record.
func TestChurnNoMisattribution(t *testing.T) {
	churn(t, false)
}

// The same while the AV grows far past its count hint in the middle of
// the run (tables swapped under traffic): besides the check above, the
// sources that are never removed are translated in every frame, before,
// during and after each swap.
func TestChurnWithGrowth(t *testing.T) {
	churn(t, true)
}

type insertion struct {
	src int
	idx fi.Addr
}

type observed struct {
	src    int
	fiAddr uint64
	userID uint64
}

func churn(t *testing.T, grow bool) {
	dp := newDP(t, 1<<16)
	const (
		stable = 32  // never removed
		pool   = 600 // sources the writer churns through
		live   = 200 // churned sources in the AV at any time
	)
	hint := pool
	if grow {
		hint = 64
	}
	a := openAV(t, dp, av.Attr{Count: hint})
	src := func(i int) netip.AddrPort {
		if i%2 == 1 {
			return peer6(i)
		}
		return peer(i)
	}

	var mu sync.Mutex
	history := map[uint64]insertion{} // user ID -> what it was inserted as
	var nextUID uint64 = 1 << 40
	inserted := map[int]fi.Addr{} // source -> index, writer's view
	insert := func(i int) {
		uid := nextUID
		nextUID++
		mu.Lock()
		history[uid] = insertion{src: i, idx: fi.AddrNotAvail}
		mu.Unlock()
		out := []fi.Addr{fi.Addr(uid)}
		if n, err := a.Insert([]netip.AddrPort{src(i)}, out, fi.AVUserID, nil); n != 1 || err != nil {
			t.Errorf("insert %v: %d %v", src(i), n, err)
			return
		}
		mu.Lock()
		history[uid] = insertion{src: i, idx: out[0]}
		mu.Unlock()
		inserted[i] = out[0]
	}
	for i := range stable + live {
		insert(i)
	}

	// One endpoint bound to the AV; frames from every source (and from
	// sources never inserted).
	local := netip.MustParseAddrPort("198.19.0.1:7000")
	local6 := netip.MustParseAddrPort("[2001:2:ff::1]:7000")
	for i, l := range []netip.AddrPort{local, local6} {
		if err := dp.EP.Put(bpf.EPKey{Local: bpf.MakeAddr(l)}, bpf.EPVal{EpId: uint32(i + 1), AvId: a.ID(), RxCtxs: 1, Queues: 1}); err != nil {
			t.Fatal(err)
		}
	}
	const strangers = 64
	frames := make([][]byte, stable+pool+strangers)
	for i := range frames {
		dst := local
		if i%2 == 1 {
			dst = local6
		}
		frames[i] = wire.Build(wire.Frame{Src: src(i), Dst: dst, Hdr: wire.Hdr{Op: wire.OpMsg}})
	}

	ncpu := runtime.NumCPU()
	var stop atomic.Bool
	var wg sync.WaitGroup
	results := make([][]observed, ncpu)
	lost := make([]int, ncpu)
	runs := make([]int, ncpu)
	errs := make(chan error, ncpu)
	for cpu := range ncpu {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				errs <- fmt.Errorf("pin to CPU %d: %w", cpu, err)
				return
			}
			rng := rand.New(rand.NewPCG(uint64(cpu), 7))
			for !stop.Load() {
				i := rng.IntN(len(frames))
				r, err := xdptest.Run(dp, frames[i])
				if err != nil {
					errs <- err
					return
				}
				runs[cpu]++
				if !r.HasMeta {
					errs <- fmt.Errorf("source %v: no metadata (verdict %d)", src(i), r.Verdict)
					return
				}
				if r.Meta.Flags&wire.MetaKnown == 0 {
					if i < stable {
						lost[cpu]++
					}
					continue
				}
				results[cpu] = append(results[cpu], observed{i, r.Meta.FiAddr, r.Meta.UserID})
			}
		})
	}

	// The writer: remove a random churned source, insert one that is out.
	rng := rand.New(rand.NewPCG(1, 2))
	deadline := time.Now().Add(churnDuration(t))
	half := time.Now().Add(churnDuration(t) / 2)
	out := []int{}
	for i := stable + live; i < stable+pool; i++ {
		out = append(out, i)
	}
	ops, grown := 0, false
	for time.Now().Before(deadline) && !t.Failed() {
		if grow && !grown && time.Now().After(half) {
			// Growth in the middle: every source still out goes in, the
			// AV grows from 64 indices to over 600 (several swaps).
			for _, i := range out {
				insert(i)
			}
			out = out[:0]
			grown = true
			continue
		}
		var victim int
		for victim = range inserted {
			if victim >= stable {
				break
			}
		}
		if victim < stable {
			continue
		}
		if err := a.Remove([]fi.Addr{inserted[victim]}, 0); err != nil {
			t.Fatalf("remove %v: %v", src(victim), err)
		}
		delete(inserted, victim)
		if len(out) > 0 {
			k := rng.IntN(len(out))
			next := out[k]
			out[k] = victim
			insert(next)
		} else {
			insert(victim)
		}
		ops++
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	total, translated, bad, lostTotal := 0, 0, 0, 0
	for cpu := range ncpu {
		total += runs[cpu]
		translated += len(results[cpu])
		lostTotal += lost[cpu]
		for _, o := range results[cpu] {
			h, ok := history[o.userID]
			if !ok || h.src != o.src || uint64(h.idx) != o.fiAddr {
				if bad < 10 {
					t.Errorf("frame from %v translated to fi_addr %d user ID %#x, which never belonged to it (recorded: %+v %v)",
						src(o.src), o.fiAddr, o.userID, h, ok)
				}
				bad++
			}
		}
	}
	t.Logf("%d CPUs, %d test runs, %d translated, %d writer remove+insert pairs, %d table rebuilds, %d stable-source frames unknown",
		ncpu, total, translated, ops, av.Rebuilds(a), lostTotal)
	if bad > 0 {
		t.Errorf("%d of %d translated frames carry an fi_addr or user ID that never belonged to their source", bad, translated)
	}
	if lostTotal > 0 {
		t.Errorf("%d frames from sources that were never removed were not translated", lostTotal)
	}
	if translated == 0 || ops == 0 {
		t.Errorf("nothing happened: %d translated, %d writer operations", translated, ops)
	}
	if grow && av.Rebuilds(a) == 0 {
		t.Error("the AV did not grow")
	}
}
