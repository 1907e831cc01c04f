package agent_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/xdpfab/xdpfab/agent"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/avtab"
	"github.com/xdpfab/xdpfab/loader"
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

// Inserts of one owner from many connections at once are checked against
// the entry quota together: exactly as many fit as the quota holds (each
// used to be checked against what the AVs held before any of them ran:
// 6000 entries of a quota of 4000 here).
func TestAVQuotaParallelInserts(t *testing.T) {
	const quota, conns, each = 4000, 8, 2000
	_, _, sock := inProcessAgent(t, func(c *agent.Config) {
		c.SocketGroup = "65534"
		c.Limits.EntriesPerUID = quota
		c.Limits.ConnsPerUID = conns + 1
	})
	owner := mustDialAs(t, sock, 4546, nobody)
	if _, err := owner.AVCreate(ctl.AVCreateArgs{Name: "par"}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range conns {
		c := mustDialAs(t, sock, 4546, nobody)
		addrs := make([]string, each)
		for j := range addrs {
			addrs[j] = fmt.Sprintf("198.18.%d.%d:%d", 10+i, j%250+1, 7000+j/250)
		}
		wg.Go(func() {
			defer c.Close()
			_, err := c.AVInsert(ctl.AVInsertArgs{Name: "par", Addrs: addrs})
			if err != nil && !errors.Is(err, fi.EDQUOT) {
				t.Errorf("insert: %v", err)
			}
		})
	}
	wg.Wait()
	info, err := owner.AVList("par")
	if err != nil {
		t.Fatal(err)
	}
	if info.Entries != quota {
		t.Errorf("%d entries after %d parallel inserts of %d with a quota of %d", info.Entries, conns, each, quota)
	}
	t.Logf("%d entries", info.Entries)
}

// A count hint sizes an AV's table (locked kernel memory, ~56 B per
// index) from the start: a non-root owner's hint is cut to its entry
// quota, so a table asked for 2^20 entries is no bigger than one asked
// for the quota (the table grows past a hint as entries come).
func TestAVCountHintWithinQuota(t *testing.T) {
	const quota = 1000
	_, _, sock := inProcessAgent(t, func(c *agent.Config) {
		c.SocketGroup = "65534"
		c.Limits.EntriesPerUID = quota
	})
	c := mustDialAs(t, sock, 4547, nobody)
	dp, err := loader.OpenPinned(filepath.Join(filepath.Dir(sock), "bpffs"))
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	size := func(name string, count int) uint32 {
		t.Helper()
		info, err := c.AVCreate(ctl.AVCreateArgs{Name: name, Count: count})
		if err != nil {
			t.Fatal(err)
		}
		tab, err := avtab.Open(dp, info.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		defer tab.Close()
		mi, err := tab.Map().Info()
		if err != nil {
			t.Fatal(err)
		}
		return mi.MaxEntries
	}
	atQuota, huge := size("atquota", quota), size("huge", 1<<20)
	if huge > atQuota {
		t.Errorf("a table asked for 2^20 entries has %d pages, one asked for the quota (%d) %d", huge, quota, atQuota)
	}
}
