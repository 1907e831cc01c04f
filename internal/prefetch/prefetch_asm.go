//go:build amd64 || arm64

package prefetch

// Line asks the CPU to load the cache line at addr (PREFETCHT0,
// PRFM PLDL1KEEP) without waiting for it.
//
//go:noescape
func Line(addr uintptr)
