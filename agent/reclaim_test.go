package agent_test

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
)

// TestLibraryChild is the root process of TestDeadLibraryProcessReclaimed:
// it uses the library directly on the agent's pins (no agent connection),
// opens an anonymous AV with an entry and an endpoint, says "ready" and
// waits to be killed. It does nothing unless started by that test.
func TestLibraryChild(t *testing.T) {
	if os.Getenv("XDPFAB_LIBCHILD") == "" {
		t.Skip("helper process for TestDeadLibraryProcessReclaimed")
	}
	fail := func(err error) { fmt.Println("error:", err); os.Exit(1) }
	objs, err := loader.Load(loader.Config{PinRoot: os.Getenv("XDPFAB_PIN_ROOT")})
	if err != nil {
		fail(err)
	}
	a, err := av.Open(objs, &av.Attr{})
	if err != nil {
		fail(err)
	}
	if _, err := a.Insert([]netip.AddrPort{netip.MustParseAddrPort("198.18.99.1:7000")}, nil, 0, nil); err != nil {
		fail(err)
	}
	tx, _ := cq.Open(cq.Attr{})
	rx, _ := cq.Open(cq.Attr{})
	if _, err := ep.Open(objs, ep.Attr{Ifname: testbed.LinkName, Local: netip.MustParseAddrPort(os.Getenv("XDPFAB_LOCAL")),
		AV: a, TxCQ: tx, RxCQ: rx, BindMode: dataplane.BindCopy}); err != nil {
		fail(err)
	}
	fmt.Println("ready")
	time.Sleep(time.Hour)
}

// A root process that uses the library directly and dies by SIGKILL
// leaves nothing behind for long: the agent removes its endpoint-table
// entry (the address can be bound again), its anonymous AV and the AV
// capacity it held in reserve, by pid and start time.
func TestDeadLibraryProcessReclaimed(t *testing.T) {
	n := newNode(t)
	n.startAgent("--gc-interval", "100ms")
	local := netip.AddrPortFrom(n.bed.A.IPv4, 7300)
	objs, err := loader.OpenPinned(n.pinRoot)
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	usedBefore := capacity(t, n)

	cmd := exec.Command(os.Args[0], "-test.run=^TestLibraryChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "XDPFAB_LIBCHILD=1", "XDPFAB_PIN_ROOT="+n.pinRoot, "XDPFAB_LOCAL="+local.String())
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := n.bed.A.Do(cmd.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("library process: %q", line)
	}
	if eps := n.endpoints(); eps != 1 {
		t.Fatalf("%d endpoints while the library process runs, want 1", eps)
	}
	if used := capacity(t, n); used <= usedBefore {
		t.Fatalf("capacity in use %d, before %d: the process reserved nothing?", used, usedBefore)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && (n.endpoints() != 0 || anonymousAVs(t, objs) != 0 || capacity(t, n) != usedBefore) {
		time.Sleep(50 * time.Millisecond)
	}
	if eps := n.endpoints(); eps != 0 {
		t.Errorf("%d endpoints left by the dead process", eps)
	}
	if k := anonymousAVs(t, objs); k != 0 {
		t.Errorf("%d anonymous AVs left by the dead process", k)
	}
	if used := capacity(t, n); used != usedBefore {
		t.Errorf("AV capacity in use %d after the dead process's was reclaimed, want %d", used, usedBefore)
	}
	if !strings.Contains(n.logs.String(), `msg=audit op=ep.close`) || !strings.Contains(n.logs.String(), `reason="owner process gone"`) {
		t.Errorf("no log line for the reclaimed endpoint:\n%s", n.logs.String())
	}
	// The address is free: an endpoint binds it again.
	w, err := loader.Load(loader.Config{PinRoot: n.pinRoot})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	a, _ := av.Open(w, &av.Attr{})
	defer a.Close()
	tx, _ := cq.Open(cq.Attr{})
	rx, _ := cq.Open(cq.Attr{})
	err = n.bed.A.Do(func() error {
		e, err := ep.Open(w, ep.Attr{Ifname: testbed.LinkName, Local: local, AV: a, TxCQ: tx, RxCQ: rx, BindMode: dataplane.BindCopy})
		if err == nil {
			e.Close()
		}
		return err
	})
	if err != nil {
		t.Errorf("the dead process's address: %v", err)
	}
}

func capacity(t *testing.T, n *node) int {
	t.Helper()
	objs, err := loader.OpenPinned(n.pinRoot)
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	var g bpf.AVMeta
	if err := objs.AVMeta.Lookup(uint32(0), &g); err != nil {
		t.Fatal(err)
	}
	return int(g.Count)
}

func anonymousAVs(t *testing.T, objs *loader.Objects) int {
	t.Helper()
	k := 0
	for id := uint32(1); id < objs.AVMeta.MaxEntries(); id++ {
		var m bpf.AVMeta
		if objs.AVMeta.Lookup(id, &m) == nil && m.InUse != 0 && m.NameString() == "" {
			k++
		}
	}
	return k
}
