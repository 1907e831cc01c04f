package ep

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/fi"
)

// Hop is where a frame to a destination goes: its source address and the
// Ethernet addresses of the link.
type Hop struct {
	SrcIP          netip.Addr
	SrcMAC, DstMAC [6]byte
}

// staticHopper resolves through the routing table and existing neighbour
// entries only. Replaced by package neigh (which also triggers resolution).
type staticHopper struct {
	ifindex int
	src     netip.Addr
	mac     [6]byte
	mu      sync.RWMutex
	cache   map[netip.Addr]Hop
	h       *netlink.Handle
}

func newHopper(ifindex int, src netip.Addr) (hopper, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, err
	}
	l, err := h.LinkByIndex(ifindex)
	if err != nil {
		h.Close()
		return nil, err
	}
	sh := &staticHopper{ifindex: ifindex, src: src, cache: map[netip.Addr]Hop{}, h: h}
	copy(sh.mac[:], l.Attrs().HardwareAddr)
	return sh, nil
}

func (s *staticHopper) Lookup(dst netip.Addr) (Hop, error) {
	s.mu.RLock()
	hop, ok := s.cache[dst]
	s.mu.RUnlock()
	if ok {
		return hop, nil
	}
	routes, err := s.h.RouteGet(dst.AsSlice())
	if err != nil || len(routes) == 0 {
		return Hop{}, fmt.Errorf("no route to %v: %w", dst, fi.ENETUNREACH)
	}
	next := dst
	if gw, ok := netip.AddrFromSlice(routes[0].Gw); ok && routes[0].Gw != nil {
		next = gw.Unmap()
	}
	hop = Hop{SrcIP: s.src, SrcMAC: s.mac}
	if src, ok := netip.AddrFromSlice(routes[0].Src); ok && (!s.src.IsValid() || s.src.IsUnspecified()) {
		hop.SrcIP = src.Unmap()
	}
	family := netlink.FAMILY_V4
	if !dst.Unmap().Is4() {
		family = netlink.FAMILY_V6
	}
	neighs, err := s.h.NeighList(s.ifindex, family)
	if err != nil {
		return Hop{}, err
	}
	for _, n := range neighs {
		if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == next.Unmap() && len(n.HardwareAddr) == 6 &&
			n.State&(netlink.NUD_REACHABLE|netlink.NUD_PERMANENT|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_NOARP) != 0 {
			copy(hop.DstMAC[:], n.HardwareAddr)
			s.mu.Lock()
			s.cache[dst] = hop
			s.mu.Unlock()
			return hop, nil
		}
	}
	return Hop{}, fmt.Errorf("no neighbour entry for %v: %w", next, fi.EAGAIN)
}

func (s *staticHopper) Close() error {
	s.h.Close()
	return nil
}
