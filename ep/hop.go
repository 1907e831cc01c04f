package ep

import (
	"net/netip"

	"github.com/xdpfab/xdpfab/neigh"
)

// hopper finds the next hop for a destination: package neigh, which asks
// the kernel (route, neighbour table) as a socket would, and triggers
// neighbour resolution without sending traffic itself.
type hopper interface {
	Lookup(dst netip.Addr) (neigh.Hop, error)
	Close() error
}

// newHopper creates the endpoint's resolver in the calling thread's
// network namespace, bound to its interface and, unless it is a wildcard,
// its address. use, if set, replaces NTF_USE (see neigh.Options.Use).
func newHopper(ifindex int, src netip.Addr, use func(int, netip.Addr) error) (hopper, error) {
	return neigh.New(neigh.Options{Ifindex: ifindex, SrcIP: src, Use: use}) // neigh ignores an unspecified SrcIP
}
