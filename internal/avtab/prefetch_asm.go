//go:build amd64 || arm64

package avtab

// prefetch asks the CPU to load the cache line at addr (PREFETCHT0,
// PRFM PLDL1KEEP) without waiting for it: a hint, which never faults.
//
//go:noescape
func prefetch(addr uintptr)
