//go:build !linux

package cq

import "testing"

// epollOn: epoll is Linux's; the tests and benchmarks using it are skipped.
func epollOn(tb testing.TB, fd int) func() (int, error) {
	tb.Skip("epoll is Linux-only")
	return nil
}
