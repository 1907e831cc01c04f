//go:build race

package avtab

import "sync/atomic"

// storeHint is hint_norace.go's, atomic for the race detector.
func storeHint(p *uint32, v uint32) { atomic.StoreUint32(p, v) }
