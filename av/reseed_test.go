//go:build linux

package av_test

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

// colliding returns five IPv6 sources whose hash under the table's
// current seed is one and the same value: what anyone who can read a
// named AV's table (its seed is in its header) can compute without a
// search, since the hash inverts in the interface id. Five sources with
// one hash share two buckets of two slots: the fifth has no slot, and the
// table must be rebuilt with another seed.
func colliding(t *testing.T, dp *loader.Objects, a *av.AV, round byte) []netip.AddrPort {
	t.Helper()
	m, _, err := dp.OpenAVTableMap(a.ID(), true)
	if err != nil {
		t.Fatal(err)
	}
	page := make([]byte, bpf.AVPage)
	err = m.Lookup(uint32(0), &page)
	m.Close()
	if err != nil {
		t.Fatal(err)
	}
	seed := binary.LittleEndian.Uint64(page[0:8])
	const k = 0x9e3779b97f4a7c15
	kinv := uint64(1)
	for range 6 { // Newton's iteration for k's inverse modulo 2^64
		kinv *= 2 - k*kinv
	}
	unxs := func(y uint64) uint64 { return y ^ y>>32 } // x ^ x>>32 is its own inverse
	mix := func(h, w uint64) uint64 { h ^= w; h *= k; return h ^ h>>32 }
	prefix := [8]byte{0x20, 0x01, 0x00, 0x02, 0, 0, 0, round}
	w0 := binary.NativeEndian.Uint64(prefix[:])
	h1 := mix(seed, w0)
	target := 0x1234567887654321 ^ uint64(round)
	var out []netip.AddrPort
	for j := range 5 {
		port := uint16(30000 + j)
		probe := bpf.MakeAddr(netip.AddrPortFrom(netip.MustParseAddr("2001:2::1"), port))
		w2 := uint64(probe.Port) | uint64(probe.Family)<<16
		h2 := (unxs(target) * kinv) ^ w2
		w1 := (unxs(h2) * kinv) ^ h1
		var a16 [16]byte
		copy(a16[:8], prefix[:])
		binary.NativeEndian.PutUint64(a16[8:], w1)
		ap := netip.AddrPortFrom(netip.AddrFrom16(a16), port)
		if got := bpf.AVHash(seed, bpf.MakeAddr(ap)); got != target {
			t.Fatalf("inverted hash %x, want %x", got, target)
		}
		out = append(out, ap)
	}
	return out
}

// A writer of a named AV inserts sources chosen to collide, over and over:
// each time the table had to be rebuilt with a new seed, a copy of the
// whole table under the node's dataplane lock, which every AV change and
// endpoint open of the node waits for (35 ms per five inserts at 60,000
// entries, measured). Now a second such rebuild within ten times the
// first's duration is refused with EAGAIN: the source that needed it is
// not inserted (FI_ADDR_NOTAVAIL, nothing else changes); once the time
// has passed, the same insert succeeds.
func TestReseedRateLimited(t *testing.T) {
	dp := newDP(t, 1<<16)
	a := openAV(t, dp, av.Attr{Name: "reseed", Count: 32768})
	base := make([]netip.AddrPort, 20000)
	for i := range base {
		base[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), 7000)
	}
	if _, err := a.Insert(base, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	r0 := av.Rebuilds(a)
	if _, err := a.Insert(colliding(t, dp, a, 0), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if got := av.Rebuilds(a) - r0; got != 1 {
		t.Fatalf("%d rebuilds for the first collision, want 1", got)
	}
	second := colliding(t, dp, a, 1)
	n0, _ := a.Len()
	out := make([]fi.Addr, len(second))
	status := make([]fi.Errno, len(second))
	n, err := a.Insert(second, out, fi.SyncErr, status)
	if !errors.Is(err, fi.EAGAIN) || n != 4 || status[4] != fi.EAGAIN || out[4] != fi.AddrNotAvail {
		t.Fatalf("second collision: %d inserted, %v, status %v, fi_addr %v; want 4, EAGAIN for the fifth", n, err, status, out)
	}
	if got := av.Rebuilds(a) - r0; got != 1 {
		t.Fatalf("%d rebuilds, want still 1", got)
	}
	if n1, _ := a.Len(); n1 != n0+4 {
		t.Fatalf("%d entries after the refused insert, want %d", n1, n0+4)
	}
	// Retried after the pause, it goes in.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := a.Insert(second[4:], out[4:], 0, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, fi.EAGAIN) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := av.Rebuilds(a) - r0; got != 2 {
		t.Fatalf("%d rebuilds after the retry, want 2", got)
	}
}

// EntriesPage is Entries a page at a time: the same entries, in order,
// for any offset and limit, with removed indices skipped.
func TestEntriesPage(t *testing.T) {
	dp := newDP(t, 1<<12)
	a := openAV(t, dp, av.Attr{})
	addrs := make([]netip.AddrPort, 300)
	for i := range addrs {
		addrs[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, 1, byte(i)}), uint16(7000+i))
	}
	if _, err := a.Insert(addrs, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove([]fi.Addr{0, 7, 150, 299}, 0); err != nil {
		t.Fatal(err)
	}
	all, err := a.Entries()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ off, lim int }{{0, 10}, {0, 1000}, {5, 3}, {290, 50}, {296, 10}, {100, 0}} {
		page, total, err := a.EntriesPage(c.off, c.lim)
		if err != nil || total != len(all) {
			t.Fatalf("EntriesPage(%d, %d): total %d, %v; want %d", c.off, c.lim, total, err, len(all))
		}
		want := all[c.off:min(len(all), c.off+max(c.lim, 0))]
		if len(page) != len(want) {
			t.Fatalf("EntriesPage(%d, %d): %d entries, want %d", c.off, c.lim, len(page), len(want))
		}
		for i := range page {
			if page[i] != want[i] {
				t.Fatalf("EntriesPage(%d, %d)[%d] = %+v, want %+v", c.off, c.lim, i, page[i], want[i])
			}
		}
	}
	if _, _, err := a.EntriesPage(len(all)+1, 1); !errors.Is(err, fi.EINVAL) {
		t.Fatalf("offset past the end: %v, want EINVAL", err)
	}
}
