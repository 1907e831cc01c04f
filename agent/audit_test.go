package agent_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// auditLines are the agent's JSON log lines with msg "audit".
func (n *node) logLines() []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(n.logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// Every change through the agent leaves one audit line with the caller's
// uid and pid and the result, refusals and failures included; enum values
// are logged by name.
func TestAuditLog(t *testing.T) {
	n := newNode(t)
	n.startAgent("--log-format", "json", "--socket-group", "65534")
	as := func(uid uint32, args ...string) {
		t.Helper()
		cmd := exec.Command(xdpfabBin, args...)
		cmd.Env = append(cmd.Environ(), "XDPFAB_SOCKET="+n.socket)
		if uid != 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		}
		cmd.Run()
	}
	as(0, "av", "create", "--name", "job")
	as(0, "av", "insert", "--name", "job", "198.18.0.1:5", "198.18.0.2:0", "198.18.0.3:5")
	as(65534, "av", "insert", "--name", "job", "198.18.0.4:5")
	as(0, "av", "create", "--name", "job", "--type", "map")
	as(65534, "av", "create", "--name", "mine")
	as(0, "av", "remove", "--name", "job", "0")
	as(0, "av", "destroy", "--name", "job")
	as(65534, "detach", "--iface", "veth0")
	as(0, "detach", "--iface", "veth0")

	want := []map[string]any{
		{"op": "attach", "by": "agent", "result": "ok", "iface": "veth0", "mode": "native", "adopted": false},
		{"op": "av.create", "uid": 0.0, "result": "ok", "av": "job", "type": "any", "created": true},
		{"op": "av.insert", "uid": 0.0, "result": "partial", "first_errno": "EADDRNOTAVAIL", "av": "job", "addrs": 3.0, "inserted": 2.0, "failed": 1.0},
		{"op": "av.insert", "uid": 65534.0, "result": "EACCES", "av": "job"},
		{"op": "av.create", "uid": 0.0, "result": "EINVAL", "av": "job", "type": "map"},
		{"op": "av.create", "uid": 65534.0, "result": "ok", "av": "mine", "created": true},
		{"op": "av.remove", "uid": 0.0, "result": "ok", "av": "job", "fi_addrs": 1.0},
		{"op": "av.destroy", "uid": 0.0, "result": "ok", "av": "job", "entries": 1.0},
		{"op": "detach", "uid": 65534.0, "result": "EACCES", "iface": "veth0"},
		{"op": "detach", "uid": 0.0, "result": "ok", "iface": "veth0"},
	}
	// The agent's log is read from its output, which may lag the last
	// command's exit under load: give it a moment.
	var audits []map[string]any
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		audits = audits[:0]
		for _, m := range n.logLines() {
			if _, ok := m["mode"].(float64); ok {
				t.Errorf("a mode logged as a number: %v", m)
			}
			if m["msg"] == "audit" {
				audits = append(audits, m)
			}
		}
		if len(audits) >= len(want) || time.Now().After(deadline) {
			break
		}
	}
	if len(audits) != len(want) {
		t.Errorf("%d audit lines, want %d", len(audits), len(want))
	}
	for i := range min(len(audits), len(want)) {
		got := audits[i]
		for k, v := range want[i] {
			if got[k] != v {
				t.Errorf("audit line %d: %s = %v, want %v\n%v", i, k, got[k], v, got)
			}
		}
		if pid, _ := got["pid"].(float64); pid <= 0 || got["level"] != map[bool]string{true: "INFO", false: "WARN"}[got["result"] == "ok"] {
			t.Errorf("audit line %d: pid %v, level %v\n%v", i, got["pid"], got["level"], got)
		}
		if got["result"] != "ok" && got["result"] != "partial" && got["err"] == nil {
			t.Errorf("audit line %d: a failure without err: %v", i, got)
		}
	}
	for _, m := range n.logLines() {
		if m["msg"] == "control socket" && m["mode"] != "0660" {
			t.Errorf("control socket mode %v, want \"0660\"", m["mode"])
		}
	}
}
