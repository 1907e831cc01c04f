//go:build linux

package dataplane_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
)

// BenchmarkReceiveLiveFrames measures XDP -> XSK -> user space receive: the
// kernel injects b.N frames (BPF_PROG_TEST_RUN live frames) through the
// metadata-writing redirect program while this goroutine drains the RX ring
// and recycles frames. Reports delivered Mpps and the share dropped.
func BenchmarkReceiveLiveFrames(b *testing.B) {
	testutil.RequirePrivileged(b)
	bed := testbed.New(b, testbed.Options{})
	p := newRedirectProg(b)
	u := newUMEM(b, dataplane.UMEMConfig{NumFrames: 4096})
	s := openIn(b, bed.B, 0, u, dataplane.SocketConfig{Mode: dataplane.BindCopy})
	p.insert(b, s)
	s.FillFree()
	frame := udp4Frame(bed.A.MAC, bed.B.MAC, netip.AddrPortFrom(bed.A.IPv4, 1), netip.AddrPortFrom(bed.B.IPv4, 2), make([]byte, 18))
	descs := make([]dataplane.Desc, 256)
	addrs := make([]uint64, 256)
	before, err := s.Stats()
	if err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	start := time.Now()
	injected := make(chan error, 1)
	go func() { injected <- p.inject(bed.B, frame, b.N) }()
	received, running := 0, true
	for running {
		select {
		case err := <-injected:
			if err != nil {
				b.Fatal(err)
			}
			running = false
		default:
		}
		for {
			n := s.Receive(descs)
			if n == 0 {
				break
			}
			received += n
			for i, d := range descs[:n] {
				addrs[i] = d.Addr
			}
			s.Fill(addrs[:n])
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	after, err := s.Stats()
	if err != nil {
		b.Fatal(err)
	}
	dropped := (after.RxDropped - before.RxDropped) + (after.RxRingFull - before.RxRingFull)
	b.ReportMetric(float64(received)/elapsed.Seconds()/1e6, "Mpps")
	b.ReportMetric(float64(dropped)/float64(b.N)*100, "%dropped")
	if received+int(dropped) != b.N {
		b.Logf("received %d + dropped %d != injected %d", received, dropped, b.N)
	}
}
