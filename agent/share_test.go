package agent_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
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
	"github.com/xdpfab/xdpfab/internal/testutil/jsonschema"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// shareReport is one phase of a TestShareChild process.
type shareReport struct {
	UID        int
	Rounds     int
	Good       int
	Wrong      []string `json:",omitempty"`
	Err        string   `json:",omitempty"`
	Errno      int      `json:",omitempty"`
	Domain     bool
	FirstQueue int
}

// TestShareChild is an application process of the sharing tests: it opens
// an endpoint through the agent as its environment says, then for each
// "go N" line on stdin plays N ping-pong rounds with its peer (fi_addr
// XDPFAB_PEER of the AV "job") and reports a line of JSON; on "close" or
// end of input it closes. It does nothing unless started by them.
func TestShareChild(t *testing.T) {
	if os.Getenv("XDPFAB_SHARE_CHILD") == "" {
		t.Skip("helper process for the sharing tests")
	}
	out := json.NewEncoder(os.Stdout)
	rep := shareReport{UID: os.Getuid()}
	fail := func(err error) {
		rep.Err = err.Error()
		rep.Errno = int(fi.Code(err))
		out.Encode(rep)
	}
	c, err := client.Dial(os.Getenv("XDPFAB_SOCKET"))
	if err != nil {
		fail(err)
		return
	}
	defer c.Close()
	dp, a, err := c.OpenAV("job")
	if err != nil {
		fail(err)
		return
	}
	defer dp.Close()
	defer a.Close()
	tx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg, Size: 256})
	rx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg, Size: 256})
	local := netip.MustParseAddrPort(os.Getenv("XDPFAB_LOCAL"))
	firstQ, _ := strconv.Atoi(os.Getenv("XDPFAB_FIRSTQ"))
	queues, _ := strconv.Atoi(os.Getenv("XDPFAB_QUEUES"))
	peerIdx, _ := strconv.Atoi(os.Getenv("XDPFAB_PEER"))
	peer := fi.Addr(peerIdx)
	req := ctl.EPOpenArgs{Iface: testbed.LinkName, Local: local.String(), AV: "job", Caps: fi.Msg | fi.Source,
		FirstQueue: firstQ, Queues: queues, RingSize: 64, Private: os.Getenv("XDPFAB_PRIVATE") != ""}
	e, err := c.OpenEndpoint(req, ep.Attr{Local: local, Ifname: testbed.LinkName, AV: a, TxCQ: tx, RxCQ: rx, Caps: fi.Msg | fi.Source})
	if err != nil {
		fail(err)
		return
	}
	out.Encode(rep) // opened
	if os.Getenv("XDPFAB_SCRIBBLE") != "" {
		// A hostile member of the domain: it writes garbage over the whole
		// shared block (locks held by no one, marks, staging records,
		// return rings), then exits without closing anything.
		if err := scribbleShareBlock(); err != nil {
			fail(err)
			return
		}
		out.Encode(rep)
		os.Exit(0)
	}
	if os.Getenv("XDPFAB_LEAK") != "" {
		// A careless application: it progresses but never posts a
		// receive, so every message it gets is parked, for ever.
		go func() {
			for {
				e.Progress()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	buf := make([]byte, 64)
	var ent [1]cq.Entry
	var src [1]fi.Addr
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		n, ok := strings.CutPrefix(in.Text(), "go ")
		if !ok {
			break
		}
		rounds, _ := strconv.Atoi(n)
		rep = shareReport{UID: os.Getuid(), Rounds: rounds, Domain: true, FirstQueue: firstQ}
		for i := range rounds {
			msg := fmt.Sprintf("%v %d", local, i)
			e.Recv(buf, fi.AddrUnspec, nil)
			for deadline := time.Now().Add(5 * time.Second); ; {
				err := e.Inject([]byte(msg), peer)
				if err == nil {
					break
				}
				if !errors.Is(err, fi.EAGAIN) || time.Now().After(deadline) {
					fail(fmt.Errorf("send %d: %w", i, err))
					return
				}
			}
			got := false
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
				if n, _ := rx.ReadFrom(ent[:], src[:]); n == 1 {
					got = true
					if src[0] != peer || string(buf[:ent[0].Len]) != msg {
						rep.Wrong = append(rep.Wrong, fmt.Sprintf("want %q from %v, got %q from %v", msg, peer, buf[:ent[0].Len], src[0]))
					} else {
						rep.Good++
					}
					break
				}
			}
			if !got {
				fail(fmt.Errorf("round %d: no reply", i))
				return
			}
		}
		out.Encode(rep)
	}
	if err := e.Close(); err != nil {
		fail(err)
	}
}

// scribbleShareBlock finds the sharing domain's block among the process's
// descriptors (a memfd named xdpfab-share) and fills it with garbage.
func scribbleShareBlock() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, ent := range ents {
		target, _ := os.Readlink("/proc/self/fd/" + ent.Name())
		if !strings.Contains(target, "xdpfab-share") {
			continue
		}
		fd, _ := strconv.Atoi(ent.Name())
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		for i := 64; i < len(mem); i++ { // past the header: that is checked at attach only
			mem[i] = byte(0xA5 ^ i)
		}
		return nil
	}
	return errors.New("no xdpfab-share memfd among the descriptors")
}

// shareChild is a running TestShareChild process.
type shareChild struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *json.Decoder
	local netip.AddrPort
}

func (n *node) shareChild(t *testing.T, uid uint32, local netip.AddrPort, firstQ, queues, peer int, env ...string) *shareChild {
	t.Helper()
	bin := filepath.Join(filepath.Dir(xdpfabBin), "agent.test")
	if _, err := os.Stat(bin); err != nil {
		copyFile(t, os.Args[0], bin)
	}
	cmd := exec.Command(bin, "-test.run=^TestShareChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "XDPFAB_SHARE_CHILD=1", "XDPFAB_SOCKET="+n.socket, "XDPFAB_LOCAL="+local.String(),
		"XDPFAB_FIRSTQ="+strconv.Itoa(firstQ), "XDPFAB_QUEUES="+strconv.Itoa(queues), "XDPFAB_PEER="+strconv.Itoa(peer))
	cmd.Env = append(cmd.Env, env...)
	// Pdeathsig: gone with the test process, even if it dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if uid != 0 {
		// The socket group's member, as its primary group.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: 65534}
	}
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := n.bed.A.Do(cmd.Start); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		in.Close()
		if cmd.ProcessState == nil {
			syscall.Kill(pid, syscall.SIGKILL) // ours, by pid
			cmd.Wait()
		}
	})
	return &shareChild{cmd: cmd, in: in, out: json.NewDecoder(out), local: local}
}

// report reads the child's next report.
func (c *shareChild) report(t *testing.T) shareReport {
	t.Helper()
	var r shareReport
	if err := c.out.Decode(&r); err != nil {
		t.Fatalf("child %v: report: %v", c.local, err)
	}
	return r
}

// opened waits for the child to open its endpoint.
func (c *shareChild) opened(t *testing.T) {
	t.Helper()
	if r := c.report(t); r.Err != "" {
		t.Fatalf("child %v: open: %s", c.local, r.Err)
	}
}

func (c *shareChild) play(rounds int) { fmt.Fprintf(c.in, "go %d\n", rounds) }

func (c *shareChild) checkPhase(t *testing.T, rounds int) {
	t.Helper()
	r := c.report(t)
	if r.Err != "" || r.Good != rounds || len(r.Wrong) > 0 {
		t.Errorf("child %v: %d of %d rounds good, wrong %v, err %s", c.local, r.Good, rounds, r.Wrong, r.Err)
	}
}

func (c *shareChild) close(t *testing.T) {
	t.Helper()
	fmt.Fprintln(c.in, "close")
	c.in.Close()
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("child %v: %v", c.local, err)
	}
}

// echoAll runs a privileged echo endpoint on host h (a dataplane of its
// own) on queues first..first+queues-1, that answers every message to its
// sender; peers are its AV. A message from a source not in it is an error.
func echoAll(t *testing.T, h *testbed.Host, dp *loader.Objects, local netip.AddrPort, first, queues int, peers []netip.AddrPort) {
	t.Helper()
	a, _ := av.Open(dp, &av.Attr{})
	t.Cleanup(func() { a.Close() })
	a.Insert(peers, make([]fi.Addr, len(peers)), 0, nil)
	tx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg, Size: 1024})
	rx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg, Size: 1024})
	t.Cleanup(func() { tx.Close(); rx.Close() })
	var e *ep.Endpoint
	err := h.Do(func() (err error) {
		e, err = ep.Open(dp, ep.Attr{Ifname: testbed.LinkName, Local: local, AV: a, TxCQ: tx, RxCQ: rx, Caps: fi.Msg | fi.Source,
			BindMode: dataplane.BindCopy, FirstQueue: first, Queues: queues, RingSize: 512})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait(); e.Close() })
	wg.Go(func() {
		bufs := make([][]byte, 64)
		for i := range bufs {
			bufs[i] = make([]byte, 64)
			e.Recv(bufs[i], fi.AddrUnspec, i)
		}
		var ent [16]cq.Entry
		var src [16]fi.Addr
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, _ := rx.ReadFrom(ent[:], src[:])
			for i := range n {
				b := bufs[ent[i].OpContext.(int)]
				if src[i] == fi.AddrNotAvail {
					t.Errorf("echo %v: message %q from an unknown source", local, b[:ent[i].Len])
				}
				for e.Inject(b[:ent[i].Len], src[i]) != nil {
					e.Progress()
				}
				e.Recv(b, fi.AddrUnspec, ent[i].OpContext)
			}
			if n == 0 {
				e.Progress()
			}
		}
	})
}

// peerDataplane loads a dataplane of its own for host h and attaches it.
func peerDataplane(t *testing.T, h *testbed.Host) *loader.Objects {
	t.Helper()
	dp, err := loader.Load(loader.Config{AVEntries: 1024, MaxAVs: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	err = h.Do(func() error {
		att, err := dp.Attach(testbed.LinkName, loader.Native)
		if err == nil {
			t.Cleanup(func() { att.Close() })
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return dp
}

func (n *node) status(t *testing.T) ctl.Status {
	t.Helper()
	c, err := client.Dial(n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Status()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// waitUsers waits until the sharing domain has users endpoints (0: gone).
func (n *node) waitUsers(t *testing.T, users int) ctl.Status {
	t.Helper()
	var s ctl.Status
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s = n.status(t)
		got := 0
		for _, q := range s.Queues {
			got += q.Users
		}
		if got == users && (users > 0 || len(s.Queues) == 0) {
			return s
		}
	}
	t.Fatalf("waiting for %d sharing domain users: %+v", users, s.Queues)
	return s
}

// Several application processes of one uid share one veth queue (the
// interface's only one) through the agent: each exchanges messages with
// its peer with the right fi_addr on both sides; a process of another uid
// is refused with EBUSY naming the holder; one killed with SIGKILL leaves
// the others running, and its slot and frames come back (a new process
// takes its place); when all are gone, so is the domain.
func TestManyAppsOneQueue(t *testing.T) {
	n := newNode(t)
	n.startAgent("--socket-group", "65534", "--domain-endpoints", "8", "--domain-rx-frames", "2048")
	peer := netip.AddrPortFrom(n.bed.B.IPv4, 7000)
	n.cli("av", "create", "--name", "job")
	if out, code := n.cli("av", "insert", "--name", "job", peer.String()); code != 0 {
		t.Fatalf("insert: %s", out)
	}
	const apps = 4
	var addrs []netip.AddrPort
	for i := range apps {
		addrs = append(addrs, netip.AddrPortFrom(n.bed.A.IPv4, uint16(7100+i)))
	}
	echoAll(t, n.bed.B, peerDataplane(t, n.bed.B), peer, 0, 0, addrs)
	var kids []*shareChild
	for _, a := range addrs {
		c := n.shareChild(t, 65534, a, 0, 0, 0)
		c.opened(t)
		kids = append(kids, c)
	}
	s := n.waitUsers(t, apps)
	if len(s.Queues) != 1 || s.Queues[0].Name != "uid:65534" || s.Queues[0].Queues != 1 {
		t.Fatalf("queue holds %+v, want one sharing domain uid:65534 on one queue", s.Queues)
	}
	// xdpfab status shows the hold, as its JSON schema says.
	schema, err := jsonschema.Load("../docs/cli-json.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, code := n.run("status", "-o", "json")
	if err := schema.Validate([]byte(out)); code != 0 || err != nil || !strings.Contains(out, `"domain": "uid:65534"`) {
		t.Errorf("status -o json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if out, _, _ := n.run("status"); !strings.Contains(out, "sharing domain uid:65534") || !strings.Contains(out, "4 of 8") {
		t.Errorf("status:\n%s", out)
	}
	// And the metrics, by Prometheus' conventions.
	if m := n.scrape(); m[`xdpfab_queue_hold_endpoints{domain="uid:65534",iface="veth0",queues="0-0"}`] != 4 ||
		m[`xdpfab_queue_hold_endpoints_max{domain="uid:65534",iface="veth0",queues="0-0"}`] != 8 {
		t.Errorf("queue hold metrics: %v", grepLines(n.scrapeText(), "queue_hold"))
	}
	lintMetrics(t, n.scrapeText())
	phase := func(kids []*shareChild, rounds int) {
		for _, c := range kids {
			c.play(rounds)
		}
		for _, c := range kids {
			c.checkPhase(t, rounds)
		}
	}
	phase(kids, 300)

	// A careless process that never receives is flooded: it keeps at most
	// its share of the pool (ring and parked frames; the pool has 2048
	// frames, the flood is twice that), and the others go on meanwhile.
	leaky := n.shareChild(t, 65534, netip.AddrPortFrom(n.bed.A.IPv4, 7110), 0, 0, 0, "XDPFAB_LEAK=1")
	leaky.opened(t)
	flood := make(chan error, 1)
	go func() {
		c, err := n.bed.B.Dial("udp", leaky.local.String())
		if err != nil {
			flood <- err
			return
		}
		defer c.Close()
		for i := range 4096 {
			if i == 2048 {
				time.Sleep(100 * time.Millisecond) // it parks the first burst's
			}
			if _, err := c.Write(xdpfabDatagram(uint32(i))); err != nil {
				flood <- err
				return
			}
		}
		flood <- nil
	}()
	phase(kids, 300)
	if err := <-flood; err != nil {
		t.Fatal(err)
	}
	phase(kids, 300)
	leaky.cmd.Process.Kill()
	leaky.cmd.Wait()
	n.waitUsers(t, apps)
	// Its share: a 64-entry ring and as many parked frames, all given
	// back. It progresses, so its ring is empty by now, and it keeps its
	// last 64 messages parked (the older ones were dropped to make room):
	// 64 frames, and never more than its share.
	var l string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if l = grepLines(n.logs.String(), "reclaimed"); strings.Contains(l, leaky.local.String()) {
			break
		}
	}
	if !strings.Contains(l, "local="+leaky.local.String()+" frames=64 ") {
		t.Errorf("the flooded process's reclaim: %s, want its 64 parked frames back", l)
	}

	// Another uid's process is another sharing domain: refused, clearly.
	root := n.shareChild(t, 0, netip.AddrPortFrom(n.bed.A.IPv4, 7200), 0, 0, 0)
	if r := root.report(t); fi.Errno(r.Errno) != fi.EBUSY || !strings.Contains(r.Err, "sharing domain uid:65534") || !strings.Contains(r.Err, "no free queue") {
		t.Errorf("another uid's process: %q (%v), want EBUSY naming the holder", r.Err, fi.Errno(r.Errno))
	}

	// SIGKILL one in the middle of traffic: the others go on, its slot
	// and frames come back.
	victim := kids[rand.IntN(apps)]
	victim.play(100000)
	time.Sleep(50 * time.Millisecond)
	victim.cmd.Process.Kill()
	victim.cmd.Wait()
	n.waitUsers(t, apps-1)
	var left []*shareChild
	for _, c := range kids {
		if c != victim {
			left = append(left, c)
		}
	}
	phase(left, 300)
	if !strings.Contains(n.logs.String(), "owner process gone") {
		t.Errorf("no reclaim logged:\n%s", n.logs.String())
	}
	// A new process takes the dead one's place (address, slot).
	again := n.shareChild(t, 65534, victim.local, 0, 0, 0)
	again.opened(t)
	left = append(left, again)
	n.waitUsers(t, apps)
	phase(left, 300)
	for _, c := range left {
		c.close(t)
	}
	n.waitUsers(t, 0)
	if eps := n.endpoints(); eps != 0 {
		t.Errorf("%d endpoints left", eps)
	}
}

// On a two-queue interface, a process of another uid gets a queue of its
// own (its own sharing domain, its own frame memory) beside the first
// domain's: both exchange messages at once, each sees only its own, and
// nothing lands on a queue no one listens on. A third asking for every
// queue is refused.
func TestAppsOwnQueues(t *testing.T) {
	n := newNodeWith(t, testbed.Options{RxQueues: 2, TxQueues: 2})
	n.startAgent("--socket-group", "65534", "--domain-endpoints", "4", "--domain-rx-frames", "1024")
	p0, p1 := netip.AddrPortFrom(n.bed.B.IPv4, 7000), netip.AddrPortFrom(n.bed.B.IPv4, 7001)
	n.cli("av", "create", "--name", "job")
	if out, code := n.cli("av", "insert", "--name", "job", p0.String(), p1.String()); code != 0 {
		t.Fatalf("insert: %s", out)
	}
	app, rootApp := netip.AddrPortFrom(n.bed.A.IPv4, 7100), netip.AddrPortFrom(n.bed.A.IPv4, 7200)
	// Host B answers on the queue each application listens on: AF_XDP
	// sends on a veth arrive on the peer's queue of the same number.
	bdp := peerDataplane(t, n.bed.B)
	echoAll(t, n.bed.B, bdp, p0, 0, 1, []netip.AddrPort{app})
	echoAll(t, n.bed.B, bdp, p1, 1, 1, []netip.AddrPort{rootApp})
	a := n.shareChild(t, 65534, app, 0, 1, 0)
	a.opened(t)
	b := n.shareChild(t, 0, rootApp, 1, 1, 1)
	b.opened(t)
	s := n.waitUsers(t, 2)
	if len(s.Queues) != 2 {
		t.Fatalf("queue holds %+v, want two sharing domains", s.Queues)
	}
	for _, q := range s.Queues {
		want := map[string]int{"uid:65534": 0, "uid:0": 1}
		if f, ok := want[q.Name]; !ok || q.FirstQueue != f || q.Queues != 1 {
			t.Errorf("hold %+v", q)
		}
	}
	a.play(500)
	b.play(500)
	a.checkPhase(t, 500)
	b.checkPhase(t, 500)

	// A hostile member of uid 65534's domain writes garbage over its
	// shared block and exits: the agent takes its endpoint back without
	// hanging or crashing, and the other domain (its own memory) carries
	// on untouched.
	evil := n.shareChild(t, 65534, netip.AddrPortFrom(n.bed.A.IPv4, 7150), 0, 1, 0, "XDPFAB_SCRIBBLE=1")
	evil.opened(t)
	if r := evil.report(t); r.Err != "" {
		t.Fatalf("scribbler: %s", r.Err)
	}
	evil.cmd.Wait()
	b.play(500)
	b.checkPhase(t, 500)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(n.logs.String(), "local="+evil.local.String()+" frames="); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the scribbler's endpoint was not taken back:\n%s", grepLines(n.logs.String(), "reclaim"))
		}
	}
	n.status(t) // the agent still answers
	third := n.shareChild(t, 1000, netip.AddrPortFrom(n.bed.A.IPv4, 7300), 0, 0, 0)
	if r := third.report(t); fi.Errno(r.Errno) != fi.EBUSY || !strings.Contains(r.Err, "free queues: none") {
		t.Errorf("a third domain asking for every queue: %q", r.Err)
	}
	private := n.shareChild(t, 1000, netip.AddrPortFrom(n.bed.A.IPv4, 7300), 1, 1, 1, "XDPFAB_PRIVATE=1")
	if r := private.report(t); fi.Errno(r.Errno) != fi.EBUSY || !strings.Contains(r.Err, "sharing domain uid:0") {
		t.Errorf("a private endpoint on a domain's queue: %q", r.Err)
	}
	a.close(t)
	b.close(t)
	n.waitUsers(t, 0)
	// Queue 1 free again: a private endpoint (frame memory of its own)
	// takes it and talks to its peer there.
	private = n.shareChild(t, 1000, rootApp, 1, 1, 1, "XDPFAB_PRIVATE=1")
	private.opened(t)
	if s := n.status(t); len(s.Queues) != 1 || s.Queues[0].Name != "" || s.Queues[0].FirstQueue != 1 {
		t.Errorf("queue holds with a private endpoint: %+v", s.Queues)
	}
	private.play(200)
	private.checkPhase(t, 200)
	private.close(t)
	if c := n.status(t).Counters; c != nil && c["wrong_queue"] != 0 {
		t.Errorf("%d frames on a queue no endpoint listens on", c["wrong_queue"])
	}
}
