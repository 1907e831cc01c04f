//go:build linux

package av_test

import (
	"net/netip"
	"sync"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
)

// Inserts and removes from several goroutines: every index handed out is
// unique at any time, and the maps end exactly as the survivors say.
func TestConcurrentInsertRemove(t *testing.T) {
	dp := newDP(t, 1<<14)
	a := openAV(t, dp, av.Attr{})
	const workers, rounds, batch = 4, 50, 16
	var wg sync.WaitGroup
	kept := make([][]fi.Addr, workers)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				addrs := peers(w*10000+r*batch, batch)
				out := notAvail(batch)
				if n, err := a.Insert(addrs, out, 0, nil); n != batch || err != nil {
					t.Errorf("worker %d insert: %d %v", w, n, err)
					return
				}
				// Remove every other one, keep the rest.
				var rm []fi.Addr
				for i, fa := range out {
					if i%2 == 0 {
						rm = append(rm, fa)
					} else {
						kept[w] = append(kept[w], fa)
					}
				}
				if err := a.Remove(rm, 0); err != nil {
					t.Errorf("worker %d remove: %v", w, err)
					return
				}
			}
		})
	}
	wg.Go(func() { // a reader racing the writers
		for range 200 {
			a.Entries()
		}
	})
	wg.Wait()
	seen := map[fi.Addr]bool{}
	for _, ks := range kept {
		for _, fa := range ks {
			if seen[fa] {
				t.Fatalf("index %v handed out twice", fa)
			}
			seen[fa] = true
		}
	}
	if n, _ := a.Len(); n != workers*rounds*batch/2 {
		t.Errorf("AV holds %d, want %d", n, workers*rounds*batch/2)
	}
	if s := snapshot(t, dp, a.ID()); len(s.fwd) != len(seen) || len(s.rev) != len(seen) {
		t.Errorf("maps hold %v, want %d", s, len(seen))
	}
	for _, ks := range kept {
		fa := ks[len(ks)-1]
		ap, _ := a.LookupAddr(fa)
		wantXDP(t, dp, a, ap, fa)
	}
}

// A million entries: insert in FI_MORE batches, translate a sample through
// the program, remove everything.
func TestMillionEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("1M entries: skipped with -short")
	}
	const n = 1_000_000
	dp := newDP(t, 1<<20)
	a := openAV(t, dp, av.Attr{Count: n})
	addr := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18 + byte(i>>24&1), byte(i >> 16), byte(i >> 8)}), uint16(1000+i&0xff))
	}
	const chunk = 4096
	buf := make([]netip.AddrPort, 0, chunk)
	for i := 0; i < n; i += chunk {
		buf = buf[:0]
		for j := i; j < min(i+chunk, n); j++ {
			buf = append(buf, addr(j))
		}
		flags := fi.More
		if i+chunk >= n {
			flags = 0
		}
		if got, err := a.Insert(buf, nil, flags, nil); got != len(buf) || err != nil {
			t.Fatalf("insert at %d: %d %v", i, got, err)
		}
	}
	if got, _ := a.Len(); got != n {
		t.Fatalf("AV holds %d", got)
	}
	for i := 0; i < n; i += n / 997 {
		wantXDP(t, dp, a, addr(i), fi.Addr(i))
	}
	all := make([]fi.Addr, n)
	for i := range all {
		all[i] = fi.Addr(i)
	}
	if err := a.Remove(all, 0); err != nil {
		t.Fatal(err)
	}
	wantXDP(t, dp, a, addr(n/2), fi.AddrNotAvail)
	if s := snapshot(t, dp, a.ID()); len(s.fwd)+len(s.rev) != 0 {
		t.Errorf("after removing all: %v", s)
	}
}
