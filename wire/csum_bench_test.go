package wire_test

import (
	"fmt"
	"math/bits"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/wire"
)

// The other place the UDP checksum could be verified: the endpoint's
// receive path (ep/rx.go), which copies the payload out of the UMEM frame
// into the application's buffer and could sum it on the way. These
// benchmarks measure that against the copy alone, at the payload sizes of
// BenchmarkXDPChecks in package bpf (which measures the same check in
// XDP); docs/platform.md#where-the-udp-checksum-is-verified compares them.
// Nothing sums in the receive copy: XDP measured cheaper. The send path
// does sum in its copy (wire.Frame.Put: BenchmarkFramePut).

// fold16 folds a sum of little-endian words to the Internet checksum's
// 16 bits in network order.
func fold16(s uint64) uint16 { return bits.ReverseBytes16(wire.Fold64(s)) }

// Sum64 of a copied datagram agrees with the package's checksum.
func TestSum64(t *testing.T) {
	for n := range 100 {
		f := wire.Build(wire.Frame{Src: netip.MustParseAddrPort("198.18.0.1:1"), Dst: netip.MustParseAddrPort("198.18.0.2:2"),
			Payload: make([]byte, n)})
		d, _ := wire.ParseUDP(f)
		u := f[d.L4Off:]
		ps := wire.PseudoHeaderSum(d.Src.Addr(), d.Dst.Addr(), len(u))
		dst := make([]byte, len(u))
		copy(dst, u)
		s := wire.Sum64(dst, 0)
		if got := fold16(wire.Sum64(nil, s) + uint64(bits.ReverseBytes16(wire.Checksum16(nil, ps)))); got != 0xffff || string(dst) != string(u) {
			t.Fatalf("payload %d: sum %#x", n, got)
		}
	}
}

// BenchmarkRxCopy is the endpoint's receive copy as it is (copy), and
// with the UDP checksum verified in a second pass over the cache-hot
// payload (copy+sum; summing in the copy's pass measured no faster). The
// check also sums the pseudo header and the 40 bytes of UDP and xdpfab
// headers that are not copied. csum-cost = checksum variant - copy.
func BenchmarkRxCopy(b *testing.B) {
	for _, size := range []int{64, 1024, 1440} {
		f := wire.Build(wire.Frame{Src: netip.MustParseAddrPort("198.18.0.1:5000"), Dst: netip.MustParseAddrPort("198.18.0.2:7000"),
			Hdr: wire.Hdr{Op: wire.OpMsg}, Payload: make([]byte, size)})
		d, _ := wire.ParseUDP(f)
		u := f[d.L4Off:]
		hdrs, payload := u[:wire.UDPHeaderLen+wire.HdrLen], u[wire.UDPHeaderLen+wire.HdrLen:]
		buf := make([]byte, 2048)
		var sink uint64
		check := func(s uint64) {
			ps := wire.PseudoHeaderSum(d.Src.Addr(), d.Dst.Addr(), len(u))
			if fold16(s+uint64(bits.ReverseBytes16(wire.Checksum16(nil, ps)))) != 0xffff {
				sink++
			}
		}
		b.Run(fmt.Sprintf("copy/payload=%d", size), func(b *testing.B) {
			for b.Loop() {
				sink += uint64(copy(buf, payload))
			}
		})
		b.Run(fmt.Sprintf("copy+sum/payload=%d", size), func(b *testing.B) {
			for b.Loop() {
				copy(buf, payload)
				check(wire.Sum64(payload, wire.Sum64(hdrs, 0)))
			}
		})
		if sink == 1 {
			b.Log(sink)
		}
	}
}
