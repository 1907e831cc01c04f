//go:build linux

package agent_test

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

// An agent restarted while an application of uid 65534 runs charges that
// application's endpoint, which the earlier run prepared, to uid 65534:
// the uid's XSKMAP slots stay counted (a restart used to hand every uid
// its whole quota again beside what it held), and come back once the
// application is gone.
func TestRestartChargesInheritedEndpoints(t *testing.T) {
	n := newNodeWith(t, testbed.Options{RxQueues: 4, TxQueues: 4})
	flags := []string{"--socket-group", "65534", "--xsk-slots-per-uid", "4", "--gc-interval", "200ms"}
	n.startAgent(flags...)
	appAddr := netip.AddrPortFrom(n.bed.A.IPv4, 7100)
	peer := netip.AddrPortFrom(n.bed.B.IPv4, 7000)
	n.cli("av", "create", "--name", "job")
	if out, code := n.cli("av", "insert", "--name", "job", peer.String()); code != 0 {
		t.Fatalf("insert: %s", out)
	}
	echo(t, n.bed.B, peer, appAddr)
	bin := filepath.Join(filepath.Dir(xdpfabBin), "agent.test")
	copyFile(t, os.Args[0], bin)
	cmd := exec.Command(bin, "-test.run=^TestAppChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "XDPFAB_APP=hang", "XDPFAB_SOCKET="+n.socket, "XDPFAB_PIN_ROOT="+n.pinRoot, "XDPFAB_LOCAL="+appAddr.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := n.bed.A.Do(cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	// The application's endpoint listens on the 4 queues: 4 slots, the
	// uid's quota.
	var rep appReport
	if err := json.NewDecoder(out).Decode(&rep); err != nil || rep.Err != "" {
		t.Fatalf("application: %v %s", err, rep.Err)
	}
	open := func() error {
		c, err := dialAs(t, n.socket, 65534, 65534)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = n.openEP(c, 7200, ctl.EPOpenArgs{AV: "job", Private: true, FirstQueue: 3, Queues: 1, Frames: 64})
		return err
	}
	wantErrno(t, "a fifth slot while the application holds 4", open(), fi.EDQUOT)

	n.stopAgent(syscall.SIGKILL)
	n.startAgent(flags...)
	wantErrno(t, "a fifth slot after the restart, the application still running", open(), fi.EDQUOT)

	cmd.Process.Kill()
	cmd.Wait()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = open(); err == nil || !errors.Is(err, fi.EDQUOT) && !errors.Is(err, fi.EBUSY) {
			break
		}
	}
	if err != nil {
		t.Errorf("once the application is gone: %v, want its slots back", err)
	}
}
