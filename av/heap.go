package av

import "math/bits"

// freeSet is the set of free AV indices below the table's high mark, for
// the lowest free index (fi_av(3), FI_AV_TABLE): a two-level bitmap, one
// bit per index (128 KiB for a million), whose lowest member is a few word
// scans away. lo is a hint: no summary word below it has a bit set.
// Typed, so pushes and pops do not allocate once grown.
type freeSet struct {
	words []uint64 // bit i%64 of words[i/64]: index i is free
	sum   []uint64 // bit w%64 of sum[w/64]: words[w] != 0
	lo    int
	n     int // members
}

func (f *freeSet) reset() {
	clear(f.words)
	clear(f.sum)
	f.lo, f.n = 0, 0
}

func (f *freeSet) push(i uint32) {
	w := int(i / 64)
	for len(f.words) <= w {
		f.words = append(f.words, 0)
	}
	for len(f.sum) <= w/64 {
		f.sum = append(f.sum, 0)
	}
	bit := uint64(1) << (i % 64)
	if f.words[w]&bit != 0 {
		return
	}
	f.words[w] |= bit
	f.sum[w/64] |= 1 << (w % 64)
	f.n++
	f.lo = min(f.lo, w/64)
}

// pop removes and returns the lowest free index; false when there is none.
func (f *freeSet) pop() (uint32, bool) {
	for s := f.lo; s < len(f.sum); s++ {
		if f.sum[s] == 0 {
			continue
		}
		f.lo = s
		w := s*64 + bits.TrailingZeros64(f.sum[s])
		b := bits.TrailingZeros64(f.words[w])
		f.words[w] &^= 1 << b
		if f.words[w] == 0 {
			f.sum[s] &^= 1 << (w % 64)
		}
		f.n--
		return uint32(w*64 + b), true
	}
	f.lo = len(f.sum)
	return 0, false
}
