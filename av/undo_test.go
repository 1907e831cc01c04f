//go:build linux

package av_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// A table rebuild that fails (growth past the count hint needs a new,
// bigger table; the kernel may refuse it) fails exactly the elements that
// needed it: nothing of them reaches the table, the elements before them
// and earlier (FI_MORE) calls stay, XDP translates what the AV holds, and
// the next insert, once the kernel allows it, grows the table.
func TestFailedWriteUndoesOnlyTheCall(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{Count: 64})
	early := netip.MustParseAddrPort("198.18.77.1:1")
	out := notAvail(1)
	if _, err := a.Insert([]netip.AddrPort{early}, out, fi.More, nil); err != nil || out[0] != 0 {
		t.Fatalf("FI_MORE insert: %v %v", out, err)
	}
	restore := av.SetRebuildFault(func() error { return unix.ENOMEM })
	before := snapshot(t, dp, a.ID())
	// The table has room for about 64 (how many it places depends on its
	// hash seed, about 63); the rest need a bigger one, which fails.
	all := peers(0, 65)
	out = notAvail(65)
	n, err := a.Insert(all, out, 0, nil)
	var ie *av.InsertError
	var failed, placed []netip.AddrPort
	for i, p := range all {
		if out[i] == fi.AddrNotAvail {
			failed = append(failed, p)
		} else {
			placed = append(placed, p)
		}
	}
	if n < 56 || n >= 65 || len(placed) != n || !errors.As(err, &ie) || out[ie.First] != fi.AddrNotAvail || !errors.Is(err, fi.ENOMEM) {
		t.Fatalf("insert needing growth: n=%d out=%v err=%v", n, out, err)
	}
	after := snapshot(t, dp, a.ID())
	if len(after.fwd) != len(before.fwd)+n {
		t.Errorf("table holds %d entries, want %d", len(after.fwd), len(before.fwd)+n)
	}
	for _, p := range failed {
		if _, ok := after.fwd[bpfAddr(p)]; ok {
			t.Errorf("the failed element %v reached the table", p)
		}
		wantXDP(t, dp, a, p, fi.AddrNotAvail)
	}
	if ap, err := a.LookupAddr(0); err != nil || ap != early {
		t.Errorf("the earlier FI_MORE insert was lost: %v %v", ap, err)
	}
	if _, err := a.LookupAddr(fi.Addr(n + 1)); !errors.Is(err, fi.EINVAL) {
		t.Errorf("index %d after the failed inserts: %v", n+1, err)
	}
	idx5 := out[slices.Index(all, placed[5])]
	wantXDP(t, dp, a, early, 0)
	wantXDP(t, dp, a, placed[5], idx5)
	restore()
	// Once the kernel allows it, the failed ones go in: the table grows.
	out = notAvail(len(failed))
	if k, err := a.Insert(failed, out, 0, nil); k != len(failed) || err != nil {
		t.Fatalf("insert after the failure: %d %v %v", k, out, err)
	}
	if av.Rebuilds(a) == 0 {
		t.Error("the table did not grow")
	}
	wantXDP(t, dp, a, early, 0)
	wantXDP(t, dp, a, failed[0], out[0])
	wantXDP(t, dp, a, placed[5], idx5)
	if n, _ := a.Len(); n != 66 {
		t.Errorf("AV holds %d, want 66", n)
	}
}
