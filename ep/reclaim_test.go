//go:build linux

package ep_test

import (
	"net/netip"
	"os/exec"
	"testing"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

// An endpoint whose owner process looks dead is taken out of the tables
// (ReclaimDead, as the agent's collector does), and its id and socket
// slots go to a new endpoint (its address stays claimed while it is
// open). Closing the first one afterwards must leave the new one's
// sockets alone: the new one still receives. (Close used to clear
// whatever the socket map held at its old slots: the new endpoint, cut off
// silently.)
func TestCloseAfterReclaimLeavesSuccessor(t *testing.T) {
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skip("no process to outlive:", err)
	}
	pid := dead.Process.Pid
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.OwnerPID, a.OwnerStart = pid, 1 }})
	gone, err := ep.ReclaimDead(r.dp, func(p uint32, _ uint64) bool { return p != uint32(pid) })
	if err != nil || len(gone) != 2 {
		t.Fatalf("reclaimed %v, %v: want both endpoints", gone, err)
	}
	var rx, tx *cq.CQ
	for _, q := range []**cq.CQ{&rx, &tx} {
		if *q, err = cq.Open(cq.Attr{Size: 64, Format: cq.FormatTagged}); err != nil {
			t.Fatal(err)
		}
		c := *q
		t.Cleanup(func() { c.Close() })
	}
	local := netip.AddrPortFrom(r.a.local.Addr(), r.a.local.Port()+1)
	next := openEP(t, r.bed.A, r.dp, ep.Attr{Ifname: testbed.LinkName, Local: local, AV: r.a.av, TxCQ: tx, RxCQ: rx,
		Caps: fi.Msg | fi.Tagged | fi.Source, BindMode: dataplane.BindCopy})
	if err := r.a.ep.Close(); err != nil {
		t.Fatalf("close of the reclaimed endpoint: %v", err)
	}
	buf := make([]byte, 64)
	if err := next.Recv(buf, fi.AddrUnspec, nil); err != nil {
		t.Fatal(err)
	}
	to := r.b.insert(t, local)
	if err := r.b.ep.Inject([]byte("still here?"), to); err != nil {
		t.Fatal(err)
	}
	if e, _, ee := read(t, rx); ee != nil || string(buf[:e.Len]) != "still here?" {
		t.Fatalf("the new endpoint got %q (error %+v)", buf[:e.Len], ee)
	}
}
