//go:build !amd64 && !arm64

package prefetch

// Line is a hint; without one for this architecture it does nothing.
func Line(addr uintptr) {}
