// Package neigh tells xdpfab's send path how to address an Ethernet frame
// for a destination IP: the egress interface, the source IP and MAC, and the
// next hop's MAC, as the kernel would choose them for a socket. AF_XDP
// frames bypass the kernel's routing and neighbour code, so user space has
// to ask.
//
// A Resolver asks the kernel over rtnetlink, never a table of its own:
// RTM_GETROUTE for the route (honouring policy rules, a bound source and a
// bound interface), then RTM_GETNEIGH for the next hop (the destination or
// the route's gateway, IPv4 or IPv6, link-local gateways included). When the
// next hop has no link-layer address yet, the Resolver sends no packet
// itself: an RTM_NEWNEIGH request with NTF_USE makes the kernel resolve it
// (ARP or NDP) exactly as if it had a packet to send, and the lookup fails
// with fi.EAGAIN, libfabric's "retry the send":
//
//	hop, err := r.Lookup(dst)
//	if errors.Is(err, fi.EAGAIN) {
//		// either report EAGAIN to the application, or wait:
//		hop, err = r.Resolve(ctx, dst)
//	}
//
// Answers are cached per destination for Options.TTL and served with no
// system call and no allocation. The cache follows the kernel through
// rtnetlink notifications: a neighbour update (a peer's new MAC after it
// moved, a FAILED verdict) changes every destination using that next hop at
// once; any route, rule, address or link change flushes the cache, as does
// a lost notification (ENOBUFS). The TTL bounds what a missed event could
// cost and, on refresh, "uses" a STALE neighbour as a kernel transmission
// would (NTF_USE), so the kernel re-verifies peers that only AF_XDP traffic
// talks to; without that the kernel would never notice a peer that moved.
// PERMANENT and NOARP entries are never touched: on Linux 6.x an NTF_USE
// request turns a PERMANENT entry into an INCOMPLETE one.
//
// Failures mirror what a kernel socket reports: fi.ENETUNREACH (no route),
// fi.EHOSTUNREACH (unreachable route, next hop FAILED or silent until
// Options.Timeout, or a route that leaves through another interface than
// Options.Ifindex), fi.EADDRNOTAVAIL (the destination is one of our own
// addresses: an AF_XDP frame would leave the host instead of looping back),
// fi.EINVAL (IPv6 link-local destination without zone or interface, family
// mismatch with the bound source). A failed next hop is remembered for one
// TTL, so a sender retrying a dead peer does not make the kernel probe on
// every retry. Broadcast and multicast destinations get the broadcast or
// the mapped multicast MAC.
//
// A nil *Resolver, or one that did not come from New (its zero value), is
// never a panic: Lookup and Resolve fail with fi.EINVAL, Close returns nil
// (nothing to release). A closed one fails with fi.EBADF.
//
// A Resolver belongs to the network namespace current on the thread that
// called New: its sockets are opened there and keep it for life, so create
// it inside the endpoint's namespace and use it from any goroutine after.
//
// The resolver talks rtnetlink, so it works on Linux only: elsewhere the
// package builds (for applications developed there) and New fails with
// fi.EOPNOTSUPP.
//
// This package is not a route or ARP implementation, does not send or
// receive packets, does not cover tunnels, VLAN or bonding devices or
// non-Ethernet links, and does not track the kernel's neighbour table as a
// whole: it only knows the destinations it was asked about.
package neigh
