package main

// Section 3: ping-pong latency over one veth pair (MTU 9000): xdpfab
// endpoints with manual progress (busy polling off and on) vs libfabric's
// fi_pingpong (udp dgram, tcp msg) vs a Go UDP ping-pong vs the floor, a
// minimal AF_XDP ping-pong in C (s3_floor.go). Latency per
// transfer is half a round trip, as fi_pingpong's usec/xfer counts it
// (elapsed / iterations / 2).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/stack"
)

// ppSizes are the payload sizes: 1472 is the MTU-sized message (the
// largest UDP payload at MTU 1500, and libfabric udp's max_msg_size); 4096
// and 8192 are jumbo messages, which xdpfab carries at MTU 9000 as
// multi-buffer frames and the floor (one UMEM frame per packet) measures
// at its largest message instead.
var ppSizes = []int{64, 1024, 1472, 4096, 8192}

// ppResult is one ping-pong run: the per-transfer latencies (half round
// trips) and the mean as fi_pingpong reports it.
type ppResult struct {
	mean, p50, p99, p999 float64 // µs
}

func summarizePP(halves []time.Duration, elapsed time.Duration) ppResult {
	slices.Sort(halves)
	return ppResult{
		mean: us(elapsed) / float64(len(halves)) / 2,
		p50:  us(percentile(halves, 0.5)),
		p99:  us(percentile(halves, 0.99)),
		p999: us(percentile(halves, 0.999)),
	}
}

// floorMaxMsg is the largest message the C floor carries on a link of mtu:
// one 4096-byte UMEM frame less the kernel's headroom and the headers (it
// binds without multi-buffer), less the 32 bytes of the xdpfab header it
// does not send, to stay comparable with xdpfab's sizes.
func floorMaxMsg(mtu int) int { return min(mtu, 4096-256-14) - 20 - 8 - 32 }

func runPingPong(r *results, cfg *config) error {
	iters, warm := 10000, 500
	if cfg.quick {
		iters, warm = 1000, 100
	}
	bd, down, err := testbed.Up(testbed.Options{StaticNeighbors: true, MTU: 9000})
	if err != nil {
		return err
	}
	defer down()
	r.Setup["pingpong_iterations"] = fmt.Sprint(iters)
	if cfg.want("pauses") && cfg.xskfloor != "" {
		// Before any ping-pong: the machine's own pauses, nothing else running.
		if err := measurePauses(r, cfg); err != nil {
			r.note("pp", "machine pauses not measured: %v", err) // the ping-pongs do not depend on them
		}
	}
	add := func(impl, title string, size int, res []ppResult) {
		var mean, p50, p99, p999 []float64
		for _, x := range res {
			mean, p50, p99, p999 = append(mean, x.mean), append(p50, x.p50), append(p99, x.p99), append(p999, x.p999)
		}
		lbl := map[string]string{"impl": title, "size": fmt.Sprint(size)}
		key := fmt.Sprintf("pp/%s/%d", impl, size)
		r.add("pp", key+"/mean", "us", mean, lbl)
		if res[0].p50 > 0 { // fi_pingpong reports only its mean
			r.add("pp", key+"/p50", "us", p50, lbl)
			r.add("pp", key+"/p99", "us", p99, lbl)
			r.add("pp", key+"/p999", "us", p999, lbl)
		}
		fmt.Printf("  %-16s %5d B: mean %7.2f us  p50 %7.2f  p99 %7.2f  p99.9 %7.2f\n", impl, size, median(mean), median(p50), median(p99), median(p999))
	}

	// xdpfab, busy polling off and on, in native and generic mode on the
	// MTU-9000 bed (its program is multi-buffer: native XDP on veth takes
	// it at that MTU). The floor's XDP program is not multi-buffer, so
	// native XDP on veth refuses it an MTU above about 3.5k (ERANGE): it
	// runs natively on a second bed with MTU 3500.
	dp, err := loader.Load(loader.Config{AVEntries: 4096, MaxAVs: 8})
	if err != nil {
		return err
	}
	defer dp.Close()
	// The floor runs on beds of its own (its program is not xdpfab's, and
	// a queue belongs to one UMEM), so that each of its repetitions can
	// run right after xdpfab's at the same size: the ratio of each pair
	// is taken minutes apart from nothing (the machine's speed drifts by
	// more than the differences measured here).
	bdNative, downNative, err := testbed.Up(testbed.Options{StaticNeighbors: true, MTU: 3500})
	if err != nil {
		return err
	}
	defer downNative()
	bdGeneric := bd // unused unless the generic floor runs
	if cfg.want("xskfloor-generic") && cfg.xskfloor != "" {
		var downGeneric func()
		if bdGeneric, downGeneric, err = testbed.Up(testbed.Options{StaticNeighbors: true, MTU: 9000}); err != nil {
			return err
		}
		defer downGeneric()
	}
	for _, v := range []struct {
		bd      *testbed.Bed
		mode    loader.Mode
		tag     string
		floorBd *testbed.Bed
		floorMT int
	}{{bd, loader.Native, "", bdNative, 3500}, {bd, loader.Generic, "-generic", bdGeneric, 9000}} {
		var fl *floorRun
		if key := "xskfloor" + v.tag; cfg.want(key) {
			if cfg.xskfloor == "" {
				r.note("pp", "%s: not run: no -xskfloor (bench/run.sh builds bench/xskfloor/xskfloor.c)", key)
			} else {
				var err error
				if fl, err = newFloorRun(cfg, v.floorBd, v.mode, key, v.floorMT, iters, warm); err != nil {
					return fmt.Errorf("%s: %w", key, err)
				}
				defer fl.Close()
			}
		}
		var atts []*loader.Attachment
		for _, h := range []*testbed.Host{v.bd.A, v.bd.B} {
			var att *loader.Attachment
			if err := h.Do(func() (err error) { att, err = dp.Attach(testbed.LinkName, v.mode); return err }); err != nil {
				return err
			}
			atts = append(atts, att)
		}
		for _, bp := range []struct {
			key  string
			poll time.Duration
		}{{"xdpfab" + v.tag, 0}, {"xdpfab-busypoll" + v.tag, 50 * time.Microsecond}} {
			if !cfg.want(bp.key) {
				continue
			}
			pair := fl
			if bp.poll > 0 {
				pair = nil // the floor pairs with xdpfab without busy polling
			}
			if err := xdpfabPingPong(r, cfg, dp, v.bd, bp.key, v.mode, bp.poll, iters, warm, add, pair); err != nil {
				return fmt.Errorf("%s: %w", bp.key, err)
			}
		}
		for _, att := range atts {
			att.Close()
		}
		// The floor at the sizes xdpfab ran at (or its largest message):
		// what the pairs measured, else on its own now.
		if fl != nil {
			if err := fl.finish(r, add); err != nil {
				return fmt.Errorf("xskfloor%s: %w", v.tag, err)
			}
		}
	}

	// Go UDP.
	if cfg.want("go-udp") {
		for _, size := range ppSizes {
			var res []ppResult
			for range cfg.reps {
				x, err := udpPingPong(cfg, bd, size, iters, warm)
				if err != nil {
					return fmt.Errorf("go udp %d: %w", size, err)
				}
				res = append(res, x)
			}
			add("go-udp", "Go UDP sockets (net.UDPConn)", size, res)
		}
	}

	// libfabric's fi_pingpong.
	for _, p := range []struct{ key, prov, ep string }{{"fi-udp", "udp", "dgram"}, {"fi-tcp", "tcp", "msg"}} {
		if !cfg.want(p.key) {
			continue
		}
		for _, size := range ppSizes {
			var res []ppResult
			var ferr error
			for range cfg.reps {
				mean, err := fiPingPong(cfg, bd, p.prov, p.ep, size, iters)
				if err != nil {
					ferr = err
					break
				}
				res = append(res, ppResult{mean: mean})
			}
			if ferr != nil {
				r.note("pp", "fi_pingpong -p %s -e %s -S %d: %v", p.prov, p.ep, size, ferr)
				fmt.Printf("  %-16s %5d B: %v\n", p.key, size, ferr)
				continue
			}
			add(p.key, fmt.Sprintf("fi_pingpong -p %s -e %s", p.prov, p.ep), size, res)
		}
	}
	return nil
}

func xdpfabPingPong(r *results, cfg *config, dp *loader.Objects, bd *testbed.Bed, key string, mode loader.Mode, poll time.Duration, iters, warm int,
	add func(string, string, int, []ppResult), pair *floorRun) error {
	la, lb := netip.AddrPortFrom(bd.A.IPv4, rxPort), netip.AddrPortFrom(bd.B.IPv4, rxPort)
	// Each side's endpoint and CQs are used by one goroutine, as
	// xdpfab pingpong's: no locks (FI_THREAD_DOMAIN, single-producer and
	// single-consumer CQs).
	epAttr := func(a *stack.Attr) {
		a.EP.BusyPoll, a.EP.Threading = poll, fi.ThreadDomain
		a.TxCQ.SingleProducer, a.TxCQ.SingleConsumer = true, true
		a.RxCQ.SingleProducer, a.RxCQ.SingleConsumer = true, true
	}
	cli, err := openXdpfabRx(dp, bd.A, la, []netip.AddrPort{lb}, epAttr)
	if err != nil {
		return err
	}
	defer cli.Close()
	srv, err := openXdpfabRx(dp, bd.B, lb, []netip.AddrPort{la}, epAttr)
	if err != nil {
		return err
	}
	defer srv.Close()
	max := cli.EP.MaxMsgSize()
	r.Setup["xdpfab_max_msg_"+mode.String()] = fmt.Sprint(max)
	title := fmt.Sprintf("xdpfab ep, %s XDP, manual progress", mode)
	if poll > 0 {
		title += fmt.Sprintf(", busy poll %v", poll)
	}
	sizes := slices.Clone(ppSizes)
	for _, size := range sizes {
		if size > max {
			r.note("pp", "%s: %d B does not fit: the endpoint's largest message is %d B; measured at %d B instead", key, size, max, max)
			size = max
		}
		var res []ppResult
		var mean, p50 []float64 // each repetition over its floor pair's
		for rep := range cfg.reps {
			// The pair's order alternates (xdpfab first, then the floor
			// first), so that a drift within pairs does not always
			// favour the same side.
			var f ppResult
			floorFirst := pair != nil && rep%2 == 1
			if floorFirst {
				if f, err = pair.one(size); err != nil {
					r.note("pp", "%s %d B: floor pair %d: %v; the rest unpaired", key, size, rep, err)
					pair, floorFirst = nil, false
				}
			}
			x, err := xdpfabPP(cfg, cli, srv, size, iters, warm)
			if err != nil {
				return fmt.Errorf("%d B: %w", size, err)
			}
			res = append(res, x)
			if pair != nil && !floorFirst {
				if f, err = pair.one(size); err != nil {
					r.note("pp", "%s %d B: floor pair %d: %v; the rest unpaired", key, size, rep, err)
					pair = nil
				}
			}
			if pair != nil {
				mean, p50 = append(mean, x.mean/f.mean), append(p50, x.p50/f.p50)
			}
		}
		add(key, title, size, res)
		if len(mean) > 0 {
			lbl := map[string]string{"impl": title, "size": fmt.Sprint(size)}
			r.add("pp", fmt.Sprintf("pp/%s/%d/floor-pair/mean", key, size), "x", mean, lbl)
			r.add("pp", fmt.Sprintf("pp/%s/%d/floor-pair/p50", key, size), "x", p50, lbl)
			fmt.Printf("  %-16s %5d B: over the floor, paired: mean %.2fx p50 %.2fx\n", key, size, median(mean), median(p50))
		}
	}
	return runBreakdown(r, cfg, cli, srv, key, mode, poll, iters, warm)
}

// waitOne spins on the CQ (each read progresses the endpoint) until one
// completion arrives.
func (x *xdpfabRx) waitOne(rx bool, deadline time.Time) (int, error) {
	q := x.TxCQ
	if rx {
		q = x.RxCQ
	}
	var buf [1]cq.Entry
	for i := 0; ; i++ {
		n, err := q.Read(buf[:])
		if n == 1 {
			return buf[0].Len, nil
		}
		// The bare fi.EAGAIN of an empty CQ is one comparison, not an
		// errors.Is walk per empty poll (as xdpfab pingpong's loop).
		if err != nil && err != fi.EAGAIN && !errors.Is(err, fi.EAGAIN) {
			return 0, err
		}
		if i&1023 == 0 && time.Now().After(deadline) {
			return 0, errors.New("no completion within the deadline")
		}
	}
}

// sendSpin sends buf as fi_pingpong sends a message within its
// provider's inject size: fi_inject, no transmit completion to wait for
// (xdpfab's inject size is its largest message, so every size is one).
func sendSpin(x *xdpfabRx, buf []byte, to fi.Addr) error {
	for {
		err := x.EP.Inject(buf, to)
		if !errors.Is(err, fi.EAGAIN) {
			return err
		}
		x.EP.Progress()
	}
}

func xdpfabPP(cfg *config, cli, srv *xdpfabRx, size, iters, warm int) (ppResult, error) {
	total := iters + warm
	deadline := time.Now().Add(2 * time.Minute)
	srvDone := goOnThread(nil, cfg.cpuLoad, func() error {
		buf := make([]byte, 9000)
		for range total {
			if err := srv.EP.Recv(buf, fi.AddrUnspec, nil); err != nil {
				return err
			}
			n, err := srv.waitOne(true, deadline)
			if err != nil {
				return err
			}
			if err := sendSpin(srv, buf[:n], srv.want); err != nil {
				return err
			}
		}
		return nil
	})
	halves := samples[time.Duration](iters)
	var elapsed time.Duration
	err := onThread(nil, cfg.cpuMeasure, func() error {
		msg, buf := make([]byte, size), make([]byte, 9000)
		var start time.Time
		for i := range total {
			if i == warm {
				start = time.Now()
			}
			if err := cli.EP.Recv(buf, fi.AddrUnspec, nil); err != nil {
				return err
			}
			t0 := time.Now()
			if err := sendSpin(cli, msg, cli.want); err != nil {
				return err
			}
			n, err := cli.waitOne(true, deadline)
			if err != nil {
				return err
			}
			if n != size {
				return fmt.Errorf("echo of %d B came back with %d B", size, n)
			}
			if i >= warm {
				halves = append(halves, time.Since(t0)/2)
			}
		}
		elapsed = time.Since(start)
		return nil
	})
	if err := errors.Join(err, <-srvDone); err != nil {
		return ppResult{}, err
	}
	return summarizePP(halves, elapsed), nil
}

func udpPingPong(cfg *config, bd *testbed.Bed, size, iters, warm int) (ppResult, error) {
	la, lb := netip.AddrPortFrom(bd.A.IPv4, 0), netip.AddrPortFrom(bd.B.IPv4, rxPort+1)
	var cc, sc *net.UDPConn
	if err := bd.B.Do(func() (err error) { sc, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(lb)); return err }); err != nil {
		return ppResult{}, err
	}
	defer sc.Close()
	if err := bd.A.Do(func() (err error) { cc, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(la)); return err }); err != nil {
		return ppResult{}, err
	}
	defer cc.Close()
	total := iters + warm
	deadline := time.Now().Add(2 * time.Minute)
	sc.SetDeadline(deadline)
	cc.SetDeadline(deadline)
	srvDone := goOnThread(nil, cfg.cpuLoad, func() error {
		buf := make([]byte, 9000)
		for range total {
			n, from, err := sc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return err
			}
			if _, err := sc.WriteToUDPAddrPort(buf[:n], from); err != nil {
				return err
			}
		}
		return nil
	})
	halves := samples[time.Duration](iters)
	var elapsed time.Duration
	err := onThread(nil, cfg.cpuMeasure, func() error {
		msg, buf := make([]byte, size), make([]byte, 9000)
		var start time.Time
		for i := range total {
			if i == warm {
				start = time.Now()
			}
			t0 := time.Now()
			if _, err := cc.WriteToUDPAddrPort(msg, lb); err != nil {
				return err
			}
			if _, _, err := cc.ReadFromUDPAddrPort(buf); err != nil {
				return err
			}
			if i >= warm {
				halves = append(halves, time.Since(t0)/2)
			}
		}
		elapsed = time.Since(start)
		return nil
	})
	if err := errors.Join(err, <-srvDone); err != nil {
		return ppResult{}, err
	}
	return summarizePP(halves, elapsed), nil
}

var ppPort = 47600

// fiPingPong runs fi_pingpong's server in B and client in A (ip netns exec,
// pinned with taskset) and returns the client's usec/xfer.
func fiPingPong(cfg *config, bd *testbed.Bed, prov, epType string, size, iters int) (float64, error) {
	return runFiPingPong(cfg, bd.B, bd.A, prov, epType, size, iters)
}

// runFiPingPong runs fi_pingpong's server in srvHost and its client in
// cliHost, to srvHost's address (the same host for section 7).
func runFiPingPong(cfg *config, srvHost, cliHost *testbed.Host, prov, epType string, size, iters int) (float64, error) {
	ppPort++
	port := fmt.Sprint(ppPort)
	ctx, cancel := context.WithTimeout(cfg.ctx, time.Minute)
	defer cancel()
	args := []string{"-p", prov, "-e", epType, "-S", fmt.Sprint(size), "-I", fmt.Sprint(iters)}
	srv := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", srvHost.Name(), "taskset", "-c", fmt.Sprint(cfg.cpuLoad),
		"fi_pingpong", "-B", port}, args...)...)
	var srvOut bytes.Buffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return 0, err
	}
	defer func() {
		if srv.ProcessState == nil {
			srv.Process.Kill()
			srv.Wait()
		}
	}()
	var out []byte
	var err error
	for try := 0; try < 50; try++ {
		time.Sleep(100 * time.Millisecond)
		cli := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", cliHost.Name(), "taskset", "-c", fmt.Sprint(cfg.cpuMeasure),
			"fi_pingpong", "-P", port}, append(args, srvHost.IPv4.String())...)...)
		out, err = cli.CombinedOutput()
		if err == nil || !bytes.Contains(out, []byte("Connection refused")) {
			break
		}
	}
	if err != nil {
		srv.Process.Kill()
		srv.Wait()
		return 0, fmt.Errorf("%v: %s%s", err, lastLine(out), lastLine(srvOut.Bytes()))
	}
	srv.Wait()
	return parseUsecPerXfer(out)
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// parseUsecPerXfer finds the usec/xfer column of fi_pingpong's table.
func parseUsecPerXfer(out []byte) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	col := -1
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if col < 0 {
			for i, x := range f {
				if x == "usec/xfer" {
					col = i
				}
			}
			continue
		}
		if len(f) > col {
			return strconv.ParseFloat(f[col], 64)
		}
	}
	return 0, fmt.Errorf("no usec/xfer in fi_pingpong output: %s", out)
}
