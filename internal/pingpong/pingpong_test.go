package pingpong_test

import (
	"bytes"
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

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
			return pingpong.Server(ctx, &srvOut, pingpong.Options{Iface: testbed.LinkName, Local: srv})
		})
	})
	defer func() { cancel(); wg.Wait() }()
	time.Sleep(200 * time.Millisecond) // the server's endpoint opens
	var out bytes.Buffer
	err := bed.A.Do(func() error {
		return pingpong.Client(ctx, &out, pingpong.Options{Iface: testbed.LinkName, Local: netip.AddrPortFrom(bed.A.IPv4, 7000),
			Peer: srv, Sizes: []int{64, 1024, 4096}, Iters: 500, Warmup: 10})
	})
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "bytes   iters   total   time    MB/sec    usec/xfer   Mxfers/sec") {
		t.Fatalf("report:\n%s", out.String())
	}
	if f := strings.Fields(lines[1]); f[0] != "64" || f[1] != "500" || f[2] != "62.5k" {
		t.Errorf("64-byte line: %q", lines[1])
	}
	if !strings.Contains(lines[3], "larger than the endpoint") {
		t.Errorf("4096 bytes over a 1500 MTU: %q", lines[3])
	}
	cancel()
	wg.Wait()
	if err := <-srvErr; err != nil {
		t.Errorf("server: %v", err)
	}
	if !strings.Contains(srvOut.String(), "client "+netip.AddrPortFrom(bed.A.IPv4, 7000).String()+" is fi_addr 0") {
		t.Errorf("server output:\n%s", srvOut.String())
	}
	t.Logf("\n%s", out.String())

}
