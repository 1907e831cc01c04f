//go:build linux

package neigh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
)

// This file is the resolver's conversation with the kernel: route lookups,
// neighbour reads, NTF_USE, and the notification socket. Every socket is
// opened in New, so it stays in New's network namespace whichever thread
// uses it later.

// parseNeigh decodes an ndmsg and its attributes (RTM_NEWNEIGH and
// RTM_DELNEIGH). netlink.NeighDeserialize is not used because for some
// address lengths it queries links through the package handle, which opens
// a socket in whatever namespace the calling thread is in.
func parseNeigh(b []byte) (kneigh, bool) {
	const ndmsgLen = 12 // family, pad, pad16, ifindex, state, flags, type
	if len(b) < ndmsgLen {
		return kneigh{}, false
	}
	fam := b[0]
	if fam != unix.AF_INET && fam != unix.AF_INET6 {
		return kneigh{}, false // AF_BRIDGE FDB entries and the like
	}
	n := kneigh{
		ifindex: int(int32(binary.NativeEndian.Uint32(b[4:8]))),
		state:   binary.NativeEndian.Uint16(b[8:10]),
	}
	attrs, err := nl.ParseRouteAttr(b[ndmsgLen:])
	if err != nil {
		return kneigh{}, false
	}
	for _, a := range attrs {
		switch a.Attr.Type {
		case unix.NDA_DST:
			ip, ok := netip.AddrFromSlice(a.Value)
			if !ok {
				return kneigh{}, false
			}
			n.ip = ip
		case unix.NDA_LLADDR:
			n.mac = a.Value
		}
	}
	return n, n.ip.IsValid()
}

// neighGet reads one neighbour entry (RTM_GETNEIGH for one address, Linux
// 4.18 and later) instead of dumping the table. A missing entry is reported
// as found == false.
func (r *Resolver) neighGet(k hopKey) (n kneigh, found bool, err error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETNEIGH, 0)
	req.Sockets = r.nsock
	req.AddData(&netlink.Ndmsg{Family: family(k.ip), Index: uint32(k.ifindex)})
	req.AddData(nl.NewRtAttr(unix.NDA_DST, k.ip.AsSlice()))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWNEIGH)
	if errors.Is(err, unix.ENOENT) {
		return kneigh{}, false, nil
	}
	if err != nil {
		return kneigh{}, false, err
	}
	for _, m := range msgs {
		if n, ok := parseNeigh(m); ok && n.ip == k.ip {
			return n, true, nil
		}
	}
	return kneigh{}, false, nil
}

// neighUse asks the kernel to use the neighbour as if it were sending a
// packet through it (RTM_NEWNEIGH with NTF_USE, NLM_F_CREATE): a missing,
// NONE or FAILED entry starts ARP/NDP resolution (INCOMPLETE), a STALE one
// moves to DELAY and gets re-verified. No packet of ours is sent.
func (r *Resolver) neighUse(k hopKey) error {
	if r.opts.Use != nil {
		return r.opts.Use(k.ifindex, k.ip)
	}
	return r.rt.NeighSet(&netlink.Neigh{
		LinkIndex: k.ifindex,
		Family:    int(family(k.ip)),
		IP:        net.IP(k.ip.AsSlice()),
		Flags:     netlink.NTF_USE,
	})
}

// routeGet asks the kernel for the route to dst as a socket bound to oif
// (0: none) and src (invalid: none) would get it.
func (r *Resolver) routeGet(dst netip.Addr, oif int, src netip.Addr) (netlink.Route, error) {
	opts := &netlink.RouteGetOptions{OifIndex: oif}
	if src.IsValid() {
		opts.SrcAddr = net.IP(src.AsSlice())
	}
	routes, err := r.rt.RouteGetWithOptions(net.IP(dst.AsSlice()), opts)
	if err != nil {
		return netlink.Route{}, err
	}
	if len(routes) == 0 {
		return netlink.Route{}, unix.ENETUNREACH
	}
	return routes[0], nil
}

// viaAddr is the next hop of a route's RTA_VIA (a gateway of another
// family).
func viaAddr(d netlink.Destination) (netip.Addr, bool) {
	if via, ok := d.(*netlink.Via); ok {
		return netip.AddrFromSlice(via.Addr)
	}
	return netip.Addr{}, false
}

func (r *Resolver) linkGet(ifindex int) (linkInfo, error) {
	l, err := r.rt.LinkByIndex(ifindex)
	if err != nil {
		return linkInfo{}, err
	}
	a := l.Attrs()
	if len(a.HardwareAddr) != 6 {
		return linkInfo{}, fmt.Errorf("interface %s (ifindex %d) has no Ethernet address: %w", a.Name, ifindex, fi.EOPNOTSUPP)
	}
	var li linkInfo
	copy(li.mac[:], a.HardwareAddr)
	li.mtu = a.MTU
	return li, nil
}

func (r *Resolver) checkOptions() error {
	if r.opts.Ifindex != 0 {
		if _, err := r.rt.LinkByIndex(r.opts.Ifindex); err != nil {
			return fmt.Errorf("neigh: ifindex %d: %w", r.opts.Ifindex, fi.ENODEV)
		}
	}
	if r.opts.SrcIP.IsValid() {
		addrs, err := r.rt.AddrList(nil, int(family(r.opts.SrcIP)))
		if err != nil {
			return fmt.Errorf("neigh: list addresses: %w", err)
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == r.opts.SrcIP {
				return nil
			}
		}
		return fmt.Errorf("neigh: source %s is not a local address: %w", r.opts.SrcIP, fi.EADDRNOTAVAIL)
	}
	return nil
}

func (r *Resolver) zoneIndex(z string) (int, error) {
	if i, err := strconv.Atoi(z); err == nil {
		return i, nil
	}
	l, err := r.rt.LinkByName(z)
	if err != nil {
		return 0, err
	}
	return l.Attrs().Index, nil
}

// sockets are a Resolver's connection to the kernel, embedded in it.
type sockets struct {
	rt    *netlink.Handle
	nsock map[int]*nl.SocketHandle
	mon   *nl.NetlinkSocket
}

// openSockets opens the resolver's netlink sockets in the calling thread's
// network namespace: a request socket for netlink.Handle, one for the
// neighbour reads netlink has no call for, and the notification socket.
func (r *Resolver) openSockets() error {
	var err error
	if r.rt, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
		return fmt.Errorf("neigh: netlink socket: %w", err)
	}
	s, err := nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("neigh: netlink socket: %w", err)
	}
	r.nsock = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: s}}
	// Anything that can change which route, source or interface address a
	// destination gets flushes the cache; neighbour events update next hops.
	r.mon, err = nl.Subscribe(unix.NETLINK_ROUTE,
		unix.RTNLGRP_NEIGH, unix.RTNLGRP_LINK,
		unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR,
		unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_IPV6_ROUTE,
		unix.RTNLGRP_IPV4_RULE, unix.RTNLGRP_IPV6_RULE,
		unix.RTNLGRP_NEXTHOP)
	if err != nil {
		return fmt.Errorf("neigh: netlink subscribe: %w", err)
	}
	// A larger buffer makes ENOBUFS (lost notifications, answered by a full
	// flush) rarer during neighbour storms. Best effort.
	if err := r.mon.SetReceiveBufferSize(1<<20, true); err != nil {
		_ = r.mon.SetReceiveBufferSize(1<<20, false)
	}
	return nil
}

func (r *Resolver) closeSockets() {
	if r.mon != nil {
		r.mon.Close()
	}
	for _, sh := range r.nsock {
		sh.Close()
	}
	if r.rt != nil {
		r.rt.Close()
	}
}

// monitor applies kernel notifications to the cache until Close.
func (r *Resolver) monitor() {
	defer close(r.monDone)
	for {
		msgs, from, err := r.mon.Receive()
		if err != nil {
			if r.closed.Load() {
				return
			}
			// ENOBUFS means notifications were dropped: nothing cached
			// can be trusted any more. Anything else is unexpected; the
			// same answer is safe, and a pause keeps a broken socket
			// from spinning.
			r.flush()
			if !errors.Is(err, unix.ENOBUFS) {
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		if from.Pid != nl.PidKernel {
			continue
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.RTM_NEWNEIGH, unix.RTM_DELNEIGH:
				if n, ok := parseNeigh(m.Data); ok {
					r.neighEvent(n, m.Header.Type == unix.RTM_DELNEIGH)
				}
			default:
				r.flush()
			}
		}
	}
}

func family(ip netip.Addr) uint8 {
	if ip.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}
