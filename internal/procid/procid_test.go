package procid

import (
	"os"
	"os/exec"
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
