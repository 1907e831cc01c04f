package agent_test

import (
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/agent"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"golang.org/x/sys/unix"
)

// The attacker of these tests: uid 65534 (nobody), in the socket's group,
// without capabilities.
const nobody = 65534

// asUser runs fn on a thread whose credentials are uid/gid with the
// supplementary groups given; what it connects carries them (SO_PEERCRED
// and SO_PEERGROUPS are the connecting thread's). The thread is discarded
// afterwards.
func asUser(t *testing.T, uid, gid int, fn func(), groups ...uint32) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		var list unsafe.Pointer
		if len(groups) > 0 {
			list = unsafe.Pointer(&groups[0])
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(list), 0); e != 0 {
			t.Errorf("setgroups: %v", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
			t.Errorf("setresgid: %v", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			t.Errorf("setresuid: %v", e)
			return
		}
		fn()
	}()
	<-done
}

// dialAs connects to the agent as uid/gid (and groups).
func dialAs(t *testing.T, sock string, uid, gid int, groups ...uint32) (*client.Client, error) {
	t.Helper()
	var c *client.Client
	var err error
	asUser(t, uid, gid, func() { c, err = client.Dial(sock) }, groups...)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func mustDialAs(t *testing.T, sock string, uid, gid int, groups ...uint32) *client.Client {
	t.Helper()
	c, err := dialAs(t, sock, uid, gid, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantErrno(t *testing.T, what string, err error, want fi.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: %v, want %s", what, err, want.Name())
	}
}

// An attacker in the agent's group: every finding of the first round's
// attack, each refused with an errno, the agent still serving root and
// everyone else afterwards.
func TestAbuseAsGroupMember(t *testing.T) {
	_, bed, sock := inProcessAgent(t, func(c *agent.Config) {
		c.SocketGroup = fmt.Sprint(nobody)
		c.Limits.ConnsPerUID = 8
		c.Limits.UMEMBytesPerUID = 8 << 20 // 2048 frames of 4 KiB
	})
	root, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "rootav"}); err != nil {
		t.Fatal(err)
	}
	if r, err := root.AVInsert(ctl.AVInsertArgs{Name: "rootav", Addrs: []string{"198.18.7.1:7000"}}); err != nil || r.Inserted != 1 {
		t.Fatal(r, err)
	}
	evil := mustDialAs(t, sock, nobody, nobody)
	local := netip.AddrPortFrom(bed.A.IPv4, 7000).String()
	open := func(args ctl.EPOpenArgs) error {
		args.Iface, args.AV = testbed.LinkName, "rootav"
		if args.Local == "" {
			args.Local = local
		}
		_, err := evil.Call(ctl.OpEPOpen.Name(), args, nil)
		return err
	}

	t.Run("sizes", func(t *testing.T) {
		wantErrno(t, "queues 2^62", open(ctl.EPOpenArgs{Queues: 1 << 62}), fi.EINVAL)
		wantErrno(t, "queues 2^34", open(ctl.EPOpenArgs{Queues: 1 << 34}), fi.EINVAL)
		wantErrno(t, "queues 2^40", open(ctl.EPOpenArgs{Queues: 1 << 40}), fi.EINVAL)
		wantErrno(t, "frames 131072", open(ctl.EPOpenArgs{Frames: 131072}), fi.EINVAL)
		wantErrno(t, "ring 2^30", open(ctl.EPOpenArgs{RingSize: 1 << 30}), fi.EINVAL)
		wantErrno(t, "contexts 2^20", open(ctl.EPOpenArgs{RxContexts: 1 << 20}), fi.EINVAL)
		wantErrno(t, "negative frames", open(ctl.EPOpenArgs{Frames: -1}), fi.EINVAL)
	})
	t.Run("ports", func(t *testing.T) {
		wantErrno(t, "0.0.0.0:53", open(ctl.EPOpenArgs{Local: "0.0.0.0:53"}), fi.EACCES)
		wantErrno(t, "a privileged port", open(ctl.EPOpenArgs{Local: netip.AddrPortFrom(bed.A.IPv4, 1023).String()}), fi.EACCES)
		wantErrno(t, "another interface", func() error {
			_, err := evil.Call(ctl.OpEPOpen.Name(), ctl.EPOpenArgs{Iface: "lo", Local: local, AV: "rootav"}, nil)
			return err
		}(), fi.ENODEV)
	})
	t.Run("quota", func(t *testing.T) {
		// 8 MiB of frame memory: 4096 frames (16 MiB) are refused before
		// anything is made. (Endpoints that fit are opened in
		// TestUnprivilegedApp, where the agent runs in the interface's
		// namespace.)
		wantErrno(t, "frame memory beyond the quota", open(ctl.EPOpenArgs{Frames: 4096, Private: true}), fi.EDQUOT)
	})
	t.Run("neighbours", func(t *testing.T) {
		// Only for an interface the caller has an endpoint on.
		_, err := evil.Call(ctl.OpNeighUse.Name(), ctl.NeighUseArgs{Ifindex: bed.A.Ifindex, IP: bed.B.IPv4}, nil)
		wantErrno(t, "neigh.use without an endpoint", err, fi.EACCES)
		_, err = evil.Call(ctl.OpNeighUse.Name(), ctl.NeighUseArgs{Ifindex: 1, IP: netip.MustParseAddr("255.255.255.255")}, nil)
		wantErrno(t, "neigh.use of the broadcast address", err, fi.EINVAL)
	})
	t.Run("detach", func(t *testing.T) {
		wantErrno(t, "detach", evil.Detach(testbed.LinkName), fi.EACCES)
		if st, err := root.Status(); err != nil || len(st.Attachments) != 1 {
			t.Errorf("after a refused detach: %+v %v", st.Attachments, err)
		}
	})
	t.Run("root's AV", func(t *testing.T) {
		_, err := evil.AVInsert(ctl.AVInsertArgs{Name: "rootav", Addrs: []string{"198.18.7.2:7000"}})
		wantErrno(t, "insert into root's AV", err, fi.EACCES)
		wantErrno(t, "remove from root's AV", evil.AVRemove("rootav", []fi.Addr{0}), fi.EACCES)
		wantErrno(t, "set a user ID in root's AV", evil.AVSetUserID("rootav", 0, 7), fi.EACCES)
		_, err = evil.AVInsertSym(ctl.AVInsertSymArgs{Name: "rootav", Node: "198.18.7.3", Service: "7000"})
		wantErrno(t, "insertsym into root's AV", err, fi.EACCES)
		wantErrno(t, "destroy root's AV", evil.AVDestroy("rootav"), fi.EACCES)
		if e, err := root.AVLookup("rootav", 0); err != nil || e.Addr.String() != "198.18.7.1:7000" {
			t.Errorf("root's AV changed: %+v %v", e, err)
		}
		// Reading is allowed: the maps are readable by the group anyway.
		if _, err := evil.AVLookup("rootav", 0); err != nil {
			t.Errorf("lookup: %v", err)
		}
	})
	t.Run("own AV", func(t *testing.T) {
		if _, err := evil.AVCreate(ctl.AVCreateArgs{Name: "mine"}); err != nil {
			t.Fatal(err)
		}
		if r, err := evil.AVInsert(ctl.AVInsertArgs{Name: "mine", Addrs: []string{"198.18.7.9:7000"}}); err != nil || r.Inserted != 1 {
			t.Fatalf("insert into its own AV: %+v %v", r, err)
		}
		// Another user may not touch it; root may.
		other := mustDialAs(t, sock, 4242, nobody)
		wantErrno(t, "another uid removes", other.AVRemove("mine", []fi.Addr{0}), fi.EACCES)
		if err := root.AVRemove("mine", []fi.Addr{0}); err != nil {
			t.Errorf("root removes: %v", err)
		}
		if err := evil.AVDestroy("mine"); err != nil {
			t.Errorf("owner destroys: %v", err)
		}
	})
	t.Run("names and counts", func(t *testing.T) {
		for _, name := range []string{"../x", "line\nbreak", "rtl\u202e", "\xff\xfe"} {
			_, err := evil.AVCreate(ctl.AVCreateArgs{Name: name})
			wantErrno(t, fmt.Sprintf("AV named %q", name), err, fi.EINVAL)
		}
		_, err := evil.AVCreate(ctl.AVCreateArgs{Name: "big", Count: 1 << 40})
		wantErrno(t, "count 2^40", err, fi.EINVAL)
		_, err = root.AVInsertSym(ctl.AVInsertSymArgs{Name: "rootav", Node: "198.18.8.1", NodeCnt: -1, Service: "7000"})
		wantErrno(t, "node_cnt -1", err, fi.EINVAL)
		if n, err := root.AVList("rootav"); err != nil || n.Entries != 1 {
			t.Errorf("after refused inserts: %d entries, %v", n.Entries, err)
		}
	})
	t.Run("connections", func(t *testing.T) {
		var errs []error
		for range 10 {
			if _, err := dialAs(t, sock, 4343, nobody); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) != 2 || !errors.Is(errs[0], fi.EDQUOT) || !strings.Contains(errs[0].Error(), "4343") {
			t.Errorf("10 connections with a limit of 8: refused %v", errs)
		}
		if _, err := root.Status(); err != nil {
			t.Errorf("root after the flood: %v", err)
		}
	})
	if _, err := root.Status(); err != nil {
		t.Fatalf("the agent stopped serving: %v", err)
	}
}

// Idle connections cost the agent no message buffer: a few hundred of
// them took it from 50 MB to 1.9 GB when each held a 1 MiB buffer.
func TestIdleConnectionsAreCheap(t *testing.T) {
	_, _, sock := inProcessAgent(t, func(c *agent.Config) {
		c.Limits.Conns, c.Limits.ConnsPerUID = 1000, 1000
	})
	const n = 400
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	conns := make([]*client.Client, 0, n)
	for range n {
		c, err := client.Dial(sock)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	for _, c := range conns {
		c.Close()
	}
	grew := int64(after.HeapInuse+after.StackInuse) - int64(before.HeapInuse+before.StackInuse)
	// Both ends of every connection live in this process: a 1 MiB buffer
	// each would be 400 MiB; a goroutine and a few small records, well
	// under 64 KiB each.
	if grew > n*64<<10 {
		t.Errorf("%d idle connections grew the heap and stacks by %d MiB", n, grew>>20)
	}
	t.Logf("%d idle connections: %d KiB", n, grew>>10)
}

// An endpoint whose sockets' descriptors would not fit one reply (64
// receive contexts on each of 4 queues: 261 descriptors, a message carries
// 253) is refused with EINVAL, saying how many it needs, and the agent
// serves on: the same request with one context succeeds. (The check runs
// before the agent makes any socket; it used to run after it had made all
// 260. This test sees the refusal, not when it came.)
func TestEPOpenTooManyDescriptors(t *testing.T) {
	n := newNodeWith(t, testbed.Options{RxQueues: 4, TxQueues: 4})
	n.startAgent()
	c, err := client.Dial(n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.AVCreate(ctl.AVCreateArgs{Name: "fds"}); err != nil {
		t.Fatal(err)
	}
	args := ctl.EPOpenArgs{Iface: testbed.LinkName, Local: netip.AddrPortFrom(n.bed.A.IPv4, 7000).String(), AV: "fds", Private: true, RxContexts: 64, Queues: 4}
	_, err = c.Call(ctl.OpEPOpen.Name(), args, nil)
	wantErrno(t, "64 contexts on 4 queues", err, fi.EINVAL)
	if err != nil && !strings.Contains(err.Error(), "need 261 descriptors") {
		t.Errorf("refusal %q does not say how many descriptors it needs", err)
	}
	args.RxContexts = 1
	var res ctl.EPOpenResult
	fds, err := c.Call(ctl.OpEPOpen.Name(), args, &res)
	if err != nil {
		t.Fatalf("1 context on 4 queues: %v", err)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	if len(fds) != 1+4+4 {
		t.Errorf("handover carries %d descriptors, want 9", len(fds))
	}
}

// Making an endpoint can wait: here its queue is bound by a socket the
// agent does not know of, and its bind retries for two seconds before it
// fails. Another client's open of another queue meanwhile is answered at
// once, not after it (the agent used to make endpoints under its queue
// lock, which every open and close takes).
func TestSlowOpenHoldsUpNoOther(t *testing.T) {
	n := newNodeWith(t, testbed.Options{RxQueues: 2, TxQueues: 2})
	n.startAgent()
	var squatter *dataplane.Socket
	err := n.bed.A.Do(func() error {
		u, err := dataplane.NewUMEM(dataplane.UMEMConfig{NumFrames: 256})
		if err != nil {
			return err
		}
		t.Cleanup(func() { u.Close() })
		squatter, err = dataplane.Open(n.bed.A.Ifindex, 1, u, dataplane.SocketConfig{RxSize: 64, TxSize: -1, Mode: dataplane.BindCopy})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { squatter.Close() })
	dial := func() *client.Client {
		c, err := client.Dial(n.socket)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c1, c2 := dial(), dial()
	if _, err := c1.AVCreate(ctl.AVCreateArgs{Name: "slow"}); err != nil {
		t.Fatal(err)
	}
	open := func(c *client.Client, port uint16, queue int) error {
		fds, err := c.Call(ctl.OpEPOpen.Name(), ctl.EPOpenArgs{Iface: testbed.LinkName, Local: netip.AddrPortFrom(n.bed.A.IPv4, port).String(),
			AV: "slow", Private: true, FirstQueue: queue, Queues: 1}, nil)
		for _, fd := range fds {
			unix.Close(fd)
		}
		return err
	}
	slow := make(chan error, 1)
	go func() { slow <- open(c1, 7000, 1) }()
	time.Sleep(300 * time.Millisecond) // the first is in its bind's retries
	if err := open(c2, 7001, 0); err != nil {
		t.Fatalf("an open of a free queue: %v", err)
	}
	var slowErr error
	select {
	case slowErr = <-slow:
		t.Errorf("the open of a free queue was answered only after the slow one (%v)", slowErr)
	default:
		slowErr = <-slow
	}
	if err := slowErr; !errors.Is(err, fi.EBUSY) {
		t.Errorf("open of a queue a socket the agent does not know holds: %v, want EBUSY", err)
	}
}

// Frame memory stays charged while the kernel keeps it: a client that
// closes its endpoints (ep.close) but keeps the descriptors it was handed
// keeps their UMEMs registered and pinned, so a fourth endpoint past the
// quota is refused (it used to be charged nothing once closed: close,
// keep, open again, without bound). Once the client lets the descriptors
// go, the charge goes with them (on a kernel with AF_XDP socket
// diagnostics; without, when the owner process exits).
func TestClosedEndpointsFrameMemoryStaysCharged(t *testing.T) {
	const frames, size = 4096, 4096 * 4096 // 16 MiB an endpoint
	_, c, open := keptSocketsBed(t, ctl.EPOpenArgs{Private: true, Frames: frames}, "--umem-per-uid", fmt.Sprint(3*size))
	var kept []int
	defer func() {
		for _, fd := range kept {
			unix.Close(fd)
		}
	}()
	for q := range 3 {
		id, fds, err := open(q)
		if err != nil {
			t.Fatalf("endpoint %d of 3 within the quota: %v", q, err)
		}
		kept = append(kept, fds...)
		if _, err := c.Call(ctl.OpEPClose.Name(), ctl.EPCloseArgs{ID: id}, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, fds, err := open(3)
	for _, fd := range fds {
		unix.Close(fd)
	}
	wantErrno(t, "a fourth endpoint while three closed ones' memory is still pinned", err, fi.EDQUOT)
	for _, fd := range kept {
		unix.Close(fd)
	}
	kept = nil
	if _, err := netlink.SocketDiagXDP(); err != nil {
		// Without AF_XDP socket diagnostics the agent cannot tell: the
		// charge stays until this process (the owner) exits.
		t.Logf("kernel without AF_XDP socket diagnostics (%v): the charge stays until the owner exits", err)
		return
	}
	// The kernel lets a closed socket's memory go from a work queue: give it
	// a moment, then the charge is gone with it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, fds, err := open(3)
		for _, fd := range fds {
			unix.Close(fd)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, fi.EDQUOT) || time.Now().After(deadline) {
			t.Fatalf("once the descriptors are closed: %v", err)
		}
	}
}

// The same for a sharing domain: its last member closes its endpoint but
// keeps the sockets, so the domain's frame memory stays pinned and stays
// charged when the domain closes; a new domain past the quota is refused.
func TestClosedDomainFrameMemoryStaysCharged(t *testing.T) {
	// A domain of (64 + 2 x 16) frames of 4 KiB: 384 KiB; two fit in 1 MiB.
	n, c, open := keptSocketsBed(t, ctl.EPOpenArgs{RingSize: 16}, "--umem-per-uid", fmt.Sprint(1<<20),
		"--domain-endpoints", "2", "--domain-rx-frames", "64", "--domain-tx-frames", "16")
	var kept []int
	defer func() {
		for _, fd := range kept {
			unix.Close(fd)
		}
	}()
	for q := range 2 {
		id, fds, err := open(q)
		if err != nil {
			t.Fatalf("domain %d of 2 within the quota: %v", q, err)
		}
		kept = append(kept, fds...)
		if _, err := c.Call(ctl.OpEPClose.Name(), ctl.EPCloseArgs{ID: id}, nil); err != nil {
			t.Fatal(err)
		}
		n.waitUsers(t, 0)
	}
	_, fds, err := open(2)
	for _, fd := range fds {
		unix.Close(fd)
	}
	wantErrno(t, "a third domain while two closed ones' memory is still pinned", err, fi.EDQUOT)
}

// keptSocketsBed starts an agent on a four-queue interface with agentArgs
// and returns it, a client of uid nobody and an open of an endpoint like base
// on one queue (its own port, the AV "kept"), returning its id and
// descriptors.
func keptSocketsBed(t *testing.T, base ctl.EPOpenArgs, agentArgs ...string) (*node, *client.Client, func(queue int) (uint32, []int, error)) {
	t.Helper()
	n := newNodeWith(t, testbed.Options{RxQueues: 4, TxQueues: 4})
	n.startAgent(append([]string{"--socket-group", "65534"}, agentArgs...)...)
	c := mustDialAs(t, n.socket, nobody, nobody)
	t.Cleanup(func() { c.Close() })
	root, err := client.Dial(n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "kept"}); err != nil {
		t.Fatal(err)
	}
	return n, c, func(queue int) (uint32, []int, error) {
		args := base
		args.Iface, args.AV, args.FirstQueue, args.Queues = testbed.LinkName, "kept", queue, 1
		args.Local = netip.AddrPortFrom(n.bed.A.IPv4, uint16(7000+queue)).String()
		var res ctl.EPOpenResult
		fds, err := c.Call(ctl.OpEPOpen.Name(), args, &res)
		return res.Handover.ID, fds, err
	}
}
