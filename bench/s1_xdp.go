package main

// Section 1: the XDP program's cost per packet, by BPF_PROG_TEST_RUN,
// beside an empty XDP program in the same run.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/avtab"
	"github.com/xdpfab/xdpfab/internal/xdptest"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/wire"
	"golang.org/x/sys/unix"
)

// avAddr is the i-th of 2^24 distinct peer addresses of family v6, all in
// 198.18.0.0/15 or 2001:2::/48 (never sent to: they only fill AVs).
func avAddr(i int, v6 bool) netip.AddrPort {
	if v6 {
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, 0, 0xff, 0xff,
			12: byte(i >> 24), 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)}), 7000)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18 + byte(i>>16&1), byte(i >> 8), byte(i)}), uint16(1024+i>>17))
}

var (
	probe4 = netip.MustParseAddrPort("198.19.255.254:47999")
	probe6 = netip.MustParseAddrPort("[2001:2:ffff::fe]:47999")
)

// noLiveFrames records that the kernel refused a live-frame test run
// (EPERM: liveFrames), so that the sections measure without them and say
// so.
var noLiveFrames atomic.Bool

// countedRun is a test run of prog (live: live-frame, else plain: the
// kernel hands every repetition the same buffer, see newRewriterPop), and
// the growth of dp's redirect_failed counter over the run. A live run a
// signal interrupts (EINTR) has already sent part of its frames, so it is
// started again with the counter read anew (a plain testRun would count
// those frames twice).
func countedRun(dp *loader.Objects, prog *ebpf.Program, data []byte, repeat uint32, live bool) (time.Duration, uint64, error) {
	for {
		c0, err := dp.Counters()
		if err != nil {
			return 0, 0, err
		}
		_, d, err := testRunOnce(prog, data, repeat, live, 0, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, 0, err
		}
		c1, err := dp.Counters()
		if err != nil {
			return 0, 0, err
		}
		return d, c1[bpf.CounterRedirectFail] - c0[bpf.CounterRedirectFail], nil
	}
}

func famName(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

func sizeName(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1024 && n%1024 == 0:
		return fmt.Sprintf("%dk", n/1024)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// fillAV inserts n addresses in batches of 65536 and returns them.
func fillAV(a *av.AV, n int, v6 bool) ([]netip.AddrPort, error) {
	all := make([]netip.AddrPort, n)
	for i := range all {
		all[i] = avAddr(i, v6)
	}
	for off := 0; off < n; off += 1 << 16 {
		chunk := all[off:min(n, off+1<<16)]
		if got, err := a.Insert(chunk, nil, 0, nil); err != nil || got != len(chunk) {
			return nil, fmt.Errorf("fill AV: %d of %d inserted: %v", got, len(chunk), err)
		}
	}
	return all, nil
}

var xdpSizes = []int{1, 1000, 64 * 1024, 1_000_000}

// avCapacity is the dataplane's AVEntries for an AV of n entries: the
// loader's default (2^18) unless n needs more.
func avCapacity(n int) uint32 { return uint32(max(1<<18, pow2ceil(n))) }

func runXDPCost(r *results, cfg *config) error {
	empty, err := retProgram(xdpPass)
	if err != nil {
		return err
	}
	defer empty.Close()
	drop, err := retProgram(xdpDrop)
	if err != nil {
		return err
	}
	defer drop.Close()
	frames := 8192
	if cfg.quick {
		frames = 1024
	}
	for _, n := range xdpSizes {
		// -cases selects rows by family and size (IPv4/1, IPv6/64k).
		if !cfg.want("IPv4/"+sizeName(n)) && !cfg.want("IPv6/"+sizeName(n)) {
			continue
		}
		dp, err := loader.Load(loader.Config{AVEntries: avCapacity(n), MaxAVs: 4})
		if err != nil {
			return err
		}
		for _, v6 := range []bool{false, true} {
			if !cfg.want(famName(v6) + "/" + sizeName(n)) {
				continue
			}
			if err := xdpCostOne(r, cfg, dp, empty, drop, n, v6, frames); err != nil {
				dp.Close()
				return fmt.Errorf("%s, %d entries: %w", famName(v6), n, err)
			}
		}
		dp.Close()
	}
	r.Setup["xdp_cold_frames"] = fmt.Sprint(frames)
	if noLiveFrames.Load() {
		r.note("xdp", "this kernel refuses live-frame test runs (EPERM): the steady state ran as plain test runs of the same "+
			"repeat count, the rewriter popping the metadata the last run pushed (bpf_xdp_adjust_head, in both programs' runs; "+
			"docs/platform.md#kernels-without-live-frames)")
	}
	return nil
}

func xdpCostOne(r *results, cfg *config, dp *loader.Objects, empty, drop *ebpf.Program, n int, v6 bool, nframes int) error {
	a, err := av.Open(dp, &av.Attr{Count: n})
	if err != nil {
		return err
	}
	defer a.Close()
	addrs, err := fillAV(a, n, v6)
	if err != nil {
		return err
	}
	// The AV's table as the kernel accounts it (fdinfo memlock), per entry.
	t, err := avtab.Open(dp, a.ID(), true)
	if err != nil {
		return err
	}
	ml, err := memlock(t.Map())
	t.Close()
	if err != nil {
		return err
	}
	local := probe4
	if v6 {
		local = probe6
	}
	key := bpf.EPKey{Local: bpf.MakeAddr(local)}
	if err := xdptest.PutEndpoint(dp, key, bpf.EPVal{EpId: 0xfffe, AvId: a.ID(), RxCtxs: 1, Queues: 1}); err != nil {
		return err
	}
	defer xdptest.DeleteEndpoint(dp, key)
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	tmpl := wire.Frame{Src: addrs[0], Dst: local, Hdr: wire.Hdr{Op: wire.OpMsg}, Payload: make([]byte, 64)}
	base := wire.Build(tmpl)

	// Steady state: live-frame test runs of 2^20 packets, each packet's
	// source rewritten from a table of random AV members, the rewriter then
	// tail-calling either xdpfab or a program that only drops.
	sources := make([]netip.AddrPort, min(65536, pow2ceil(n)))
	for i := range sources {
		sources[i] = addrs[rng.IntN(n)]
	}
	repeat := uint32(1 << 20)
	if cfg.quick {
		repeat = 1 << 17
	}
	lbl := map[string]string{"family": famName(v6), "entries": fmt.Sprint(n)}
	mkey := fmt.Sprintf("xdp/%s/%s", famName(v6), sizeName(n))
	costs, err := steadyCost(cfg, dp, drop, v6, base, sources, repeat, false)
	if err != nil {
		return err
	}
	addCost(r, mkey, costs, lbl)
	// The same with the checksum field as xdpfab's endpoints and kernel
	// sockets leave it over veth (the pseudo header's sum, for the device
	// to complete), which the program accepts without summing the datagram.
	ptmpl := tmpl
	ptmpl.PartialUDPCsum = true
	pcosts, err := steadyCost(cfg, dp, drop, v6, wire.Build(ptmpl), sources, repeat, true)
	if err != nil {
		return err
	}
	addCost(r, "xdp-partial"+mkey[3:], pcosts, lbl)

	// Cold: one packet per test run (repeat 1), the frame's source random,
	// beside the empty program: the system call between runs leaves caches
	// and predictors cold.
	frames := make([][]byte, nframes)
	for i := range frames {
		tmpl.Src = addrs[rng.IntN(n)]
		frames[i] = wire.Build(tmpl)
	}
	var cold [2][]float64
	err = onThread(nil, cfg.cpuMeasure, func() error {
		for range cfg.reps {
			for pi, p := range []*ebpf.Program{empty, dp.Program} {
				var total float64
				for _, f := range frames {
					_, d, err := testRun(p, f, 1, false, 0, 0)
					if err != nil {
						return err
					}
					total += float64(d.Nanoseconds())
				}
				cold[pi] = append(cold[pi], total/float64(len(frames)))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	addCost(r, "xdp-cold"+mkey[3:], cold, lbl)

	// Reference: a Go map from source address to index, looked up with the
	// same random sources (what a user-space demultiplexer pays per packet).
	m := make(map[netip.AddrPort]uint32, n)
	for i, a := range addrs {
		m[a] = uint32(i)
	}
	order := make([]netip.AddrPort, 1<<20)
	for i := range order {
		order[i] = addrs[rng.IntN(n)]
	}
	var gomap []float64
	err = onThread(nil, cfg.cpuMeasure, func() error {
		for range cfg.reps {
			var sink uint32
			t0 := time.Now()
			for _, a := range order {
				sink += m[a]
			}
			gomap = append(gomap, float64(time.Since(t0).Nanoseconds())/float64(len(order)))
			runtime.KeepAlive(sink) // the loop must not be optimised away
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.add("xdp", mkey+"/gomap", "ns/lookup", gomap, lbl)
	r.add("xdp", mkey+"/table", "B/entry", []float64{float64(ml) / float64(n)}, lbl)
	fmt.Printf("  %s %s entries: steady: drop-only %.1f ns, xdpfab %.1f ns; cold: empty %.1f ns, xdpfab %.1f ns; Go map %.1f ns\n",
		famName(v6), sizeName(n), median(costs[0]), median(costs[1]), median(cold[0]), median(cold[1]), median(gomap))
	return nil
}

// steadyCost runs the steady-state measurement: live-frame test runs of
// repeat packets shaped like base, each with a source from sources, through
// the rewriter into the drop-only program and into xdpfab, cfg.reps times
// each, interleaved. Every packet must be translated.
//
// Where the kernel refuses live-frame runs (EPERM: docs/platform.md#kernels-without-live-frames)
// the runs are plain ones, whose rewriter first pops what the last run
// pushed in front of the frame (newRewriterPop); noLiveFrames records it
// for the report.
func steadyCost(cfg *config, dp *loader.Objects, drop *ebpf.Program, v6 bool, base []byte, sources []netip.AddrPort, repeat uint32, partial bool) (costs [2][]float64, err error) {
	table := rewriteTable(base, sources, partial)
	live := liveFrames()
	pop := 0
	if !live {
		pop = len(base)
	}
	var progs [2]*rewriter
	for i, tail := range []*ebpf.Program{drop, dp.Program} {
		if progs[i], err = newRewriterPop(v6, table, tail, pop); err != nil {
			return costs, err
		}
		defer progs[i].Close()
	}
	var translated uint64
	err = onThread(nil, cfg.cpuMeasure, func() error {
		for range cfg.reps {
			for i, p := range progs {
				d, n, err := countedRun(dp, p.prog, base, repeat, live)
				if err != nil {
					return err
				}
				costs[i] = append(costs[i], float64(d.Nanoseconds()))
				translated += n
			}
		}
		return nil
	})
	if err != nil {
		return costs, err
	}
	// Every packet must have been translated: redirect_failed (no socket
	// behind the slot) is counted after the lookup and the metadata write.
	if got, want := translated, uint64(cfg.reps)*uint64(repeat); got != want {
		return costs, fmt.Errorf("expected %d translated packets (redirect_failed without a socket), counters say %d", want, got)
	}
	return costs, nil
}

func addCost(r *results, key string, costs [2][]float64, lbl map[string]string) {
	r.add("xdp", key+"/empty", "ns/pkt", costs[0], lbl)
	r.add("xdp", key+"/xdpfab", "ns/pkt", costs[1], lbl)
	diff := make([]float64, len(costs[0]))
	for i := range diff {
		diff[i] = costs[1][i] - costs[0][i]
	}
	r.add("xdp", key+"/delta", "ns/pkt", diff, lbl)
}

func pow2ceil(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

func median(v []float64) float64 { m, _, _ := summarize(v); return m }
