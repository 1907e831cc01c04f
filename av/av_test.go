//go:build linux

package av_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wire"
)

// docs/semantics.md#av-open, fabtests av_open_close: types, flags, counts.
func TestOpen(t *testing.T) {
	dp := newDP(t, 4096)
	for _, tc := range []struct {
		in, want av.Type
	}{{av.TypeUnspec, av.TypeTable}, {av.TypeTable, av.TypeTable}, {av.TypeMap, av.TypeMap}} {
		attr := av.Attr{Type: tc.in}
		a, err := av.Open(dp, &attr)
		if err != nil {
			t.Fatal(err)
		}
		if attr.Type != tc.want || a.Attr().Type != tc.want {
			t.Errorf("open %v: reported %v, want %v", tc.in, attr.Type, tc.want)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i <= 16; i++ {
		a, err := av.Open(dp, &av.Attr{Type: av.TypeTable, Count: 1 << i})
		if err != nil {
			t.Fatalf("count %d: %v", 1<<i, err)
		}
		if err := a.Close(); err != nil {
			t.Fatalf("close count %d: %v", 1<<i, err)
		}
	}
	bad := []struct {
		name string
		attr av.Attr
		want error
	}{
		{"unknown type", av.Attr{Type: 7}, fi.EINVAL},
		{"unknown flag", av.Attr{Flags: fi.MultiRecv}, fi.EINVAL},
		{"FI_READ unnamed", av.Attr{Flags: fi.Read}, fi.EINVAL},
		{"FI_READ missing", av.Attr{Flags: fi.Read, Name: "nope"}, fi.ENOENT},
		{"rx_ctx_bits", av.Attr{RxCtxBits: 17}, fi.EINVAL},
		{"negative count", av.Attr{Count: -1}, fi.EINVAL},
		{"long name", av.Attr{Name: string(make([]byte, 48))}, fi.EINVAL},
		{"bad format", av.Attr{AddrFormat: 4}, fi.EINVAL},
	}
	for _, tc := range bad {
		if _, err := av.Open(dp, &tc.attr); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := av.Open(nil, &av.Attr{}); !errors.Is(err, fi.EINVAL) {
		t.Errorf("nil dataplane: %v", err)
	}
}

// Count is a hint: docs/semantics.md#count-is-a-hint.
func TestGrowsPastCount(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{Type: av.TypeTable, Count: 2})
	out := notAvail(305)
	n, err := a.Insert(peers(0, 305), out, 0, nil)
	if n != 305 || err != nil {
		t.Fatalf("insert 305 into count-2 AV: %d, %v", n, err)
	}
	for i, fa := range out {
		if fa != fi.Addr(i) {
			t.Fatalf("fi_addr[%d] = %v", i, fa)
		}
	}
	wantXDP(t, dp, a, peer(304), 304)
}

// Lowest free index, stable until removed: docs/semantics.md#lowest-free-index.
func TestLowestFreeIndex(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{Type: av.TypeTable})
	out := notAvail(3)
	if n, err := a.Insert(peers(0, 3), out, 0, nil); n != 3 || err != nil {
		t.Fatal(n, err)
	}
	if !slices.Equal(out, []fi.Addr{0, 1, 2}) {
		t.Fatalf("first inserts: %v", out)
	}
	if err := a.Remove([]fi.Addr{1}, 0); err != nil {
		t.Fatal(err)
	}
	wantXDP(t, dp, a, peer(1), fi.AddrNotAvail)
	one := notAvail(1)
	if _, err := a.Insert(peers(10, 1), one, 0, nil); err != nil || one[0] != 1 {
		t.Fatalf("reinsert got %v, %v; want index 1", one, err)
	}
	wantXDP(t, dp, a, peer(10), 1)
	if err := a.Remove([]fi.Addr{2}, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove([]fi.Addr{0}, 0); err != nil {
		t.Fatal(err)
	}
	out = notAvail(3)
	if _, err := a.Insert(peers(20, 3), out, 0, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out, []fi.Addr{0, 2, 3}) {
		t.Errorf("after removing 2 then 0, three inserts got %v, want [0 2 3]", out)
	}
	// Index 1 (peer 10) kept its index throughout.
	if ap, err := a.LookupAddr(1); err != nil || ap != peer(10) {
		t.Errorf("index 1 moved: %v %v", ap, err)
	}
	for i, fa := range out {
		wantXDP(t, dp, a, peer(20+i), fa)
	}
}

// Duplicates return the existing index and are counted:
// docs/semantics.md#duplicates.
func TestDuplicates(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{})
	p := peer(7)
	for i := 0; i < 3; i++ {
		out := notAvail(1)
		if _, err := a.Insert([]netip.AddrPort{p}, out, 0, nil); err != nil || out[0] != 0 {
			t.Fatalf("insert #%d: %v %v", i, out, err)
		}
	}
	if v, _ := revEntry(t, dp, a, 0); v.Refcnt != 3 {
		t.Errorf("reverse table refcnt %d, want 3", v.Refcnt)
	}
	// Duplicates inside one call too.
	out := notAvail(2)
	if n, err := a.Insert([]netip.AddrPort{p, p}, out, 0, nil); n != 2 || err != nil || out[0] != 0 || out[1] != 0 {
		t.Fatalf("duplicate pair: %d %v %v", n, out, err)
	}
	for i := 0; i < 4; i++ {
		if err := a.Remove([]fi.Addr{0}, 0); err != nil {
			t.Fatalf("remove #%d: %v", i, err)
		}
		wantXDP(t, dp, a, p, 0)
	}
	if err := a.Remove([]fi.Addr{0}, 0); err != nil {
		t.Fatalf("last remove: %v", err)
	}
	wantXDP(t, dp, a, p, fi.AddrNotAvail)
	if _, ok := revEntry(t, dp, a, 0); ok {
		t.Error("reverse entry survives the last remove")
	}
	if err := a.Remove([]fi.Addr{0}, 0); !errors.Is(err, fi.EINVAL) {
		t.Errorf("remove after last: %v", err)
	}
	// Two removes of a refcount-1 entry in one call: the second fails.
	if _, err := a.Insert([]netip.AddrPort{p}, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove([]fi.Addr{0, 0}, 0); !errors.Is(err, fi.EINVAL) {
		t.Errorf("double remove in one call: %v", err)
	}
	wantXDP(t, dp, a, p, fi.AddrNotAvail)
}

// docs/semantics.md#insert-results and fabtests av_good, av_null_fi_addr,
// av_bad, av_goodbad_vector.
func TestInsertResults(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{AddrFormat: fi.FormatSockaddrIn})
	if n, err := a.Insert(nil, nil, 0, nil); n != 0 || err != nil {
		t.Errorf("count 0: %d %v", n, err)
	}
	if n, err := a.Insert(peers(0, 4), nil, 0, nil); n != 4 || err != nil {
		t.Errorf("nil fi_addr: %d %v", n, err)
	}
	wantXDP(t, dp, a, peer(3), 3)

	bad := []netip.AddrPort{
		netip.MustParseAddrPort("0.0.0.0:5000"),     // av_bad: all-zero address
		netip.MustParseAddrPort("198.18.9.9:0"),     // port 0
		netip.MustParseAddrPort("[2001:2::9]:5000"), // family not the AV's
		{}, // invalid
		netip.MustParseAddrPort("[::ffff:198.18.9.10]:1"), // v4-mapped is IPv4: fine
	}
	out := []fi.Addr{7, 7, 7, 7, 7}
	n, err := a.Insert(bad, out, 0, nil)
	if n != 1 || !errors.Is(err, fi.EADDRNOTAVAIL) {
		t.Errorf("bad vector: n=%d err=%v", n, err)
	}
	if !slices.Equal(out, []fi.Addr{fi.AddrNotAvail, fi.AddrNotAvail, fi.AddrNotAvail, fi.AddrNotAvail, 4}) {
		t.Errorf("bad vector fi_addr: %v", out)
	}
	wantXDP(t, dp, a, netip.MustParseAddrPort("198.18.9.10:1"), 4)

	// av_goodbad_vector: alternate good and bad.
	vec := make([]netip.AddrPort, 10)
	for i := range vec {
		vec[i] = peer(100 + i)
		if i%2 == 1 {
			vec[i] = netip.AddrPortFrom(vec[i].Addr(), 0)
		}
	}
	out = notAvail(10)
	n, err = a.Insert(vec, out, 0, nil)
	if n != 5 || !errors.Is(err, fi.EADDRNOTAVAIL) {
		t.Fatalf("goodbad: %d %v", n, err)
	}
	for i, fa := range out {
		if i%2 == 1 && fa != fi.AddrNotAvail || i%2 == 0 && fa == fi.AddrNotAvail {
			t.Errorf("goodbad fi_addr[%d] = %v", i, fa)
		}
		if i%2 == 0 {
			wantXDP(t, dp, a, vec[i], fa)
		}
	}

	// IPv6-only AV refuses IPv4.
	a6 := openAV(t, dp, av.Attr{AddrFormat: fi.FormatSockaddrIn6})
	out = notAvail(2)
	n, _ = a6.Insert([]netip.AddrPort{peer6(1), peer(1)}, out, 0, nil)
	if n != 1 || out[0] != 0 || out[1] != fi.AddrNotAvail {
		t.Errorf("IPv6 AV: %d %v", n, out)
	}
	wantXDP(t, dp, a6, peer6(1), 0)
}

// docs/semantics.md#fi_sync_err and fabtests av_goodbad_vector_sync_err:
// per-element status, flag checks.
func TestSyncErr(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{})
	vec := []netip.AddrPort{peer(1), netip.MustParseAddrPort("198.18.0.9:0"), peer(2)}
	status := []fi.Errno{99, 99, 99}
	n, err := a.Insert(vec, nil, fi.SyncErr, status)
	if n != 2 || !errors.Is(err, fi.EADDRNOTAVAIL) {
		t.Errorf("sync_err insert: %d %v", n, err)
	}
	if !slices.Equal(status, []fi.Errno{0, fi.EADDRNOTAVAIL, 0}) {
		t.Errorf("status %v", status)
	}
	for _, tc := range []struct {
		name  string
		flags fi.Flags
		ctx   any
		want  error
	}{
		{"unknown flag", fi.Tagged, nil, fi.EBADFLAGS},
		{"FI_SOURCE", fi.SourceErr, nil, fi.EBADFLAGS},
		{"sync_err without status", fi.SyncErr, nil, fi.EINVAL},
		{"sync_err short status", fi.SyncErr, make([]fi.Errno, 1), fi.EINVAL},
		{"sync_err wrong type", fi.SyncErr, make([]int, 3), fi.EINVAL},
	} {
		unchanged(t, dp, a, tc.want, func() error {
			_, err := a.Insert(peers(50, 3), nil, tc.flags, tc.ctx)
			return err
		})
	}
	unchanged(t, dp, a, fi.EINVAL, func() error {
		_, err := a.Insert(peers(50, 3), make([]fi.Addr, 2), 0, nil)
		return err
	})
}

// FI_MORE assigns indices at once and, with a table written without
// system calls, defers nothing: docs/semantics.md#fi_more.
func TestMoreBatches(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{})
	var got []fi.Addr
	for i := range 100 {
		out := notAvail(1)
		if _, err := a.Insert(peers(i, 1), out, fi.More, nil); err != nil {
			t.Fatal(err)
		}
		got = append(got, out[0])
	}
	if n := len(snapshot(t, dp, a.ID()).fwd); n != 100 {
		t.Errorf("table holds %d of the FI_MORE inserts, want all 100", n)
	}
	wantXDP(t, dp, a, peer(42), 42)
	// Lookup sees them at once: the index is assigned.
	if ap, err := a.LookupAddr(got[50]); err != nil || ap != peer(50) {
		t.Errorf("lookup of deferred insert: %v %v", ap, err)
	}
	out := notAvail(1)
	if _, err := a.Insert(peers(100, 1), out, 0, nil); err != nil {
		t.Fatal(err)
	}
	if s := snapshot(t, dp, a.ID()); len(s.fwd) != 101 || len(s.rev) != 101 {
		t.Errorf("after closing call: %v, want 101", s)
	}
	for i, fa := range append(got, out[0]) {
		if fa != fi.Addr(i) {
			t.Fatalf("fi_addr %d = %v", i, fa)
		}
	}
	wantXDP(t, dp, a, peer(42), 42)
	// Remove flushes pending FI_MORE inserts first.
	if _, err := a.Insert(peers(200, 1), out, fi.More, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove([]fi.Addr{0}, 0); err != nil {
		t.Fatal(err)
	}
	wantXDP(t, dp, a, peer(200), out[0])
}

// The deprecated FI_EVENT mode: docs/semantics.md#fi_event.
func TestEventMode(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{Flags: fi.Event})
	unchanged(t, dp, a, fi.ENOEQ, func() error {
		_, err := a.Insert(peers(0, 2), nil, 0, "ctx")
		return err
	})
	eq := av.NewEventQueue()
	if err := a.Bind(eq, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Bind(eq, 0); !errors.Is(err, fi.EBUSY) {
		t.Errorf("second bind: %v", err)
	}
	if _, err := eq.Read(); !errors.Is(err, fi.EAGAIN) {
		t.Errorf("empty eq read: %v", err)
	}
	vec := []netip.AddrPort{peer(0), netip.MustParseAddrPort("0.0.0.0:1"), peer(1), netip.MustParseAddrPort("198.18.0.1:0")}
	out := notAvail(4)
	n, err := a.Insert(vec, out, 0, "my-ctx")
	if n != 0 || err != nil {
		t.Fatalf("FI_EVENT insert returns %d, %v; want 0, nil", n, err)
	}
	if _, err := eq.Read(); !errors.Is(err, fi.EAVAIL) {
		t.Errorf("read with error at head: %v", err)
	}
	for _, wantIdx := range []uint64{1, 3} {
		ev, err := eq.ReadErr()
		if err != nil || ev.Data != wantIdx || ev.Err != fi.EADDRNOTAVAIL || ev.Context != "my-ctx" {
			t.Errorf("error event: %+v %v; want index %d", ev, err, wantIdx)
		}
	}
	if _, err := eq.ReadErr(); !errors.Is(err, fi.EAGAIN) {
		t.Errorf("readerr with completion at head: %v", err)
	}
	ev, err := eq.Read()
	if err != nil || ev.Type != av.AVComplete || ev.Data != 2 || ev.Context != "my-ctx" {
		t.Errorf("completion: %+v %v", ev, err)
	}
	if out[0] != 0 || out[2] != 1 || out[1] != fi.AddrNotAvail {
		t.Errorf("fi_addr %v", out)
	}
	wantXDP(t, dp, a, peer(1), 1)
	if err := eq.Close(); !errors.Is(err, fi.EBUSY) {
		t.Errorf("close bound eq: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := eq.Close(); err != nil {
		t.Errorf("close eq after av: %v", err)
	}
	// SYNC_ERR is for synchronous AVs only: FI_EBADFLAGS, libfabric's code.
	b := openAV(t, dp, av.Attr{Flags: fi.Event})
	b.Bind(av.NewEventQueue(), 0)
	unchanged(t, dp, b, fi.EBADFLAGS, func() error {
		_, err := b.Insert(peers(0, 1), nil, fi.SyncErr, make([]fi.Errno, 1))
		return err
	})
}

// docs/semantics.md#remove-and-reinsert and fabtests av_remove_good,
// av_remove_bad, av_reinsert.
func TestRemove(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{})
	if _, err := a.Insert(peers(0, 5), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	unchanged(t, dp, a, fi.EINVAL, func() error { return a.Remove([]fi.Addr{0}, fi.More) })
	// Invalid elements fail; the valid ones are still removed.
	err := a.Remove([]fi.Addr{1, 99, fi.AddrNotAvail, 3}, 0)
	if !errors.Is(err, fi.EINVAL) {
		t.Errorf("mixed remove: %v", err)
	}
	for i, want := range []fi.Addr{0, fi.AddrNotAvail, 2, fi.AddrNotAvail, 4} {
		wantXDP(t, dp, a, peer(i), want)
	}
	if err := a.Remove([]fi.Addr{1}, 0); !errors.Is(err, fi.EINVAL) {
		t.Errorf("already removed: %v", err)
	}
	if err := a.Remove(nil, 0); err != nil {
		t.Errorf("remove nothing: %v", err)
	}
	// Remove then re-insert the same address works.
	out := notAvail(1)
	if _, err := a.Insert(peers(3, 1), out, 0, nil); err != nil || out[0] != 1 {
		t.Errorf("reinsert: %v %v", out, err)
	}
	wantXDP(t, dp, a, peer(3), 1)
}

// docs/semantics.md#lookup and fabtests av_lookup_good, av_lookup_bad.
func TestLookup(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{})
	if _, err := a.Insert([]netip.AddrPort{peer(0), peer6(1)}, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := a.Lookup(0, buf)
	if err != nil || n != fi.SockaddrInLen {
		t.Fatalf("lookup v4: %d %v", n, err)
	}
	if ap, _ := fi.DecodeSockaddr(buf[:n]); ap != peer(0) {
		t.Errorf("lookup v4 = %v", ap)
	}
	n, err = a.Lookup(1, buf)
	if err != nil || n != fi.SockaddrIn6Len {
		t.Fatalf("lookup v6: %d %v", n, err)
	}
	if ap, _ := fi.DecodeSockaddr(buf[:n]); ap != peer6(1) {
		t.Errorf("lookup v6 = %v", ap)
	}
	// Truncation copies what fits and reports the full size.
	small := make([]byte, 4)
	if n, err := a.Lookup(1, small); err != nil || n != fi.SockaddrIn6Len || !slices.Equal(small, buf[:4]) {
		t.Errorf("truncated lookup: %d %v %x", n, err, small)
	}
	if err := a.Remove([]fi.Addr{0}, 0); err != nil {
		t.Fatal(err)
	}
	for _, fa := range []fi.Addr{0, 2, 2 + 32, fi.Addr(^uint64(0))} {
		if _, err := a.Lookup(fa, buf); !errors.Is(err, fi.EINVAL) {
			t.Errorf("lookup %v: %v", fa, err)
		}
		if _, ok := a.Resolve(fa); ok {
			t.Errorf("resolve %v succeeds", fa)
		}
	}
	if ap, ok := a.Resolve(1); !ok || ap != peer6(1) {
		t.Errorf("resolve 1: %v %v", ap, ok)
	}
}

// straddr and FI_ADDR_STR: docs/semantics.md#straddr-and-fi_addr_str.
func TestStrAddr(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{})
	raw := fi.EncodeSockaddr(nil, netip.MustParseAddrPort("1.2.3.4:5000"))
	buf := make([]byte, 64)
	n, err := a.StrAddr(raw, buf)
	want := "fi_sockaddr_in://1.2.3.4:5000"
	if err != nil || n != len(want)+1 || string(buf[:n-1]) != want || buf[n-1] != 0 {
		t.Errorf("straddr: %d %q %v", n, buf[:n], err)
	}
	raw6 := fi.EncodeSockaddr(nil, netip.MustParseAddrPort("[::1]:5000"))
	n, _ = a.StrAddr(raw6, buf)
	if string(buf[:n-1]) != "fi_sockaddr_in6://[::1]:5000" {
		t.Errorf("straddr v6: %q", buf[:n])
	}
	small := make([]byte, 8)
	if n, err := a.StrAddr(raw, small); n != len(want)+1 || err != nil || string(small) != "fi_sock\x00" {
		t.Errorf("truncated straddr: %d %q %v", n, small, err)
	}
	if _, err := a.StrAddr([]byte{1, 2}, buf); !errors.Is(err, fi.EINVAL) {
		t.Errorf("straddr garbage: %v", err)
	}
	// The same strings are accepted as input.
	out := notAvail(3)
	n, err = a.InsertStr([]string{want, "fi_sockaddr_in6://[2001:2::5]:7000", "fi_sockaddr_in://nonsense"}, out, 0, nil)
	if n != 2 || !errors.Is(err, fi.EADDRNOTAVAIL) || out[2] != fi.AddrNotAvail {
		t.Errorf("insert strings: %d %v %v", n, out, err)
	}
	wantXDP(t, dp, a, netip.MustParseAddrPort("[2001:2::5]:7000"), out[1])
	// An FI_ADDR_STR AV looks up strings.
	s := openAV(t, dp, av.Attr{AddrFormat: fi.FormatStr})
	if _, err := s.InsertSvc("fi_sockaddr_in://198.18.3.3:4000", "", nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	n, err = s.Lookup(0, buf)
	if err != nil || string(buf[:n]) != "fi_sockaddr_in://198.18.3.3:4000\x00" {
		t.Errorf("str lookup: %q %v", buf[:n], err)
	}
	if _, err := s.InsertSvc("fi_sockaddr_in://198.18.3.3:4000", "9", nil, 0, nil); !errors.Is(err, fi.EINVAL) {
		t.Errorf("addr str with service: %v", err)
	}
	// Raw sockaddr input, as FI_SOURCE_ERR err_data carries it.
	if n, err := a.InsertRaw([][]byte{fi.EncodeSockaddr(nil, peer(77)), {9}}, out[:2], 0, nil); n != 1 || out[1] != fi.AddrNotAvail || err == nil {
		t.Errorf("insert raw: %d %v %v", n, out, err)
	}
	wantXDP(t, dp, a, peer(77), out[0])
}

// insertsvc and insertsym: docs/semantics.md#insertsvc-and-insertsym.
func TestInsertSym(t *testing.T) {
	dp := newDP(t, 4096)
	resolved := map[string]string{}
	hosts := map[string]string{"host10": "198.18.7.10", "host11": "198.18.7.11", "node007": "198.18.7.7", "node008": "198.18.7.8"}
	lookup := func(_ context.Context, h string) ([]netip.Addr, error) {
		resolved[h] = hosts[h]
		if ip, ok := hosts[h]; ok {
			return []netip.Addr{netip.MustParseAddr(ip)}, nil
		}
		return nil, fmt.Errorf("no such host %s", h)
	}
	a := openAV(t, dp, av.Attr{LookupHost: lookup})
	out := notAvail(4)
	if n, err := a.InsertSym("10.1.1.1", 2, "5000", 2, out, 0, nil); n != 4 || err != nil {
		t.Fatal(n, err)
	}
	want := []string{"10.1.1.1:5000", "10.1.1.1:5001", "10.1.1.2:5000", "10.1.1.2:5001"}
	for i, fa := range out {
		if ap, _ := a.LookupAddr(fa); ap.String() != want[i] {
			t.Errorf("insertsym %d = %v, want %s", i, ap, want[i])
		}
		wantXDP(t, dp, a, netip.MustParseAddrPort(want[i]), fa)
	}
	out = notAvail(4)
	if n, err := a.InsertSym("host10", 2, "6000", 2, out, 0, nil); n != 4 || err != nil {
		t.Fatal(n, err)
	}
	if resolved["host10"] == "" || resolved["host11"] == "" {
		t.Errorf("each host name must be resolved: %v", resolved)
	}
	if ap, _ := a.LookupAddr(out[3]); ap.String() != "198.18.7.11:6001" {
		t.Errorf("host11:6001 = %v", ap)
	}
	out = notAvail(2)
	if n, err := a.InsertSym("node007", 2, "6000", 1, out, 0, nil); n != 2 || err != nil {
		t.Errorf("zero-padded suffix: %d %v", n, err)
	}
	// insertsvc == insertsym(node, 1, service, 1).
	out = notAvail(1)
	if n, err := a.InsertSvc("198.18.8.8", "7000", out, 0, nil); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	wantXDP(t, dp, a, netip.MustParseAddrPort("198.18.8.8:7000"), out[0])
	// A host that does not resolve fails the whole call, as libfabric's
	// util AV does (its call returns the resolver's error): nothing is
	// inserted and fi_addr is left as it was.
	out = []fi.Addr{7, 7}
	hosts["host12"] = "198.18.7.12"
	unchanged(t, dp, a, fi.ENOENT, func() error {
		_, err := a.InsertSym("host12", 2, "5000", 1, out, 0, nil)
		return err
	})
	if out[0] != 7 || out[1] != 7 {
		t.Errorf("unresolvable: fi_addr written %v", out)
	}
	// A node or service count of 0 inserts nothing and returns 0, like an
	// insert of count 0.
	for _, c := range [][2]int{{0, 1}, {1, 0}, {0, 0}} {
		if n, err := a.InsertSym("10.1.1.1", c[0], "5000", c[1], nil, 0, nil); n != 0 || err != nil {
			t.Errorf("insertsym counts %v: %d %v", c, n, err)
		}
	}
	// Service "0": port 0 is not a valid destination; the element fails
	// with FI_ADDR_NOTAVAIL and the call returns 0 (the util AV alike).
	out = notAvail(1)
	out[0] = 9
	n, err := a.InsertSvc("10.1.1.1", "0", out, fi.SyncErr, make([]fi.Errno, 1))
	if n != 0 || !errors.Is(err, fi.EADDRNOTAVAIL) || out[0] != fi.AddrNotAvail {
		t.Errorf("service 0: %d %v %v", n, out, err)
	}
	for _, tc := range []struct {
		node, svc       string
		nodeCnt, svcCnt int
	}{
		{"10.1.1.1", "5000", -1, 1}, {"10.1.1.1", "5000", 1, -1}, {"", "5000", 1, 1},
		{"10.1.1.1", "", 1, 1}, {"10.1.1.1", "65535", 1, 2},
		{"10.1.1.1", "not-a-service", 1, 1}, {"hostname", "5000", 2, 1},
		{"255.255.255.255", "5000", 2, 1},
	} {
		unchanged(t, dp, a, fi.EINVAL, func() error {
			_, err := a.InsertSym(tc.node, tc.nodeCnt, tc.svc, tc.svcCnt, nil, 0, nil)
			return err
		})
	}
}

// Close while an endpoint is bound: docs/semantics.md#av-close.
func TestCloseBusy(t *testing.T) {
	dp := newDP(t, 4096)
	a, err := av.Open(dp, &av.Attr{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Insert(peers(0, 3), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.BindEndpoint(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); !errors.Is(err, fi.EBUSY) {
		t.Errorf("close while bound: %v", err)
	}
	wantXDP(t, dp, a, peer(1), 1) // still working
	a.UnbindEndpoint()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	// An anonymous AV's entries are gone from the maps.
	if s := snapshot(t, dp, a.ID()); len(s.fwd)+len(s.rev) != 0 {
		t.Errorf("closed AV left %v", s)
	}
	if _, err := a.Insert(peers(0, 1), nil, 0, nil); !errors.Is(err, fi.EOPBADSTATE) {
		t.Errorf("insert after close: %v", err)
	}
	if _, err := a.LookupAddr(0); !errors.Is(err, fi.EOPBADSTATE) {
		t.Errorf("lookup after close: %v", err)
	}
	if err := a.BindEndpoint(); !errors.Is(err, fi.EOPBADSTATE) {
		t.Errorf("bind after close: %v", err)
	}
}

// User IDs, at open and per insert: docs/semantics.md#user-ids.
func TestUserID(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{Flags: fi.AVUserID})
	if _, err := a.Insert(peers(0, 2), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	m := wantXDP(t, dp, a, peer(1), 1)
	if m.UserID != uint64(fi.AddrNotAvail) || m.Flags&wire.MetaUserID == 0 {
		t.Errorf("default user id: %#x flags %#x", m.UserID, m.Flags)
	}
	if err := a.SetUserID(1, 0xabc, 0); err != nil {
		t.Fatal(err)
	}
	if m := wantXDP(t, dp, a, peer(1), 1); m.UserID != 0xabc {
		t.Errorf("user id after set: %#x", m.UserID)
	}
	unchanged(t, dp, a, fi.EINVAL, func() error { return a.SetUserID(5, 1, 0) })
	unchanged(t, dp, a, fi.EINVAL, func() error { return a.SetUserID(0, 1, fi.More) })
	unchanged(t, dp, a, fi.EINVAL, func() error {
		_, err := a.Insert(peers(9, 1), []fi.Addr{1}, fi.AVUserID, nil)
		return err
	})

	// Without FI_AV_USER_ID at open: SetUserID fails, per-insert works.
	b := openAV(t, dp, av.Attr{})
	if _, err := b.Insert(peers(0, 1), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	unchanged(t, dp, b, fi.EINVAL, func() error { return b.SetUserID(0, 1, 0) })
	if m := wantXDP(t, dp, b, peer(0), 0); m.Flags&wire.MetaUserID != 0 {
		t.Errorf("plain entry reports a user id")
	}
	ids := []fi.Addr{1000, 2000}
	if n, err := b.Insert(peers(1, 2), ids, fi.AVUserID, nil); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	if !slices.Equal(ids, []fi.Addr{1, 2}) {
		t.Errorf("fi_addr after per-insert user id: %v, want the indices", ids)
	}
	if m := wantXDP(t, dp, b, peer(2), 2); m.UserID != 2000 || m.Flags&wire.MetaUserID == 0 {
		t.Errorf("per-insert user id: %d flags %#x", m.UserID, m.Flags)
	}
	unchanged(t, dp, b, fi.EINVAL, func() error {
		_, err := b.Insert(peers(5, 1), nil, fi.AVUserID, nil)
		return err
	})
	unchanged(t, dp, b, fi.EINVAL, func() error {
		_, err := b.Insert(peers(5, 1), []fi.Addr{3}, fi.AVUserID|fi.AuthKey, nil)
		return err
	})
	sym := openAV(t, dp, av.Attr{Flags: fi.Symmetric})
	unchanged(t, dp, sym, fi.EINVAL, func() error {
		_, err := sym.Insert(peers(5, 1), []fi.Addr{3}, fi.AVUserID, nil)
		return err
	})
}

// Auth keys: docs/semantics.md#auth-keys.
func TestAuthKeys(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{Flags: fi.AVUserID})
	key := []byte{0, 0, 0x12, 0x34}
	k, err := a.InsertAuthKey(key, 0)
	if err != nil || !av.IsAuthKeyAddr(k) {
		t.Fatalf("insert auth key: %v %v", k, err)
	}
	if k2, err := a.InsertAuthKey(key, 0); k2 != k || err != nil {
		t.Errorf("same key again: %v %v", k2, err)
	}
	for _, tc := range []struct {
		key   []byte
		flags fi.Flags
		want  error
	}{{[]byte{1, 2, 3}, 0, fi.EINVAL}, {[]byte{1, 2, 3, 4, 5}, 0, fi.EINVAL}, {[]byte{0, 0, 0, 0}, 0, fi.EINVAL}, {key, fi.More, fi.EBADFLAGS}} {
		unchanged(t, dp, a, tc.want, func() error { _, err := a.InsertAuthKey(tc.key, tc.flags); return err })
	}
	// Addresses bound to the key.
	in := []fi.Addr{k, k}
	if n, err := a.Insert(peers(0, 2), in, fi.AuthKey, nil); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	if in[0] != 0 || in[1] != 1 {
		t.Errorf("fi_addr after auth-key insert: %v", in)
	}
	buf := make([]byte, 8)
	if n, err := a.LookupAuthKey(1, buf); n != 4 || err != nil || !slices.Equal(buf[:4], key) {
		t.Errorf("lookup key of address: %d %v %x", n, err, buf)
	}
	// Truncated: the size needed comes back, as fi_av_lookup_auth_key says.
	if n, err := a.LookupAuthKey(k, buf[:2]); n != 4 || err != nil || !slices.Equal(buf[:2], key[:2]) {
		t.Errorf("lookup key truncated: %d %v", n, err)
	}
	if _, err := a.Insert(peers(5, 1), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.LookupAuthKey(2, buf); !errors.Is(err, fi.ENOKEY) {
		t.Errorf("key of keyless address: %v", err)
	}
	// The same address under another key is refused.
	k2, _ := a.InsertAuthKey([]byte{0, 0, 0, 9}, 0)
	if n, err := a.Insert(peers(0, 1), []fi.Addr{k2}, fi.AuthKey, nil); n != 0 || !errors.Is(err, fi.EINVAL) {
		t.Errorf("address under a second key: %d %v", n, err)
	}
	// XDP: the entry carries the key value.
	if v, ok := snapshot(t, dp, a.ID()).fwd[bpf.MakeAddr(peer(0))]; !ok || v.AuthKey != 0x1234 {
		t.Errorf("forward entry auth key %#x %v", v.AuthKey, ok)
	}
	// Removing: needs FI_AUTH_KEY, fails while addresses or endpoints use it.
	unchanged(t, dp, a, fi.EBUSY, func() error { return a.Remove([]fi.Addr{k}, fi.AuthKey) })
	if err := a.Remove([]fi.Addr{0, 1}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AcquireAuthKey(k); err != nil {
		t.Fatal(err)
	}
	unchanged(t, dp, a, fi.EBUSY, func() error { return a.Remove([]fi.Addr{k}, fi.AuthKey) })
	a.ReleaseAuthKey(k)
	if err := a.SetUserID(k, 77, fi.AuthKey); err != nil {
		t.Errorf("set user id of key: %v", err)
	}
	if err := a.Remove([]fi.Addr{k}, fi.AuthKey); err != nil {
		t.Fatal(err)
	}
	if _, err := a.LookupAuthKey(k, buf); !errors.Is(err, fi.EINVAL) {
		t.Errorf("lookup removed key: %v", err)
	}
	// Full table.
	for i := 0; ; i++ {
		_, err := a.InsertAuthKey([]byte{1, 0, byte(i >> 8), byte(i)}, 0)
		if errors.Is(err, fi.ENOSPC) {
			if i+1 != av.MaxAuthKeys { // k2 holds one slot
				t.Errorf("table full after %d keys", i+1)
			}
			break
		}
		if err != nil || i > av.MaxAuthKeys {
			t.Fatal(i, err)
		}
	}
}

// Every call on a closed or read-only AV fails without effect.
func TestReadOnlyRefusesWrites(t *testing.T) {
	dp := newDP(t, 4096)
	w := openAV(t, dp, av.Attr{Name: "ro-test"})
	if _, err := w.Insert(peers(0, 2), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	r := openAV(t, dp, av.Attr{Name: "ro-test", Flags: fi.Read})
	if ap, err := r.LookupAddr(1); err != nil || ap != peer(1) {
		t.Errorf("read-only lookup: %v %v", ap, err)
	}
	unchanged(t, dp, r, fi.EACCES, func() error { _, err := r.Insert(peers(5, 1), nil, 0, nil); return err })
	unchanged(t, dp, r, fi.EACCES, func() error { return r.Remove([]fi.Addr{0}, 0) })
	unchanged(t, dp, r, fi.EACCES, func() error { _, err := r.InsertAuthKey([]byte{0, 0, 0, 1}, 0); return err })
	// A second writer of the same name sees the same table.
	w2 := openAV(t, dp, av.Attr{Name: "ro-test"})
	out := notAvail(1)
	if _, err := w2.Insert(peers(9, 1), out, 0, nil); err != nil || out[0] != 2 {
		t.Errorf("second opener insert: %v %v", out, err)
	}
	if ap, err := w.LookupAddr(2); err != nil || ap != peer(9) {
		t.Errorf("first opener sees %v %v", ap, err)
	}
	// A writer must ask for the existing shape; a reader takes it.
	if _, err := av.Open(dp, &av.Attr{Name: "ro-test", Flags: fi.AVUserID}); !errors.Is(err, fi.EINVAL) {
		t.Errorf("reopen with other flags: %v", err)
	}
	shaped := openAV(t, dp, av.Attr{Name: "shaped", Flags: fi.AVUserID, RxCtxBits: 3})
	ra := av.Attr{Name: "shaped", Flags: fi.Read}
	rs, err := av.Open(dp, &ra)
	if err != nil {
		t.Fatalf("read-only open of an AV with user IDs and rx_ctx_bits: %v", err)
	}
	if ra.Flags != fi.Read|fi.AVUserID || ra.RxCtxBits != 3 || rs.Attr().Flags&fi.AVUserID == 0 || rs.Attr().RxCtxBits != 3 {
		t.Errorf("read-only open reports %v / %d, AV has %v / %d", ra.Flags, ra.RxCtxBits, shaped.Attr().Flags, shaped.Attr().RxCtxBits)
	}
	rs.Close()
	if err := av.Destroy(dp, "shaped"); err != nil {
		t.Errorf("destroy an AV with user IDs: %v", err)
	}
	if err := av.Destroy(dp, "ro-test"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.LookupAddr(0); !errors.Is(err, fi.EOPBADSTATE) {
		t.Errorf("use after destroy: %v", err)
	}
}

// Count is a hint: a huge one neither panics nor preallocates it.
func TestCountHintIsBounded(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{Count: math.MaxInt})
	if _, err := a.Insert(peers(0, 1), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
}

// An endpoint's use of an auth key survives the cache being re-read after
// another handle changed the named AV: removing the key is still EBUSY.
func TestAuthKeyUseSurvivesReload(t *testing.T) {
	dp := newDP(t, 4096)
	a := openAV(t, dp, av.Attr{Name: "keys"})
	k, err := a.InsertAuthKey([]byte{0, 0, 0, 7}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.AcquireAuthKey(k); err != nil {
		t.Fatal(err)
	}
	b := openAV(t, dp, av.Attr{Name: "keys"})
	if _, err := b.Insert(peers(0, 1), nil, 0, nil); err != nil { // a's cache is now stale
		t.Fatal(err)
	}
	if err := a.Remove([]fi.Addr{k}, fi.AuthKey); !errors.Is(err, fi.EBUSY) {
		t.Errorf("remove of a key in use after a reload: %v", err)
	}
	a.ReleaseAuthKey(k)
	if err := a.Remove([]fi.Addr{k}, fi.AuthKey); err != nil {
		t.Errorf("remove after release: %v", err)
	}
}
