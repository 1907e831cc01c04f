package pingpong_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/pingpong"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
)

// Server in one namespace, client in the other, each with its own
// dataplane; the client's report has fi_pingpong's columns.
func TestPingPong(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	srv := netip.AddrPortFrom(bed.B.IPv4, 7000)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var srvOut bytes.Buffer
	srvErr := make(chan error, 1)
	wg.Go(func() {
		srvErr <- bed.B.Do(func() error {
			return pingpong.Server(ctx, &srvOut, pingpong.Options{Iface: testbed.LinkName, Local: srv, Via: pingpong.ViaDirect})
		})
	})
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(200 * time.Millisecond) // the server's endpoint opens
	var out bytes.Buffer
	run := func(sizes []int) []string {
		t.Helper()
		out.Reset()
		err := bed.A.Do(func() error {
			return pingpong.Client(ctx, &out, pingpong.Options{Iface: testbed.LinkName, Local: netip.AddrPortFrom(bed.A.IPv4, 7000),
				Peer: srv, Sizes: sizes, Iters: 500, Warmup: 10, Via: pingpong.ViaDirect})
		})
		if err != nil {
			t.Fatalf("client: %v\n%s", err, out.String())
		}
		t.Logf("\n%s", out.String())
		return strings.Split(strings.TrimSpace(out.String()), "\n")
	}
	// Given sizes: one line each, a size over the MTU skipped.
	lines := run([]int{64, 1024, 4096})
	if len(lines) != 4 || lines[0] != strings.TrimSuffix(pingpong.Header(), "\n") {
		t.Fatalf("report:\n%s", out.String())
	}
	if f := strings.Fields(lines[1]); len(f) != 10 || f[0] != "64" || f[1] != "500" || f[2] != "62k" {
		t.Errorf("64-byte line: %q", lines[1])
	} else {
		// The percentiles of the half round trips: ordered, and p50 not
		// above the mean's worst case (every sample at most p99.9).
		var p [3]float64
		for i := range p {
			p[i], _ = strconv.ParseFloat(f[7+i], 64)
		}
		if p[0] <= 0 || p[0] > p[1] || p[1] > p[2] {
			t.Errorf("64-byte line's percentiles %v: want 0 < p50 <= p99 <= p99.9", p)
		}
	}
	if !strings.HasPrefix(lines[3], "4k") || !strings.Contains(lines[3], "larger than the endpoint") {
		t.Errorf("4096 bytes over a 1500 MTU: %q", lines[3])
	}
	// Default sizes: fi_pingpong's that fit 1500 bytes (64, 256, 1k), none
	// skipped, and a note naming those left out.
	lines = run(nil)
	if len(lines) != 5 || !strings.Contains(lines[0], "left out: 4k, 64k, 1m") {
		t.Fatalf("default sizes:\n%s", out.String())
	}
	for i, want := range []string{"64", "256", "1k"} {
		if f := strings.Fields(lines[2+i]); f[0] != want || f[1] != "500" {
			t.Errorf("default size line %d: %q, want %s bytes", i, lines[2+i], want)
		}
	}
	cancel()
	wg.Wait()
	if err := <-srvErr; err != nil {
		t.Errorf("server: %v", err)
	}
	if !strings.Contains(srvOut.String(), "client "+netip.AddrPortFrom(bed.A.IPv4, 7000).String()+" is fi_addr 0") {
		t.Errorf("server output:\n%s", srvOut.String())
	}
}

// An iteration count whose times the client cannot keep is refused (EINVAL)
// before anything is opened: -I 1e12 made the client, its endpoint open,
// allocate 8 TB for them at once, and crash.
func TestClientIterationBound(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	for _, o := range []pingpong.Options{{Iters: 1e12}, {Iters: pingpong.MaxIters + 1}, {Iters: 0}, {Iters: 10, Warmup: -1}, {Iters: 10, Warmup: 1e12}} {
		o.Iface, o.Local, o.Peer = testbed.LinkName, netip.AddrPortFrom(bed.A.IPv4, 7000), netip.AddrPortFrom(bed.B.IPv4, 7000)
		o.Sizes, o.Via = []int{64}, pingpong.ViaDirect
		var out bytes.Buffer
		err := bed.A.Do(func() error { return pingpong.Client(context.Background(), &out, o) })
		if !errors.Is(err, fi.EINVAL) || !strings.Contains(fmt.Sprint(err), "at most 100000000") || out.Len() > 0 {
			t.Errorf("%d iterations, %d warmup: %v (output %q), want EINVAL before anything runs", o.Iters, o.Warmup, err, out.String())
		}
	}
}

// The counts print as fabtests' size_str and cnt_str do.
func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		v         int64
		size, cnt string
	}{
		{0, "0", "0"}, {64, "64", "64"}, {999, "999", "999"}, {1000, "1000", "1k"}, {1023, "1023", "1k"},
		{1024, "1k", "1k"}, {1536, "1.5k", "1k"}, {9999, "9.7k", "9k"}, {10000, "9.7k", "10k"},
		{64000, "62k", "64k"}, {64 << 10, "64k", "65k"}, {1 << 20, "1m", "1m"}, {1_500_000, "1.4m", "1m"},
		{20 << 20, "20m", "20m"}, {3 << 30, "3g", "3b"}, {2_000_000_000, "1.8g", "2b"},
	} {
		if got := pingpong.SizeStr(tc.v); got != tc.size {
			t.Errorf("SizeStr(%d) = %q, want %q", tc.v, got, tc.size)
		}
		if got := pingpong.CountStr(tc.v); got != tc.cnt {
			t.Errorf("CountStr(%d) = %q, want %q", tc.v, got, tc.cnt)
		}
	}
	// 10000 iterations of 64 bytes in 1 s: fi_pingpong's line.
	// Then the percentiles, in microseconds.
	got := pingpong.Line(64, 10000, time.Second, pingpong.Percentiles{P50: 1500 * time.Nanosecond, P99: 4 * time.Microsecond, P999: 12345 * time.Nanosecond})
	want := "64      10k     1.2m        1.00s      1.28      50.00       0.02       1.50       4.00      12.35\n"
	if got != want {
		t.Errorf("Line:\n%q\nwant\n%q", got, want)
	}
	if h := pingpong.Header(); h != "bytes   iters   total       time     MB/sec    usec/xfer   Mxfers/sec   p50 usec   p99 usec p99.9 usec\n" {
		t.Errorf("Header: %q", h)
	}
}

// Percentiles are nearest-rank: of 1..1000 µs, p50 is 500, p99 990 and
// p99.9 999; of one sample, that sample; of none, zeros.
func TestPercentiles(t *testing.T) {
	var h []time.Duration
	for i := 1000; i >= 1; i-- {
		h = append(h, time.Duration(i)*time.Microsecond)
	}
	if p := pingpong.PercentilesOf(h); p != (pingpong.Percentiles{P50: 500 * time.Microsecond, P99: 990 * time.Microsecond, P999: 999 * time.Microsecond}) {
		t.Errorf("1..1000 µs: %+v", p)
	}
	if p := pingpong.PercentilesOf([]time.Duration{7}); p != (pingpong.Percentiles{P50: 7, P99: 7, P999: 7}) {
		t.Errorf("one sample: %+v", p)
	}
	if p := pingpong.PercentilesOf(nil); p != (pingpong.Percentiles{}) {
		t.Errorf("none: %+v", p)
	}
}
