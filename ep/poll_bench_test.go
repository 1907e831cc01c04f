//go:build linux

package ep_test

import (
	"errors"
	"testing"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/fi"
)

// BenchmarkEmptyPoll is one turn of a polling receiver's loop when nothing
// arrived: a CQ read, which progresses the endpoint (completion ring,
// every RX ring, same-host channels) and finds nothing. A message that
// arrives waits, on average, half of it before the loop notices.
func BenchmarkEmptyPoll(b *testing.B) {
	r := newRig(b, rigOpts{})
	r.a.insert(b, r.b.local)
	var buf [1]cq.Entry
	for b.Loop() {
		if n, err := r.a.rx.Read(buf[:]); n != 0 || !errors.Is(err, fi.EAGAIN) {
			b.Fatalf("read: %d, %v", n, err)
		}
	}
}
