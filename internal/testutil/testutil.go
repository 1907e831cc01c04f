// Package testutil holds the small helpers xdpfab's tests share: skipping
// (or, under CI, failing) tests that need root, and similar.
package testutil

import (
	"os"
	"testing"
)

// RequirePrivileged skips t unless the process runs as root. When the
// environment sets XDPFAB_REQUIRE_PRIV=1 (as .ci/run does) the skip becomes
// a failure, so CI can never pass by skipping the kernel tests.
func RequirePrivileged(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	Skip(tb, "needs root (BPF maps, XDP and AF_XDP sockets)")
}

// Skip skips tb with reason, or fails it when XDPFAB_REQUIRE_PRIV=1.
func Skip(tb testing.TB, reason string) {
	tb.Helper()
	if os.Getenv("XDPFAB_REQUIRE_PRIV") == "1" {
		tb.Fatalf("XDPFAB_REQUIRE_PRIV=1 but test would skip: %s", reason)
	}
	tb.Skip(reason)
}
