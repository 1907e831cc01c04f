package agent_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
)

// runAgent runs `xdpfab agent` in host A's namespace with args (after the
// node's defaults, which later flags override) and waits for it to exit
// within 10 s. It returns the combined output and the exit code.
func (n *node) runAgent(args ...string) (string, int) {
	n.t.Helper()
	all := append([]string{"agent", "--iface", testbed.LinkName, "--pin-root", n.pinRoot, "--socket", n.socket,
		"--metrics", ""}, args...)
	cmd := exec.Command(xdpfabBin, all...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := n.bed.A.Do(cmd.Start); err != nil {
		n.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		n.t.Fatalf("agent %v did not exit:\n%s", args, out.String())
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// One agent per socket and per pin root: a second one exits with a clear
// message and changes nothing; the first keeps serving.
func TestSecondAgentRefused(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	before, _ := os.Lstat(n.socket)
	for _, args := range [][]string{
		nil, // same socket, same pin root
		{"--socket", filepath.Join(n.dir, "other.sock")}, // same pin root
	} {
		out, code := n.runAgent(args...)
		if code == 0 || !strings.Contains(out, "another xdpfab agent (pid") {
			t.Errorf("second agent %v: exit %d\n%s", args, code, out)
		}
	}
	if after, err := os.Lstat(n.socket); err != nil || !os.SameFile(before, after) {
		t.Errorf("the second agent replaced the socket: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(n.dir, "other.sock")); err == nil {
		t.Errorf("the refused agent left a socket")
	}
	if n.endpoints() != 0 || !n.agentXDP() {
		t.Errorf("the first agent stopped serving")
	}
}

// The agent never removes what is not a stale socket of its own.
func TestSocketPathNotReplaced(t *testing.T) {
	n := newNode(t)
	if err := os.WriteFile(n.socket, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := n.runAgent()
	if code == 0 || !strings.Contains(out, "not a socket") {
		t.Errorf("agent on a regular file's path: exit %d\n%s", code, out)
	}
	if b, err := os.ReadFile(n.socket); err != nil || string(b) != "precious" {
		t.Errorf("the file at --socket was changed: %q %v", b, err)
	}
}

// A failed start undoes what it made: no program on the interface, no
// pins, no bpffs mount, no pin directory.
func TestFailedStartUndoes(t *testing.T) {
	n := newNode(t)
	// No such interface: refused before anything is made.
	out, code := n.runAgent("--iface", "nope0")
	if code == 0 || !strings.Contains(out, "nope0") {
		t.Errorf("no such interface: exit %d\n%s", code, out)
	}
	// A socket that cannot be made: fails after the program was attached.
	blocker := filepath.Join(n.dir, "file")
	os.WriteFile(blocker, nil, 0o644)
	out, code = n.runAgent("--socket", filepath.Join(blocker, "agent.sock"))
	if code == 0 {
		t.Fatalf("agent with an impossible socket started:\n%s", out)
	}
	if n.agentXDP() {
		t.Errorf("a failed start left the program attached:\n%s", out)
	}
	if ok, _ := loader.IsBPFFS(n.pinRoot); ok {
		t.Errorf("a failed start left bpffs mounted on %s", n.pinRoot)
	}
	if _, err := os.Stat(n.pinRoot); err == nil {
		t.Errorf("a failed start left %s", n.pinRoot)
	}
	// And after all that, an agent starts normally.
	n.startAgent()
}

// Under `ip netns exec` (a private /sys) the agent's pins would vanish
// with it: it refuses and says how to run it in a namespace.
func TestIPNetnsExecRefused(t *testing.T) {
	n := newNode(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a wrongly started agent is killed
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", n.bed.A.Name(), xdpfabBin, "agent", "--iface", testbed.LinkName,
		"--pin-root", "/sys/fs/bpf/xdpfab-netns-test", "--socket", n.socket, "--metrics", "")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "nsenter --net=") {
		t.Errorf("agent under ip netns exec: %v\n%s", err, out)
	}
	if _, err := os.Stat("/sys/fs/bpf/xdpfab-netns-test"); err == nil {
		os.Remove("/sys/fs/bpf/xdpfab-netns-test")
		t.Errorf("the refused agent made a pin root on the host's bpffs")
	}
}
