//go:build linux

package av_test

import (
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/avtab"
	"github.com/xdpfab/xdpfab/loader"
)

// Readers of a named AV follow its growth: one with the pins (it maps
// the table read-only), one with read-only descriptors as the agent hands
// them out (it reads a copy, and fetches the new table's descriptor when
// the one it holds is retired). Both see what the writer inserted after
// the swaps, without re-opening the AV, and so does XDP.
func TestNamedAVReadersFollowGrowth(t *testing.T) {
	dp, root := pinnedDP(t)
	w := openAV(t, dp, av.Attr{Name: "grows", Count: 64})
	if _, err := w.Insert(peers(0, 10), nil, 0, nil); err != nil {
		t.Fatal(err)
	}

	pinned, err := loader.OpenPinned(root)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	byPin := openAV(t, pinned, av.Attr{Name: "grows", Flags: fi.Read})

	byFD := openAV(t, handedDP(t, dp, nil), av.Attr{Name: "grows", Flags: fi.Read})

	for _, r := range []*av.AV{byPin, byFD} {
		if ap, err := r.LookupAddr(7); err != nil || ap != peer(7) {
			t.Fatalf("reader before growth: %v %v", ap, err)
		}
	}
	// 64 indices -> 512: three swaps.
	if _, err := w.Insert(peers(10, 400), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if av.Rebuilds(w) < 3 {
		t.Fatalf("%d table swaps, want 3 or more", av.Rebuilds(w))
	}
	for name, r := range map[string]*av.AV{"pinned reader": byPin, "reader on handed descriptors": byFD} {
		if n, err := r.Len(); n != 410 || err != nil {
			t.Errorf("%s: %d entries (%v), want 410", name, n, err)
		}
		for _, i := range []int{3, 64, 250, 409} {
			if ap, err := r.LookupAddr(fi.Addr(i)); err != nil || ap != peer(i) {
				t.Errorf("%s: index %d = %v %v, want %v", name, i, ap, err, peer(i))
			}
			if ap, ok := r.Resolve(fi.Addr(i)); !ok || ap != peer(i) {
				t.Errorf("%s: resolve %d = %v %v", name, i, ap, ok)
			}
		}
	}
	wantXDP(t, dp, w, peer(3), 3)
	wantXDP(t, dp, w, peer(409), 409)
}

// A writer that died between swapping a grown table into xdpfab_avtab and
// pinning it leaves the old table's pin behind: the next writer finds the
// pin is not the table XDP reads, repairs it, and writes the table XDP
// reads.
func TestStalePinRepaired(t *testing.T) {
	dp, root := pinnedDP(t)
	w := openAV(t, dp, av.Attr{Name: "crashy", Count: 64})
	if _, err := w.Insert(peers(0, 5), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	// The "crash": a copy swapped in, the pin left alone.
	old, err := avtab.Open(dp, w.ID(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	nt, err := avtab.New(dp, w.ID(), 256)
	if err != nil {
		t.Fatal(err)
	}
	defer nt.Close()
	if err := nt.CopyFrom(old); err != nil {
		t.Fatal(err)
	}
	if err := dp.AVTab.Put(w.ID(), nt.Map()); err != nil {
		t.Fatal(err)
	}
	other, err := loader.Load(loader.Config{PinRoot: root, AVEntries: 4096, MaxAVs: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	w2 := openAV(t, other, av.Attr{Name: "crashy"})
	out := notAvail(1)
	if _, err := w2.Insert(peers(5, 1), out, 0, nil); err != nil || out[0] != 5 {
		t.Fatalf("insert after the crash: %v %v", out, err)
	}
	wantXDP(t, dp, w2, peer(5), 5)
	wantXDP(t, dp, w2, peer(2), 2)
}
