//go:build linux

package av_test

import (
	"errors"
	"net/netip"
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
	// 63 fit the table; the 64th and 65th need a bigger one.
	out = notAvail(65)
	n, err := a.Insert(peers(0, 65), out, 0, nil)
	var ie *av.InsertError
	if n != 63 || !errors.As(err, &ie) || ie.First != 63 || out[63] != fi.AddrNotAvail || out[64] != fi.AddrNotAvail || out[62] != 63 {
		t.Fatalf("insert needing growth: n=%d out[62:]=%v err=%v", n, out[62:], err)
	}
	after := snapshot(t, dp, a.ID())
	if len(after.fwd) != len(before.fwd)+63 {
		t.Errorf("table holds %d entries, want %d", len(after.fwd), len(before.fwd)+63)
	}
	for _, p := range peers(63, 2) {
		if _, ok := after.fwd[bpfAddr(p)]; ok {
			t.Errorf("the failed element %v reached the table", p)
		}
	}
	if ap, err := a.LookupAddr(0); err != nil || ap != early {
		t.Errorf("the earlier FI_MORE insert was lost: %v %v", ap, err)
	}
	if _, err := a.LookupAddr(64); !errors.Is(err, fi.EINVAL) {
		t.Errorf("index 64 after its failed insert: %v", err)
	}
	wantXDP(t, dp, a, early, 0)
	wantXDP(t, dp, a, peer(5), 6)
	wantXDP(t, dp, a, peer(63), fi.AddrNotAvail)
	restore()
	out = notAvail(2)
	if n, err := a.Insert(peers(63, 2), out, 0, nil); n != 2 || err != nil || out[0] != 64 || out[1] != 65 {
		t.Fatalf("insert after the failure: %d %v %v", n, out, err)
	}
	if av.Rebuilds(a) == 0 {
		t.Error("the table did not grow")
	}
	wantXDP(t, dp, a, early, 0)
	wantXDP(t, dp, a, peer(63), 64)
	wantXDP(t, dp, a, peer(5), 6)
	if n, _ := a.Len(); n != 66 {
		t.Errorf("AV holds %d, want 66", n)
	}
}
