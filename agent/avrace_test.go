package agent_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/agent"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

// A change of an AV is checked against the AV it changes. An owner's
// requests that passed their check while another of its requests destroyed
// the AV used to go on by name, into the AV another uid made under the
// name in between: the owner destroyed the other's AV, or inserted into
// it. Here the attacker destroys its AV from two connections and inserts
// into it from four at once while the victim makes one of the name as soon as
// it is free; the victim's AV must stay whole and the victim's alone.
func TestAVWriteChecksTheAVItChanges(t *testing.T) {
	_, _, sock := inProcessAgent(t, func(c *agent.Config) { c.SocketGroup = "65534" })
	const attacker, victim = 4601, 4602
	var evil [6]*client.Client
	for i := range evil {
		evil[i] = mustDialAs(t, sock, attacker, nobody)
	}
	vc := mustDialAs(t, sock, victim, nobody)
	const victimAddr = "198.18.46.2:7000"
	lost, stuffed, raced := 0, 0, 0
	deadline := time.Now().Add(5 * time.Second)
	for round := 0; round < 400 && time.Now().Before(deadline); round++ {
		name := fmt.Sprintf("contested%d", round)
		if _, err := evil[0].AVCreate(ctl.AVCreateArgs{Name: name}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		done := make(chan struct{})
		wg.Go(func() { evil[0].AVDestroy(name) })
		wg.Go(func() { evil[1].AVDestroy(name) })
		for _, c := range evil[2:] {
			wg.Go(func() { c.AVInsert(ctl.AVInsertArgs{Name: name, Addrs: []string{"198.18.46.1:6666"}}) })
		}
		go func() { wg.Wait(); close(done) }()
		// The victim takes the name the moment it is free.
		created := false
		for !created {
			_, err := vc.AVCreate(ctl.AVCreateArgs{Name: name})
			switch {
			case err == nil:
				created = true
			case errors.Is(err, fi.ENOENT):
				// Gone between the create's look and its open: try again.
			case !errors.Is(err, fi.EEXIST):
				t.Fatalf("victim's create: %v", err)
			}
			select {
			case <-done:
				if !created {
					if _, err := vc.AVCreate(ctl.AVCreateArgs{Name: name}); err != nil {
						// The attacker's insert may have come after both destroys
						// into nothing; the name is free now.
						t.Fatalf("victim's create after the attacker's requests: %v", err)
					}
					created = true
				}
			default:
			}
		}
		raced++
		<-done
		if _, err := vc.AVInsert(ctl.AVInsertArgs{Name: name, Addrs: []string{victimAddr}}); err != nil {
			if errors.Is(err, fi.ENOENT) || errors.Is(err, fi.EOPBADSTATE) {
				lost++ // destroyed by the attacker's request
				continue
			}
			t.Fatalf("victim's insert: %v", err)
		}
		info, err := vc.AVList(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range info.List {
			if e.Addr.String() != victimAddr {
				stuffed++
				break
			}
		}
		if err := vc.AVDestroy(name); err != nil {
			t.Fatal(err)
		}
	}
	if lost > 0 || stuffed > 0 {
		t.Errorf("in %d rounds, the attacker's requests checked against its own AV destroyed the victim's AV of the name %d times, inserted into it %d times",
			raced, lost, stuffed)
	}
	t.Logf("%d rounds", raced)
}

// An AV destroyed outside the agent (by a root process with the library)
// left the agent's handle on it closed for good: every later request on
// the name was EOPBADSTATE, and av create of the name ENOENT, until the
// agent restarted. The handle is dropped and the name opened afresh.
func TestAVDestroyedOutsideTheAgent(t *testing.T) {
	_, _, sock := inProcessAgent(t, func(c *agent.Config) { c.SocketGroup = "65534" })
	const owner = 4603
	c := mustDialAs(t, sock, owner, nobody)
	if _, err := c.AVCreate(ctl.AVCreateArgs{Name: "outside"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AVInsert(ctl.AVInsertArgs{Name: "outside", Addrs: []string{"198.18.46.3:7000"}}); err != nil {
		t.Fatal(err)
	}
	dp, err := loader.Load(loader.Config{PinRoot: filepath.Join(filepath.Dir(sock), "bpffs")})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	if err := av.Destroy(dp, "outside"); err != nil {
		t.Fatal(err)
	}
	// Made again by the library, in another slot (another AV takes the
	// one it had), for the same owner.
	var outside []*av.AV
	defer func() {
		for _, v := range outside {
			v.Close()
		}
	}()
	for _, name := range []string{"filler", "outside"} {
		v, err := av.Open(dp, &av.Attr{Name: name, Owner: &av.Owner{UID: owner, Group: av.NoGroup}})
		if err != nil {
			t.Fatal(err)
		}
		outside = append(outside, v)
	}
	if _, err := c.AVInsert(ctl.AVInsertArgs{Name: "outside", Addrs: []string{"198.18.46.4:7000"}}); err != nil {
		t.Errorf("insert into the AV made again outside the agent: %v", err)
	}
	if info, err := c.AVList("outside"); err != nil || info.Entries != 1 {
		t.Errorf("list of the AV made again: %d entries, %v; want 1", info.Entries, err)
	}
	// Destroyed outside again: av create of the name makes it anew.
	if err := av.Destroy(dp, "outside"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AVCreate(ctl.AVCreateArgs{Name: "outside"}); err != nil {
		t.Errorf("av create of a name whose AV was destroyed outside the agent: %v", err)
	}
	if _, err := c.AVInsert(ctl.AVInsertArgs{Name: "outside", Addrs: []string{"198.18.46.5:7000"}}); err != nil {
		t.Errorf("insert into the AV made anew: %v", err)
	}
}

// av list fetches an AV page by page; each page used to build every entry
// of the AV first (20 listings of 65,536 entries took 6.4 s and 4.2 GiB).
// A page now costs what it lists: 16 pages of one entry each of a
// 65,536-entry AV allocate less than one page of all its entries used to
// (4 MiB), and the whole listing still comes back in index order.
func TestAVListPageCostsItsEntries(t *testing.T) {
	_, _, sock := inProcessAgent(t)
	root, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	const n = 65536
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "pages", Count: n}); err != nil {
		t.Fatal(err)
	}
	for done := 0; done < n; done += 16384 {
		batch := make([]string, 16384)
		for i := range batch {
			k := done + i
			batch[i] = fmt.Sprintf("198.18.%d.%d:%d", 100+k>>14, k>>6&255, 7000+k&63)
		}
		if r, err := root.AVInsert(ctl.AVInsertArgs{Name: "pages", Addrs: batch}); err != nil || r.Inserted != len(batch) {
			t.Fatalf("fill: %d of %d, %v", r.Inserted, len(batch), err)
		}
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for page := range 16 {
		var info ctl.AVInfo
		if _, err := root.Call(ctl.OpAVList.Name(), ctl.AVListArgs{Name: "pages", Offset: page * 4096, Limit: 1}, &info); err != nil {
			t.Fatal(err)
		}
		if len(info.List) != 1 || info.Entries != n || info.List[0].FiAddr != fi.Addr(page*4096) {
			t.Fatalf("page at %d: %+v", page*4096, info.List)
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Errorf("16 one-entry pages of a %d-entry AV allocated %d KiB", n, got>>10)
	} else {
		t.Logf("16 one-entry pages: %d KiB", got>>10)
	}
	info, err := root.AVList("pages")
	if err != nil || len(info.List) != n {
		t.Fatalf("whole listing: %d entries, %v", len(info.List), err)
	}
	for i, e := range info.List {
		if e.FiAddr != fi.Addr(i) {
			t.Fatalf("entry %d of the listing is fi_addr %d", i, e.FiAddr)
		}
	}
}
