//go:build linux

package testutil

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// WithoutCaps runs fn on a locked OS thread whose effective capability set
// lacks caps (unix.CAP_*): capabilities are per thread on Linux, so the rest
// of the process keeps them. The permitted set is untouched and the
// effective set restored afterwards; if restoring fails the thread stays
// locked and dies with the goroutine.
//
// Run something privileged of the same kind first: libraries that cache
// kernel feature probes must not probe from the reduced thread.
func WithoutCaps(tb testing.TB, caps []int, fn func()) {
	tb.Helper()
	runtime.LockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var saved [2]unix.CapUserData
	if err := unix.Capget(&hdr, &saved[0]); err != nil {
		runtime.UnlockOSThread()
		tb.Fatalf("capget: %v", err)
	}
	reduced := saved
	for _, c := range caps {
		reduced[c/32].Effective &^= 1 << (uint(c) % 32)
	}
	if err := unix.Capset(&hdr, &reduced[0]); err != nil {
		runtime.UnlockOSThread()
		tb.Fatalf("capset: %v", err)
	}
	defer func() {
		if err := unix.Capset(&hdr, &saved[0]); err != nil {
			tb.Errorf("restore capabilities: %v (thread left locked)", err)
			return
		}
		runtime.UnlockOSThread()
	}()
	fn()
}
