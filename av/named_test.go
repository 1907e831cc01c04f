//go:build linux

package av_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/loader"
)

// pinnedDP loads a dataplane pinned on a bpffs mounted in a fresh temporary
// directory, removed with the test.
func pinnedDP(t *testing.T) (*loader.Objects, string) {
	t.Helper()
	testutil.RequirePrivileged(t)
	root := filepath.Join(t.TempDir(), "bpffs")
	dp, err := loader.Load(loader.Config{PinRoot: root, AVEntries: 4096, MaxAVs: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dp.Unpin()
		dp.Close()
		if err := loader.UnmountBPFFS(root); err != nil {
			t.Errorf("unmount %s: %v", root, err)
		}
	})
	return dp, root
}

// childResult is what the child process reports.
type childResult struct {
	Lookups   map[uint64]string
	Inserted  []uint64
	InsertErr int
	RemoveErr int
	Err       string
}

// TestNamedAVChild is the second process of TestNamedAVTwoProcesses; it
// does nothing unless started by it.
func TestNamedAVChild(t *testing.T) {
	root := os.Getenv("XDPFAB_TEST_PINROOT")
	if root == "" {
		t.Skip("helper process for TestNamedAVTwoProcesses")
	}
	res := childResult{Lookups: map[uint64]string{}}
	defer func() { json.NewEncoder(os.Stdout).Encode(res) }()
	dp, err := loader.Load(loader.Config{PinRoot: root, AVEntries: 4096, MaxAVs: 16})
	if err != nil {
		res.Err = err.Error()
		return
	}
	defer dp.Close()
	attr := av.Attr{Name: "shared"}
	if os.Getenv("XDPFAB_TEST_ROLE") == "reader" {
		attr.Flags = fi.Read
	}
	a, err := av.Open(dp, &attr)
	if err != nil {
		res.Err = err.Error()
		return
	}
	defer a.Close()
	for i := range uint64(4) {
		if ap, err := a.LookupAddr(fi.Addr(i)); err == nil {
			res.Lookups[i] = ap.String()
		}
	}
	out := notAvail(1)
	_, err = a.Insert([]netip.AddrPort{netip.MustParseAddrPort("198.18.50.50:5050")}, out, 0, nil)
	res.InsertErr = int(fi.Code(err))
	if err == nil {
		res.Inserted = append(res.Inserted, uint64(out[0]))
	}
	if attr.Flags&fi.Read != 0 {
		res.RemoveErr = int(fi.Code(a.Remove([]fi.Addr{0}, 0)))
	}
}

func runChild(t *testing.T, root, role string) childResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestNamedAVChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "XDPFAB_TEST_PINROOT="+root, "XDPFAB_TEST_ROLE="+role)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child %s: %v\n%s", role, err, out)
	}
	var res childResult
	// The test binary prints PASS after the child's JSON line.
	if err := json.Unmarshal(firstLine(out), &res); err != nil {
		t.Fatalf("child %s output %q: %v", role, out, err)
	}
	if res.Err != "" {
		t.Fatalf("child %s: %s", role, res.Err)
	}
	return res
}

func firstLine(b []byte) []byte {
	for i, c := range b {
		if c == '\n' {
			return b[:i]
		}
	}
	return b
}

// A named AV is shared between processes through the pinned maps; FI_READ
// opens it read-only (docs/semantics.md#named-avs).
func TestNamedAVTwoProcesses(t *testing.T) {
	dp, root := pinnedDP(t)
	a := openAV(t, dp, av.Attr{Name: "shared"})
	if _, err := a.Insert(peers(0, 3), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove([]fi.Addr{1}, 0); err != nil {
		t.Fatal(err)
	}

	w := runChild(t, root, "writer")
	want := map[uint64]string{0: peer(0).String(), 2: peer(2).String()}
	if fmt.Sprint(w.Lookups) != fmt.Sprint(want) {
		t.Errorf("child sees %v, want %v", w.Lookups, want)
	}
	if len(w.Inserted) != 1 || w.Inserted[0] != 1 {
		t.Errorf("child's insert got %v, want the lowest free index 1", w.Inserted)
	}
	// The parent sees the child's insert, and XDP translates it.
	x := netip.MustParseAddrPort("198.18.50.50:5050")
	if ap, err := a.LookupAddr(1); err != nil || ap != x {
		t.Errorf("parent lookup of child's insert: %v %v", ap, err)
	}
	wantXDP(t, dp, a, x, 1)
	out := notAvail(1)
	if _, err := a.Insert(peers(9, 1), out, 0, nil); err != nil || out[0] != 3 {
		t.Errorf("parent insert after child: %v %v", out, err)
	}

	r := runChild(t, root, "reader")
	if r.Lookups[3] != peer(9).String() || r.Lookups[1] != x.String() {
		t.Errorf("reader sees %v", r.Lookups)
	}
	if fi.Errno(r.InsertErr) != fi.EACCES || fi.Errno(r.RemoveErr) != fi.EACCES {
		t.Errorf("reader writes: insert %v, remove %v; want EACCES", fi.Errno(r.InsertErr), fi.Errno(r.RemoveErr))
	}
	if n, _ := a.Len(); n != 4 {
		t.Errorf("after reader: %d entries, want 4", n)
	}
}

// The loader re-opens pinned state instead of replacing it.
func TestPinnedStateSurvivesReload(t *testing.T) {
	dp, root := pinnedDP(t)
	a := openAV(t, dp, av.Attr{Name: "persist"})
	if _, err := a.Insert(peers(0, 10), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	dp2, err := loader.Load(loader.Config{PinRoot: root, AVEntries: 4096, MaxAVs: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer dp2.Close()
	b := openAV(t, dp2, av.Attr{Name: "persist"})
	if n, _ := b.Len(); n != 10 {
		t.Errorf("reloaded dataplane sees %d entries, want 10", n)
	}
	wantXDP(t, dp2, b, peer(4), 4)
	// Another size is an error, never a silent replacement.
	if _, err := loader.Load(loader.Config{PinRoot: root, AVEntries: 8192, MaxAVs: 16}); !errors.Is(err, fi.EEXIST) {
		t.Errorf("incompatible reload: %v", err)
	}
	if n, _ := b.Len(); n != 10 {
		t.Errorf("after refused reload: %d entries", n)
	}
}
