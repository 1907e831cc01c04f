package main

// Section 4: the AV control plane: inserts and removes per second, memory
// per entry, beside libfabric's fi_av_insert on its udp provider.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/avtab"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
)

type avCase struct {
	key, title string
	batch      int
	more       bool
}

var avCases = []avCase{
	{"single", "one address per call", 1, false},
	{"single_more", "one per call with FI_MORE (flushed every 1024)", 1, true},
	{"batch1024", "1024 addresses per call", 1024, false},
}

// memlock reads the kernel's accounting of a map ("memlock:" in fdinfo).
func memlock(m *ebpf.Map) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "memlock:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no memlock in fdinfo of %v", m)
}

// avRun is what one xdpfabAVRun measured.
type avRun struct {
	ins, rem   float64 // per second
	heap, kern float64 // bytes per entry: process memory growth (Go heap + hint mapping), kernel (fdinfo memlock of the AV's table)
	lookupNs   float64 // Lookup of a random fi_addr into a sockaddr buffer, ns
}

// avLookups is how many Lookup calls a bulk run times (as fiav's).
const avLookups = 1 << 20

// xdpfabAVRun inserts n addresses in calls of batch, times Lookup of
// random fi_addr values (with lookups), and removes them in calls of
// removeBatch, returning the rates, the Go heap growth per entry, the
// kernel's accounting of the AV's table (fdinfo memlock) per entry with all
// n in, and the lookup time.
func xdpfabAVRun(dp *loader.Objects, n, batch, removeBatch int, more, lookups bool) (run avRun, err error) {
	var ins, rem, heap, kern float64
	addrs := make([]netip.AddrPort, n)
	for i := range addrs {
		addrs[i] = avAddr(i, false)
	}
	ids := make([]fi.Addr, n)
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	hints0 := avtab.HintBytes()
	a, err := av.Open(dp, &av.Attr{Count: n})
	if err != nil {
		return run, err
	}
	defer a.Close()
	t0 := time.Now()
	for i := 0; i < n; i += batch {
		k := min(batch, n-i)
		flags := fi.Flags(0)
		if more && (i+k)%1024 != 0 && i+k < n {
			flags = fi.More
		}
		if got, err := a.Insert(addrs[i:i+k], ids[i:i+k], flags, nil); err != nil || got != k {
			return run, fmt.Errorf("insert: %d of %d: %v", got, k, err)
		}
	}
	ins = float64(n) / time.Since(t0).Seconds()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	// The Go heap and, for large AVs, the slot hints' own mapping
	// (internal/avtab's huge-page hints), which the heap does not count.
	heap = (float64(m1.HeapAlloc) - float64(m0.HeapAlloc) + float64(avtab.HintBytes()-hints0)) / float64(n)
	runtime.KeepAlive(addrs)
	t, err := avtab.Open(dp, a.ID(), true)
	if err != nil {
		return run, err
	}
	ml, err := memlock(t.Map())
	t.Close()
	if err != nil {
		return run, err
	}
	kern = float64(ml) / float64(n)
	if lookups {
		// Random fi_addr values (the same LCG as fiav's), looked up into a
		// sockaddr buffer as fi_av_lookup does.
		order := make([]fi.Addr, avLookups)
		x := uint32(12345)
		for i := range order {
			x = x*1103515245 + 12345
			order[i] = ids[(x>>8)%uint32(n)]
		}
		buf := make([]byte, 28)
		tl := time.Now()
		for _, fa := range order {
			if _, err := a.Lookup(fa, buf); err != nil {
				return run, fmt.Errorf("lookup %d: %w", fa, err)
			}
		}
		run.lookupNs = float64(time.Since(tl).Nanoseconds()) / avLookups
	}
	t1 := time.Now()
	for i := 0; i < n; i += removeBatch {
		k := min(removeBatch, n-i)
		if err := a.Remove(ids[i:i+k], 0); err != nil {
			return run, fmt.Errorf("remove: %v", err)
		}
	}
	rem = float64(n) / time.Since(t1).Seconds()
	run.ins, run.rem, run.heap, run.kern = ins, rem, heap, kern
	return run, nil
}

type fiavOut struct {
	N         int     `json:"n"`
	Insert    float64 `json:"insert_per_s"`
	Remove    float64 `json:"remove_per_s"`
	HeapBytes float64 `json:"heap_bytes_per_entry"`
	LookupNs  float64 `json:"lookup_ns"`
}

func runAV(r *results, cfg *config) error {
	small, bulk := 16384, 1_000_000
	if cfg.quick {
		small, bulk = 4096, 1<<18
	}
	dp, err := loader.Load(loader.Config{AVEntries: avCapacity(bulk), MaxAVs: 4})
	if err != nil {
		return err
	}
	defer dp.Close()
	lbl := func(impl, c string) map[string]string { return map[string]string{"impl": impl, "case": c} }
	for _, c := range avCases {
		var ins, rem []float64
		err := onThread(nil, cfg.cpuMeasure, func() error {
			for range cfg.reps {
				run, err := xdpfabAVRun(dp, small, c.batch, c.batch, c.more, false)
				if err != nil {
					return fmt.Errorf("%s: %w", c.key, err)
				}
				ins, rem = append(ins, run.ins), append(rem, run.rem)
			}
			return nil
		})
		if err != nil {
			return err
		}
		r.add("av", "av/insert/"+c.key+"/xdpfab", "ops/s", ins, lbl("xdpfab", c.key))
		r.add("av", "av/remove/"+c.key+"/xdpfab", "ops/s", rem, lbl("xdpfab", c.key))
		fmt.Printf("  xdpfab %-12s insert %9.0f/s remove %9.0f/s\n", c.key, median(ins), median(rem))
	}
	// The bulk runs, xdpfab's and libfabric's in turns (one of each per
	// repetition), so that drift of the machine (memory latency above
	// all: the random lookups miss in the caches and the TLB) shows in
	// both alike.
	var bd *testbed.Bed
	if cfg.fiav == "" {
		r.note("av", "libfabric peer skipped: no -fiav helper given")
	} else {
		var down func()
		if bd, down, err = testbed.Up(testbed.Options{StaticNeighbors: true}); err != nil {
			return err
		}
		defer down()
	}
	var ins, rem, heap, kern, lookup []float64
	var outs []map[string]fiavOut
	for range cfg.reps {
		err = onThread(nil, cfg.cpuMeasure, func() error {
			run, err := xdpfabAVRun(dp, bulk, 1024, 1024, false, true)
			if err != nil {
				return fmt.Errorf("bulk: %w", err)
			}
			ins, rem, heap, kern = append(ins, run.ins), append(rem, run.rem), append(heap, run.heap), append(kern, run.kern)
			lookup = append(lookup, run.lookupNs)
			return nil
		})
		if err != nil {
			return err
		}
		if bd != nil {
			o, err := fiavRun(r, cfg, bd, small, bulk)
			if err != nil {
				return err
			}
			outs = append(outs, o)
		}
	}
	r.add("av", "av/insert/bulk/xdpfab", "ops/s", ins, lbl("xdpfab", "bulk"))
	r.add("av", "av/remove/bulk/xdpfab", "ops/s", rem, lbl("xdpfab", "bulk"))
	r.add("av", "av/mem/heap/xdpfab", "B/entry", heap, lbl("xdpfab", "bulk"))
	r.add("av", "av/lookup/bulk/xdpfab", "ns/lookup", lookup, lbl("xdpfab", "bulk"))
	fmt.Printf("  xdpfab bulk %d  insert %9.0f/s remove %9.0f/s, Go heap + hints %.0f B/entry, lookup %.1f ns\n", bulk, median(ins), median(rem), median(heap), median(lookup))
	r.Setup["av_small"], r.Setup["av_bulk"] = fmt.Sprint(small), fmt.Sprint(bulk)

	// Kernel accounting of the AV's table (forward index and per-index
	// entries in one array map sized by the count hint), with all bulk
	// entries in: fdinfo memlock of that map.
	r.add("av", "av/mem/kernel/xdpfab", "B/entry", kern, lbl("xdpfab", "kernel"))
	total := make([]float64, len(kern))
	for i := range kern {
		total[i] = kern[i] + heap[i]
	}
	r.add("av", "av/mem/total/xdpfab", "B/entry", total, lbl("xdpfab", "bulk"))
	fmt.Printf("  xdpfab bulk %d  kernel %.1f B/entry, kernel + process %.1f B/entry\n", bulk, median(kern), median(total))
	r.note("av", "kernel accounting (fdinfo memlock) of the AV's table for %d entries opened with count %d: %.0f B", bulk, bulk, median(kern)*float64(bulk))
	if bd == nil {
		return nil
	}
	col := func(k string, f func(fiavOut) float64) []float64 {
		var v []float64
		for _, o := range outs {
			v = append(v, f(o[k]))
		}
		return v
	}
	for _, c := range append(avCases, avCase{key: "bulk"}) {
		r.add("av", "av/insert/"+c.key+"/libfabric", "ops/s", col(c.key, func(o fiavOut) float64 { return o.Insert }), lbl("libfabric", c.key))
		if c.key != "bulk" {
			r.add("av", "av/remove/"+c.key+"/libfabric", "ops/s", col(c.key, func(o fiavOut) float64 { return o.Remove }), lbl("libfabric", c.key))
		}
		fmt.Printf("  libfabric %-12s insert %9.0f/s remove %9.0f/s\n", c.key,
			median(col(c.key, func(o fiavOut) float64 { return o.Insert })), median(col(c.key, func(o fiavOut) float64 { return o.Remove })))
	}
	r.add("av", "av/mem/heap/libfabric", "B/entry", col("bulk", func(o fiavOut) float64 { return o.HeapBytes }), lbl("libfabric", "bulk"))
	r.add("av", "av/lookup/bulk/libfabric", "ns/lookup", col("bulk", func(o fiavOut) float64 { return o.LookupNs }), lbl("libfabric", "bulk"))
	return nil
}

// fiavRun runs the libfabric peer (bench/fiav) once on the measuring CPU in
// host B's namespace and returns its results by case.
func fiavRun(r *results, cfg *config, bd *testbed.Bed, small, bulk int) (map[string]fiavOut, error) {
	ctx, cancel := context.WithTimeout(cfg.ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", bd.B.Name(), "taskset", "-c", fmt.Sprint(cfg.cpuMeasure),
		cfg.fiav, fmt.Sprint(small), fmt.Sprint(bulk))
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("fiav: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("fiav output: %w: %s", err, b)
	}
	o := map[string]fiavOut{}
	for k, v := range raw {
		var x fiavOut
		if json.Unmarshal(v, &x) == nil {
			o[k] = x
		} else if k == "version" {
			var s string
			json.Unmarshal(v, &s)
			r.Setup["libfabric"] = s
		}
	}
	return o, nil
}
