package main

// Section 6: scaling of the receive rate with the number of distinct
// senders, the AV size, and receive contexts / rx queues. The load is the
// in-kernel injector with the source-rewriting program (testrun.go): every
// frame of a live test run gets the next source of a table.

import (
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/stack"
	"github.com/xdpfab/xdpfab/wire"
)

// scaleAddr is the i-th sender (i < 2^24) of the scaling runs: an address
// of 198.19.0.0/16 off the bed's subnet net4 (testbed picks a random /24 of
// 198.18.0.0/15, which may lie in there), the port counting up once the
// addresses run out.
func scaleAddr(i int, net4 netip.Prefix) netip.AddrPort {
	n, skip := 1<<16, -1
	if b := net4.Addr().As4(); b[1] == 19 {
		n, skip = n-256, int(b[2])
	}
	j := i % n
	if skip >= 0 && j>>8 >= skip {
		j += 256
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte(j >> 8), byte(j)}), uint16(2000+i/n))
}

type scaleRun struct {
	avSize   int // AV entries (and Go map entries)
	senders  int // distinct sources cycled through by the injector
	contexts int
	queues   int
}

func runScaling(r *results, cfg *config) error {
	if !liveFrames() {
		r.note("scale", "not measured: this kernel refuses live-frame test runs (EPERM), and the section's load is the in-kernel "+
			"injector (docs/platform.md#kernels-without-live-frames)")
		return nil
	}
	senders := []int{1, 16, 256, 4096, 65536}
	sizes := []int{1, 1000, 65536, 1_000_000}
	if cfg.quick {
		senders, sizes = []int{1, 65536}, []int{1, 65536}
	}
	bd, down, err := testbed.Up(testbed.Options{StaticNeighbors: true, RxQueues: 2, TxQueues: 2})
	if err != nil {
		return err
	}
	defer down()
	o := cfg.rateOpts()
	o.genNS = bd.B.NS
	pass, err := retProgram(xdpPass)
	if err != nil {
		return err
	}
	defer pass.Close()

	// one runs one configuration for xdpfab (FI_MULTI_RECV loop) and,
	// when peer, for the Go recvmmsg + map receiver.
	one := func(key string, sr scaleRun, peer bool, lbl map[string]string) error {
		dp, err := loader.Load(loader.Config{AVEntries: avCapacity(sr.avSize), MaxAVs: 4})
		if err != nil {
			return err
		}
		defer dp.Close()
		all := make([]netip.AddrPort, sr.avSize)
		for i := range all {
			all[i] = scaleAddr(i, bd.Net4)
		}
		rng := rand.New(rand.NewPCG(uint64(sr.avSize), uint64(sr.senders)))
		perm := rng.Perm(sr.avSize)
		srcs := make([]netip.AddrPort, sr.senders)
		for i := range srcs {
			if sr.senders < sr.avSize {
				srcs[i] = all[perm[i]]
			} else {
				srcs[i] = all[i%sr.avSize]
			}
		}
		local := netip.AddrPortFrom(bd.B.IPv4, rxPort)
		base := wire.Build(wire.Frame{SrcMAC: [6]byte(bd.A.MAC), DstMAC: [6]byte(bd.B.MAC), Src: srcs[0], Dst: local,
			Hdr: wire.Hdr{Op: wire.OpMsg}, Payload: make([]byte, payloadLen), NoUDPCsum: true})
		// The rewriter cycles through a power-of-two table.
		for len(srcs)&(len(srcs)-1) != 0 {
			srcs = append(srcs, srcs[len(srcs)%sr.senders])
		}
		table := rewriteTable(base, srcs, false)
		for i := range table {
			table[i].RxCtx = uint8(i % sr.contexts)
		}
		measureOne := func(name string, tail *ebpf.Program, rx rxLoop) error {
			rw, err := newRewriter(false, table, tail)
			if err != nil {
				return err
			}
			defer rw.Close()
			var vals []float64
			for range cfg.reps {
				v, err := measureRate(cfg, o, rx, injector(bd.B, rw.prog, base, sr.queues))
				if err != nil {
					return err
				}
				if v.bad > 0 {
					return fmt.Errorf("%s: %d deliveries with a wrong source", name, v.bad)
				}
				vals = append(vals, v.mpps)
			}
			m := r.add("scale", key+"/"+name, "Mpps", vals, lbl)
			fmt.Printf("  %-28s %-9s %6.3f Mpps (min %.3f max %.3f)\n", key, name, m.Median, m.Min, m.Max)
			return nil
		}
		x, err := openXdpfabRx(dp, bd.B, local, all, func(a *stack.Attr) {
			a.EP.RxContexts, a.EP.Queues = sr.contexts, sr.queues
		})
		if err != nil {
			return err
		}
		n := fi.Addr(sr.avSize)
		err = measureOne("xdpfab", dp.Program, x.loop(true, func(a fi.Addr) bool { return a < n }))
		x.Close()
		if err != nil || !peer {
			return err
		}
		loop, closeRx, err := udpReceiver(bd.B, local, all, true)
		if err != nil {
			return err
		}
		defer closeRx()
		return measureOne("udp-mmsg", nil, loop)
	}

	for _, k := range senders {
		key := fmt.Sprintf("scale/senders/%d", k)
		if err := one(key, scaleRun{avSize: k, senders: k, contexts: 1, queues: 1}, true,
			map[string]string{"senders": fmt.Sprint(k), "av": fmt.Sprint(k)}); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	for _, n := range sizes {
		key := fmt.Sprintf("scale/avsize/%s", sizeName(n))
		k := min(n, 65536)
		if err := one(key, scaleRun{avSize: n, senders: k, contexts: 1, queues: 1}, true,
			map[string]string{"senders": fmt.Sprint(k), "av": fmt.Sprint(n)}); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	for _, cq := range [][2]int{{1, 1}, {2, 1}, {4, 1}, {1, 2}, {2, 2}} {
		key := fmt.Sprintf("scale/ctx%d-q%d", cq[0], cq[1])
		if err := one(key, scaleRun{avSize: 256, senders: 256, contexts: cq[0], queues: cq[1]}, false,
			map[string]string{"contexts": fmt.Sprint(cq[0]), "queues": fmt.Sprint(cq[1])}); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	return nil
}
