package agent_test

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/agent"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/avtab"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// The per-uid AV quota does not split the node's AV slots: four uids at
// their quota used to take every slot, and root's next AV, and every other
// uid's, was refused (ENOSPC). Uids other than root now own three quarters
// of the slots at most (EAGAIN past that); root and the admin group still
// find slots.
func TestUserAVsLeaveRootSlots(t *testing.T) {
	const adminGroup = 7703
	_, _, sock := inProcessAgent(t, func(c *agent.Config) {
		c.SocketGroup = "65534"
		c.AdminGroup = fmt.Sprint(adminGroup)
		c.Sizes.MaxAVs = 32 // 31 AV slots (slot 0 is the node's); 24 for uids other than root
		c.Limits.AVsPerUID = 8
	})
	made := 0
	for uid := 5001; uid <= 5004; uid++ {
		c := mustDialAs(t, sock, uid, nobody)
		for i := range 8 {
			_, err := c.AVCreate(ctl.AVCreateArgs{Name: fmt.Sprintf("u%d-%d", uid, i)})
			if err == nil {
				made++
				continue
			}
			if !errors.Is(err, fi.EAGAIN) {
				t.Errorf("uid %d's AV %d: %v, want EAGAIN once the uids' share is taken", uid, i, err)
			}
			break
		}
		c.Close()
	}
	if made != 24 {
		t.Errorf("uids other than root made %d AVs of 31 slots, want 24", made)
	}
	root, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "root-after"}); err != nil {
		t.Errorf("root's AV once the uids made all they may: %v", err)
	}
	admin := mustDialAs(t, sock, 5009, nobody, adminGroup)
	if _, err := admin.AVCreate(ctl.AVCreateArgs{Name: "admin-after"}); err != nil {
		t.Errorf("an admin's AV once the uids made all they may: %v", err)
	}
	// A destroyed AV gives its slot back to the uids (the admin's counts
	// among theirs).
	if err := admin.AVDestroy("admin-after"); err != nil {
		t.Fatal(err)
	}
	_, err = mustDialAs(t, sock, 5005, nobody).AVCreate(ctl.AVCreateArgs{Name: "u5005"})
	wantErrno(t, "a fifth uid's AV", err, fi.EAGAIN)
	c := mustDialAs(t, sock, 5001, nobody)
	if err := c.AVDestroy("u5001-0"); err != nil {
		t.Fatal(err)
	}
	if _, err := mustDialAs(t, sock, 5005, nobody).AVCreate(ctl.AVCreateArgs{Name: "u5005"}); err != nil {
		t.Errorf("another uid's AV once one was destroyed: %v", err)
	}
}

// An AV's count hint sizes its table from the start (~56 B an index),
// entries or not: 64 empty AVs asking for 2^20 entries each held 224 MiB
// of kernel memory (each cut to the entry quota). The room of a uid's
// tables now counts against its room quota (twice the entry quota and the
// smallest table of each AV of its quota): a create past it is refused
// with EDQUOT.
func TestAVRoomQuota(t *testing.T) {
	_, _, sock := inProcessAgent(t, func(c *agent.Config) { c.SocketGroup = "65534" })
	dp, err := loader.OpenPinned(filepath.Join(filepath.Dir(sock), "bpffs"))
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	evil := mustDialAs(t, sock, nobody, nobody)
	room := 0
	created := 0
	for i := range 64 {
		info, err := evil.AVCreate(ctl.AVCreateArgs{Name: fmt.Sprintf("huge%d", i), Count: 1 << 20})
		if err != nil {
			wantErrno(t, fmt.Sprintf("AV %d asking for 2^20 entries", i), err, fi.EDQUOT)
			break
		}
		created++
		tab, err := avtab.Open(dp, info.ID, true)
		if err != nil {
			t.Fatal(err)
		}
		room += int(tab.Cap())
		tab.Close()
	}
	l := agent.DefaultLimits
	if quota := 2*l.EntriesPerUID + l.AVsPerUID*64; room > quota || created > 2 {
		t.Errorf("%d AVs asking for 2^20 entries made tables with room for %d indices (%d MiB); the room quota is %d",
			created, room, room*56>>20, quota)
	}
	// What is left still holds small AVs.
	if _, err := evil.AVCreate(ctl.AVCreateArgs{Name: "small"}); err != nil {
		t.Errorf("a small AV within the room left: %v", err)
	}

}

// An insert that would grow a table (it doubles when it fills) past its
// owner's room quota is refused with EDQUOT, and so is another AV whose
// smallest table does not fit.
func TestAVRoomQuotaGrowth(t *testing.T) {
	_, _, sock := inProcessAgent(t, func(c *agent.Config) {
		c.SocketGroup = "65534"
		c.Limits.AVRoomPerUID = 256
	})
	c := mustDialAs(t, sock, 4606, nobody)
	if _, err := c.AVCreate(ctl.AVCreateArgs{Name: "grows"}); err != nil {
		t.Fatal(err)
	}
	insert := func(from, n int) error {
		addrs := make([]string, n)
		for i := range addrs {
			addrs[i] = fmt.Sprintf("198.18.48.%d:%d", (from+i)%250+1, 7000+(from+i)/250)
		}
		_, err := c.AVInsert(ctl.AVInsertArgs{Name: "grows", Addrs: addrs})
		return err
	}
	if err := insert(0, 200); err != nil {
		t.Fatalf("200 entries in a table of room 256: %v", err)
	}
	wantErrno(t, "57 more, past room 256 (the table would double to 512)", insert(200, 57), fi.EDQUOT)
	if err := insert(200, 56); err != nil {
		t.Errorf("the last 56 entries of the room: %v", err)
	}
	if info, err := c.AVList("grows"); err != nil || info.Entries != 256 {
		t.Errorf("grows: %d entries, %v; want 256", info.Entries, err)
	}
	_, err := c.AVCreate(ctl.AVCreateArgs{Name: "another"})
	wantErrno(t, "another AV's smallest table past the room", err, fi.EDQUOT)
}

// Frame memory and endpoints have node-wide limits for all uids but root
// together (--umem-total, --endpoints-total; EAGAIN past them): a member
// with subordinate uids multiplied its per-uid quotas, without bound.
// Here three uids each stay within their quota; the node's share runs out.
// Root is not held to it.
func TestNodeWideEndpointLimits(t *testing.T) {
	const mib = 1 << 20
	n := newNodeWith(t, testbed.Options{RxQueues: 4, TxQueues: 4})
	n.startAgent("--socket-group", "65534", "--umem-per-uid", fmt.Sprint(32*mib), "--umem-total", fmt.Sprint(33*mib),
		"--endpoints-total", "3")
	root, err := client.Dial(n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "node"}); err != nil {
		t.Fatal(err)
	}
	var kept []int
	defer func() {
		for _, fd := range kept {
			unix.Close(fd)
		}
	}()
	open := func(c *client.Client, queue, frames int) error {
		args := ctl.EPOpenArgs{Iface: testbed.LinkName, Local: netip.AddrPortFrom(n.bed.A.IPv4, uint16(7000+queue)).String(),
			AV: "node", Private: true, FirstQueue: queue, Queues: 1, Frames: frames}
		fds, err := c.Call(ctl.OpEPOpen.Name(), args, nil)
		kept = append(kept, fds...)
		return err
	}
	for i, uid := range []int{4701, 4702} {
		if err := open(mustDialAs(t, n.socket, uid, nobody), i, 4096); err != nil { // 16 MiB each
			t.Fatalf("uid %d's endpoint of 16 MiB: %v", uid, err)
		}
	}
	third := mustDialAs(t, n.socket, 4703, nobody)
	wantErrno(t, "a third uid's 16 MiB past the node's 33 MiB", open(third, 2, 4096), fi.EAGAIN)
	if err := open(third, 2, 64); err != nil {
		t.Fatalf("the third uid's endpoint of 256 KiB: %v", err)
	}
	wantErrno(t, "a fourth endpoint past the node's 3", open(mustDialAs(t, n.socket, 4704, nobody), 3, 64), fi.EAGAIN)
	if err := open(root, 3, 4096); err != nil {
		t.Errorf("root's endpoint past the uids' limits: %v", err)
	}
}

// Same-host channels have a node-wide limit for all uids but root
// together (--channels-total; EAGAIN past it), besides the per-endpoint
// quotas subordinate uids multiply.
func TestNodeWideChannelLimit(t *testing.T) {
	n := newNodeWith(t, testbed.Options{RxQueues: 8, TxQueues: 8})
	n.startAgent("--socket-group", "65534", "--channels-total", "2")
	root, err := client.Dial(n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "chan"}); err != nil {
		t.Fatal(err)
	}
	// Each uid's sharing domain on a queue of its own.
	queues := map[*client.Client]int{}
	open := func(c *client.Client, port uint16) uint32 {
		t.Helper()
		q, ok := queues[c]
		if !ok {
			q = len(queues)
			queues[c] = q
		}
		id, err := n.openEP(c, port, ctl.EPOpenArgs{AV: "chan", FirstQueue: q, Queues: 1, RingSize: 16})
		if err != nil {
			t.Fatalf("open %d: %v", port, err)
		}
		return id
	}
	recv := netip.AddrPortFrom(n.bed.A.IPv4, 7000)
	rc := mustDialAs(t, n.socket, 4801, nobody)
	rid := open(rc, recv.Port())
	localAttach(t, rc, rid)
	connect := func(c *client.Client, from uint32) error { return localConnect(c, from, recv) }
	for i, uid := range []int{4802, 4803} {
		c := mustDialAs(t, n.socket, uid, nobody)
		if err := connect(c, open(c, uint16(7001+i))); err != nil {
			t.Fatalf("uid %d's channel: %v", uid, err)
		}
	}
	c := mustDialAs(t, n.socket, 4804, nobody)
	wantErrno(t, "a third channel past the node's 2", connect(c, open(c, 7003)), fi.EAGAIN)
	// Root's channels are not counted; a closed channel's place is free.
	if err := connect(root, open(root, 7004)); err != nil {
		t.Errorf("root's channel: %v", err)
	}
	if _, err := rc.Call(ctl.OpEPClose.Name(), ctl.EPCloseArgs{ID: rid}, nil); err != nil {
		t.Fatal(err)
	}
	localAttach(t, rc, open(rc, recv.Port()))
	if err := connect(c, open(c, 7005)); err != nil {
		t.Errorf("a channel once the others closed with their receiver: %v", err)
	}
}

// The agent's limits of the node's shared resources have flags: AV slots
// and the uids' share of them (--max-avs, --user-avs), the uids' share of
// AV entries (--user-av-entries), XSKMAP slots per uid and in all
// (--xsk-slots-per-uid, --xsk-slots-total), unresolved neighbour entries
// per uid and in all (--neighbors-per-uid, --neighbors-total).
func TestNodeLimitFlags(t *testing.T) {
	n := newNodeWith(t, testbed.Options{RxQueues: 2, TxQueues: 2})
	n.startAgent("--socket-group", "65534", "--max-avs", "16", "--user-avs", "2", "--user-av-entries", "3",
		"--xsk-slots-per-uid", "1", "--xsk-slots-total", "3", "--neighbors-per-uid", "3", "--neighbors-total", "5")
	root, err := client.Dial(n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	c := mustDialAs(t, n.socket, 4901, nobody)
	for i := range 2 {
		if _, err := c.AVCreate(ctl.AVCreateArgs{Name: fmt.Sprintf("f%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.AVCreate(ctl.AVCreateArgs{Name: "f2"})
	wantErrno(t, "a third AV with --user-avs 2", err, fi.EAGAIN)
	if _, err := c.AVInsert(ctl.AVInsertArgs{Name: "f0", Addrs: []string{"198.18.9.1:7000", "198.18.9.2:7000", "198.18.9.3:7000"}}); err != nil {
		t.Fatal(err)
	}
	_, err = c.AVInsert(ctl.AVInsertArgs{Name: "f1", Addrs: []string{"198.18.9.4:7000"}})
	wantErrno(t, "a fourth entry with --user-av-entries 3", err, fi.EAGAIN)
	for i := range 13 { // 15 slots in all
		if _, err := root.AVCreate(ctl.AVCreateArgs{Name: fmt.Sprintf("r%d", i)}); err != nil {
			t.Fatalf("root's AV %d: %v", i, err)
		}
	}
	_, err = root.AVCreate(ctl.AVCreateArgs{Name: "r13"})
	wantErrno(t, "an AV past --max-avs 16", err, fi.ENOSPC)

	// Unresolved neighbours: 3 for one uid, 5 in all.
	neighUser := func(uid, queue int) func(netip.Addr) error { return n.neighUser(uid, queue, "r0") }
	onLink := n.bed.Net4.Addr().As4()
	next := 100
	addr := func() netip.Addr { next++; onLink[3] = byte(next); return netip.AddrFrom4(onLink) }
	first, second := neighUser(4902, 0), neighUser(4903, 1)
	// Each endpoint holds an XSKMAP slot (one context) per queue.
	xsk := func(uid, queues int) error {
		c := mustDialAs(t, n.socket, uid, nobody)
		defer c.Close()
		fds, err := c.Call(ctl.OpEPOpen.Name(), ctl.EPOpenArgs{Iface: testbed.LinkName,
			Local: netip.AddrPortFrom(n.bed.A.IPv4, uint16(7100+uid%100)).String(), AV: "r0", Private: true, Queues: queues, Frames: 64}, nil)
		for _, fd := range fds {
			unix.Close(fd)
		}
		return err
	}
	wantErrno(t, "a second endpoint's slot with --xsk-slots-per-uid 1", xsk(4902, 1), fi.EDQUOT)
	wantErrno(t, "a third uid's two slots with --xsk-slots-total 3", xsk(4904, 2), fi.EAGAIN)
	for i := range 3 {
		if err := first(addr()); err != nil {
			t.Fatalf("first uid's unresolved neighbour %d: %v", i, err)
		}
	}
	wantErrno(t, "a fourth unresolved neighbour with --neighbors-per-uid 3", first(addr()), fi.EDQUOT)
	for i := range 2 {
		if err := second(addr()); err != nil {
			t.Fatalf("second uid's unresolved neighbour %d: %v", i, err)
		}
	}
	wantErrno(t, "a sixth unresolved neighbour with --neighbors-total 5", second(addr()), fi.EAGAIN)
}

// XSKMAP slots (1024; an endpoint takes one per receive context and
// queue) have a quota per uid, a quarter of the map (EDQUOT past it), and
// a limit for all uids but root together (--xsk-slots-total, three
// quarters by default; EAGAIN past it): one uid's endpoints of 64
// contexts used to take every slot, and root's next endpoint found none
// (ENOSPC). A closed endpoint's slots, and those of a connection that
// ended, are given back. (Every slot is a socket, whose close takes the
// kernel ~15 ms: the uids' limit is a flag here.)
func TestXSKSlotQuotas(t *testing.T) {
	n := newNodeWith(t, testbed.Options{RxQueues: 4, TxQueues: 4})
	n.startAgent("--socket-group", "65534", "--xsk-slots-total", "258")
	root, err := client.Dial(n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "xsk", RxCtxBits: 6}); err != nil {
		t.Fatal(err)
	}
	port := uint16(7000)
	// open opens an endpoint of ctxs receive contexts on queue q, in the
	// sharing domain of c's uid (each uid's on a queue of its own).
	open := func(c *client.Client, q, ctxs int) (uint32, error) {
		port++
		return n.openEP(c, port, ctl.EPOpenArgs{AV: "xsk", RxContexts: ctxs, FirstQueue: q, Queues: 1, RingSize: 16})
	}
	evil, b, c := mustDialAs(t, n.socket, 5101, nobody), mustDialAs(t, n.socket, 5102, nobody), mustDialAs(t, n.socket, 5103, nobody)
	for i := range 4 {
		if _, err := open(evil, 0, 64); err != nil {
			t.Fatalf("uid 5101's endpoint %d of 64 slots: %v", i, err)
		}
	}
	_, err = open(evil, 0, 1)
	wantErrno(t, "uid 5101's fifth endpoint, of 1 slot past its quota of 256", err, fi.EDQUOT)
	var bs []uint32
	for i := range 2 {
		id, err := open(b, 1, 1)
		if err != nil {
			t.Fatalf("uid 5102's endpoint %d of 1 slot: %v", i, err)
		}
		bs = append(bs, id)
	}
	_, err = open(b, 1, 1)
	wantErrno(t, "uid 5102's slot past the uids' 258", err, fi.EAGAIN)
	if _, err := open(root, 3, 64); err != nil {
		t.Fatalf("root's endpoint of 64 slots once the uids hold all they may: %v", err)
	}
	// A closed endpoint gives its slot back.
	if _, err := b.Call(ctl.OpEPClose.Name(), ctl.EPCloseArgs{ID: bs[0]}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := open(c, 2, 1); err != nil {
		t.Fatalf("uid 5103's slot once an endpoint was closed: %v", err)
	}
	_, err = open(c, 2, 1)
	wantErrno(t, "uid 5103's second slot", err, fi.EAGAIN)
	// So does a connection that ends (its process died).
	evil.Close()
	for deadline := time.Now().Add(5 * time.Second); n.endpoints() > 3 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := open(c, 2, 1); err != nil {
		t.Fatalf("uid 5103's second slot once uid 5101's connection ended: %v", err)
	}
}

// The node's AV entries (--av-entries, 262,144) have a limit for the named
// AVs of all uids but root together, three quarters (--user-av-entries;
// EAGAIN past it): four uids at their entry quota used to fill the node,
// and root's next insert found no room (ENOSPC). Here eight uids insert
// their quota at once: three fit, as together, however the inserts
// interleave; root's insert still fits, and a destroyed AV gives its
// entries back.
func TestUserAVEntriesLeaveRootRoom(t *testing.T) {
	const quota, uids = 1024, 8
	_, _, sock := inProcessAgent(t, func(c *agent.Config) {
		c.SocketGroup = "65534"
		c.Sizes.AVEntries = 4 * quota // 3 quotas for uids other than root
		c.Limits.EntriesPerUID = quota
	})
	addrs := func(net int) []string {
		a := make([]string, quota)
		for i := range a {
			a[i] = fmt.Sprintf("198.18.%d.%d:%d", net, i%250+1, 7000+i/250)
		}
		return a
	}
	conns := make([]*client.Client, uids)
	for i := range conns {
		conns[i] = mustDialAs(t, sock, 5201+i, nobody)
		if _, err := conns[i].AVCreate(ctl.AVCreateArgs{Name: fmt.Sprintf("e%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	errs, inserted := make([]error, uids), make([]int, uids)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			var r ctl.InsertResult
			r, errs[i] = c.AVInsert(ctl.AVInsertArgs{Name: fmt.Sprintf("e%d", i), Addrs: addrs(10 + i)})
			inserted[i] = r.Inserted
		})
	}
	wg.Wait()
	fitted, refused, entries := 0, -1, 0
	for i, err := range errs {
		if err == nil {
			if inserted[i] == quota {
				fitted++
			}
		} else {
			wantErrno(t, fmt.Sprintf("uid %d's insert past the uids' share", 5201+i), err, fi.EAGAIN)
			refused = i
		}
		info, err := conns[i].AVList(fmt.Sprintf("e%d", i))
		if err != nil {
			t.Fatal(err)
		}
		entries += info.Entries
	}
	if fitted != 3 || entries != 3*quota {
		t.Fatalf("%d uids' inserts of %d fitted, their AVs hold %d entries; want 3 and %d of the node's %d", fitted, quota, entries, 3*quota, 4*quota)
	}
	root, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "root"}); err != nil {
		t.Fatal(err)
	}
	if r, err := root.AVInsert(ctl.AVInsertArgs{Name: "root", Addrs: addrs(30)}); err != nil || r.Inserted != quota {
		t.Fatalf("root's %d entries once the uids hold their share: %d, %v", quota, r.Inserted, err)
	}
	for i, err := range errs {
		if err == nil {
			if err := conns[i].AVDestroy(fmt.Sprintf("e%d", i)); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if _, err := conns[refused].AVInsert(ctl.AVInsertArgs{Name: fmt.Sprintf("e%d", refused), Addrs: addrs(10 + refused)}); err != nil {
		t.Errorf("uid %d's insert once another uid's AV was destroyed: %v", 5201+refused, err)
	}
}
