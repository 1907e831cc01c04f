package agent_test

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/internal/testbed"
)

// `xdpfab pingpong server` runs as an unprivileged member of the agent's
// group, through the agent, and two servers share the interface at once;
// root clients on the other host (their own dataplane) ping each.
func TestPingPongThroughAgent(t *testing.T) {
	n := newNode(t)
	n.startAgent("--socket-group", "65534")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var servers []*exec.Cmd
	var outs []*syncBuffer
	for i := range 2 {
		local := netip.AddrPortFrom(n.bed.A.IPv4, uint16(7100+i))
		cmd := exec.CommandContext(ctx, xdpfabBin, "pingpong", "server", "--iface", testbed.LinkName, "--local", local.String(),
			"--socket", n.socket, "--via", "agent")
		// Pdeathsig: gone with the test process, even if it dies.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Pdeathsig: syscall.SIGKILL}
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := n.bed.A.Do(cmd.Start); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGTERM); cmd.Wait() })
		servers, outs = append(servers, cmd), append(outs, out)
	}
	for i, out := range outs {
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "waiting for a client"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("server %d did not start:\n%s", i, out.String())
			}
		}
	}
	if s := n.status(t); len(s.Queues) != 1 || s.Queues[0].Users != 2 {
		t.Fatalf("two servers, queue holds %+v: want one sharing domain with both", s.Queues)
	}
	for i := range servers {
		srv := netip.AddrPortFrom(n.bed.A.IPv4, uint16(7100+i))
		cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
		defer ccancel()
		cmd := exec.CommandContext(cctx, xdpfabBin, "pingpong", "client", "--iface", testbed.LinkName, "--local", netip.AddrPortFrom(n.bed.B.IPv4, 7000).String(),
			"--peer", srv.String(), "-S", "64", "-I", "200", "--via", "direct", "--pin-root", "")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := n.bed.B.Do(cmd.Run); err != nil {
			t.Fatalf("client of server %d: %v\n%s\nserver:\n%s", i, err, out.String(), outs[i].String())
		}
		if f := strings.Fields(lastLine(out.String())); len(f) < 2 || f[0] != "64" || f[1] != "200" {
			t.Errorf("client of server %d:\n%s", i, out.String())
		}
		if !strings.Contains(outs[i].String(), fmt.Sprintf("client %v:7000 is fi_addr 0", n.bed.B.IPv4)) {
			t.Errorf("server %d output:\n%s", i, outs[i].String())
		}
	}
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}
