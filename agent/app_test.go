package agent_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
)

// appReport is what the unprivileged application process reports.
type appReport struct {
	UID, EUID int
	CapEff    string
	Sent, Got int
	Wrong     int
	Err       string
}

// TestAppChild is the unprivileged application of TestUnprivilegedApp; it
// does nothing unless started by it.
func TestAppChild(t *testing.T) {
	if os.Getenv("XDPFAB_APP") == "" {
		t.Skip("helper process for TestUnprivilegedApp")
	}
	rep := appReport{UID: os.Getuid(), EUID: os.Geteuid(), CapEff: capEff()}
	out := json.NewEncoder(os.Stdout)
	defer func() { out.Encode(rep) }()
	fail := func(err error) { rep.Err = err.Error() }
	client.ReportInterval = 50 * time.Millisecond
	c, err := client.Dial(os.Getenv("XDPFAB_SOCKET"))
	if err != nil {
		fail(err)
		return
	}
	dp, a, err := c.OpenAV("job")
	if err != nil {
		fail(err)
		return
	}
	defer dp.Close()
	defer a.Close()
	tx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
	rx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
	local := netip.MustParseAddrPort(os.Getenv("XDPFAB_LOCAL"))
	queues, _ := strconv.Atoi(os.Getenv("XDPFAB_QUEUES")) // 0: the interface's
	e, err := c.OpenEndpoint(ctl.EPOpenArgs{Iface: testbed.LinkName, Local: local.String(), AV: "job", Caps: fi.Msg | fi.Source, Queues: queues},
		ep.Attr{Local: local, Ifname: testbed.LinkName, AV: a, TxCQ: tx, RxCQ: rx, Caps: fi.Msg | fi.Source})
	if err != nil {
		fail(err)
		return
	}
	buf := make([]byte, 64)
	var ent [1]cq.Entry
	var src [1]fi.Addr
	for i := range 100 {
		e.Recv(buf, fi.AddrUnspec, nil)
		for deadline := time.Now().Add(5 * time.Second); ; {
			err := e.Inject([]byte(fmt.Sprintf("ping %d", i)), 0)
			if err == nil {
				break
			}
			if !errors.Is(err, fi.EAGAIN) || time.Now().After(deadline) {
				fail(fmt.Errorf("send %d: %w", i, err))
				return
			}
		}
		rep.Sent++
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if n, _ := rx.ReadFrom(ent[:], src[:]); n == 1 {
				rep.Got++
				if src[0] != 0 || string(buf[:ent[0].Len]) != fmt.Sprintf("ping %d", i) {
					rep.Wrong++
				}
				break
			}
		}
	}
	if os.Getenv("XDPFAB_APP") == "hang" {
		out.Encode(rep)
		os.Stdout.Sync()
		time.Sleep(time.Hour) // until killed
	}
	if err := e.Close(); err != nil {
		fail(err)
	}
	c.Close()
}

func capEff() string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "CapEff:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "CapEff:"))
		}
	}
	return "?"
}

// echo runs a privileged echo endpoint on host B (its own dataplane).
func echo(t *testing.T, h *testbed.Host, local, peer netip.AddrPort) {
	t.Helper()
	dp, err := loader.Load(loader.Config{AVEntries: 1024, MaxAVs: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	a, _ := av.Open(dp, &av.Attr{})
	t.Cleanup(func() { a.Close() })
	to := []fi.Addr{0}
	a.Insert([]netip.AddrPort{peer}, to, 0, nil)
	tx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
	rx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
	t.Cleanup(func() { tx.Close(); rx.Close() })
	var e *ep.Endpoint
	err = h.Do(func() error {
		att, err := dp.Attach(testbed.LinkName, loader.Native)
		if err != nil {
			return err
		}
		t.Cleanup(func() { att.Close() })
		e, err = ep.Open(dp, ep.Attr{Ifname: testbed.LinkName, Local: local, AV: a, TxCQ: tx, RxCQ: rx, BindMode: 1})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait(); e.Close() })
	wg.Go(func() {
		buf := make([]byte, 64)
		var ent [1]cq.Entry
		for {
			e.Recv(buf, fi.AddrUnspec, nil)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if n, _ := rx.Read(ent[:]); n == 1 {
					for e.Inject(buf[:ent[0].Len], to[0]) != nil {
						e.Progress()
					}
					break
				}
			}
		}
	})
}

// An application without capabilities opens an endpoint through the agent
// and exchanges messages with the peer namespace; killed, it frees its
// endpoint.
func TestUnprivilegedApp(t *testing.T) {
	n := newNode(t)
	n.startAgent("--socket-group", "65534")
	appAddr := netip.AddrPortFrom(n.bed.A.IPv4, 7100)
	n.appSetup(appAddr)
	run := func(mode string) (*exec.Cmd, io.Reader) { return n.appChild(mode, appAddr) }
	check := func(r io.Reader) appReport {
		t.Helper()
		var rep appReport
		if err := json.NewDecoder(r).Decode(&rep); err != nil {
			t.Fatalf("application report: %v", err)
		}
		if rep.Err != "" {
			t.Fatalf("application: %s", rep.Err)
		}
		if rep.UID != 65534 || rep.CapEff != "0000000000000000" {
			t.Errorf("application ran as uid %d with capabilities %s", rep.UID, rep.CapEff)
		}
		if rep.Sent != 100 || rep.Got != 100 || rep.Wrong != 0 {
			t.Errorf("application: sent %d, received %d, %d wrong", rep.Sent, rep.Got, rep.Wrong)
		}
		return rep
	}
	cmd, out := run("close")
	check(out)
	cmd.Wait()
	if eps := n.endpoints(); eps != 0 {
		t.Errorf("%d endpoints left after the application closed", eps)
	}

	// Killed mid-life: the agent releases its endpoint.
	cmd, out = run("hang")
	check(out)
	if eps := n.endpoints(); eps != 1 {
		t.Errorf("%d endpoints while the application runs, want 1", eps)
	}
	// Its CQs and sockets show in the agent's metrics.
	var m map[string]float64
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if m = n.scrape(); hasPrefix(m, `xdpfab_cq_depth{cq="rx"`) && hasPrefix(m, `xdpfab_endpoint_socket_events_total{`) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !hasPrefix(m, `xdpfab_cq_depth{cq="rx"`) || !hasPrefix(m, `xdpfab_cq_lost_total{cq="tx"`) ||
		!hasPrefix(m, `xdpfab_endpoint_socket_events_total{endpoint=`) {
		t.Errorf("application endpoint metrics missing")
	}
	// With every kind of metric present: Prometheus' conventions.
	lintMetrics(t, n.scrapeText())
	cmd.Process.Kill()
	cmd.Wait()
	deadline = time.Now().Add(5 * time.Second)
	for n.endpoints() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if eps := n.endpoints(); eps != 0 {
		t.Errorf("%d endpoints left after the application was killed", eps)
	}
	// Its address and slots are free: the next application binds the same
	// address (a leftover endpoint-table entry would make that EADDRINUSE).
	cmd, out = run("close")
	check(out)
	cmd.Wait()
	// Audit lines: the application's endpoints opened and closed, and the
	// one of the killed application released.
	logs := n.logs.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`msg=audit op=ep.open uid=65534 pid=[1-9][0-9]* result=ok iface=veth0 local=` + regexp.QuoteMeta(appAddr.String()) + ` av=job .* id=[0-9]+`),
		regexp.MustCompile(`msg=audit op=ep.close uid=65534 pid=[1-9][0-9]* result=ok id=[0-9]+`),
		regexp.MustCompile(`msg=audit op=ep.close uid=65534 pid=[1-9][0-9]* result=ok id=[0-9]+ local=\S+ reason="connection closed"`),
	} {
		if !want.MatchString(logs) {
			t.Errorf("no audit line like %s in the agent's log:\n%s", want, grepLines(logs, "audit"))
		}
	}
}

// appSetup makes the AV "job" with a peer on host B that echoes what
// appAddr sends, and a copy of this test binary that appChild runs as the
// application.
func (n *node) appSetup(appAddr netip.AddrPort) {
	n.t.Helper()
	peer := netip.AddrPortFrom(n.bed.B.IPv4, 7000)
	n.cli("av", "create", "--name", "job")
	if out, code := n.cli("av", "insert", "--name", "job", peer.String()); code != 0 {
		n.t.Fatalf("insert: %s", out)
	}
	echo(n.t, n.bed.B, peer, appAddr)
	copyFile(n.t, os.Args[0], filepath.Join(filepath.Dir(xdpfabBin), "agent.test"))
}

// appChild starts TestAppChild in mode as uid 65534 in host A's namespace
// (env added to its environment), and returns it and its output; the test
// kills it at its end if it still runs.
func (n *node) appChild(mode string, appAddr netip.AddrPort, env ...string) (*exec.Cmd, io.Reader) {
	n.t.Helper()
	cmd := exec.Command(filepath.Join(filepath.Dir(xdpfabBin), "agent.test"), "-test.run=^TestAppChild$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), "XDPFAB_APP="+mode, "XDPFAB_SOCKET="+n.socket, "XDPFAB_PIN_ROOT="+n.pinRoot,
		"XDPFAB_LOCAL="+appAddr.String()), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := n.bed.A.Do(cmd.Start); err != nil { // born in host A's namespace
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, out
}

func (n *node) endpoints() int {
	n.t.Helper()
	c, err := client.Dial(n.socket)
	if err != nil {
		n.t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Status()
	if err != nil {
		n.t.Fatal(err)
	}
	return len(s.Endpoints)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func hasPrefix(m map[string]float64, p string) bool {
	for k := range m {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}
