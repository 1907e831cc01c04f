//go:build linux

package ep_test

import (
	"testing"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/fi"
)

// The message path allocates nothing per message in steady state: a send,
// its completion, the receive and its completion.
func TestMessagePathAllocations(t *testing.T) {
	r := newRig(t, rigOpts{})
	toA := r.b.insert(t, r.a.local)
	r.a.insert(t, r.b.local)
	buf, msg := make([]byte, 64), make([]byte, 64)
	var e [1]cq.Entry
	var src [1]fi.Addr
	round := func() {
		r.a.ep.Recv(buf, fi.AddrUnspec, nil)
		for r.b.ep.Send(msg, toA, nil) != nil {
			r.b.ep.Progress()
		}
		for n, _ := r.b.tx.Read(e[:]); n == 0; n, _ = r.b.tx.Read(e[:]) {
		}
		for n, _ := r.a.rx.ReadFrom(e[:], src[:]); n == 0; n, _ = r.a.rx.ReadFrom(e[:], src[:]) {
		}
	}
	for range 2000 { // warm up: slices reach their steady size
		round()
	}
	if allocs := testing.AllocsPerRun(1000, round); allocs > 0.05 {
		t.Errorf("%.2f allocations per message", allocs)
	}
}
