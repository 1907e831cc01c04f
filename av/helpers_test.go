//go:build linux

package av_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/avtab"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/internal/xdptest"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/wire"
	"golang.org/x/sys/unix"
)

// newDP loads a private dataplane (nothing pinned) for one test.
func newDP(tb testing.TB, entries uint32) *loader.Objects {
	tb.Helper()
	testutil.RequirePrivileged(tb)
	dp, err := loader.Load(loader.Config{AVEntries: entries, MaxAVs: 64})
	if err != nil {
		tb.Fatalf("load dataplane: %v", err)
	}
	tb.Cleanup(func() { dp.Close() })
	return dp
}

func openAV(tb testing.TB, dp *loader.Objects, attr av.Attr) *av.AV {
	tb.Helper()
	a, err := av.Open(dp, &attr)
	if err != nil {
		tb.Fatalf("av.Open(%+v): %v", attr, err)
	}
	tb.Cleanup(func() { a.Close() })
	return a
}

// peer returns 198.18.<i/250>.<i%250+1>:5000+i%7, distinct for i < 62500.
func peer(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i / 250), byte(i%250 + 1)}), uint16(5000+i%7))
}

func peer6(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, 1, 14: byte(i >> 8), 15: byte(i)}), uint16(6000+i%5))
}

func peers(from, n int) []netip.AddrPort {
	out := make([]netip.AddrPort, n)
	for i := range out {
		out[i] = peer(from + i)
	}
	return out
}

func notAvail(n int) []fi.Addr {
	out := make([]fi.Addr, n)
	for i := range out {
		out[i] = fi.AddrNotAvail
	}
	return out
}

// wantXDP checks what the XDP program translates src to now: want is the
// index, or fi.AddrNotAvail for "unknown source".
func wantXDP(tb testing.TB, dp *loader.Objects, a *av.AV, src netip.AddrPort, want fi.Addr) wire.Meta {
	tb.Helper()
	m, known, err := xdptest.Translate(dp, a.ID(), src)
	if err != nil {
		tb.Fatalf("translate %s: %v", src, err)
	}
	switch {
	case want == fi.AddrNotAvail && known:
		tb.Errorf("XDP translates %s to %d, want unknown source", src, m.FiAddr)
	case want != fi.AddrNotAvail && !known:
		tb.Errorf("XDP does not know %s, want fi_addr %d", src, want)
	case want != fi.AddrNotAvail && fi.Addr(m.FiAddr) != want:
		tb.Errorf("XDP translates %s to %d, want %d", src, m.FiAddr, want)
	}
	return m
}

// mapState is everything the kernel holds of an AV, read through a
// mapping of its own (not the AV's): its table's forward index (source ->
// translation) and index entries, and its auth keys, to prove a call
// changed nothing.
type mapState struct {
	fwd map[bpf.Addr]bpf.AVVal
	rev map[uint32]revVal
	key map[bpf.RevKey]bpf.AuthKeyVal
}

// revVal is one in-use index of a table.
type revVal struct {
	Addr   bpf.Addr
	UserId uint64
	Refcnt uint32
}

func snapshot(tb testing.TB, dp *loader.Objects, id uint32) mapState {
	tb.Helper()
	s := mapState{map[bpf.Addr]bpf.AVVal{}, map[uint32]revVal{}, map[bpf.RevKey]bpf.AuthKeyVal{}}
	t, err := avtab.Open(dp, id, true)
	switch {
	case errors.Is(err, fi.ENOENT):
	case err != nil:
		tb.Fatal(err)
	default:
		defer t.Close()
		for idx := range t.High() {
			uid, pos, refcnt := t.Aux(idx)
			if refcnt == 0 {
				continue
			}
			slot, ok := t.ReadSlot(pos)
			if !ok || slot.FiAddr != idx {
				tb.Fatalf("index %d: slot %d holds %+v", idx, pos, slot)
			}
			src := avtab.SlotAddr(&slot)
			s.rev[idx] = revVal{Addr: src, UserId: uid, Refcnt: refcnt}
			if p, _, ok := t.Find(&src); !ok || p != pos {
				tb.Fatalf("index %d: %v not found at its slot %d", idx, src.AddrPort(), pos)
			}
			s.fwd[src] = bpf.AVVal{FiAddr: uint64(idx), UserId: uid, AuthKey: slot.AuthKey, Flags: uint32(slot.Flags)}
		}
		if int(t.Live()) != len(s.fwd) {
			tb.Fatalf("table header counts %d entries, holds %d", t.Live(), len(s.fwd))
		}
	}
	var rk bpf.RevKey
	var kv bpf.AuthKeyVal
	for it := dp.AuthKey.Iterate(); it.Next(&rk, &kv); {
		if rk.AvId == id {
			s.key[rk] = kv
		}
	}
	return s
}

func (s mapState) equal(o mapState) bool {
	if len(s.fwd) != len(o.fwd) || len(s.rev) != len(o.rev) || len(s.key) != len(o.key) {
		return false
	}
	for k, v := range s.fwd {
		if o.fwd[k] != v {
			return false
		}
	}
	for k, v := range s.rev {
		if o.rev[k] != v {
			return false
		}
	}
	for k, v := range s.key {
		if o.key[k] != v {
			return false
		}
	}
	return true
}

func (s mapState) String() string {
	return fmt.Sprintf("%d forward, %d reverse, %d auth keys", len(s.fwd), len(s.rev), len(s.key))
}

// unchanged runs fn, which must fail with want, and checks the AV's maps
// did not change.
func unchanged(tb testing.TB, dp *loader.Objects, a *av.AV, want error, fn func() error) {
	tb.Helper()
	before := snapshot(tb, dp, a.ID())
	err := fn()
	if !errors.Is(err, want) {
		tb.Errorf("got error %v, want %v", err, want)
	}
	if after := snapshot(tb, dp, a.ID()); !before.equal(after) {
		tb.Errorf("failed call changed the maps: before %v, after %v", before, after)
	}
}

func revEntry(tb testing.TB, dp *loader.Objects, a *av.AV, idx fi.Addr) (revVal, bool) {
	tb.Helper()
	v, ok := snapshot(tb, dp, a.ID()).rev[uint32(idx)]
	return v, ok
}

func bpfAddr(ap netip.AddrPort) bpf.Addr { return bpf.MakeAddr(ap) }

// handedDP is what an application of the agent's gets: read-only map
// descriptors of dp (a copy of each AV table), with the stamp page of
// dp's writer when stamps is set (the agent hands it out).
func handedDP(t *testing.T, dp *loader.Objects, stamps *loader.StampPage) *loader.Objects {
	t.Helper()
	fds := func() ([]int, error) {
		maps, err := dp.ReadOnlyFDs()
		if err != nil {
			return nil, err
		}
		// Descriptors of their own, as SCM_RIGHTS would deliver them.
		var out []int
		for _, m := range maps {
			fd, err := unix.Dup(m.FD())
			m.Close()
			if err != nil {
				return nil, err
			}
			out = append(out, fd)
		}
		if stamps != nil {
			for _, sfd := range []int{stamps.FD(), stamps.LifeFD()} {
				fd, err := unix.Dup(sfd)
				if err != nil {
					return nil, err
				}
				out = append(out, fd)
			}
		}
		return out, nil
	}
	first, err := fds()
	if err != nil {
		t.Fatal(err)
	}
	h, err := loader.FromFDs(first)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	h.SetTableSource(fds)
	return h
}
