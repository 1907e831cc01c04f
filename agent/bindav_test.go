//go:build linux

package agent_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/agent"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

// An endpoint binds its AV, and a bound AV cannot be destroyed (EBUSY).
// Before, any group member could bind an endpoint to another uid's AV,
// which it may only read, and keep its owner from destroying it for as
// long as it liked. Now binding another uid's AV takes the right to change
// it (its group); root's AVs, the operator's for jobs, may be bound by all.
func TestBindingAnotherUsersAV(t *testing.T) {
	n := newNodeWith(t, testbed.Options{RxQueues: 4, TxQueues: 4})
	n.startAgent("--socket-group", "65534")
	queue := -1
	open := func(c *client.Client, av string) error {
		queue++ // a queue of its own: no sharing domain in the way
		_, err := n.openEP(c, uint16(7000+queue), ctl.EPOpenArgs{AV: av, Private: true, FirstQueue: queue, Queues: 1, Frames: 64})
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

// avTables counts the AV tables the kernel holds (maps named xdpfab_avt*).
func avTables(t *testing.T) int {
	t.Helper()
	n := 0
	for id := ebpf.MapID(0); ; {
		next, err := ebpf.MapGetNextID(id)
		if err != nil {
			return n
		}
		id = next
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		if info, err := m.Info(); err == nil && strings.HasPrefix(info.Name, "xdpfab_avt") {
			n++
		}
		m.Close()
	}
}

// The agent's quota checks keep a mapping of each table whose header they
// read. A first version kept the destroyed AVs' tables alive through them
// (the kernel memory a uid's room quota counted as freed), and the tables
// an insert replaced as it grew the AV; now destroy drops the mapping, and
// so does the end of an insert whose table was retired.
func TestDestroyedAVTableReleased(t *testing.T) {
	_, _, sock := inProcessAgent(t, func(c *agent.Config) { c.SocketGroup = fmt.Sprint(nobody) })
	owner := mustDialAs(t, sock, nobody, nobody)
	before := avTables(t)
	if _, err := owner.AVCreate(ctl.AVCreateArgs{Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.AVInsert(ctl.AVInsertArgs{Name: "gone", Addrs: []string{"198.18.9.1:7000"}}); err != nil {
		t.Fatal(err)
	}
	if err := owner.AVDestroy("gone"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Second); avTables(t) > before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d AV tables in the kernel after the destroy, %d before the create", avTables(t), before)
		}
	}
	// An insert that grows the AV retires the table the check mapped.
	if _, err := owner.AVCreate(ctl.AVCreateArgs{Name: "grown", Count: 1}); err != nil {
		t.Fatal(err)
	}
	addrs := make([]string, 600)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("198.18.%d.%d:7000", 10+i/200, i%200+1)
	}
	if r, err := owner.AVInsert(ctl.AVInsertArgs{Name: "grown", Addrs: addrs}); err != nil || r.Inserted != len(addrs) {
		t.Fatal(r, err)
	}
	for deadline := time.Now().Add(3 * time.Second); avTables(t) > before+1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d AV tables in the kernel after one AV grew, %d before it was made", avTables(t), before)
		}
	}
}
