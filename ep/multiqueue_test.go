//go:build linux

package ep_test

import (
	"fmt"
	"net/netip"
	"os/exec"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/wire"
)

// On a two-queue interface, flows land on both rx queues. An endpoint
// listens on every queue by default, so none falls back; one listening on
// queue 0 only loses the others (counted as wrong_queue).
func TestMultiQueue(t *testing.T) {
	const flows = 32
	sendFlows := func(r *rig) {
		t.Helper()
		for range flows {
			c, err := r.b.h.Dial("udp", r.a.local.String())
			if err != nil {
				t.Fatal(err)
			}
			msg := make([]byte, wire.HdrLen+4)
			wire.PutHdr(msg, wire.Hdr{Op: wire.OpMsg})
			copy(msg[wire.HdrLen:], "flow")
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
	if c, _ := one.dp.Counters(); c[bpf.CounterWrongQueue] == 0 {
		t.Errorf("no flow arrived on queue 1: the test cannot tell whether queues are served")
	}
}

// A veth made without queue attributes reports one rx queue per possible
// CPU but has one real queue; sockets on the others fail to bind (EINVAL).
// The default listens on the queues it could bind.
func TestQueuesDefaultToUsable(t *testing.T) {
	r := newRig(t, rigOpts{})
	err := r.a.h.Do(func() error {
		for _, args := range [][]string{
			{"link", "add", "vq0", "type", "veth", "peer", "name", "vq1"},
			{"link", "set", "vq0", "up"}, {"link", "set", "vq1", "up"},
			{"addr", "add", "198.19.254.1/30", "dev", "vq0"},
		} {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("ip %v: %v: %s", args, err, out)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var reported int
	r.a.h.Do(func() error {
		l, err := netlink.LinkByName("vq0")
		if err == nil {
			reported = l.Attrs().NumRxQueues
		}
		return err
	})
	e := openEP(t, r.a.h, r.dp, ep.Attr{Ifname: "vq0", Local: netip.MustParseAddrPort("198.19.254.1:7000"), AV: r.a.av,
		TxCQ: r.a.tx, RxCQ: r.a.rx, BindMode: dataplane.BindCopy})
	if e.Queues() != 1 {
		t.Errorf("listening on %d queues (the link reports %d)", e.Queues(), reported)
	}
	if reported < 2 {
		t.Logf("this machine reports %d rx queue(s): the fallback was not needed", reported)
	}
}
