//go:build linux

package agent_test

import (
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
)

// An agent restarted while an application of uid 65534 runs charges that
// application's endpoint, which the earlier run prepared, to uid 65534
// (the uid recorded in the endpoint table): the uid's XSKMAP slots stay
// counted (a restart used to hand every uid its whole quota again beside
// what it held), and come back once the application is gone. An endpoint
// a root process registered itself with the library is not the agent's
// and is charged to no one.
func TestRestartChargesInheritedEndpoints(t *testing.T) {
	n := newNodeWith(t, testbed.Options{RxQueues: 4, TxQueues: 4})
	flags := []string{"--socket-group", "65534", "--xsk-slots-per-uid", "2", "--gc-interval", "200ms"}
	n.startAgent(flags...)
	appAddr := netip.AddrPortFrom(n.bed.A.IPv4, 7100)
	n.appSetup(appAddr)
	cmd, out := n.appChild("hang", appAddr, "XDPFAB_QUEUES=2")
	// The application's endpoint listens on queues 0 and 1: 2 slots, the
	// uid's quota.
	var rep appReport
	if err := json.NewDecoder(out).Decode(&rep); err != nil || rep.Err != "" {
		t.Fatalf("application: %v %s", err, rep.Err)
	}
	// Root's own endpoint on queue 2, through the library.
	dp, err := loader.Load(loader.Config{PinRoot: n.pinRoot})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	lav, err := av.Open(dp, &av.Attr{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lav.Close() })
	ltx, _ := cq.Open(cq.Attr{Size: 64})
	lrx, _ := cq.Open(cq.Attr{Size: 64})
	t.Cleanup(func() { ltx.Close(); lrx.Close() })
	if err := n.bed.A.Do(func() error {
		e, err := ep.Open(dp, ep.Attr{Ifname: testbed.LinkName, Local: netip.AddrPortFrom(n.bed.A.IPv4, 7300), AV: lav, TxCQ: ltx, RxCQ: lrx,
			FirstQueue: 2, Queues: 1, BindMode: dataplane.BindCopy, Frames: 256})
		if err == nil {
			t.Cleanup(func() { e.Close() })
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	open := func() error {
		c, err := dialAs(t, n.socket, 65534, 65534)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = n.openEP(c, 7200, ctl.EPOpenArgs{AV: "job", Private: true, FirstQueue: 3, Queues: 1, Frames: 64})
		return err
	}
	wantErrno(t, "a third slot while the application holds 2", open(), fi.EDQUOT)

	n.stopAgent(syscall.SIGKILL)
	n.startAgent(flags...)
	wantErrno(t, "a third slot after the restart, the application still running", open(), fi.EDQUOT)
	if got := strings.Count(n.logs.String(), "op=ep.charge"); got != 1 || !strings.Contains(n.logs.String(), "charged_uid=65534") {
		t.Errorf("the restarted agent charged %d endpoints, want the application's only, to uid 65534:\n%s", got, grepLines(n.logs.String(), "ep.charge"))
	}
	// status names the application as the owner of its endpoint.
	if c, err := client.Dial(n.socket); err != nil {
		t.Fatal(err)
	} else {
		st, err := c.Status()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		owners := map[string]int32{}
		for _, e := range st.Endpoints {
			owners[e.Local] = e.OwnerPID
		}
		if got := owners[appAddr.String()]; got != int32(cmd.Process.Pid) {
			t.Errorf("status: owner of %v is %d, want the application's pid %d", appAddr, got, cmd.Process.Pid)
		}
	}

	cmd.Process.Kill()
	cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = open(); err == nil || !errors.Is(err, fi.EDQUOT) && !errors.Is(err, fi.EBUSY) {
			break
		}
	}
	if err != nil {
		t.Errorf("once the application is gone: %v, want its slots back", err)
	}
}
