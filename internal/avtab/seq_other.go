//go:build !amd64

package avtab

import "sync/atomic"

// Weakly ordered CPUs (arm64) may make stores visible out of order. The
// odd number is an atomic swap, a full barrier (SWPAL, or a load/store
// exclusive pair with barriers), so no store of the write moves before
// it; the even one a release store (STLR), so none moves after it.

func writeBegin(p *uint32) uint32 {
	odd := (atomic.LoadUint32(p) + 1) | 1
	atomic.SwapUint32(p, odd)
	return odd
}

func writeEnd(p *uint32, odd uint32) {
	atomic.StoreUint32(p, odd+1)
}
