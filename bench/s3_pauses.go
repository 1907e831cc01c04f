package main

// Section 3's machine pauses: how often the machine takes a CPU from a
// program that never gives it up (timer interrupts, the hypervisor), and
// for how long. A ping-pong on that CPU meets each such pause whatever
// its implementation, so they bound the tail any of them can show: a half
// round trip of t µs is held up when it starts inside a pause (the share
// of the time in pauses) or one of R pauses per second starts while it
// runs (about t·R); where the two add up to more than 1% the p99 holds a
// pause (reportPauses).
// bench/xskfloor/xskfloor.c's "pauses" mode measures them (no Go runtime
// on the CPU, no socket), pinned like the ping-pongs' sides.

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// pauseOut is xskfloor pauses' output: for each threshold, the gaps of at
// least that many ns between two consecutive clock reads, and their sum.
type pauseOut struct {
	ElapsedNs int64   `json:"elapsed_ns"`
	Loops     int64   `json:"loops"`
	LongestNs int64   `json:"longest_ns"`
	MinNs     []int64 `json:"pause_min_ns"`
	Count     []int64 `json:"count"`
	TotalNs   []int64 `json:"total_ns"`
}

// pauseThresholds are the thresholds (µs) the report shows.
var pauseThresholds = []int64{5, 10, 20}

// measurePauses runs xskfloor pauses on the ping-pongs' two CPUs, one
// after the other (the other CPU idle), half the repetitions (at least
// one) on each, and records per
// CPU and threshold the pauses per second and the share of time they
// took.
func measurePauses(r *results, cfg *config) error {
	secs := 2.0
	if cfg.quick {
		secs = 1
	}
	for _, cpu := range []int{cfg.cpuMeasure, cfg.cpuLoad} {
		rates := make([][]float64, len(pauseThresholds))
		shares := make([][]float64, len(pauseThresholds))
		var longest []float64
		for range max(cfg.reps/2, 1) {
			o, err := runPauses(cfg, cpu, secs)
			if err != nil {
				return err
			}
			el := float64(o.ElapsedNs) / 1e9
			for i, th := range pauseThresholds {
				j := slices.Index(o.MinNs, th*1000)
				if j < 0 || j >= len(o.Count) || j >= len(o.TotalNs) {
					return fmt.Errorf("xskfloor pauses: no count for %d µs", th)
				}
				rates[i] = append(rates[i], float64(o.Count[j])/el)
				shares[i] = append(shares[i], 100*float64(o.TotalNs[j])/float64(o.ElapsedNs))
			}
			longest = append(longest, float64(o.LongestNs)/1e3)
		}
		lbl := map[string]string{"cpu": fmt.Sprint(cpu)}
		for i, th := range pauseThresholds {
			k := fmt.Sprintf("pp/pauses/cpu%d/%dus", cpu, th)
			r.add("pp", k+"/per_s", "1/s", rates[i], lbl)
			r.add("pp", k+"/time_pct", "%", shares[i], lbl)
			fmt.Printf("  pauses on CPU %d >= %2d us: %6.0f/s, %.2f%% of the time\n", cpu, th, median(rates[i]), median(shares[i]))
		}
		r.add("pp", fmt.Sprintf("pp/pauses/cpu%d/longest", cpu), "us", longest, lbl)
	}
	return nil
}

func runPauses(cfg *config, cpu int, secs float64) (pauseOut, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs*float64(time.Second))+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "taskset", "-c", fmt.Sprint(cpu), cfg.xskfloor, "pauses", fmt.Sprint(secs))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return pauseOut{}, fmt.Errorf("xskfloor pauses on CPU %d: %v: %s", cpu, err, strings.TrimSpace(stderr.String()))
	}
	var o pauseOut
	if err := json.Unmarshal(b, &o); err != nil {
		return pauseOut{}, fmt.Errorf("xskfloor pauses: %w", err)
	}
	if o.ElapsedNs <= 0 {
		return pauseOut{}, fmt.Errorf("xskfloor pauses: elapsed %d ns", o.ElapsedNs)
	}
	return o, nil
}
