package neigh

import (
	"net/netip"
	"sync/atomic"
)

// Cache remembers the last destination a sender looked up and its Hop, and
// answers the same destination again without the resolver's lock or map:
// the common case of a sender talking to one peer at a time (a ping-pong, a
// stream). Any change to the resolver's cache (a neighbour event, a sweep,
// a new destination, Close) invalidates it, so it never serves what
// Resolver.Lookup would no longer answer. The zero Cache is empty; it may be
// used from several goroutines.
type Cache struct {
	last atomic.Pointer[cached]
}

type cached struct {
	r   *Resolver
	gen uint64
	dst netip.Addr
	hop Hop
}

// Lookup is r.Lookup(dst), answered from the cache when dst was the last
// destination looked up through c in r and nothing changed in r since. A
// nil Cache asks r every time.
func (c *Cache) Lookup(r *Resolver, dst netip.Addr) (Hop, error) {
	if c == nil {
		return r.Lookup(dst)
	}
	if e := c.last.Load(); e != nil && e.r == r && e.dst == dst && r != nil && e.gen == r.gen.Load() {
		return e.hop, nil
	}
	var gen uint64
	if r != nil {
		gen = r.gen.Load() // before the lookup: a change meanwhile invalidates
	}
	hop, err := r.Lookup(dst)
	if err == nil {
		c.last.Store(&cached{r: r, gen: gen, dst: dst, hop: hop})
	}
	return hop, err
}
