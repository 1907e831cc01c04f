//go:build linux

package av_test

import (
	"runtime"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

// A reader of a named AV through the agent's descriptors reads a copy of
// its table. Before, a lock-free hit answered from the copy whatever had
// changed since: after the owner removed a peer and gave its index to
// another, the reader still attributed the old peer's datagrams to the
// index and sent to the old peer, on every call. Now the copy answers only
// while the AV's change stamp has not moved; the next call after a change
// re-reads the table. Without a stamp page (a reader of the pins), every
// call asks the kernel whether the AV changed.
func TestCopyReaderSeesChanges(t *testing.T) {
	for _, withStamps := range []bool{true, false} {
		dp, _ := pinnedDP(t)
		var stamps *loader.StampPage
		if withStamps {
			var err error
			if stamps, err = loader.NewStampPage(int(dp.Config().MaxAVs)); err != nil {
				t.Fatal(err)
			}
			dp.SetStampPage(stamps)
		}
		w := openAV(t, dp, av.Attr{Name: "copied", Flags: fi.AVUserID})
		if _, err := w.Insert(peers(0, 3), nil, 0, nil); err != nil {
			t.Fatal(err)
		}
		if err := w.SetUserID(1, 111, 0); err != nil {
			t.Fatal(err)
		}
		r := openAV(t, handedDP(t, dp, stamps), av.Attr{Name: "copied", Flags: fi.Read})
		if s, ok := r.SourceOf(peer(1)); !ok || s.FiAddr != 1 || s.UserID != 111 {
			t.Fatalf("stamps %v, before: %+v %v", withStamps, s, ok)
		}
		if err := w.Remove([]fi.Addr{1}, 0); err != nil {
			t.Fatal(err)
		}
		fa := make([]fi.Addr, 1)
		if _, err := w.Insert(peers(50, 1), fa, 0, nil); err != nil || fa[0] != 1 {
			t.Fatalf("reinsert: %v %v", fa, err)
		}
		if err := w.SetUserID(1, 222, 0); err != nil {
			t.Fatal(err)
		}
		if s, ok := r.SourceOf(peer(1)); ok {
			t.Errorf("stamps %v: the removed peer is still fi_addr %d (user ID %d)", withStamps, s.FiAddr, s.UserID)
		}
		if ap, ok := r.Resolve(1); !ok || ap != peer(50) {
			t.Errorf("stamps %v: fi_addr 1 resolves to %v %v, want %v", withStamps, ap, ok, peer(50))
		}
		if s, ok := r.SourceOf(peer(50)); !ok || s.FiAddr != 1 || s.UserID != 222 {
			t.Errorf("stamps %v: the new peer: %+v %v", withStamps, s, ok)
		}
		if ap, err := r.LookupAddr(1); err != nil || ap != peer(50) {
			t.Errorf("stamps %v: lookup of fi_addr 1: %v %v, want %v", withStamps, ap, err, peer(50))
		}
	}
}

// An AV destroyed and made again under its name lands in the same slot;
// its generations go on from the old one's (both used to start at 1, so a
// reader of the old one, a copy without stamps, could see the new one's
// generation equal to the one it read and keep its copy; this test does not
// reach that coincidence, it checks that the reader follows the new AV).
func TestRecreatedAVIsNotTheOld(t *testing.T) {
	dp, _ := pinnedDP(t)
	w := openAV(t, dp, av.Attr{Name: "again"})
	if _, err := w.Insert(peers(0, 2), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	r := openAV(t, handedDP(t, dp, nil), av.Attr{Name: "again", Flags: fi.Read})
	if ap, ok := r.Resolve(1); !ok || ap != peer(1) {
		t.Fatalf("before: %v %v", ap, ok)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := av.Destroy(dp, "again"); err != nil {
		t.Fatal(err)
	}
	w2 := openAV(t, dp, av.Attr{Name: "again"})
	if w2.ID() != w.ID() {
		t.Skipf("made again in slot %d, not %d", w2.ID(), w.ID())
	}
	if _, err := w2.Insert(peers(40, 2), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if ap, ok := r.Resolve(1); ok && ap != peer(41) {
		t.Errorf("the reader of the old AV resolves fi_addr 1 to %v, the new AV's is %v", ap, peer(41))
	}
}

// The agent that handed out the stamp page stops (a restart): it marks
// its page dead, and its clients' copies no longer answer because of it;
// a change made after (by the next agent, or a root process) is seen at
// the next lookup, through the kernel's generation.
func TestCopyReaderAfterAgentStops(t *testing.T) {
	dp, _ := pinnedDP(t)
	stamps, err := loader.NewStampPage(int(dp.Config().MaxAVs))
	if err != nil {
		t.Fatal(err)
	}
	dp.SetStampPage(stamps)
	w := openAV(t, dp, av.Attr{Name: "orphan"})
	if _, err := w.Insert(peers(0, 3), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	r := openAV(t, handedDP(t, dp, stamps), av.Attr{Name: "orphan", Flags: fi.Read})
	if ap, ok := r.Resolve(1); !ok || ap != peer(1) {
		t.Fatalf("before: %v %v", ap, ok)
	}
	stamps.Close() // the agent stops
	if err := w.Remove([]fi.Addr{1}, 0); err != nil {
		t.Fatal(err)
	}
	fa := make([]fi.Addr, 1)
	if _, err := w.Insert(peers(50, 1), fa, 0, nil); err != nil || fa[0] != 1 {
		t.Fatalf("reinsert: %v %v", fa, err)
	}
	if ap, ok := r.Resolve(1); !ok || ap != peer(50) {
		t.Errorf("after the agent stopped: fi_addr 1 resolves to %v %v, want %v", ap, ok, peer(50))
	}
}

// A copy without a stamp page asks the kernel for the AV's generation at
// each lookup, and re-reads the table only when it moved: a first version
// re-read the whole table (and rebuilt the free list) at every call,
// hundreds of kilobytes allocated per Resolve.
func TestCopyReaderWithoutStampsDoesNotReload(t *testing.T) {
	dp, _ := pinnedDP(t)
	w := openAV(t, dp, av.Attr{Name: "plain"})
	if _, err := w.Insert(peers(0, 4000), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	r := openAV(t, handedDP(t, dp, nil), av.Attr{Name: "plain", Flags: fi.Read})
	if ap, ok := r.Resolve(1); !ok || ap != peer(1) {
		t.Fatalf("resolve: %v %v", ap, ok)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for range 50 {
		r.Resolve(1)
	}
	runtime.ReadMemStats(&m1)
	if per := (m1.TotalAlloc - m0.TotalAlloc) / 50; per > 4096 {
		t.Errorf("%d bytes allocated per Resolve: the copy is re-read at every call", per)
	}
}
