package procid

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

func TestSelfAndChild(t *testing.T) {
	self := Self()
	if self.PID != uint32(os.Getpid()) || self.Start == 0 || !self.Alive() {
		t.Fatalf("Self() = %v, alive %v", self, self.Alive())
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child, err := Of(cmd.Process.Pid)
	if err != nil || !child.Alive() {
		t.Fatalf("child %v alive %v: %v", child, child.Alive(), err)
	}
	// The same pid with another start time is another process.
	if (ID{PID: child.PID, Start: child.Start + 1}).Alive() {
		t.Error("a reused pid passed for the process")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if child.Alive() {
		t.Error("a dead process is alive")
	}
	if (ID{}).Alive() {
		t.Error("the zero ID is alive")
	}
}

func TestParseStart(t *testing.T) {
	for _, c := range []struct {
		stat string
		want uint64
	}{
		{"1 (init) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 42 1 2", 42},
		{"7 (a) b) (c) R 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 99 1 2", 99},
	} {
		if got, err := parseStart([]byte(c.stat)); err != nil || got != c.want {
			t.Errorf("parseStart(%q) = %d, %v", c.stat, got, err)
		}
	}
	for _, bad := range []string{"", "1 (x", "1 (x) S 1 2"} {
		if _, err := parseStart([]byte(bad)); err == nil {
			t.Errorf("parseStart(%q) succeeded", bad)
		}
	}
}

// UID is the effective uid, of the process the ID names only.
func TestUID(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a process as uid 65534: %v", err)
	}
	child, err := Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if uid, err := child.UID(); err != nil || uid != 65534 {
		t.Errorf("UID() = %d, %v; want 65534", uid, err)
	}
	if _, err := (ID{PID: child.PID, Start: child.Start + 1}).UID(); err == nil {
		t.Error("a reused pid's uid passed for the process's")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := child.UID(); err == nil {
		t.Error("a dead process has a uid")
	}
	if self, err := Self().UID(); err != nil || self != uint32(os.Geteuid()) {
		t.Errorf("own UID() = %d, %v", self, err)
	}
	for _, c := range []struct {
		status string
		want   uint32
		ok     bool
	}{
		{"Name:\tx\nUid:\t1000\t65534\t1000\t1000\nGid:\t0\t0\t0\t0\n", 65534, true},
		{"Name:\tx\nGid:\t0\n", 0, false},
		{"Uid:\t5\n", 0, false},
		{"Uid:\t1\tx\t1\t1\n", 0, false},
	} {
		if got, err := parseUID([]byte(c.status)); (err == nil) != c.ok || got != c.want {
			t.Errorf("parseUID(%q) = %d, %v", c.status, got, err)
		}
	}
}
