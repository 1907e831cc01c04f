package av

import "github.com/xdpfab/xdpfab/internal/avtab"

// SetRebuildFault makes every table rebuild fail with f's error until
// restore is called.
func SetRebuildFault(f func() error) (restore func()) {
	old := rebuildFault
	rebuildFault = f
	return func() { rebuildFault = old }
}

// Rebuilds is the number of tables a replaced (growth and rebuilds).
func Rebuilds(a *AV) int {
	unlock := a.lock()
	defer unlock()
	return a.grown
}

// TableBytes is the size of a's table in memory.
func TableBytes(a *AV) int {
	unlock := a.lock()
	defer unlock()
	return a.tab.Bytes()
}

// FastReader is a's lock-free reader (nil when it has none).
func FastReader(a *AV) *avtab.Reader { return a.fast.Load() }
