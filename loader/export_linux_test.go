//go:build linux

package loader

// IsLifeLineForTest is isLifeLine.
func IsLifeLineForTest(fd int) bool { return isLifeLine(fd) }
