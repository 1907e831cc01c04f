// Package prefetch asks the CPU to start loading cache lines it will need
// shortly, so that several misses overlap instead of following each other.
// A hint: it never faults, whatever the address.
package prefetch

import "unsafe"

// LineSize is the cache line size prefetching steps by.
const LineSize = 64

// Bytes prefetches the cache lines of b, up to max bytes of it.
func Bytes(b []byte, max int) {
	n := min(len(b), max)
	if n <= 0 {
		return
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	end := p + uintptr(n)
	for a := p &^ (LineSize - 1); a < end; a += LineSize {
		Line(a)
	}
}
