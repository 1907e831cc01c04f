//go:build linux

package avtab

import (
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

func load(t *testing.T) *loader.Objects {
	t.Helper()
	testutil.RequirePrivileged(t)
	dp, err := loader.Load(loader.Config{AVEntries: 1 << 16, MaxAVs: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	return dp
}

func addr(i int) bpf.Addr {
	return bpf.MakeAddr(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), uint16(1000+i%13)))
}

func install(t *testing.T, dp *loader.Objects, id, capacity uint32) *Table {
	t.Helper()
	tab, err := New(dp, id, capacity)
	if err != nil {
		t.Fatal(err)
	}
	if err := Install(dp, id, tab); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tab.Close() })
	return tab
}

// A table filled to its capacity (the forward index 5/8 full) holds every
// source at its index: cuckoo moves keep each findable, and the index
// entries follow the moves.
func TestFillToCapacity(t *testing.T) {
	dp := load(t)
	tab := install(t, dp, 1, 4096)
	n := int(tab.Cap())
	full := 0
	for i := range n {
		a := addr(i)
		if _, _, ok := tab.Locate(&a); ok {
			t.Fatalf("%v found before its insert", a.AddrPort())
		}
		if _, err := tab.Place(&a, uint32(i), uint64(i), 0, 0); errors.Is(err, ErrTableFull) {
			full++
			continue
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if full > 0 {
		t.Logf("%d of %d found no slot (the AV rebuilds the table then)", full, n)
	}
	if full > n/1000 {
		t.Errorf("%d of %d sources found no slot at 5/8 load", full, n)
	}
	for i := range n {
		a := addr(i)
		pos, s, ok := tab.Find(&a)
		if !ok {
			continue // one of the full ones
		}
		uid, slot, refcnt := tab.Aux(uint32(i))
		if s.FiAddr != uint32(i) || slot != pos || refcnt != 1 || uid != uint64(i) {
			t.Fatalf("%v: slot %d holds fi_addr %d; index %d: slot %d refcnt %d user ID %d", a.AddrPort(), pos, s.FiAddr, i, slot, refcnt, uid)
		}
		if got, ok := tab.Addr(uint32(i)); !ok || got != a {
			t.Fatalf("index %d: %v %v, want %v", i, got.AddrPort(), ok, a.AddrPort())
		}
	}
	if int(tab.Live()) != n-full {
		t.Errorf("header counts %d, want %d", tab.Live(), n-full)
	}
}

// A reader maps the table without PROT_WRITE, and cannot gain it.
func TestReaderMappingIsReadOnly(t *testing.T) {
	dp := load(t)
	w := install(t, dp, 2, 64)
	a := addr(1)
	if _, err := w.Place(&a, 0, 7, bpf.AVFUserID, 0); err != nil {
		t.Fatal(err)
	}
	r, err := Open(dp, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !r.ReadOnly() || r.Copied() {
		t.Fatalf("reader: read-only %v, copy %v; want a read-only mapping", r.ReadOnly(), r.Copied())
	}
	if err := unix.Mprotect(r.mem, unix.PROT_READ|unix.PROT_WRITE); !errors.Is(err, unix.EACCES) {
		t.Errorf("mprotect PROT_WRITE on the reader's mapping: %v, want EACCES", err)
	}
	if _, err := r.Place(&a, 1, 0, 0, 0); !errors.Is(err, fi.EACCES) {
		t.Errorf("place through the reader: %v", err)
	}
	if got, ok := r.Addr(0); !ok || got != a {
		t.Errorf("reader sees %v %v", got.AddrPort(), ok)
	}
	// The same memory: the writer's change is the reader's at once.
	b := addr(2)
	if _, err := w.Place(&b, 1, 8, 0, 0); err != nil {
		t.Fatal(err)
	}
	if got, ok := r.Addr(1); !ok || got != b {
		t.Errorf("reader after the writer's insert: %v %v", got.AddrPort(), ok)
	}
}

// A table whose header does not fit its map (written by a broken or
// hostile privileged process) is refused, never indexed out of bounds.
func TestBadHeaderRefused(t *testing.T) {
	dp := load(t)
	w := install(t, dp, 3, 64)
	for _, bad := range []func(h *bpf.AVHdr){
		func(h *bpf.AVHdr) { atomic.StoreUint32(&h.Nbuckets, 1<<30) },
		func(h *bpf.AVHdr) { atomic.StoreUint32(&h.Cap, 1<<30) },
		func(h *bpf.AVHdr) { atomic.StoreUint32(&h.Cap, 3) },
		func(h *bpf.AVHdr) { atomic.StoreUint32(&h.Cap, 0) },
		func(h *bpf.AVHdr) { atomic.StoreUint32(&h.Nbuckets, 0) },
		func(h *bpf.AVHdr) { atomic.StoreUint32(&h.Magic, 0) },
		func(h *bpf.AVHdr) { atomic.StoreUint32(&h.AvId, 9) },
	} {
		saved := *w.hdr
		bad(w.hdr)
		if r, err := Open(dp, 3, true); !errors.Is(err, fi.EINVAL) {
			t.Errorf("bad header %+v opened: %v", *w.hdr, err)
			r.Close()
		}
		*w.hdr = saved
	}
	// Out-of-range positions and indices are no-ops or misses.
	w.Remove(1 << 20)
	w.Update(1<<20, 1, 0)
	w.SetRefcnt(1<<20, 1)
	if _, ok := w.ReadSlot(1 << 20); ok {
		t.Error("slot beyond the table read")
	}
	if _, ok := w.Addr(1 << 20); ok {
		t.Error("index beyond the table resolved")
	}
}

// A writer that died inside a slot write leaves its number odd: the next
// write of the slot goes to the next odd number and ends even, so readers
// see the slot again (an odd number made even by a blind increment would
// invert what readers take for stable).
func TestStuckSequenceNumber(t *testing.T) {
	dp := load(t)
	w := install(t, dp, 4, 64)
	a := addr(3)
	pos, err := w.Place(&a, 0, 1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	atomic.AddUint32(&w.slots[pos].Seq, 1) // the "crash"
	if _, ok := w.ReadSlot(pos); ok {
		t.Fatal("a slot with an odd number read as stable")
	}
	w.Update(pos, 2, 0)
	if s, ok := w.ReadSlot(pos); !ok || s.Seq&1 != 0 || s.FiAddr != 0 {
		t.Fatalf("after the next write: %+v %v", s, ok)
	}
	if uid, _, _ := w.Aux(0); uid != 2 {
		t.Errorf("user ID %d, want 2", uid)
	}
}
