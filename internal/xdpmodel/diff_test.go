//go:build linux

package xdpmodel_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/internal/xdpmodel"
	"github.com/xdpfab/xdpfab/internal/xdptest"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/wire"
	"golang.org/x/sys/unix"
)

// envInt reads a positive integer from the environment, or def.
func envInt(tb testing.TB, name string, def uint64) uint64 {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		tb.Fatalf("%s=%q: %v", name, s, err)
	}
	return v
}

// TestDifferential runs the real XDP program (BPF_PROG_TEST_RUN on real
// maps holding the fixture) and the model on the same generated frames,
// on both rx queues of a two-queue veth, and compares them frame by frame:
// the action, the metadata (present or not, and every field), the frame
// (never changed), and the counters (in the ingress interface's row, rx
// and the model's outcome counter move by one and no other moves).
//
// XDPFAB_DIFF_N frames (default 4000: make test), from seed
// XDPFAB_DIFF_SEED (default 1); `make difftest` runs 1M from a fresh seed.
// A failure prints the seed, the frame's index and kind: rerun with that
// seed to reproduce it.
func TestDifferential(t *testing.T) {
	testutil.RequirePrivileged(t)
	n := envInt(t, "XDPFAB_DIFF_N", 4000)
	seed := envInt(t, "XDPFAB_DIFF_SEED", 1)
	t.Logf("seed %d (XDPFAB_DIFF_SEED=%d reproduces), %d frames", seed, seed, n)

	dp, err := loader.Load(loader.Config{AVEntries: 1024, MaxAVs: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	bed := testbed.New(t, testbed.Options{RxQueues: 2, TxQueues: 2})
	tables := xdpmodel.Fixture()
	if err := tables.Install(dp); err != nil {
		t.Fatal(err)
	}
	xdptest.BindXSK(t, dp, bed.A, 0, xdpmodel.FixtureSlots...)

	g := xdpmodel.NewGen(seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	row := bed.A.Ifindex
	if row >= bpf.IfindexSlots {
		row = 0
	}
	var tally [bpf.NumCounters]uint64 // what the model says the row gained
	kinds := map[string]int{}
	stamped := 0 // frames to an endpoint being measured (fixture EP6)
	// Outcomes of frames with fragments (longer than a test run's linear
	// part): the checks over fragments must have been reached.
	fragged := map[bpf.Counter]int{}
	start := time.Now()
	err = bed.A.Do(func() error {
		base, err := readRow(dp, row)
		if err != nil {
			return err
		}
		prev := base
		for i := range n {
			frame, kind := g.Next()
			kinds[kind]++
			ctx := bpf.XDPMD{IngressIfindex: uint32(bed.A.Ifindex), RxQueueIndex: uint32(rng.IntN(2))}
			want := tables.Run(frame, ctx)
			if len(frame) > xdpmodel.TestLinear {
				fragged[want.Counter]++
			}
			fail := func(format string, a ...any) error {
				return fmt.Errorf("seed %d, frame %d (%s, queue %d): %s\nmodel: %v\nframe (%d bytes): % x",
					seed, i, kind, ctx.RxQueueIndex, fmt.Sprintf(format, a...), want, len(frame), frame)
			}
			before := monotonic()
			got, err := xdptest.RunQueue(dp, frame, ctx)
			if err != nil {
				return fail("test run: %v", err)
			}
			after := monotonic()
			if got.Verdict != want.Action {
				return fail("program's verdict %d", got.Verdict)
			}
			if got.HasMeta != want.HasMeta || want.HasMeta && got.Meta != want.Meta {
				return fail("program's metadata (%v) %+v\nmodel's (%v) %+v", got.HasMeta, got.Meta, want.HasMeta, want.Meta)
			}
			out := got.Frame
			if want.Stamped {
				stamped++
				// The stamp: the time of the run, on CLOCK_MONOTONIC.
				ns, ok := wire.Stamp(out, got.Meta)
				if !ok || ns < before || ns > after {
					return fail("stamp %d (ok %v), want one between %d and %d", ns, ok, before, after)
				}
				out = out[wire.StampLen:]
			}
			if !bytes.Equal(out, frame) {
				return fail("the program changed the frame")
			}
			if want.Row != row {
				return fail("model's counter row %d, ingress row %d", want.Row, row)
			}
			tally[bpf.CounterRX]++
			tally[want.Counter]++
			// The whole row, frame by frame: RX and the model's counter
			// moved by one, every other counter stayed.
			now, err := readRow(dp, row)
			if err != nil {
				return err
			}
			for c := range bpf.NumCounters {
				d, w := now[c]-prev[c], uint64(0)
				if c == bpf.CounterRX || c == want.Counter {
					w = 1
				}
				if d != w {
					return fail("counter %v moved by %d, want %d", c, d, w)
				}
			}
			prev = now
		}
		for c := range bpf.NumCounters {
			if prev[c]-base[c] != tally[c] {
				return fmt.Errorf("seed %d: counter %v moved by %d over the run, the model says %d", seed, c, prev[c]-base[c], tally[c])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	el := time.Since(start)
	t.Logf("%d frames agree in %v (%.1f µs per frame); outcomes %v", n, el.Round(time.Millisecond), float64(el.Microseconds())/float64(n), tally)
	t.Logf("kinds %v; %d stamped", kinds, stamped)
	if n >= 1000 && stamped == 0 {
		t.Errorf("no frame of %d went to the stamping endpoint: the stamp went untested", n)
	}
	t.Logf("frames with fragments: %v", fragged)
	if n >= 4000 {
		for _, c := range []bpf.Counter{bpf.CounterTranslated, bpf.CounterCsumError, bpf.CounterMalformed} {
			if fragged[c] == 0 {
				t.Errorf("no frame with fragments ended in %v: the checks over fragments went untested", c)
			}
		}
	}
}

// readCounter sums counter c of row over the CPUs.
func readCounter(dp *loader.Objects, row int, c bpf.Counter) (uint64, error) {
	var per []uint64
	if err := dp.Stats.Lookup(uint32(row*int(bpf.NumCounters)+int(c)), &per); err != nil {
		return 0, fmt.Errorf("counter %v: %w", c, err)
	}
	var s uint64
	for _, v := range per {
		s += v
	}
	return s, nil
}

// readRow reads row's counters, with RX the sum of the others, as the
// loader reports it (the program does not count RX itself; reading the
// row's elements is much faster than the loader's read of every row).
func readRow(dp *loader.Objects, row int) (out [bpf.NumCounters]uint64, err error) {
	for c := range bpf.NumCounters {
		if c == bpf.CounterRX {
			continue
		}
		if out[c], err = readCounter(dp, row, c); err != nil {
			return out, err
		}
		out[bpf.CounterRX] += out[c]
	}
	return out, nil
}

// monotonic is CLOCK_MONOTONIC in nanoseconds, the XDP program's clock.
func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
