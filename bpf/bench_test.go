package bpf_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/avtab"
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
		if err := putEndpoint(dp, bpf.EPKey{Local: bpf.MakeAddr(local)}, bpf.EPVal{AvId: a.ID(), RxCtxs: 1, Queues: 1}); err != nil {
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

// BenchmarkXDPChecks is the cost per packet of a datagram that passes
// every check (docs/BENCHMARKS.md, "Cost of the validity checks"): IPv4
// and IPv6, 64- and 1440-byte payloads, a UDP checksum the program
// verifies in full, one AV entry, beside an empty program. Run alone on
// the machine: `go test -run '^$' -bench XDPChecks -count 5 ./bpf`.
//
// With csum=none (IPv4 only: checksum 0) and csum=partial (the bare
// pseudo-header sum of CHECKSUM_PARTIAL) the program skips the sum over
// the datagram: against csum=full that is what verifying the UDP checksum
// costs in XDP (docs/platform.md#where-the-udp-checksum-is-verified).
func BenchmarkXDPChecks(b *testing.B) {
	testutil.RequirePrivileged(b)
	empty, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer empty.Close()
	dp, err := loader.Load(loader.Config{AVEntries: 1024, MaxAVs: 4})
	if err != nil {
		b.Fatal(err)
	}
	defer dp.Close()
	src4, src6 := netip.MustParseAddrPort("198.18.1.1:5000"), netip.MustParseAddrPort("[2001:2:1::1]:5000")
	dst4, dst6 := netip.MustParseAddrPort("198.19.0.1:7000"), netip.MustParseAddrPort("[2001:2:ff::1]:7000")
	for i, dst := range []netip.AddrPort{dst4, dst6} {
		if err := putEndpoint(dp, bpf.EPKey{Local: bpf.MakeAddr(dst)}, bpf.EPVal{EpId: uint32(i + 1), AvId: 1, RxCtxs: 1, Queues: 1}); err != nil {
			b.Fatal(err)
		}
	}
	for i, src := range []netip.AddrPort{src4, src6} {
		if err := avtab.Put(dp, 1, bpf.MakeAddr(src), bpf.AVVal{FiAddr: uint64(i)}); err != nil {
			b.Fatal(err)
		}
	}
	for _, fam := range []string{"IPv4", "IPv6"} {
		for _, size := range []int{64, 1024, 1440} {
			for _, csum := range []string{"full", "none", "partial"} {
				if fam == "IPv6" && csum == "none" {
					continue
				}
				s := wire.Frame{Src: src4, Dst: dst4, Hdr: wire.Hdr{Op: wire.OpMsg}, Payload: make([]byte, size), NoUDPCsum: csum == "none"}
				if fam == "IPv6" {
					s.Src, s.Dst = src6, dst6
				}
				for i := range s.Payload {
					s.Payload[i] = byte(i * 7)
				}
				f := wire.Build(s)
				if csum == "partial" {
					d, _ := wire.ParseUDP(f)
					n := wire.UDPHeaderLen + wire.HdrLen + size
					binary.BigEndian.PutUint16(f[d.L4Off+6:], wire.Checksum16(nil, wire.PseudoHeaderSum(d.Src.Addr(), d.Dst.Addr(), n)))
				}
				progs := []struct {
					name string
					prog *ebpf.Program
				}{{"xdpfab", dp.Program}}
				if csum == "full" {
					progs = append(progs, struct {
						name string
						prog *ebpf.Program
					}{"empty", empty})
				}
				for _, p := range progs {
					name := fmt.Sprintf("%s/%s/payload=%d/csum=%s", p.name, fam, size, csum)
					if p.name == "empty" {
						name = fmt.Sprintf("empty/%s/payload=%d", fam, size)
					}
					b.Run(name, func(b *testing.B) { benchRun(b, p.prog, f) })
				}
			}
		}
	}
	// Every frame must have passed the checks: counted redirect_failed
	// (the endpoint's slot has no socket), never malformed or csum_error.
	c, err := dp.Counters()
	if err != nil {
		b.Fatal(err)
	}
	if c[bpf.CounterMalformed]+c[bpf.CounterCsumError] != 0 || c[bpf.CounterRedirectFail] == 0 {
		b.Fatalf("counters %v: frames refused", c)
	}
}

// benchRun reports the program's cost per run of f, from test runs of
// 1000 repeats.
func benchRun(b *testing.B, prog *ebpf.Program, f []byte) {
	const repeat = 1000
	var total time.Duration
	runs := 0
	for i := 0; i < b.N; i += repeat {
		_, d, err := prog.Benchmark(f, repeat, nil)
		if err != nil {
			b.Fatal(err)
		}
		total += d * repeat
		runs++
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(runs*repeat), "ns/pkt")
}

// putEndpoint binds an endpoint through the endpoint index, as ep does
// (loader.Objects.PutEndpoint under the dataplane lock).
func putEndpoint(dp *loader.Objects, k bpf.EPKey, v bpf.EPVal) error {
	unlock := dp.Lock()
	defer unlock()
	return dp.PutEndpoint(k, v, ebpf.UpdateAny)
}
