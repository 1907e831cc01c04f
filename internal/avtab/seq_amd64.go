package avtab

import "sync/atomic"

// On x86-64 stores become visible in program order (TSO), so both numbers
// are plain stores, as Linux's seqcount writers on x86 are; what must not
// reorder them is the compiler, and a call to an assembly function
// (storeInOrder) is opaque to it: no store moves across. sync/atomic's
// stores would be XCHG, each a full barrier that drains the store buffer
// (waiting for the stores before it, cache misses included).

func writeBegin(p *uint32) uint32 {
	odd := (atomic.LoadUint32(p) + 1) | 1
	storeInOrder(p, odd)
	return odd
}

func writeEnd(p *uint32, odd uint32) {
	storeInOrder(p, odd+1)
}

// storeInOrder is a plain 32-bit store (MOVL) that the compiler cannot
// move other memory accesses across.
//
//go:noescape
func storeInOrder(p *uint32, v uint32)
