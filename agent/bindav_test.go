//go:build linux

package agent_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"golang.org/x/sys/unix"
)

// An endpoint binds its AV, and a bound AV cannot be destroyed (EBUSY).
// Before, any group member could bind an endpoint to another uid's AV,
// which it may only read, and keep its owner from destroying it for as
// long as it liked. Now binding another uid's AV takes the right to change
// it (its group); root's AVs, the operator's for jobs, may be bound by all.
func TestBindingAnotherUsersAV(t *testing.T) {
	n := newNodeWith(t, testbed.Options{RxQueues: 4, TxQueues: 4})
	n.startAgent("--socket-group", "65534")
	var kept []int
	defer func() {
		for _, fd := range kept {
			unix.Close(fd)
		}
	}()
	queue := -1
	open := func(c *client.Client, av string) error {
		queue++ // a queue of its own: no sharing domain in the way
		args := ctl.EPOpenArgs{Iface: testbed.LinkName, Local: netip.AddrPortFrom(n.bed.A.IPv4, uint16(7000+queue)).String(), AV: av,
			Private: true, FirstQueue: queue, Queues: 1, Frames: 64}
		fds, err := c.Call(ctl.OpEPOpen.Name(), args, nil)
		kept = append(kept, fds...)
		return err
	}
	owner := mustDialAs(t, n.socket, 5201, nobody, 5300)
	if _, err := owner.AVCreate(ctl.AVCreateArgs{Name: "private"}); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.AVCreate(ctl.AVCreateArgs{Name: "shared", Group: "5300"}); err != nil {
		t.Fatal(err)
	}
	stranger := mustDialAs(t, n.socket, 5202, nobody)
	wantErrno(t, "a stranger binds the owner's AV", open(stranger, "private"), fi.EACCES)
	if _, err := stranger.AVLookup("private", 0); errors.Is(err, fi.EACCES) {
		t.Errorf("the stranger may still read the AV: %v", err)
	}
	if err := owner.AVDestroy("private"); err != nil {
		t.Errorf("the owner's destroy: %v", err)
	}
	member := mustDialAs(t, n.socket, 5203, nobody, 5300)
	if err := open(member, "shared"); err != nil {
		t.Errorf("a member of the AV's group binds it: %v", err)
	}
	root, err := client.Dial(n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	if err := open(stranger, "job"); err != nil {
		t.Errorf("a member binds root's AV: %v", err)
	}
}
