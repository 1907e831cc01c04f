package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testutil/jsonschema"
)

// run runs the xdpfab command against the node's agent with stdout and
// stderr apart.
func (n *node) run(args ...string) (stdout, stderr string, code int) {
	n.t.Helper()
	cmd := exec.Command(xdpfabBin, args...)
	cmd.Env = append(cmd.Environ(), "XDPFAB_SOCKET="+n.socket)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// Every command that talks to the agent writes, with -o json, one document
// that validates against docs/cli-json.schema.json: 64-bit identifiers as
// strings (FI_ADDR_NOTAVAIL null), empty lists [], errors on stderr.
func TestCLIJSON(t *testing.T) {
	s, err := jsonschema.Load("../docs/cli-json.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t)
	n.startAgent()
	doc := func(kind string, args ...string) map[string]any {
		t.Helper()
		out, errOut, code := n.run(append(args, "-o", "json")...)
		if code != 0 || errOut != "" {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
		if err := s.Validate([]byte(out)); err != nil {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
		var m map[string]any
		json.Unmarshal([]byte(out), &m)
		if m["kind"] != kind || m["schema"] != 1.0 {
			t.Errorf("%v: kind %v schema %v, want %s 1", args, m["kind"], m["schema"], kind)
		}
		return m
	}
	st := doc("status", "status")
	if st["avs"] == nil || len(st["avs"].([]any)) != 0 || st["endpoints"] == nil {
		t.Errorf("status of a fresh agent: avs %v, endpoints %v (want [])", st["avs"], st["endpoints"])
	}
	doc("stats", "stats")
	av := doc("av", "av", "create", "--name", "ids", "--user-id")
	if av["type"] != "table" || len(av["flags"].([]any)) != 1 || av["flags"].([]any)[0] != "FI_AV_USER_ID" {
		t.Errorf("av create: %v", av)
	}
	if av = doc("av", "av", "create", "--name", "job"); len(av["flags"].([]any)) != 0 {
		t.Errorf("av create: %v", av)
	}
	if l := doc("av_list", "av", "list", "--name", "job"); len(l["addresses"].([]any)) != 0 {
		t.Errorf("empty AV lists %v", l["addresses"])
	}
	ins := doc("av_insert", "av", "insert", "--name", "job", "198.18.0.1:5000", "[2001:2::9]:7", "--user-ids", "18446744073709551614,7")
	if r := ins["results"].([]any); r[0].(map[string]any)["fi_addr"] != "0" || r[1].(map[string]any)["fi_addr"] != "1" {
		t.Errorf("insert: %v", ins)
	}
	// 2^64-2 survives as a string; JSON numbers would have rounded it.
	e := doc("av_entry", "av", "lookup", "--name", "job", "0")
	if e["user_id"] != "18446744073709551614" || e["fi_addr"] != "0" {
		t.Errorf("lookup: %v", e)
	}
	l := doc("av_list", "av", "list", "--name", "job")
	if a := l["addresses"].([]any); len(a) != 2 || a[1].(map[string]any)["user_id"] != "7" {
		t.Errorf("list: %v", l)
	}
	doc("av_insert", "av", "insert", "--name", "ids", "198.18.0.1:5000")
	if e := doc("av_entry", "av", "lookup", "--name", "ids", "0"); e["user_id"] != nil {
		t.Errorf("no user ID set: %v, want null", e["user_id"])
	}
	doc("av_set_user_id", "av", "set-user-id", "--name", "ids", "0", "0xfffffffffffffffe")
	if e := doc("av_entry", "av", "lookup", "--name", "ids", "0"); e["user_id"] != "18446744073709551614" {
		t.Errorf("user ID set: %v", e["user_id"])
	}
	doc("av_remove", "av", "remove", "--name", "job", "1")
	st = doc("status", "status")
	if len(st["avs"].([]any)) != 2 || len(st["attachments"].([]any)) != 1 {
		t.Errorf("status: %v", st)
	}

	// A partial insert: the results on stdout, the error on stderr, one
	// document each.
	out, errOut, code := n.run("av", "insert", "--name", "job", "198.18.0.2:5", "198.18.0.3:0", "-o", "json")
	if code != int(fi.EADDRNOTAVAIL) {
		t.Errorf("partial insert: exit %d", code)
	}
	if err := s.Validate([]byte(out)); err != nil || !strings.Contains(out, `"failed": 1`) || !strings.Contains(out, `"fi_addr": null`) {
		t.Errorf("partial insert stdout: %v\n%s", err, out)
	}
	if err := s.Validate([]byte(errOut)); err != nil || !strings.Contains(errOut, `"errno_name":"EADDRNOTAVAIL"`) {
		t.Errorf("partial insert stderr: %v\n%s", err, errOut)
	}
	// Errors from the agent: JSON on stderr, nothing on stdout.
	out, errOut, code = n.run("av", "list", "--name", "nope", "-o", "json")
	if code != int(fi.ENOENT) || out != "" || s.Validate([]byte(errOut)) != nil || !strings.Contains(errOut, `"errno":2`) {
		t.Errorf("list of no AV: exit %d %q %q", code, out, errOut)
	}
	// stats --watch: JSON Lines, one stats_rate document per interval.
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	cmd := exec.CommandContext(ctx, xdpfabBin, "stats", "--watch", "200ms", "-o", "json", "--socket", n.socket)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	watch, _ := cmd.Output()
	lines := strings.Split(strings.TrimSpace(string(watch)), "\n")
	if len(lines) < 2 {
		t.Errorf("stats --watch 200ms for 0.7 s: %d lines\n%s", len(lines), watch)
	}
	for _, l := range lines {
		if err := s.Validate([]byte(l)); err != nil || !strings.Contains(l, `"kind":"stats_rate"`) {
			t.Errorf("stats --watch line: %v\n%s", err, l)
		}
	}
	doc("av_destroy", "av", "destroy", "--name", "job")
	doc("detach", "detach", "--iface", "veth0")
}

// av create of an existing AV with another type (or FI_AV_USER_ID) is
// EINVAL naming what it is, as fi_av_open of a named AV; without --type it
// opens whatever type the AV has.
func TestCLIAVCreateType(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	if out, _, code := n.run("av", "create", "--name", "t"); code != 0 || !strings.Contains(out, "type table") {
		t.Fatalf("create: %d %s", code, out)
	}
	for _, args := range [][]string{{"--type", "map"}, {"--user-id"}} {
		out, errOut, code := n.run(append([]string{"av", "create", "--name", "t"}, args...)...)
		if code != int(fi.EINVAL) || out != "" || !strings.Contains(errOut, "exists with") {
			t.Errorf("create %v on a table: exit %d %q %q", args, code, out, errOut)
		}
	}
	if _, errOut, _ := n.run("av", "create", "--name", "t", "--type", "map"); !strings.Contains(errOut, "exists with type table, asked for map") {
		t.Errorf("the error does not name the type: %s", errOut)
	}
	for _, args := range [][]string{nil, {"--type", "table"}} {
		if out, errOut, code := n.run(append([]string{"av", "create", "--name", "t"}, args...)...); code != 0 || !strings.Contains(out, "type table") {
			t.Errorf("create %v of the existing table: exit %d %s%s", args, code, out, errOut)
		}
	}
	if out, _, code := n.run("av", "create", "--name", "m", "--type", "map"); code != 0 || !strings.Contains(out, "type map") {
		t.Errorf("create a map: %d %s", code, out)
	}
	if out, _, code := n.run("av", "create", "--name", "m"); code != 0 || !strings.Contains(out, "type map") {
		t.Errorf("open the map without --type: %d %s", code, out)
	}
	// An agent restarted (no cached handle) answers the same.
	n.stopAgent(9)
	n.startAgent()
	if _, errOut, code := n.run("av", "create", "--name", "m", "--type", "table"); code != int(fi.EINVAL) || !strings.Contains(errOut, "exists with type map") {
		t.Errorf("after restart, create --type table of a map: exit %d %s", code, errOut)
	}
}
