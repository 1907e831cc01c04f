//go:build linux

package av_test

import (
	"errors"
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

// The lock-free readers (Lookup, LookupAddr, Resolve, SourceOf) on other
// goroutines while the writer inserts (growing the table several times),
// removes, re-inserts freed indices with other addresses, and finally
// closes the AV: every answer is one the AV gave at some time (an index's
// address, a source's index), never a fault; after Close, EOPBADSTATE.
func TestLockFreeReadersRaceWriter(t *testing.T) {
	dp := newDP(t, 1<<14)
	a, err := av.Open(dp, &av.Attr{Count: 64})
	if err != nil {
		t.Fatal(err)
	}
	type pair struct {
		fa fi.Addr
		ap netip.AddrPort
	}
	var mu sync.Mutex
	history := map[pair]bool{}
	var stop sync.WaitGroup
	done := make(chan struct{})
	seen := make([]map[pair]bool, 3)
	for g := range seen {
		seen[g] = map[pair]bool{}
		stop.Go(func() {
			buf := make([]byte, 28)
			for k := 0; ; k++ {
				select {
				case <-done:
					return
				default:
				}
				fa := fi.Addr(k % 3000)
				if ap, err := a.LookupAddr(fa); err == nil {
					seen[g][pair{fa, ap}] = true
				}
				if n, err := a.Lookup(fa, buf); err == nil {
					ap, err := fi.DecodeSockaddr(buf[:n])
					if err != nil {
						t.Errorf("lookup %d: %x: %v", fa, buf[:n], err)
						return
					}
					seen[g][pair{fa, ap}] = true
				}
				if ap, ok := a.Resolve(fa); ok {
					seen[g][pair{fa, ap}] = true
				}
				ap := peer(k % 6000)
				if s, ok := a.SourceOf(ap); ok {
					seen[g][pair{s.FiAddr, ap}] = true
				}
			}
		})
	}
	for round := range 4 {
		addrs := peers(round*1500, 3000-round*500)
		out := notAvail(len(addrs))
		if _, err := a.Insert(addrs, out, 0, nil); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		for i, fa := range out {
			history[pair{fa, addrs[i]}] = true
		}
		mu.Unlock()
		var rm []fi.Addr
		for i, fa := range out {
			if i%3 != 0 {
				rm = append(rm, fa)
			}
		}
		if err := a.Remove(rm, 0); err != nil {
			t.Fatal(err)
		}
	}
	if av.Rebuilds(a) == 0 {
		t.Error("the table never grew")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.LookupAddr(0); !errors.Is(err, fi.EOPBADSTATE) {
		t.Errorf("lookup after close: %v", err)
	}
	close(done)
	stop.Wait()
	n := 0
	for _, s := range seen {
		for p := range s {
			n++
			if !history[p] {
				t.Errorf("read fi_addr %d as %v: never in the AV", p.fa, p.ap)
			}
		}
	}
	t.Logf("%d distinct answers checked", n)
}
