//go:build linux

package av_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/loader"
)

// A map write that fails undoes exactly the failing call: nothing of it
// stays in the cache or the maps, and earlier FI_MORE inserts, already
// reported, stay queued and reach the maps with the next successful call.
func TestFailedWriteUndoesOnlyTheCall(t *testing.T) {
	testutil.RequirePrivileged(t)
	dp, err := loader.Load(loader.Config{AVEntries: 64, MaxAVs: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	a := openAV(t, dp, av.Attr{})
	early := netip.MustParseAddrPort("198.18.77.1:1")
	out := notAvail(1)
	if _, err := a.Insert([]netip.AddrPort{early}, out, fi.More, nil); err != nil || out[0] != 0 {
		t.Fatalf("FI_MORE insert: %v %v", out, err)
	}
	// Fill the forward map behind the AV's back: its next write fails.
	var junk []bpf.AVKey
	for i := range 64 {
		k := bpf.AVKey{AvId: 999, Src: bpf.MakeAddr(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, 1, byte(i)}), 9))}
		if err := dp.AV.Update(k, bpf.AVVal{}, ebpf.UpdateNoExist); err != nil {
			t.Fatal(err)
		}
		junk = append(junk, k)
	}
	x, y := peer(1), peer(2)
	out = notAvail(3)
	n, err := a.Insert([]netip.AddrPort{x, y, x}, out, 0, nil)
	if n != 0 || err == nil || out[0] != fi.AddrNotAvail || out[2] != fi.AddrNotAvail {
		t.Fatalf("failing insert: n=%d out=%v err=%v", n, out, err)
	}
	if _, err := a.LookupAddr(1); !errors.Is(err, fi.EINVAL) {
		t.Errorf("x survived its failed insert: %v", err)
	}
	if ap, err := a.LookupAddr(0); err != nil || ap != early {
		t.Errorf("the earlier FI_MORE insert was lost: %v %v", ap, err)
	}
	// The maps may hold the earlier call's reverse entry (written before
	// the forward write failed); nothing of the failed call's.
	s := snapshot(t, dp, a.ID())
	for k := range s.rev {
		if k.Index != 0 {
			t.Errorf("the failed call left reverse entry %d", k.Index)
		}
	}
	for k := range s.fwd {
		t.Errorf("the failed call left forward entry %v", k.Src.AddrPort())
	}
	for _, k := range junk {
		dp.AV.Delete(k)
	}
	out = notAvail(1)
	if n, err := a.Insert([]netip.AddrPort{y}, out, 0, nil); n != 1 || err != nil || out[0] != 1 {
		t.Fatalf("insert after the failure: %d %v %v", n, out, err)
	}
	wantXDP(t, dp, a, early, 0)
	wantXDP(t, dp, a, y, 1)
	wantXDP(t, dp, a, x, fi.AddrNotAvail)
	if n, _ := a.Len(); n != 2 {
		t.Errorf("AV holds %d, want 2", n)
	}
}
