package agent_test

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"golang.org/x/sys/unix"
)

// localReport is one line a TestLocalChild process prints.
type localReport struct {
	Phase      string
	Sent, Got  int
	Wrong      int
	In         int
	Bad        uint64
	SendErrno  int
	Err        string
	LastSource fi.Addr
}

// TestLocalChild is a process of TestLocalPeers: an application that opens
// an endpoint through the agent and plays XDPFAB_ROLE.
func TestLocalChild(t *testing.T) {
	role := os.Getenv("XDPFAB_ROLE")
	if role == "" {
		t.Skip("helper process for TestLocalPeers")
	}
	out := json.NewEncoder(os.Stdout)
	say := func(r localReport) { out.Encode(r); os.Stdout.Sync() }
	fail := func(err error) { say(localReport{Phase: "error", Err: err.Error()}); os.Exit(1) }
	c, err := client.Dial(os.Getenv("XDPFAB_SOCKET"))
	if err != nil {
		fail(err)
	}
	local := netip.MustParseAddrPort(os.Getenv("XDPFAB_LOCAL"))
	peer, _ := strconv.Atoi(os.Getenv("XDPFAB_PEER_FIADDR"))
	if role == "attacker" {
		attack(c, local, netip.MustParseAddrPort(os.Getenv("XDPFAB_DEST")), say, fail)
		return
	}
	dp, a, err := c.OpenAV("job")
	if err != nil {
		fail(err)
	}
	defer dp.Close()
	tx, _ := cq.Open(cq.Attr{Format: cq.FormatTagged})
	rx, _ := cq.Open(cq.Attr{Format: cq.FormatTagged})
	iface := os.Getenv("XDPFAB_IFACE")
	e, err := c.OpenEndpoint(ctl.EPOpenArgs{Iface: iface, Local: local.String(), AV: "job", Caps: fi.Msg | fi.Tagged | fi.Source},
		ep.Attr{Local: local, Ifname: iface, AV: a, TxCQ: tx, RxCQ: rx, Caps: fi.Msg | fi.Tagged | fi.Source})
	if err != nil {
		fail(err)
	}
	say(localReport{Phase: "ready"})
	buf := make([]byte, 256)
	var ent [1]cq.Entry
	var src [1]fi.Addr
	recv := func(d time.Duration) (int, fi.Addr, bool) {
		for deadline := time.Now().Add(d); time.Now().Before(deadline); {
			if n, _ := rx.ReadFrom(ent[:], src[:]); n == 1 {
				return ent[0].Len, src[0], true
			}
		}
		return 0, 0, false
	}
	send := func(msg []byte, to fi.Addr) error {
		for deadline := time.Now().Add(5 * time.Second); ; {
			err := e.TInject(msg, to, 7)
			if err == nil || !errors.Is(err, fi.EAGAIN) || time.Now().After(deadline) {
				return err
			}
			e.Progress()
		}
	}
	const n = 200
	switch role {
	case "server":
		// Echo 2n messages to their sources (fi_addr 1 and 2), report,
		// then report again once the senders' channels are gone, then
		// wait to be killed.
		r := localReport{Phase: "echoed"}
		for r.Got < 2*n {
			e.TRecv(buf, fi.AddrUnspec, 7, 0, nil)
			l, s, ok := recv(20 * time.Second)
			if !ok {
				fail(fmt.Errorf("echo: nothing after %d", r.Got))
			}
			r.Got++
			r.LastSource = s
			if s != 1 && s != 2 {
				r.Wrong++
				continue
			}
			if err := send(buf[:l], s); err != nil {
				fail(err)
			}
		}
		st := e.LocalStats()
		r.In, r.Bad = st.In, st.BadChannels
		say(r)
		for deadline := time.Now().Add(10 * time.Second); e.LocalStats().In != 0 && time.Now().Before(deadline); {
			e.Progress()
		}
		say(localReport{Phase: "sender gone", In: e.LocalStats().In})
		time.Sleep(time.Hour)
	case "client":
		r := localReport{Phase: "pinged"}
		for i := range n {
			e.TRecv(buf, fi.AddrUnspec, 7, 0, nil)
			msg := fmt.Appendf(nil, "ping %d", i)
			if err := send(msg, fi.Addr(peer)); err != nil {
				fail(err)
			}
			r.Sent++
			l, s, ok := recv(5 * time.Second)
			if !ok {
				break
			}
			r.Got++
			if s != fi.Addr(peer) || string(buf[:l]) != string(msg) {
				r.Wrong++
			}
		}
		say(r)
		if os.Getenv("XDPFAB_THEN") == "hang" {
			time.Sleep(time.Hour)
		}
	case "late":
		// Sends to an address whose endpoint was killed.
		err := send([]byte("anyone?"), fi.Addr(peer))
		say(localReport{Phase: "late", SendErrno: int(fi.Code(err))})
	}
	e.Close()
	c.Close()
}

// attack plays a hostile sender: it opens an endpoint, asks the agent for
// a channel to dest with the raw protocol, maps it and writes garbage:
// lengths beyond the slot, then a tail far ahead of the head. Then it goes
// for the wake-up descriptors, as a sender and as a receiver.
func attack(c *client.Client, local, dest netip.AddrPort, say func(localReport), fail func(error)) {
	var res ctl.EPOpenResult
	fds, err := c.Call(ctl.OpEPOpen.Name(), ctl.EPOpenArgs{Iface: os.Getenv("XDPFAB_IFACE"), Local: local.String(), AV: "job"}, &res)
	if err != nil {
		fail(err)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	var info ep.LocalChannelInfo
	fds, err = c.Call(ctl.OpLocalConnect.Name(), ctl.LocalConnectArgs{ID: res.Handover.ID, Dest: dest.String()}, &info)
	if err != nil {
		fail(err)
	}
	mem, err := unix.Mmap(fds[0], 0, 4096+info.Slots*info.SlotSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		fail(err)
	}
	// Seals hold: the channel cannot shrink under the receiver.
	if err := unix.Ftruncate(fds[0], 4096); err == nil {
		fail(errors.New("a sender could shrink its channel"))
	}
	for i := range 4 {
		s := mem[4096+i*info.SlotSize:]
		binary.NativeEndian.PutUint32(s, 0xffffffff) // a length far beyond the slot
		for j := 4; j < 64; j++ {
			s[j] = 0xa5
		}
	}
	binary.NativeEndian.PutUint64(mem[0:], 4) // publish the garbage
	unix.Syscall(unix.SYS_WRITE, uintptr(fds[1]), uintptr(0), 0)
	time.Sleep(200 * time.Millisecond)
	binary.NativeEndian.PutUint64(mem[0:], 1<<40) // then an absurd tail

	// Then at the wake-up descriptors. As a sender: fill the one it was
	// given to wake dest and make it blocking. As a receiver: make the one
	// of its own endpoint blocking, fill it through a sender's descriptor
	// of its own, and have two more endpoints connect to the first, so
	// that the agent wakes it. With one open file shared by the receiver, the
	// agent and every sender (an eventfd, as it was), the agent then hung
	// in that wake-up, holding its same-host lock for ever: every client's
	// same-host request and every endpoint's close after it hung too.
	fillBlocking(fds[1])
	open := func(port uint16) uint32 {
		var r ctl.EPOpenResult
		fds, err := c.Call(ctl.OpEPOpen.Name(), ctl.EPOpenArgs{Iface: os.Getenv("XDPFAB_IFACE"), Local: netip.AddrPortFrom(local.Addr(), port).String(), AV: "job"}, &r)
		if err != nil {
			fail(err)
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		return r.Handover.ID
	}
	bell, err := c.Call(ctl.OpLocalAttach.Name(), ctl.LocalEPArgs{ID: res.Handover.ID}, nil)
	if err != nil {
		fail(err)
	}
	fillBlocking(bell[1])
	// A channel from the endpoint to itself first (its wake-up filled
	// through it), then two more towards it, each waking it.
	self, err := c.Call(ctl.OpLocalConnect.Name(), ctl.LocalConnectArgs{ID: res.Handover.ID, Dest: local.String()}, &info)
	if err != nil {
		fail(err)
	}
	fillBlocking(self[1])
	for _, from := range []uint32{open(local.Port() + 1), open(local.Port() + 2)} {
		if _, err := c.Call(ctl.OpLocalConnect.Name(), ctl.LocalConnectArgs{ID: from, Dest: local.String()}, &info); err != nil {
			fail(err)
		}
	}
	// Closing it drops its channels, the one to itself among them (in both
	// of its lists: TestLocalDropSelfChannel has the drop alone).
	if _, err := c.Call(ctl.OpEPClose.Name(), ctl.EPCloseArgs{ID: res.Handover.ID}, nil); err != nil {
		fail(err)
	}
	say(localReport{Phase: "attacked"})
}

// fillBlocking fills a wake-up descriptor (an eventfd's counter, or a
// pipe, as far as fd lets it) and clears its O_NONBLOCK.
func fillBlocking(fd int) {
	var max [8]byte
	binary.NativeEndian.PutUint64(max[:], 1<<64-2)
	unix.Write(fd, max[:])
	for range 1 << 16 {
		if _, err := unix.Write(fd, max[:1]); err != nil {
			break
		}
	}
	unix.SetNonblock(fd, false)
}

// localIfaces adds interfaces to host A for TestLocalPeers: a device queue
// belongs to one process here (sharing one is the rest of issue 12), so
// each process's endpoint gets an interface of its own: veth pairs with
// both ends in A, the first end addressed, and returns those addresses
// (the host's own, as every address of the namespace).
func localIfaces(t *testing.T, n *node, names ...string) []netip.Addr {
	t.Helper()
	var addrs []netip.Addr
	ip := n.bed.Net4.Addr()
	for range 200 {
		ip = ip.Next()
	}
	err := n.bed.A.Do(func() error {
		for _, name := range names {
			la := netlink.NewLinkAttrs()
			la.Name = name
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: name + "p"}); err != nil {
				return err
			}
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			p, err := netlink.LinkByName(name + "p")
			if err != nil {
				return err
			}
			ip = ip.Next()
			if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
				return err
			}
			if err := netlink.LinkSetUp(p); err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
			addrs = append(addrs, ip)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// TestLocalPeers: processes that opened endpoints through the agent on one
// node exchange messages through same-host channels with correct
// attribution; a hostile sender's garbage closes only its own channel, and
// what it does to its wake-up descriptors blocks no one (the agent serves
// the others' same-host requests after it);
// SIGKILL of a sender or a receiver has its channels reclaimed.
func TestLocalPeers(t *testing.T) {
	n := newNode(t)
	alt := localIfaces(t, n, "lx0", "lx1", "lx2")
	n.startAgent("--socket-group", "65534", "--iface", "lx0", "--iface", "lx1", "--iface", "lx2")
	// The first client shares the server's address (its endpoint is on
	// another interface, its address is the host's all the same); the
	// second client, the attacker and the late sender have addresses of
	// their own.
	srvAddr, cliAddr, attAddr := netip.AddrPortFrom(n.bed.A.IPv4, 7300), netip.AddrPortFrom(n.bed.A.IPv4, 7301), netip.AddrPortFrom(alt[1], 7302)
	cli2Addr := netip.AddrPortFrom(alt[0], 7303)
	lateAddr := netip.AddrPortFrom(alt[2], 7301)
	n.cli("av", "create", "--name", "job")
	if out, code := n.cli("av", "insert", "--name", "job", srvAddr.String(), cliAddr.String(), cli2Addr.String()); code != 0 {
		t.Fatalf("insert: %s", out)
	}
	bin := filepath.Join(filepath.Dir(xdpfabBin), "agent.test")
	copyFile(t, os.Args[0], bin)
	type child struct {
		cmd *exec.Cmd
		out *json.Decoder
	}
	run := func(role string, local netip.AddrPort, env ...string) *child {
		cmd := exec.Command(bin, "-test.run=^TestLocalChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), append(env, "XDPFAB_ROLE="+role, "XDPFAB_SOCKET="+n.socket, "XDPFAB_LOCAL="+local.String())...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := n.bed.A.Do(cmd.Start); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return &child{cmd, json.NewDecoder(bufio.NewReader(out))}
	}
	next := func(c *child) localReport {
		t.Helper()
		var r localReport
		if err := c.out.Decode(&r); err != nil && !errors.Is(err, io.EOF) {
			t.Fatalf("child report: %v", err)
		}
		if r.Err != "" {
			t.Fatalf("child: %s", r.Err)
		}
		return r
	}
	ready := func(c *child) *child {
		t.Helper()
		if r := next(c); r.Phase != "ready" {
			t.Fatalf("child: %+v", r)
		}
		return c
	}
	srv := ready(run("server", srvAddr, "XDPFAB_PEER_FIADDR=1", "XDPFAB_IFACE="+testbed.LinkName))
	// The attacker is unknown to the AV; its garbage must not hurt.
	att := run("attacker", attAddr, "XDPFAB_DEST="+srvAddr.String(), "XDPFAB_IFACE=lx1")
	if r := next(att); r.Phase != "attacked" {
		t.Fatalf("attacker: %+v", r)
	}
	cli := ready(run("client", cliAddr, "XDPFAB_PEER_FIADDR=0", "XDPFAB_THEN=hang", "XDPFAB_IFACE=lx0"))
	r := next(cli)
	if r.Sent != 200 || r.Got != 200 || r.Wrong != 0 {
		t.Fatalf("client: %+v", r)
	}
	cli2 := ready(run("client", cli2Addr, "XDPFAB_PEER_FIADDR=0", "XDPFAB_IFACE=lx2"))
	if r := next(cli2); r.Sent != 200 || r.Got != 200 || r.Wrong != 0 {
		t.Fatalf("second client: %+v", r)
	}
	cli2.cmd.Wait()
	s := next(srv)
	if s.Got != 400 || s.Wrong != 0 || s.Bad < 1 || s.In < 1 {
		t.Fatalf("server: %+v (want 400 echoed from fi_addr 1 and 2, the attacker's channel closed as bad, the first client's open)", s)
	}
	// SIGKILL the sender: its channel goes from the receiver.
	cli.cmd.Process.Kill()
	cli.cmd.Wait()
	if s := next(srv); s.Phase != "sender gone" || s.In != 0 {
		t.Fatalf("after the client was killed: %+v", s)
	}
	// SIGKILL the receiver: a new sender to its address is refused.
	srv.cmd.Process.Kill()
	srv.cmd.Wait()
	late := ready(run("late", lateAddr, "XDPFAB_PEER_FIADDR=0", "XDPFAB_IFACE=lx2"))
	// (Its address is on another interface than the late sender's: the
	// error is neigh's, no route through that interface.)
	if r := next(late); fi.Errno(r.SendErrno) != fi.ENETUNREACH {
		t.Fatalf("send to a killed receiver's address: errno %v", fi.Errno(r.SendErrno))
	}
	late.cmd.Wait()
	if eps := n.endpoints(); eps != 0 {
		t.Errorf("%d endpoints left", eps)
	}
}

// Another uid cannot fill an endpoint's incoming same-host channels: a
// quarter of its quota per other uid (channels live until an end closes,
// and the receiver's peers would be refused for as long). The receiver's
// own uid is not held to it.
func TestLocalForeignChannelShare(t *testing.T) {
	n := newNodeWith(t, testbed.Options{RxQueues: 4, TxQueues: 4})
	n.startAgent("--socket-group", "65534")
	root, err := client.Dial(n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "share"}); err != nil {
		t.Fatal(err)
	}
	const owner, stranger = 4101, 4102
	rc, sc := mustDialAs(t, n.socket, owner, nobody), mustDialAs(t, n.socket, stranger, nobody)
	defer rc.Close()
	defer sc.Close()
	open := func(c *client.Client, port uint16, queue int) uint32 {
		t.Helper()
		id, err := n.openEP(c, port, ctl.EPOpenArgs{AV: "share", FirstQueue: queue, Queues: 1, RingSize: 16})
		if err != nil {
			t.Fatalf("open %d: %v", port, err)
		}
		return id
	}
	recv := netip.AddrPortFrom(n.bed.A.IPv4, 7000)
	localAttach(t, rc, open(rc, recv.Port(), 0))
	connect := func(c *client.Client, from uint32) error { return localConnect(c, from, recv) }
	const share = ep.MaxShmChannels / 4
	for i := range share {
		if err := connect(sc, open(sc, uint16(7200+i), 1)); err != nil {
			t.Fatalf("channel %d of the stranger's %d: %v", i+1, share, err)
		}
	}
	wantErrno(t, "one channel more from the stranger", connect(sc, open(sc, 7200+share, 1)), fi.EDQUOT)
	if err := connect(rc, open(rc, 7001, 0)); err != nil {
		t.Errorf("a channel from the receiver's own uid: %v", err)
	}
}
