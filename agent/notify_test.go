package agent_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/client"
)

// notifySocket listens where $NOTIFY_SOCKET will point, as systemd does.
func notifySocket(t *testing.T, dir string) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(dir, "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ch := make(chan string, 1024)
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			if err != nil {
				close(ch)
				return
			}
			ch <- string(buf[:k])
		}
	}()
	return path, ch
}

// Under systemd's Type=notify, the agent sends READY=1 once the program is
// attached and the socket listens, pings the watchdog every half
// WATCHDOG_USEC, and says STOPPING=1 on SIGTERM.
func TestSystemdNotify(t *testing.T) {
	n := newNode(t)
	path, msgs := notifySocket(t, n.dir)
	n.env = []string{"NOTIFY_SOCKET=" + path, "WATCHDOG_USEC=200000"}
	n.startAgent()
	var ready string
	select {
	case ready = <-msgs:
	case <-time.After(5 * time.Second):
		t.Fatal("no notification")
	}
	if !strings.HasPrefix(ready, "READY=1\n") || !strings.Contains(ready, "STATUS=attached to veth0") ||
		!strings.Contains(ready, "MAINPID=") {
		t.Errorf("first notification %q, want READY=1 with STATUS and MAINPID", ready)
	}
	// Ready means ready: the socket answers and the program is attached.
	if c, err := client.Dial(n.socket); err != nil {
		t.Errorf("READY=1 sent, but the socket does not answer: %v", err)
	} else {
		c.Close()
	}
	if !n.agentXDP() {
		t.Error("READY=1 sent before the program was attached")
	}
	start, pings := time.Now(), 0
	for time.Since(start) < time.Second {
		select {
		case m := <-msgs:
			if m != "WATCHDOG=1" {
				t.Errorf("notification %q, want WATCHDOG=1", m)
			}
			pings++
		case <-time.After(300 * time.Millisecond):
			t.Fatalf("no watchdog ping within 300 ms (WATCHDOG_USEC=200000: every 100 ms); %d so far", pings)
		}
	}
	if pings < 6 || pings > 12 {
		t.Errorf("%d watchdog pings in 1 s, want about 10", pings)
	}
	n.agent.Process.Signal(syscall.SIGTERM)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m := <-msgs:
			if m == "STOPPING=1" {
				n.stopAgent(syscall.SIGTERM)
				return
			}
		case <-deadline:
			t.Fatal("no STOPPING=1 on SIGTERM")
		}
	}
}

// Without WATCHDOG_USEC, or with WATCHDOG_PID naming another process,
// there are no pings; READY=1 still comes.
func TestSystemdNoWatchdog(t *testing.T) {
	n := newNode(t)
	path, msgs := notifySocket(t, n.dir)
	n.env = []string{"NOTIFY_SOCKET=" + path, "WATCHDOG_USEC=100000", "WATCHDOG_PID=1"}
	n.startAgent()
	if m := <-msgs; !strings.HasPrefix(m, "READY=1") {
		t.Fatalf("first notification %q", m)
	}
	select {
	case m := <-msgs:
		t.Errorf("notification %q with the watchdog another process's", m)
	case <-time.After(400 * time.Millisecond):
	}
}

// Restarts are starts that adopted an earlier agent's pinned state: not the
// first start, not a failed one.
func TestRestartsCounted(t *testing.T) {
	n := newNode(t)
	restarts := func() float64 {
		t.Helper()
		return n.scrape()["xdpfab_agent_restarts_total"]
	}
	n.startAgent()
	if r := restarts(); r != 0 {
		t.Errorf("first start: %v restarts", r)
	}
	n.stopAgent(syscall.SIGTERM)
	// A start that fails after loading the pinned maps (its socket path is
	// taken by a regular file).
	bad := filepath.Join(n.dir, "file.sock")
	if err := os.WriteFile(bad, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := n.runAgent("--socket", bad); code == 0 || !strings.Contains(out, "not a socket") {
		t.Fatalf("start on a file's path: exit %d\n%s", code, out)
	}
	n.startAgent()
	if r := restarts(); r != 1 {
		t.Errorf("after a failed start and a good one: %v restarts, want 1", r)
	}
	if out, _ := n.cli("status"); !strings.Contains(out, "agent restarts  1") {
		t.Errorf("status:\n%s", out)
	}
	n.stopAgent(syscall.SIGKILL)
	n.startAgent()
	if r := restarts(); r != 2 {
		t.Errorf("after SIGKILL and a restart: %v restarts, want 2", r)
	}
}
