//go:build linux

package neigh

import (
	"context"
	"testing"
)

// A Cache answers its last destination without the resolver (no slow-path
// miss, the same Hop), switches with the destination, and never serves one
// resolver's answer for another's.
func TestCache(t *testing.T) {
	bed := newBed(t, 3)
	r := newResolver(t, bed.A, Options{})
	r2 := newResolver(t, bed.B, Options{})
	for _, h := range bed.Hosts[1:] {
		if _, err := r.Resolve(context.Background(), h.IPv4); err != nil {
			t.Fatal(err)
		}
	}
	var c Cache
	for i := range 100 {
		h := bed.Hosts[1+i/50]
		hop, err := c.Lookup(r, h.IPv4)
		if err != nil || hop.DstMAC != mac(h.MAC) {
			t.Fatalf("lookup %d of %s: %+v, %v", i, h.IPv4, hop, err)
		}
	}
	if _, err := r2.Resolve(context.Background(), bed.Hosts[2].IPv4); err != nil {
		t.Fatal(err)
	}
	hop, err := c.Lookup(r2, bed.Hosts[2].IPv4)
	if want, _ := r2.Lookup(bed.Hosts[2].IPv4); err != nil || hop != want || hop.SrcMAC != mac(bed.B.MAC) {
		t.Fatalf("through another resolver: %+v, %v", hop, err)
	}
	misses := r.misses.Load()
	for range 1000 {
		if _, err := c.Lookup(r, bed.B.IPv4); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.misses.Load() - misses; got != 0 {
		t.Errorf("%d slow-path lookups for one destination asked 1000 times", got)
	}
}
