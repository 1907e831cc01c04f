package ep_test

import (
	"testing"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

// On a two-queue interface, flows land on both rx queues. An endpoint
// listens on every queue by default, so none falls back; one listening on
// queue 0 only loses the others (counted as failed redirects).
func TestMultiQueue(t *testing.T) {
	const flows = 32
	sendFlows := func(r *rig) {
		t.Helper()
		for range flows {
			c, err := r.b.h.Dial("udp", r.a.local.String())
			if err != nil {
				t.Fatal(err)
			}
			msg := make([]byte, bpf.HdrLen+4)
			bpf.PutHdr(msg, bpf.WireHdr{Op: bpf.OpMsg})
			copy(msg[bpf.HdrLen:], "flow")
			if _, err := c.Write(msg); err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
	}
	bed := testbed.Options{RxQueues: 2, TxQueues: 2}

	all := newRig(t, rigOpts{bedOpts: bed})
	for i := range flows {
		all.a.ep.Recv(make([]byte, 64), fi.AddrUnspec, i)
	}
	sendFlows(all)
	for range flows {
		if e, src, ee := read(t, all.a.rx); ee != nil || e.Len != 4 || src != fi.AddrNotAvail {
			t.Fatalf("flow: %+v %v %+v", e, src, ee)
		}
	}
	if c, _ := all.dp.Counters(); c[bpf.CounterRedirectFail] != 0 {
		t.Errorf("%d redirects failed with every queue listened on", c[bpf.CounterRedirectFail])
	}

	one := newRig(t, rigOpts{bedOpts: bed, epAttr: func(a *ep.Attr) { a.Queues = 1 }})
	sendFlows(one)
	waitCounter(t, one, bpf.CounterRX, flows)
	if c, _ := one.dp.Counters(); c[bpf.CounterRedirectFail] == 0 {
		t.Errorf("no flow arrived on queue 1: the test cannot tell whether queues are served")
	}
}
