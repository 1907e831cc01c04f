package main_test

// The xdpfab command as a user meets it, without an agent: help, version,
// completion, validation of every value, address errors, av straddr, and
// errors as JSON. The built binary is run; exit statuses, stdout and
// stderr are checked, and JSON is validated against
// docs/cli-json.schema.json. Commands that need an agent are tested in
// agent/cli_test.go.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdpfab/xdpfab/internal/testutil/jsonschema"
)

var bin, noSocket string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "xdpfab-cli")
	if err != nil {
		panic(err)
	}
	bin, noSocket = filepath.Join(dir, "xdpfab"), filepath.Join(dir, "none.sock")
	// As make build does: stamped with the commit whatever GOFLAGS says.
	out, err := exec.Command("go", "build", "-buildvcs=auto", "-o", bin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build xdpfab: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	// No agent: a command that tried to reach one would fail with ENOENT.
	cmd.Env = append(os.Environ(), "XDPFAB_SOCKET="+noSocket)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	r := result{o.String(), e.String(), 0}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

func loadSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	s, err := jsonschema.Load("../../docs/cli-json.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// validate checks that doc is one document of the schema, of kind.
func validate(t *testing.T, s *jsonschema.Schema, kind, doc string) map[string]any {
	t.Helper()
	if err := s.Validate([]byte(doc)); err != nil {
		t.Errorf("%s document does not match the schema: %v\n%s", kind, err, doc)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(doc), &m); err != nil || m["kind"] != kind {
		t.Errorf("want one %s document: %v\n%s", kind, err, doc)
	}
	return m
}

var commands = []string{"", "agent", "av", "av create", "av insert", "av insertsvc", "av insertsym", "av remove",
	"av lookup", "av list", "av straddr", "av set-user-id", "av destroy", "status", "stats", "detach", "demo",
	"pingpong", "pingpong server", "pingpong client", "version", "completion", "completion bash", "help"}

// Help of every command and group: on stdout, exit 0, the same whichever
// way it is asked for.
func TestHelp(t *testing.T) {
	for _, c := range commands {
		path := strings.Fields(c)
		want := run(t, append(path, "--help")...)
		if want.code != 0 || want.stderr != "" || !strings.Contains(want.stdout, "Usage:") {
			t.Errorf("xdpfab %s --help: exit %d, stderr %q, stdout:\n%s", c, want.code, want.stderr, want.stdout)
			continue
		}
		if c != "" && !strings.Contains(want.stdout, "xdpfab "+c) {
			t.Errorf("xdpfab %s --help does not show its usage:\n%s", c, want.stdout)
		}
		for _, args := range [][]string{append(path, "-h"), append([]string{"help"}, path...)} {
			if c == "help" && args[0] == "help" {
				continue // "help help" is about help, not the same page
			}
			if got := run(t, args...); got != want {
				t.Errorf("xdpfab %s: exit %d, stderr %q, and its help differs from --help's:\n%s", strings.Join(args, " "), got.code, got.stderr, got.stdout)
			}
		}
	}
	// A group alone shows its help; the command alone, its own.
	for _, g := range []string{"av", "pingpong", ""} {
		r := run(t, strings.Fields(g)...)
		if r.code != 0 || !strings.Contains(r.stdout, "Available Commands:") || r.stderr != "" {
			t.Errorf("xdpfab %s: exit %d\n%s%s", g, r.code, r.stdout, r.stderr)
		}
	}
	// deploy/validate.sh checks the unit's flags against this.
	r := run(t, "agent", "--help")
	for _, f := range []string{"--iface", "--mode", "--pin-root", "--socket", "--socket-group", "--metrics",
		"--log-format", "--log-level", "--detach-on-exit", "--av-entries", "--admin-group", "--gc-interval", "--ports"} {
		if !strings.Contains(r.stdout, f+" ") {
			t.Errorf("agent --help does not list %s", f)
		}
	}
}

func TestVersion(t *testing.T) {
	s := loadSchema(t)
	obj, err := os.ReadFile("../../bpf/xdpfab_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(obj)
	hash := hex.EncodeToString(sum[:])
	text := run(t, "version")
	if text.code != 0 || text.stderr != "" {
		t.Fatalf("version: exit %d %s", text.code, text.stderr)
	}
	for _, want := range []string{"module      github.com/xdpfab/xdpfab", "bpf object  sha256:" + hash, "kernel      ", "go          go1."} {
		if !strings.Contains(text.stdout, want) {
			t.Errorf("version does not say %q:\n%s", want, text.stdout)
		}
	}
	if r := run(t, "--version"); r != text {
		t.Errorf("--version differs from version:\n%s", r.stdout)
	}
	r := run(t, "version", "-o", "json")
	m := validate(t, s, "version", r.stdout)
	if m["bpf_object_sha256"] != hash {
		t.Errorf("bpf_object_sha256 %v, want %s", m["bpf_object_sha256"], hash)
	}
	if r2 := run(t, "--version", "-o", "json"); r2.stdout != r.stdout {
		t.Errorf("--version -o json:\n%s", r2.stdout)
	}
	// The binary was built from this work tree with VCS stamping (which the
	// go command does in a clone: a .git directory, not a worktree's file).
	if st, err := os.Stat("../../.git"); err != nil || !st.IsDir() {
		t.Logf("no .git directory: the build is not stamped")
	} else if head, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		if c := strings.TrimSpace(string(head)); m["commit"] != c || !strings.Contains(text.stdout, "commit      "+c) {
			t.Errorf("commit %v, want %s (git rev-parse HEAD)\n%s", m["commit"], c, text.stdout)
		}
	}
}

func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		r := run(t, "completion", sh)
		if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "xdpfab") || len(r.stdout) < 1000 {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes", sh, r.code, r.stderr, len(r.stdout))
		}
	}
	if r := run(t, "completion", "tcsh"); r.code != 64 {
		t.Errorf("completion tcsh: exit %d", r.code)
	}
	// Completions come from the commands: av's subcommands, and -o's values.
	r := run(t, "__complete", "av", "ins")
	if r.code != 0 || !strings.Contains(r.stdout, "insert\t") || !strings.Contains(r.stdout, "insertsym\t") {
		t.Errorf("__complete av ins:\n%s", r.stdout)
	}
	r = run(t, "__complete", "status", "-o", "")
	if !strings.Contains(r.stdout, "json\n") {
		t.Errorf("__complete status -o:\n%s", r.stdout)
	}
}

// Usage errors: exit 64, the message once on stderr with the usage hint,
// nothing on stdout; no value falls back to a default.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"demo", "-n", "-1"}, "-n -1: want 1 or more"},
		{[]string{"demo", "-n", "0"}, "-n 0: want 1 or more"},
		{[]string{"demo", "-size", "0"}, "--size 0: want 1 or more bytes"}, // single-dash long flags still work
		{[]string{"demo", "--size", "-5"}, "--size -5"},
		{[]string{"demo", "-n", "x"}, `invalid argument "x"`},
		{[]string{"stats", "--watch", "-1s"}, "--watch -1s: want a positive duration"},
		{[]string{"stats", "--watch", "0"}, "--watch 0s: want a positive duration"},
		{[]string{"stats", "--watch", "soon"}, `invalid argument "soon"`},
		{[]string{"status", "-o", "yaml"}, "-o yaml: want text or json"},
		{[]string{"status", "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"agent"}, `required flag(s) "iface" not set`},
		{[]string{"agent", "--iface", "lo", "--gc-interval", "0"}, "--gc-interval 0s: want a positive duration"},
		{[]string{"agent", "--iface", "lo", "--mode", "fast"}, "--mode"},
		{[]string{"agent", "--iface", "lo", "--log-format", "xml"}, "--log-format xml: want text or json"},
		{[]string{"agent", "--iface", "lo", "--log-level", "loud"}, "--log-level loud"},
		{[]string{"agent", "--iface", "lo", "--ports", "0-10"}, "--ports"},
		{[]string{"agent", "--iface", "lo", "--av-entries", "-1"}, `invalid argument "-1"`},
		{[]string{"agent", "--iface", "lo", "--max-avs", "-1"}, `invalid argument "-1"`},
		{[]string{"agent", "--iface", "lo", "--umem-total", "4096"}, "--umem-total 4096: want at least 1 MiB"},
		{[]string{"agent", "--iface", "lo", "--endpoints-total", "-1"}, "--endpoints-total -1: want 0 (the default) or more"},
		{[]string{"agent", "--iface", "lo", "--channels-total", "-2"}, "--channels-total -2"},
		{[]string{"agent", "--iface", "lo", "--user-avs", "-1"}, "--user-avs -1"},
		{[]string{"agent", "--iface", "lo", "--neighbors-total", "-1"}, "--neighbors-total -1"},
		{[]string{"agent", "--iface", "lo", "--neighbors-per-uid", "-1"}, "--neighbors-per-uid -1"},
		{[]string{"agent", "--iface", "lo", "--user-av-entries", "-1"}, "--user-av-entries -1"},
		{[]string{"agent", "--iface", "lo", "--xsk-slots-per-uid", "-1"}, "--xsk-slots-per-uid -1"},
		{[]string{"agent", "--iface", "lo", "--xsk-slots-total", "-1"}, "--xsk-slots-total -1"},
		{[]string{"pingpong", "client", "--iface", "lo", "--local", "1.2.3.4:5", "--peer", "1.2.3.4:6", "-I", "0"}, "-I 0: want 1 or more"},
		{[]string{"pingpong", "client", "--iface", "lo", "--local", "1.2.3.4:5", "--peer", "1.2.3.4:6", "--warmup", "-1"}, "--warmup -1"},
		{[]string{"pingpong", "client", "--iface", "lo", "--local", "1.2.3.4:5", "--peer", "1.2.3.4:6", "-I", "1000000000000"},
			"-I 1000000000000: want 1 or more iterations, at most 100000000"},
		{[]string{"pingpong", "client", "--iface", "lo", "--local", "1.2.3.4:5", "--peer", "1.2.3.4:6", "--warmup", "1000000000000"},
			"--warmup 1000000000000: want 0 or more, at most 100000000"},
		{[]string{"pingpong", "client", "--iface", "lo", "--local", "1.2.3.4:5", "--peer", "1.2.3.4:6", "-S", "64,0"}, "-S 0: sizes are positive"},
		{[]string{"pingpong", "server", "--iface", "lo", "--local", "1.2.3.4:5", "--busy-poll", "-1us"}, "--busy-poll -1µs"},
		{[]string{"pingpong", "server", "--local", "1.2.3.4:5"}, `required flag(s) "iface" not set`},
		{[]string{"av", "create", "--name", "x", "--type", "ring"}, "--type ring: want table or map"},
		{[]string{"av", "create", "--name", "x", "--count", "-1"}, "--count -1"},
		{[]string{"av", "create"}, `required flag(s) "name" not set`},
		{[]string{"av", "insert", "--name", "x"}, "want one or more addresses"},
		{[]string{"av", "insert", "--name", "x", "--user-ids", "1,2", "1.2.3.4:5"}, "--user-ids has 2 IDs for 1 addresses"},
		{[]string{"av", "insertsym", "--name", "x", "--", "n", "-1", "5000", "1"}, "want positive numbers"},
		{[]string{"av", "lookup", "--name", "x"}, "want one FI_ADDR"},
		{[]string{"av", "bogus"}, `unknown command "bogus" for "xdpfab av"`},
		{[]string{"bogus"}, `unknown command "bogus" for "xdpfab"`},
		{[]string{"status", "--bogus"}, "unknown flag: --bogus"},
	} {
		r := run(t, tc.args...)
		if r.code != 64 || r.stdout != "" || strings.Count(r.stderr, tc.msg) != 1 || strings.Count(r.stderr, "for usage.") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant exit 64 and %q once with the usage hint", tc.args, r.code, r.stdout, r.stderr, tc.msg)
		}
	}
}

// A malformed address or identifier is EINVAL with the parser's message,
// never a network errno; nothing reaches the agent (there is none here).
func TestInvalidArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"av", "insert", "--name", "j", "999.1.1.1:5"}, "IPv4 field has value >255"},
		{[]string{"av", "insert", "--name", "j", "[::1]:99999"}, `invalid port "99999"`},
		{[]string{"av", "insert", "--name", "j", "bogus"}, `address "bogus": not an ip:port`},
		{[]string{"av", "insert", "--name", "j", "1.2.3.4"}, `address "1.2.3.4": not an ip:port`},
		{[]string{"av", "insert", "--name", "j", "fi_sockaddr_in://[::1]:5"}, "does not match the address"},
		{[]string{"av", "insert", "-name", "j", "--user-ids", "x", "1.2.3.4:5"}, `user ID "x"`},
		{[]string{"av", "remove", "--name", "j", "--", "-1"}, `fi_addr "-1"`},
		{[]string{"av", "lookup", "--name", "j", "99999999999999999999"}, "value out of range"},
		{[]string{"av", "straddr", "1.2.3.4"}, "not an ip:port"},
		{[]string{"pingpong", "server", "--iface", "lo", "--local", "999.1.1.1:5"}, `--local "999.1.1.1:5": ParseAddr("999.1.1.1"): IPv4 field has value >255`},
		{[]string{"pingpong", "client", "--iface", "lo", "--local", "1.2.3.4:5", "--peer", "x"}, `--peer "x"`},
	} {
		r := run(t, tc.args...)
		if r.code != 22 || r.stdout != "" || !strings.Contains(r.stderr, tc.msg) || !strings.Contains(r.stderr, "(EINVAL)") ||
			strings.Contains(r.stderr, "EADDRNOTAVAIL") || strings.Contains(r.stderr, "agent") {
			t.Errorf("%q: exit %d, stdout %q, stderr:\n%s\nwant exit 22 (EINVAL) and %q", tc.args, r.code, r.stdout, r.stderr, tc.msg)
		}
	}
}

// av straddr formats offline, text and JSON.
func TestStrAddrOffline(t *testing.T) {
	s := loadSchema(t)
	for in, want := range map[string]string{
		"198.18.0.1:5000":                  "fi_sockaddr_in://198.18.0.1:5000",
		"[2001:2::1]:7000":                 "fi_sockaddr_in6://[2001:2::1]:7000",
		"fi_sockaddr_in://10.1.2.3:4":      "fi_sockaddr_in://10.1.2.3:4",
		"fi_sockaddr://[2001:2::1:2]:9999": "fi_sockaddr_in6://[2001:2::1:2]:9999",
	} {
		r := run(t, "av", "straddr", in)
		if r.code != 0 || r.stdout != want+"\n" || r.stderr != "" {
			t.Errorf("straddr %s: exit %d %q %q, want %q", in, r.code, r.stdout, r.stderr, want)
		}
		r = run(t, "av", "straddr", in, "-o", "json")
		if m := validate(t, s, "av_straddr", r.stdout); m["straddr"] != want {
			t.Errorf("straddr %s -o json: %v", in, m["straddr"])
		}
	}
	// The flags of earlier releases are accepted, with a notice on stderr.
	r := run(t, "av", "straddr", "--name", "job", "1.2.3.4:5")
	if r.code != 0 || r.stdout != "fi_sockaddr_in://1.2.3.4:5\n" || !strings.Contains(r.stderr, "--name is not needed") {
		t.Errorf("straddr --name: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// With -o json every error is one JSON document on stderr, usage errors
// included, and stdout stays empty.
func TestJSONErrors(t *testing.T) {
	s := loadSchema(t)
	for _, tc := range []struct {
		args  []string
		code  int
		errno any
	}{
		{[]string{"av", "insert", "--name", "j", "-o", "json", "bogus"}, 22, "EINVAL"},
		{[]string{"av", "insert", "-o", "json", "bogus"}, 64, nil},
		{[]string{"stats", "--watch", "-1s", "-o", "json"}, 64, nil},
		{[]string{"status", "--output=json"}, 2, "ENOENT"}, // no agent
		{[]string{"av", "list", "--name", "j", "-ojson"}, 2, "ENOENT"},
	} {
		r := run(t, tc.args...)
		if r.code != tc.code || r.stdout != "" {
			t.Errorf("%q: exit %d, stdout %q", tc.args, r.code, r.stdout)
		}
		m := validate(t, s, "error", r.stderr)
		if m["errno_name"] != tc.errno || m["exit_status"] != float64(tc.code) || m["usage"] != (tc.code == 64) {
			t.Errorf("%q: %s", tc.args, r.stderr)
		}
	}
}
