package wire_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/wire"
)

// BenchmarkFramePut is the send path's frame build: Ethernet, IP and UDP
// headers, the xdpfab header, the payload copy and the UDP checksum (full,
// or partial: the pseudo header's, for the kernel to complete), for IPv4
// and IPv6 at the ping-pong's message sizes.
func BenchmarkFramePut(b *testing.B) {
	for _, fam := range []struct {
		name     string
		src, dst netip.AddrPort
	}{
		{"ipv4", netip.MustParseAddrPort("198.18.0.1:5000"), netip.MustParseAddrPort("198.18.0.2:7000")},
		{"ipv6", netip.MustParseAddrPort("[2001:2::1]:5000"), netip.MustParseAddrPort("[2001:2::2]:7000")},
	} {
		for _, size := range []int{64, 1024, 1472, 3440} {
			for _, partial := range []bool{false, true} {
				f := wire.Frame{Src: fam.src, Dst: fam.dst, Hdr: wire.Hdr{Op: wire.OpMsg}, Payload: make([]byte, size), PartialUDPCsum: partial}
				buf := make([]byte, 4096)
				b.Run(fmt.Sprintf("%s/csum=%s/payload=%d", fam.name, map[bool]string{false: "full", true: "partial"}[partial], size), func(b *testing.B) {
					b.SetBytes(int64(size))
					for b.Loop() {
						f.Put(buf)
					}
				})
			}
		}
	}
}

// refSum is RFC 1071's reference loop: big-endian 16-bit words, an odd
// last byte as a high byte.
func refSum(b []byte, acc uint32) uint32 {
	for ; len(b) >= 2; b = b[2:] {
		acc += uint32(b[0])<<8 | uint32(b[1])
	}
	if len(b) == 1 {
		acc += uint32(b[0]) << 8
	}
	return acc
}

// Put's checksum (summed in 64-bit words after the payload copy)
// verifies under the reference loop for every length and alignment, both
// families, with raw headers of odd length, and random bytes.
func TestPutChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, ap := range [][2]netip.AddrPort{
		{netip.MustParseAddrPort("198.18.0.1:5000"), netip.MustParseAddrPort("198.18.255.254:7000")},
		{netip.MustParseAddrPort("[2001:2::ffff:1]:5000"), netip.MustParseAddrPort("[2001:2::2]:65535")},
	} {
		for n := range 300 {
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = byte(rng.Uint32())
			}
			f := wire.Frame{Src: ap[0], Dst: ap[1], Hdr: wire.Hdr{Op: wire.OpMsg, Tag: rng.Uint64()}, Payload: payload}
			if n%3 == 1 {
				f.RawHdr = payload[:n%7] // odd and even raw header lengths
			}
			b := wire.Build(f)
			d, ok := wire.ParseUDP(b)
			if !ok {
				t.Fatalf("payload %d: frame does not parse", n)
			}
			u := b[d.L4Off:]
			var acc uint32
			for _, a := range []netip.Addr{d.Src.Addr(), d.Dst.Addr()} {
				acc = refSum(a.Unmap().AsSlice(), acc)
			}
			acc = refSum(u, acc+17+uint32(len(u)))
			for acc > 0xffff {
				acc = acc>>16 + acc&0xffff
			}
			if acc != 0xffff {
				t.Fatalf("%v payload %d raw %d: checksum does not verify (%#x)", ap[0], n, len(f.RawHdr), acc)
			}
		}
	}
}
