package main

// Section 3's breakdown: where one message's time goes, both directions of
// a traced xdpfab ping-pong. Both endpoints are traced (ep.SetTrace: the
// XDP program stamps their frames, the endpoints note their stages), and
// the application stamps its send call and the CQ read that returns the
// completion, all on CLOCK_MONOTONIC (ep.TraceNow). The stages of one
// message, each a difference of stamps in causal order, so never negative:
//
//	send call -> frame on the TX ring -> XDP on the receiving side ->
//	descriptor seen on the RX ring -> completion returned by the CQ read
//
// The kick (the sendto in which copy mode transmits, and in which veth runs
// the receiver's XDP) returns at a time of its own, reported beside them.

import (
	"errors"
	"fmt"
	"time"

	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

// stage is one segment of a message's latency.
type stage struct{ key, title string }

var stages = []stage{
	{"send-txring", "send call → frame on TX ring"},
	{"txring-xdp", "TX ring → XDP on receiver"},
	{"xdp-rxring", "XDP → descriptor seen on RX ring"},
	{"rxring-read", "RX ring → completion returned by CQ read"},
}

// hop is one message's stamps (ns, CLOCK_MONOTONIC).
type hop struct {
	call, txRing, kicked, xdp, rxRing, read int64
}

func (h hop) stages() [4]int64 {
	return [4]int64{h.txRing - h.call, h.xdp - h.txRing, h.rxRing - h.xdp, h.read - h.rxRing}
}

// breakdownSizes are the sizes the breakdown runs at.
var breakdownSizes = []int{64, 1472}

// xdpfabBreakdown runs a traced ping-pong of size bytes and returns, per
// direction (0: client to server, 1: back), the mean of each stage and of
// the kick's return after the XDP stamp, and the server's mean turnaround
// (its completion read to its next send call) and the run's mean half
// round trip, all in µs.
func xdpfabBreakdown(cfg *config, cli, srv *xdpfabRx, size, iters, warm int) (dirs [2][5]float64, turn, half float64, err error) {
	var tc, ts ep.Trace
	if err := cli.EP.SetTrace(&tc); err != nil {
		return dirs, 0, 0, err
	}
	defer cli.EP.SetTrace(nil)
	if err := srv.EP.SetTrace(&ts); err != nil {
		return dirs, 0, 0, err
	}
	defer srv.EP.SetTrace(nil)
	total := iters + warm
	deadline := time.Now().Add(2 * time.Minute)
	// ping[i] is message i from the client, pong[i] the echo.
	ping, pong := samples[hop](total)[:total], samples[hop](total)[:total]
	srvDone := goOnThread(nil, cfg.cpuLoad, func() error {
		buf := make([]byte, 9000)
		for i := range total {
			if err := srv.EP.Recv(buf, fi.AddrUnspec, nil); err != nil {
				return err
			}
			n, err := srv.waitOne(true, deadline)
			if err != nil {
				return err
			}
			ping[i].read, ping[i].xdp, ping[i].rxRing = ep.TraceNow(), ts.XDP, ts.RxRing
			pong[i].call = ep.TraceNow()
			if err := sendSpin(srv, buf[:n], srv.want); err != nil {
				return err
			}
			pong[i].txRing, pong[i].kicked = ts.TxRing, ts.Kicked
		}
		return nil
	})
	var elapsed time.Duration
	err = onThread(nil, cfg.cpuMeasure, func() error {
		msg, buf := make([]byte, size), make([]byte, 9000)
		var start time.Time
		for i := range total {
			if i == warm {
				start = time.Now()
			}
			if err := cli.EP.Recv(buf, fi.AddrUnspec, nil); err != nil {
				return err
			}
			ping[i].call = ep.TraceNow()
			if err := sendSpin(cli, msg, cli.want); err != nil {
				return err
			}
			ping[i].txRing, ping[i].kicked = tc.TxRing, tc.Kicked
			n, err := cli.waitOne(true, deadline)
			if err != nil {
				return err
			}
			pong[i].read, pong[i].xdp, pong[i].rxRing = ep.TraceNow(), tc.XDP, tc.RxRing
			if n != size {
				return fmt.Errorf("echo of %d B came back with %d B", size, n)
			}
		}
		elapsed = time.Since(start)
		return nil
	})
	if err := errors.Join(err, <-srvDone); err != nil {
		return dirs, 0, 0, err
	}
	var turnSum int64
	for d, hops := range [2][]hop{ping[warm:], pong[warm:]} {
		var sum [5]int64
		for _, h := range hops {
			if h.xdp == 0 || h.rxRing == 0 || h.txRing == 0 {
				return dirs, 0, 0, errors.New("a traced message lacks a stamp (XDP program without the stamp?)")
			}
			for k, v := range h.stages() {
				sum[k] += v
			}
			sum[4] += h.kicked - h.xdp
		}
		for k := range sum {
			dirs[d][k] = float64(sum[k]) / float64(len(hops)) / 1e3
		}
	}
	for i := warm; i < total; i++ {
		turnSum += pong[i].call - ping[i].read
	}
	turn = float64(turnSum) / float64(iters) / 1e3
	half = us(elapsed) / float64(iters) / 2
	return dirs, turn, half, nil
}

// runBreakdown measures the breakdown of one configuration (mode, busy
// poll) at breakdownSizes and records it under pp-stages/CONFIG/SIZE/.
func runBreakdown(r *results, cfg *config, cli, srv *xdpfabRx, key string, mode loader.Mode, poll time.Duration, iters, warm int) error {
	title := fmt.Sprintf("%s XDP", mode)
	if poll > 0 {
		title += ", busy poll"
	}
	for _, size := range breakdownSizes {
		size = min(size, cli.EP.MaxMsgSize())
		var dirs [2][5][]float64
		var turn, half []float64
		for range cfg.reps {
			d, t, h, err := xdpfabBreakdown(cfg, cli, srv, size, iters, warm)
			if err != nil {
				return fmt.Errorf("breakdown %d B: %w", size, err)
			}
			for i := range d {
				for k := range d[i] {
					dirs[i][k] = append(dirs[i][k], d[i][k])
				}
			}
			turn, half = append(turn, t), append(half, h)
		}
		base := fmt.Sprintf("pp-stages/%s/%d", key, size)
		lbl := map[string]string{"config": title, "size": fmt.Sprint(size)}
		for i, dir := range []string{"ab", "ba"} {
			for k, s := range stages {
				r.add("pp", base+"/"+dir+"/"+s.key, "us", dirs[i][k], lbl)
			}
			r.add("pp", base+"/"+dir+"/kick-after-xdp", "us", dirs[i][4], lbl)
		}
		r.add("pp", base+"/turnaround", "us", turn, lbl)
		r.add("pp", base+"/half", "us", half, lbl)
		fmt.Printf("  %-16s %5d B traced: half %.2f us; A→B", key, size, median(half))
		for k := range stages {
			fmt.Printf(" %.2f", median(dirs[0][k]))
		}
		fmt.Printf(" (kick-xdp %.2f); B→A", median(dirs[0][4]))
		for k := range stages {
			fmt.Printf(" %.2f", median(dirs[1][k]))
		}
		fmt.Printf("; turnaround %.2f\n", median(turn))
	}
	return nil
}

// breakdownConfigs are the configurations the report shows, in order.
var breakdownConfigs = []struct{ key, title string }{
	{"xdpfab", "native"},
	{"xdpfab-busypoll", "native, busy poll"},
	{"xdpfab-generic", "generic"},
	{"xdpfab-busypoll-generic", "generic, busy poll"},
}
