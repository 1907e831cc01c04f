package avtab

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugeHints is the number of indices from which a table's slot hints
// live in a mapping of their own, backed by transparent huge pages
// (adviseHuge): 2 MiB of hints, one huge page.
//
// A random fi_av_lookup reads the index's hint, then its slot: two
// dependent loads, each of them a TLB miss once the table spans more
// pages than the TLB holds. Hints in huge pages make the first load's
// translation a hit. Measured on Linux 6.18 in 2026 (bench section 4, 1M
// entries): in 8 alternating pairs of runs, 0.79-1.01x libfabric's lookup
// rate with hints in the Go heap against 1.02-1.10x in huge pages; runs an
// hour later gave 0.83-0.90x with huge pages: the ratio follows the
// machine's memory latency (two dependent loads here, one in libfabric).
const hugeHints = 1 << 19

const hugePage = 2 << 20

// hintMapped counts the bytes of hint mappings this process holds.
var hintMapped atomic.Int64

// HintBytes reports the bytes of slot hints this process holds outside
// the Go heap (tables of 512Ki indices and more): AV memory that the Go
// heap's statistics do not show.
func HintBytes() int64 { return hintMapped.Load() }

// newHints returns n zero hints: in the Go heap for a small table, else
// in an anonymous mapping advised into huge pages, with the region that
// gives it back (munmap) once no Table or Reader refers to it. A failed
// mapping falls back to the Go heap: hints are only hints.
func newHints(n int) ([]uint32, *region) {
	if n < hugeHints {
		return make([]uint32, n), nil
	}
	size := (uintptr(n)*4 + hugePage - 1) &^ (hugePage - 1)
	addr, err := unix.MmapPtr(-1, 0, nil, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]uint32, n), nil
	}
	adviseHuge(unsafe.Slice((*byte)(addr), size))
	r := newRegion(addr, size, &hintMapped)
	return unsafe.Slice((*uint32)(addr), n), r
}
