//go:build linux

package av_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// An application without capabilities reads a named AV through the pinned
// maps (loader.OpenPinned): lookups and XDP's view agree, writes are
// refused.
func TestReadPinnedWithoutCapabilities(t *testing.T) {
	dp, root := pinnedDP(t)
	w := openAV(t, dp, av.Attr{Name: "shared-ro"})
	if _, err := w.Insert(peers(0, 3), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := dp.ShareWithGroup(0); err != nil {
		t.Fatal(err)
	}
	caps := []int{unix.CAP_BPF, unix.CAP_SYS_ADMIN, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_NET_ADMIN, unix.CAP_PERFMON}
	testutil.WithoutCaps(t, caps, func() {
		ro, err := loader.OpenPinned(root)
		if err != nil {
			t.Fatalf("OpenPinned without capabilities: %v", err)
		}
		defer ro.Close()
		r, err := av.Open(ro, &av.Attr{Name: "shared-ro", Flags: fi.Read})
		if err != nil {
			t.Fatalf("open the named AV read-only: %v", err)
		}
		defer r.Close()
		if ap, ok := r.Resolve(2); !ok || ap != peer(2) {
			t.Errorf("resolve: %v %v", ap, ok)
		}
		if _, err := r.Insert(peers(9, 1), nil, 0, nil); !errors.Is(err, fi.EACCES) {
			t.Errorf("insert through a read-only view: %v", err)
		}
		if _, err := ro.Counters(); err != nil {
			t.Errorf("counters: %v", err)
		}
		// The same reader follows a later change by the writer (it
		// re-reads the AV when the generation moved).
		if _, err := w.Insert(peers(5, 1), nil, 0, nil); err != nil {
			t.Fatal(err)
		}
		if n, _ := r.Len(); n != 4 {
			t.Errorf("reader sees %d entries, want 4", n)
		}
		if ap, err := r.LookupAddr(3); err != nil || ap != peer(5) {
			t.Errorf("reader's lookup of the new entry: %v %v", ap, err)
		}
	})
	if _, err := loader.OpenPinned(filepath.Join(root, "nope")); !errors.Is(err, fi.ENOENT) {
		t.Errorf("OpenPinned of nothing: %v", err)
	}
}
