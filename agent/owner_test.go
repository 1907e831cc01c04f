package agent_test

import (
	"testing"

	"github.com/xdpfab/xdpfab/agent"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
)

// An AV's owner and group are recorded with it in the pinned maps: they
// hold across agent restarts. The owner and members of the AV's group may
// change it, others may not; a creator cannot grant a group it is not in;
// the per-uid AV quota counts what a uid owns.
func TestAVOwnership(t *testing.T) {
	n := newNode(t)
	n.startAgent("--socket-group", "65534")
	const owner, member, stranger = 4242, 4243, 4244
	const jobGroup = 7777
	o := mustDialAs(t, n.socket, owner, nobody, jobGroup)
	_, err := o.AVCreate(ctl.AVCreateArgs{Name: "job", Group: "9999"})
	wantErrno(t, "a group the creator is not in", err, fi.EACCES)
	if _, err := o.AVCreate(ctl.AVCreateArgs{Name: "job", Group: "7777"}); err != nil {
		t.Fatal(err)
	}
	o.Close()

	n.stopAgent(15)
	n.startAgent("--socket-group", "65534")

	insert := func(uid int, groups ...uint32) error {
		c := mustDialAs(t, n.socket, uid, nobody, groups...)
		defer c.Close()
		_, err := c.AVInsert(ctl.AVInsertArgs{Name: "job", Addrs: []string{"198.18.77.1:7000"}})
		return err
	}
	if err := insert(owner); err != nil {
		t.Errorf("the owner after an agent restart: %v", err)
	}
	if err := insert(member, jobGroup); err != nil {
		t.Errorf("a member of the AV's group: %v", err)
	}
	wantErrno(t, "a uid outside the group", insert(stranger), fi.EACCES)
	s := mustDialAs(t, n.socket, stranger, nobody)
	wantErrno(t, "a stranger destroys", s.AVDestroy("job"), fi.EACCES)
	if err := mustDialAs(t, n.socket, owner, nobody).AVDestroy("job"); err != nil {
		t.Errorf("the owner destroys: %v", err)
	}
}

// The AV quota counts the AVs a uid owns, the entry quota the entries in
// them, whoever inserts.
func TestAVQuota(t *testing.T) {
	_, _, sock := inProcessAgent(t, func(c *agent.Config) {
		c.SocketGroup = "65534"
		c.Limits.AVsPerUID = 2
		c.Limits.EntriesPerUID = 3
	})
	c := mustDialAs(t, sock, 4545, nobody)
	for _, name := range []string{"q1", "q2"} {
		if _, err := c.AVCreate(ctl.AVCreateArgs{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.AVCreate(ctl.AVCreateArgs{Name: "q3"})
	wantErrno(t, "a third AV with a quota of 2", err, fi.EDQUOT)
	if err := c.AVDestroy("q1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AVCreate(ctl.AVCreateArgs{Name: "q3"}); err != nil {
		t.Errorf("after destroying one: %v", err)
	}
	r, err := c.AVInsert(ctl.AVInsertArgs{Name: "q2", Addrs: []string{"198.18.7.1:1", "198.18.7.2:1"}})
	if err != nil || r.Inserted != 2 {
		t.Fatalf("two entries: %+v %v", r, err)
	}
	_, err = c.AVInsert(ctl.AVInsertArgs{Name: "q3", Addrs: []string{"198.18.7.3:1", "198.18.7.4:1"}})
	wantErrno(t, "entries beyond the quota, in another AV of the owner", err, fi.EDQUOT)
	if _, err := c.AVInsert(ctl.AVInsertArgs{Name: "q3", Addrs: []string{"198.18.7.3:1"}}); err != nil {
		t.Errorf("the last entry of the quota: %v", err)
	}
}
