//go:build !amd64 && !arm64

package avtab

// prefetch is a hint; without one for this architecture it does nothing.
func prefetch(addr uintptr) {}
