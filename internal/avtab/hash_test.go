//go:build linux

package avtab

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/bpf"
)

// hashAddr and hashSlot are bpf.AVHash, which the XDP program's av_hash
// matches (package bpf's tests).
func TestHashMatchesBPF(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 10000 {
		a := addr(i)
		if i%2 == 1 {
			a = addr6(i)
		}
		if i%3 == 2 { // any bytes, as a hostile table could hold
			for k := range a.Addr {
				a.Addr[k] = byte(rng.Uint32())
			}
			a.Port, a.Family = uint16(rng.Uint32()), byte(rng.Uint32())
		}
		seed := rng.Uint64()
		s := bpf.AVSlot{Addr: a.Addr, Port: a.Port, Family: a.Family}
		want := bpf.AVHash(seed, a)
		if got := hashAddr(seed, &a); got != want {
			t.Fatalf("hashAddr(%#x, %v) = %#x, want %#x", seed, a, got, want)
		}
		if got := hashSlot(seed, &s); got != want {
			t.Fatalf("hashSlot(%#x, %v) = %#x, want %#x", seed, a, got, want)
		}
	}
}

// A probe reset from an address and port holds what bpf.MakeAddr makes.
func TestResetAddrPort(t *testing.T) {
	for _, s := range []string{"198.18.0.1:1", "198.19.255.254:65535", "[::ffff:198.18.1.2]:80", "[2001:2::1]:5000", "[2001:2:ffff::fe]:47999", "[::1]:256"} {
		ap := netip.MustParseAddrPort(s)
		var p Probe
		p.ok = true
		p.ResetAddrPort(ap)
		if want := bpf.MakeAddr(ap); p.src != want || p.ok {
			t.Errorf("%s: %+v (computed %v), want %+v", s, p.src, p.ok, want)
		}
	}
}
