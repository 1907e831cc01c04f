package wire_test

import (
	"encoding/binary"
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
// Nothing in the product sums in the copy: XDP measured cheaper.

// copySum copies src into dst (as much as fits) and adds src's 64-bit
// little-endian words to acc with end-around carry in the same pass, the
// fastest form of a ones' complement sum in Go (ADC on amd64); fold16
// makes the Internet checksum's 16 bits of it.
func copySum(dst, src []byte, acc uint64) (int, uint64) {
	n := min(len(dst), len(src))
	dst, src = dst[:n], src[:n]
	var c uint64
	i := 0
	for ; i+32 <= n; i += 32 {
		a := binary.LittleEndian.Uint64(src[i:])
		b := binary.LittleEndian.Uint64(src[i+8:])
		d := binary.LittleEndian.Uint64(src[i+16:])
		e := binary.LittleEndian.Uint64(src[i+24:])
		binary.LittleEndian.PutUint64(dst[i:], a)
		binary.LittleEndian.PutUint64(dst[i+8:], b)
		binary.LittleEndian.PutUint64(dst[i+16:], d)
		binary.LittleEndian.PutUint64(dst[i+24:], e)
		acc, c = bits.Add64(acc, a, c)
		acc, c = bits.Add64(acc, b, c)
		acc, c = bits.Add64(acc, d, c)
		acc, c = bits.Add64(acc, e, c)
	}
	for ; i+8 <= n; i += 8 {
		a := binary.LittleEndian.Uint64(src[i:])
		binary.LittleEndian.PutUint64(dst[i:], a)
		acc, c = bits.Add64(acc, a, c)
	}
	var t [8]byte
	copy(dst[i:], src[i:])
	copy(t[:], src[i:])
	acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(t[:]), c)
	acc, c = bits.Add64(acc, 0, c)
	return n, acc + c
}

// sum32 sums 32-bit words into four independent 64-bit accumulators (no
// carry chain): the other fast form in Go. The result folds like sum64's.
func sum32(src []byte, acc uint64) uint64 {
	var a, b, c, d uint64
	i := 0
	for ; i+16 <= len(src); i += 16 {
		a += uint64(binary.LittleEndian.Uint32(src[i:]))
		b += uint64(binary.LittleEndian.Uint32(src[i+4:]))
		c += uint64(binary.LittleEndian.Uint32(src[i+8:]))
		d += uint64(binary.LittleEndian.Uint32(src[i+12:]))
	}
	for ; i+4 <= len(src); i += 4 {
		a += uint64(binary.LittleEndian.Uint32(src[i:]))
	}
	var t [4]byte
	copy(t[:], src[i:])
	a += uint64(binary.LittleEndian.Uint32(t[:]))
	s, carry := bits.Add64(acc, a+b, 0)
	s, carry = bits.Add64(s, c+d, carry)
	return s + carry
}

// sum64 is copySum without the copy.
func sum64(src []byte, acc uint64) uint64 {
	var c uint64
	i := 0
	for ; i+32 <= len(src); i += 32 {
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(src[i:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(src[i+8:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(src[i+16:]), c)
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(src[i+24:]), c)
	}
	for ; i+8 <= len(src); i += 8 {
		acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(src[i:]), c)
	}
	var t [8]byte
	copy(t[:], src[i:])
	acc, c = bits.Add64(acc, binary.LittleEndian.Uint64(t[:]), c)
	acc, c = bits.Add64(acc, 0, c)
	return acc + c
}

func fold16(s uint64) uint16 {
	s = s&0xffffffff + s>>32
	s = s&0xffffffff + s>>32
	s = s&0xffff + s>>16
	s = s&0xffff + s>>16
	return bits.ReverseBytes16(uint16(s)) // little-endian words: swap back
}

// The sums agree with the package's checksum.
func TestCopySum(t *testing.T) {
	for n := range 100 {
		f := wire.Build(wire.Frame{Src: netip.MustParseAddrPort("198.18.0.1:1"), Dst: netip.MustParseAddrPort("198.18.0.2:2"),
			Payload: make([]byte, n)})
		d, _ := wire.ParseUDP(f)
		u := f[d.L4Off:]
		ps := wire.PseudoHeaderSum(d.Src.Addr(), d.Dst.Addr(), len(u))
		dst := make([]byte, len(u))
		_, s := copySum(dst, u, 0)
		if s32 := sum32(u, 0); fold16(s32+uint64(bits.ReverseBytes16(wire.Checksum16(nil, ps)))) != 0xffff {
			t.Fatalf("payload %d: sum32 wrong", n)
		}
		if got := fold16(sum64(nil, s) + uint64(bits.ReverseBytes16(wire.Checksum16(nil, ps)))); got != 0xffff || string(dst) != string(u) {
			t.Fatalf("payload %d: sum %#x", n, got)
		}
	}
}

// BenchmarkRxCopy is the endpoint's receive copy as it is (copy), and
// with the UDP checksum verified in it: summed in the same pass (fused) or
// in a second pass over the cache-hot payload (copy+sum). Either way the
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
		b.Run(fmt.Sprintf("fused/payload=%d", size), func(b *testing.B) {
			for b.Loop() {
				_, s := copySum(buf, payload, sum64(hdrs, 0))
				check(s)
			}
		})
		b.Run(fmt.Sprintf("copy+sum/payload=%d", size), func(b *testing.B) {
			for b.Loop() {
				copy(buf, payload)
				check(sum64(payload, sum64(hdrs, 0)))
			}
		})
		b.Run(fmt.Sprintf("copy+sum32/payload=%d", size), func(b *testing.B) {
			for b.Loop() {
				copy(buf, payload)
				check(sum32(payload, sum32(hdrs, 0)))
			}
		})
		if sink == 1 {
			b.Log(sink)
		}
	}
}
