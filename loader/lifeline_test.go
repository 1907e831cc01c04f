//go:build linux

package loader_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// TestLifeLineChild reports, in a child of TestLifeLineAcrossPidNamespaces,
// whether descriptor 3 passes as a life line.
func TestLifeLineChild(t *testing.T) {
	if os.Getenv("XDPFAB_TEST_LIFELINE_CHILD") == "" {
		t.Skip("helper process for TestLifeLineAcrossPidNamespaces")
	}
	fmt.Printf("lifeline=%v\n", loader.IsLifeLineForTest(3))
}

// A client in a container (a pid namespace of its own) sees the agent's
// pidfd, but signalling it fails with EINVAL there, not EPERM: the first
// version took that for "not a life line", closed it, and the client kept
// trusting a killed agent's stamps. A /proc/PID directory, which the same
// probe accepts, is not one.
func TestLifeLineAcrossPidNamespaces(t *testing.T) {
	testutil.RequirePrivileged(t)
	pidfd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLifeLineChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "XDPFAB_TEST_LIFELINE_CHILD=1")
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "lifeline=true") {
		t.Errorf("the agent's pidfd in another pid namespace is not taken for a life line:\n%s", out)
	}
	dir, err := os.Open(fmt.Sprintf("/proc/%d", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if loader.IsLifeLineForTest(int(dir.Fd())) {
		t.Error("a /proc/PID directory passes for a life line")
	}
}
