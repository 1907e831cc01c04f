package av

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The free set always gives the lowest free index, like the min-heap it
// replaced, over random pushes and pops.
func TestFreeSetLowest(t *testing.T) {
	var f freeSet
	ref := map[uint32]bool{}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		if rng.IntN(3) > 0 {
			i := uint32(rng.IntN(5000))
			f.push(i)
			ref[i] = true
		} else {
			got, ok := f.pop()
			if len(ref) == 0 {
				if ok {
					t.Fatalf("pop of an empty set gave %d", got)
				}
				continue
			}
			keys := make([]uint32, 0, len(ref))
			for k := range ref {
				keys = append(keys, k)
			}
			want := slices.Min(keys)
			if !ok || got != want {
				t.Fatalf("pop = %d %v, want %d", got, ok, want)
			}
			delete(ref, want)
		}
		if f.n != len(ref) {
			t.Fatalf("len %d, want %d", f.n, len(ref))
		}
	}
}
