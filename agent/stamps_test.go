//go:build linux

package agent_test

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/agent"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

// An application reads a named AV through the agent's descriptors (a copy
// of its table); its owner, another uid, removes a peer and gives the index
// to another peer through the agent. At once (no other call of the
// reader's between), the reader resolves the index to the new peer and no
// longer knows the old one: before, it answered from its copy for ever.
// Then a root process with the library changes the AV without the agent:
// the reader sees that within the agent's stamp interval.
func TestClientCopySeesOwnersChanges(t *testing.T) {
	_, _, sock := inProcessAgent(t, func(c *agent.Config) { c.SocketGroup = fmt.Sprint(nobody) })
	owner := mustDialAs(t, sock, nobody, nobody)
	defer owner.Close()
	if _, err := owner.AVCreate(ctl.AVCreateArgs{Name: "watched"}); err != nil {
		t.Fatal(err)
	}
	peers := []string{"198.18.9.1:7000", "198.18.9.2:7000", "198.18.9.3:7000"}
	if r, err := owner.AVInsert(ctl.AVInsertArgs{Name: "watched", Addrs: peers}); err != nil || r.Inserted != 3 {
		t.Fatal(r, err)
	}
	reader := mustDialAs(t, sock, nobody+1, nobody, nobody)
	defer reader.Close()
	dp, a, err := reader.OpenAV("watched")
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	defer a.Close()
	if ap, ok := a.Resolve(1); !ok || ap.String() != peers[1] {
		t.Fatalf("before: %v %v", ap, ok)
	}
	if err := owner.AVRemove("watched", []fi.Addr{1}); err != nil {
		t.Fatal(err)
	}
	if r, err := owner.AVInsert(ctl.AVInsertArgs{Name: "watched", Addrs: []string{"198.18.9.50:7000"}}); err != nil || r.FiAddrs[0] != 1 {
		t.Fatal(r, err)
	}
	if ap, ok := a.Resolve(1); !ok || ap.String() != "198.18.9.50:7000" {
		t.Errorf("the reader resolves fi_addr 1 to %v %v, the owner's index 1 is 198.18.9.50:7000", ap, ok)
	}
	if s, ok := a.SourceOf(netip.MustParseAddrPort(peers[1])); ok {
		t.Errorf("the reader still knows the removed peer as fi_addr %v", s.FiAddr)
	}
	// Stamps move for changes the agent did not make, too: a root process
	// with the library (here another dataplane handle of this one) removes
	// index 2 from the pinned maps.
	ext, err := loader.Load(loader.Config{PinRoot: filepath.Join(filepath.Dir(sock), "bpffs")})
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	w, err := av.Open(ext, &av.Attr{Name: "watched"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Remove([]fi.Addr{2}, 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := a.Resolve(2); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reader still resolves a removed index after 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// maps.open handed over every AV's table, one descriptor each, and one
// message carries at most ctl.MaxFDs: on a node with about 250 AVs every
// application's OpenAV failed with EMSGSIZE. Now the client names its AV
// and gets that table only (and maps.open without a name says to name
// one).
func TestOpenAVAmongManyAVs(t *testing.T) {
	_, _, sock := inProcessAgent(t)
	root, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	const n = ctl.MaxFDs // more AVs than one message carries tables for
	for i := range n {
		if _, err := root.AVCreate(ctl.AVCreateArgs{Name: fmt.Sprintf("many%d", i), Count: 1}); err != nil {
			t.Fatalf("AV %d: %v", i, err)
		}
	}
	last := fmt.Sprintf("many%d", n-1)
	if r, err := root.AVInsert(ctl.AVInsertArgs{Name: last, Addrs: []string{"198.18.9.1:7000"}}); err != nil || r.Inserted != 1 {
		t.Fatal(r, err)
	}
	dp, a, err := root.OpenAV(last)
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	defer a.Close()
	if ap, ok := a.Resolve(0); !ok || ap.String() != "198.18.9.1:7000" {
		t.Errorf("resolve: %v %v", ap, ok)
	}
	if _, err := root.Call(ctl.OpMapsOpen.Name(), nil, nil); !errors.Is(err, fi.EMSGSIZE) {
		t.Errorf("maps.open of every AV's table: %v, want EMSGSIZE", err)
	}
	if _, _, err := root.OpenAV("no-such-av"); !errors.Is(err, fi.ENOENT) {
		t.Errorf("OpenAV of no AV: %v, want ENOENT", err)
	}
}
