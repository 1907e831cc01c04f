package avtab

import (
	"math/rand/v2"
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
