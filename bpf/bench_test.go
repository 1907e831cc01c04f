package bpf_test

import (
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/wire"
)

func benchAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18 + byte(i>>24&1), byte(i >> 16), byte(i >> 8)}), uint16(1024+i&0xff))
}

// XDP cost per packet via BPF_PROG_TEST_RUN with repeat, for AVs of 1, 1k
// and 1M entries, sources drawn at random from the whole AV, beside an
// empty XDP program in the same run. Each test run repeats one frame, so
// 256 frames with distinct random sources are cycled to defeat a single
// hot key. The redirect itself is not performed in test runs (no socket):
// this is the parse + lookup + metadata cost.
func BenchmarkXDP(b *testing.B) {
	testutil.RequirePrivileged(b)
	empty, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer empty.Close()
	for _, n := range []int{1, 1000, 1_000_000} {
		dp, err := loader.Load(loader.Config{AVEntries: 1 << 20, MaxAVs: 4})
		if err != nil {
			b.Fatal(err)
		}
		a, err := av.Open(dp, &av.Attr{Count: n})
		if err != nil {
			b.Fatal(err)
		}
		addrs := make([]netip.AddrPort, n)
		for i := range addrs {
			addrs[i] = benchAddr(i)
		}
		if got, err := a.Insert(addrs, nil, 0, nil); got != n || err != nil {
			b.Fatal(got, err)
		}
		local := netip.MustParseAddrPort("198.19.0.1:7000")
		if err := dp.EP.Put(bpf.EPKey{Local: bpf.MakeAddr(local)}, bpf.EPVal{AvId: a.ID(), RxCtxs: 1, Queues: 1}); err != nil {
			b.Fatal(err)
		}
		frames := make([][]byte, 256)
		for i := range frames {
			frames[i] = wire.Build(wire.Frame{Src: addrs[rand.IntN(n)], Dst: local, Hdr: wire.Hdr{Op: wire.OpMsg}, Payload: make([]byte, 64)})
		}
		for _, p := range []struct {
			name string
			prog *ebpf.Program
		}{{"empty", empty}, {"xdpfab", dp.Program}} {
			b.Run(p.name+"/entries="+itoa(n), func(b *testing.B) {
				const repeat = 1000
				var total time.Duration
				runs := 0
				for i := 0; i < b.N; i += repeat {
					_, d, err := p.prog.Benchmark(frames[runs%len(frames)], repeat, nil)
					if err != nil {
						b.Fatal(err)
					}
					total += d * repeat
					runs++
				}
				b.ReportMetric(float64(total.Nanoseconds())/float64(runs*repeat), "ns/pkt")
			})
		}
		a.Close()
		dp.Close()
	}
}

func itoa(n int) string {
	switch n {
	case 1:
		return "1"
	case 1000:
		return "1k"
	}
	return "1M"
}
