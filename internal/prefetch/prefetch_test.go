package prefetch_test

import (
	"testing"

	"github.com/xdpfab/xdpfab/internal/prefetch"
)

// Prefetching is a hint: any range, empty, unaligned or past a slice's
// length, neither faults nor changes the bytes.
func TestBytes(t *testing.T) {
	b := make([]byte, 1000)
	for i := range b {
		b[i] = byte(i)
	}
	for _, c := range []struct{ off, n, max int }{{0, 0, 10}, {0, 1000, 0}, {3, 500, 64}, {1, 999, 4096}, {999, 1, 1}} {
		prefetch.Bytes(b[c.off:c.off+c.n], c.max)
	}
	prefetch.Bytes(nil, 100)
	prefetch.Line(0)
	for i := range b {
		if b[i] != byte(i) {
			t.Fatalf("byte %d changed", i)
		}
	}
}
