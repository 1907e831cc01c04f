package agent_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/wire"
)

var xdpfabBin string

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		dir, err := os.MkdirTemp("", "xdpfab-bin")
		if err != nil {
			panic(err)
		}
		os.Chmod(dir, 0o755)
		xdpfabBin = filepath.Join(dir, "xdpfab")
		out, err := exec.Command("go", "build", "-o", xdpfabBin, "github.com/xdpfab/xdpfab/cmd/xdpfab").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build xdpfab: %v\n%s", err, out)
			os.Exit(1)
		}
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// node is a namespace running the agent as its own process.
type node struct {
	t       *testing.T
	bed     *testbed.Bed
	dir     string
	pinRoot string
	socket  string
	metrics string
	agent   *exec.Cmd
	logs    *syncBuffer
	env     []string // added to the agent's environment
}

func newNode(t *testing.T) *node {
	t.Helper()
	return newNodeWith(t, testbed.Options{})
}

// newNodeWith is newNode with a test bed made with opts.
func newNodeWith(t *testing.T, opts testbed.Options) *node {
	t.Helper()
	testutil.RequirePrivileged(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755) // the test's own 0700 directory
	n := &node{t: t, bed: testbed.New(t, opts), dir: dir,
		pinRoot: filepath.Join(dir, "bpffs"), socket: filepath.Join(dir, "agent.sock"),
		metrics: fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(20000))}
	t.Cleanup(func() {
		n.stopAgent(syscall.SIGTERM)
		loader.UnmountBPFFS(n.pinRoot)
	})
	return n
}

// startAgent starts `xdpfab agent` inside host A's namespace: a process
// forked from a thread in the namespace is born in it.
func (n *node) startAgent(extra ...string) {
	n.t.Helper()
	args := append([]string{"agent", "--iface", testbed.LinkName, "--pin-root", n.pinRoot, "--socket", n.socket,
		"--metrics", n.metrics, "--log-level", "debug"}, extra...)
	cmd := exec.Command(xdpfabBin, args...)
	cmd.Env = append(os.Environ(), n.env...)
	n.logs = &syncBuffer{}
	cmd.Stderr, cmd.Stdout = n.logs, n.logs
	if err := n.bed.A.Do(cmd.Start); err != nil {
		n.t.Fatal(err)
	}
	n.agent = cmd
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := client.Dial(n.socket); err == nil {
			c.Close()
			return
		}
		if cmd.ProcessState != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.t.Fatalf("agent did not come up:\n%s", n.logs.String())
}

func (n *node) stopAgent(sig syscall.Signal) {
	if n.agent == nil {
		return
	}
	n.agent.Process.Signal(sig)
	n.agent.Wait()
	n.agent = nil
}

// cli runs the xdpfab command (in the root namespace: the control socket
// is a file) and returns its output and exit status.
func (n *node) cli(args ...string) (string, int) {
	n.t.Helper()
	cmd := exec.Command(xdpfabBin, append(args[:1:1], append([]string{"--socket", n.socket}, args[1:]...)...)...)
	if args[0] == "av" {
		cmd = exec.Command(xdpfabBin, append([]string{"av", args[1], "--socket", n.socket}, args[2:]...)...)
	}
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatal(err)
	}
	return string(out), code
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// receiver is an endpoint in host A's namespace on the agent's pinned
// dataplane (a privileged application sharing the agent's maps).
type receiver struct {
	dp     *loader.Objects
	av     *av.AV
	rx, tx *cq.CQ
	ep     *ep.Endpoint
	local  netip.AddrPort
}

func (n *node) receiver(avName string) *receiver {
	n.t.Helper()
	r := &receiver{local: netip.AddrPortFrom(n.bed.A.IPv4, 7000)}
	var err error
	if r.dp, err = loader.Load(loader.Config{PinRoot: n.pinRoot}); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { r.dp.Close() })
	if r.av, err = av.Open(r.dp, &av.Attr{Name: avName, Flags: fi.Read}); err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { r.av.Close() })
	r.rx, _ = cq.Open(cq.Attr{Size: 4096, Format: cq.FormatMsg})
	r.tx, _ = cq.Open(cq.Attr{Size: 64, Format: cq.FormatMsg})
	n.t.Cleanup(func() { r.rx.Close(); r.tx.Close() })
	err = n.bed.A.Do(func() (err error) {
		r.ep, err = ep.Open(r.dp, ep.Attr{Ifname: testbed.LinkName, Local: r.local, AV: r.av, TxCQ: r.tx, RxCQ: r.rx,
			Caps: fi.Msg | fi.Source, BindMode: dataplane.BindCopy, Frames: 8192, RingSize: 2048, MaxPosted: 4096})
		return err
	})
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { r.ep.Close() })
	return r
}

// xdpfabDatagram is an xdpfab message as a plain UDP payload.
func xdpfabDatagram(seq uint32) []byte {
	b := make([]byte, wire.HdrLen+4)
	wire.PutHdr(b, wire.Hdr{Op: wire.OpMsg})
	b[wire.HdrLen], b[wire.HdrLen+1], b[wire.HdrLen+2], b[wire.HdrLen+3] = byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq)
	return b
}

// The agent's whole life: start, insert through the CLI, traffic
// translated, SIGKILL during traffic, restart with nothing lost, SIGTERM
// leaving the program attached.
func TestAgentLifecycle(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	if out, code := n.cli("av", "create", "--name", "job"); code != 0 {
		t.Fatalf("av create: %d %s", code, out)
	}
	peer := netip.AddrPortFrom(n.bed.B.IPv4, 5000)
	out, code := n.cli("av", "insert", "--name", "job", "198.18.200.1:1", peer.String(), "-o", "json")
	if code != 0 {
		t.Fatalf("av insert: %d %s", code, out)
	}
	var ins struct {
		Results []struct {
			FiAddr *string `json:"fi_addr"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &ins); err != nil || len(ins.Results) != 2 || ins.Results[1].FiAddr == nil || *ins.Results[1].FiAddr != "1" {
		t.Fatalf("av insert output %q: %v", out, err)
	}

	r := n.receiver("job")
	// B sends a datagram every 200 us from port 5000; A counts what arrives
	// and from whom.
	var laddr = &net.UDPAddr{IP: peer.Addr().AsSlice(), Port: 5000}
	var uc *net.UDPConn
	if err := n.bed.B.Do(func() (err error) {
		uc, err = net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(r.local))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	var sent atomic.Uint32
	stop := make(chan struct{})
	var senders sync.WaitGroup
	senders.Go(func() {
		for seq := uint32(0); ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := uc.Write(xdpfabDatagram(seq)); err == nil {
				sent.Add(1)
			}
			time.Sleep(200 * time.Microsecond)
		}
	})
	got, wrong := 0, 0
	buf := make([]byte, 64)
	recvUntil := func(d time.Duration) {
		end := time.Now().Add(d)
		var e [16]cq.Entry
		var src [16]fi.Addr
		for time.Now().Before(end) {
			for range 64 {
				if err := r.ep.Recv(buf, fi.AddrUnspec, nil); err != nil {
					break
				}
			}
			k, _ := r.rx.ReadFrom(e[:], src[:])
			for i := range k {
				got++
				if src[i] != 1 {
					wrong++
				}
			}
		}
	}
	recvUntil(300 * time.Millisecond)
	before := got
	n.stopAgent(syscall.SIGKILL) // during traffic
	recvUntil(300 * time.Millisecond)
	if got-before < 100 {
		t.Errorf("only %d messages while no agent ran: the pinned link should keep traffic flowing", got-before)
	}
	n.startAgent()
	out, code = n.cli("av", "list", "--name", "job", "-o", "json")
	var list struct {
		Entries   int `json:"entries"`
		Addresses []struct {
			Addr netip.AddrPort `json:"addr"`
		} `json:"addresses"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || list.Entries != 2 || list.Addresses[1].Addr != peer {
		t.Errorf("after restart: av list %d %s", code, out)
	}
	if !strings.Contains(n.logs.String(), "adopted=true") {
		t.Errorf("restarted agent did not adopt the pinned link:\n%s", n.logs.String())
	}
	recvUntil(300 * time.Millisecond)
	close(stop)
	senders.Wait()
	recvUntil(100 * time.Millisecond)
	if wrong != 0 {
		t.Errorf("%d of %d messages attributed to another fi_addr", wrong, got)
	}
	if lost := int(sent.Load()) - got; lost != 0 {
		t.Errorf("sent %d, received %d: %d lost", sent.Load(), got, lost)
	}

	// Metrics, parsed.
	m := n.scrape()
	if m[`xdpfab_xdp_packets_total{iface="veth0",outcome="translated"}`] < float64(got) {
		t.Errorf("translated counter %v < %d received", m[`xdpfab_xdp_packets_total{iface="veth0",outcome="translated"}`], got)
	}
	if m[`xdpfab_av_entries{av="job"}`] != 2 || m["xdpfab_agent_restarts_total"] != 1 {
		t.Errorf("metrics: av entries %v, restarts %v", m[`xdpfab_av_entries{av="job"}`], m["xdpfab_agent_restarts_total"])
	}

	// SIGTERM: clean exit, program still attached.
	n.stopAgent(syscall.SIGTERM)
	if st := n.agentXDP(); !st {
		t.Error("SIGTERM detached the program")
	}
	n.startAgent("--detach-on-exit")
	n.stopAgent(syscall.SIGTERM)
	if st := n.agentXDP(); st {
		t.Errorf("--detach-on-exit left the program attached:\n%s", n.logs.String())
	}
}

func (n *node) agentXDP() bool {
	var attached bool
	n.bed.A.Do(func() error {
		l, err := net.InterfaceByName(testbed.LinkName)
		if err != nil {
			return err
		}
		out, _ := exec.Command("ip", "-d", "link", "show", "dev", l.Name).Output()
		attached = strings.Contains(string(out), "prog/xdp")
		return nil
	})
	return attached
}

// scrape fetches /metrics from inside host A's namespace.
func (n *node) scrape() map[string]float64 {
	n.t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return n.bed.A.Dial(network, addr)
	}}}
	defer hc.CloseIdleConnections() // a transport per call: its connection goes with it
	resp, err := hc.Get("http://" + n.metrics + "/metrics")
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	return parseMetrics(n.t, resp.Body)
}

func parseMetrics(t *testing.T, r io.Reader) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		var v float64
		if _, err := fmt.Sscan(line[i+1:], &v); err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// Errors cross the socket as errno values; bad input changes nothing.
func TestCLIErrors(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"av", "list", "--name", "nope"}, int(fi.ENOENT), "ENOENT"},
		{[]string{"av", "insert", "--name", "nope", "1.2.3.4:5"}, int(fi.ENOENT), "ENOENT"},
		{[]string{"av", "create"}, 64, `required flag(s) "name" not set`},
		{[]string{"av", "create", "--name", "x", "--type", "ring"}, 64, "want table or map"},
		{[]string{"av", "create", "--name", "bad/name"}, int(fi.EINVAL), "EINVAL"},
		{[]string{"av", "bogus"}, 64, "unknown command"},
		{[]string{"detach", "--iface", "nope0"}, int(fi.ENOENT), "ENOENT"},
		{[]string{"status", "-o", "yaml"}, 64, "want text or json"},
	} {
		out, code := n.cli(tc.args...)
		if code != tc.code || !strings.Contains(out, tc.msg) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, code, out, tc.code, tc.msg)
		}
	}
	n.cli("av", "create", "--name", "j")
	// A malformed address: EINVAL, nothing inserted.
	out, code := n.cli("av", "insert", "--name", "j", "198.18.0.1:5", "garbage")
	if code != int(fi.EINVAL) || !strings.Contains(out, `address "garbage": not an ip:port`) {
		t.Errorf("malformed address: exit %d\n%s", code, out)
	}
	// An address the AV refuses (port 0): the others go in, exit EADDRNOTAVAIL.
	out, code = n.cli("av", "insert", "--name", "j", "198.18.0.1:5", "198.18.0.2:0")
	if code != int(fi.EADDRNOTAVAIL) || !strings.Contains(out, "198.18.0.1:5  0") || strings.Count(out, "EADDRNOTAVAIL") != 2 {
		t.Errorf("partial insert: exit %d\n%s", code, out)
	}
	if out, _ := n.cli("av", "list", "--name", "j"); strings.Count(out, "\n") != 2 {
		t.Errorf("after the partial insert:\n%s", out)
	}
	// Through the protocol, a malformed address is that element's EINVAL.
	c, err := client.Dial(n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.AVInsert(ctl.AVInsertArgs{Name: "j", Addrs: []string{"198.18.0.3:5", "999.1.1.1:5", "fi_sockaddr_in://x"}})
	if err != nil || r.Inserted != 1 || r.Errnos[0] != 0 || r.Errnos[1] != fi.EINVAL || r.Errnos[2] != fi.EINVAL {
		t.Errorf("insert through the protocol: %+v %v", r, err)
	}
}

// The socket's permissions decide who may connect: another user is
// refused; the socket's group is admitted.
func TestSocketPermissions(t *testing.T) {
	n := newNode(t)
	n.startAgent("--socket-group", "65534")
	try := func(uid, gid uint32) error {
		cmd := exec.Command(xdpfabBin, "status", "--socket", n.socket)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	if err := try(65534, 65534); err != nil {
		t.Errorf("member of the socket's group refused: %v", err)
	}
	err := try(65533, 65533)
	if err == nil || !strings.Contains(err.Error(), "permission denied") || !strings.Contains(err.Error(), "exit status 13") {
		t.Errorf("another user: %v", err)
	}
}
