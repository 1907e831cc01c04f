package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// neigh.use: an application's endpoint resolves next hops with package
// neigh, which asks the kernel for the route and the neighbour entry and,
// when the next hop has no link-layer address yet, has the kernel resolve
// it (NTF_USE), which needs CAP_NET_ADMIN: an unprivileged application
// asks the agent (neigh.Options.Use). What it sends is the next hop the
// kernel's route lookup gave it, on the endpoint's interface: the
// destination itself when it is on link, else the route's gateway.
//
// A neighbour entry is host memory from a table all namespaces share
// (gc_thresh3 bounds it: 1024 entries by default), and resolving sends
// ARP or NDP probes. So the agent asks the kernel for no more than an
// honest application would:
//
//   - only a next hop on an interface the caller has an endpoint on, and
//     only one the kernel's routes give there: an address on link there,
//     or a gateway of a route through it (else EHOSTUNREACH). An address
//     the kernel reaches only by assuming it is on link (no route at all),
//     elsewhere, or through a gateway is not a next hop.
//   - entries that exist are used (re-verified) as they are, never
//     created; static ones (PERMANENT, NOARP), which NTF_USE would turn
//     into unresolved ones, are left alone.
//   - entries it creates are charged to the caller's uid while no host
//     answers for them (INCOMPLETE, FAILED): at most NeighborsPerUID of
//     them per uid (EDQUOT) and Neighbors for all (EAGAIN); an entry that
//     resolved is a real neighbour, and costs nothing, as does one the
//     kernel dropped. And a uid creates at most a quarter of its quota a
//     second (EAGAIN: retry the send).

// neighState is what the agent has made the kernel create for callers.
type neighState struct {
	mu     sync.Mutex
	byUID  map[uint32]*neighBudget
	total  int       // records in all budgets
	pruned time.Time // when all of them were last checked against the kernel
	gws    gatewayCache
}

// neighBudget is one uid's neighbour entries and creation rate.
type neighBudget struct {
	made   map[neighKey]time.Time // entries it made the kernel create, when
	pruned time.Time              // when made was last checked against the kernel
	tokens float64                // creations it may make now
	last   time.Time              // when tokens was last brought up to date
}

type neighKey struct {
	ifindex int
	ip      netip.Addr
}

// neighLimits are the limits in force (Limits.Neighbors, NeighborsPerUID)
// and the rate of creations one uid may make: a quarter of its quota a
// second, its whole quota at once.
func (a *Agent) neighLimits() (total, perUID int, rate float64) {
	total, perUID = a.cfg.Limits.Neighbors, a.cfg.Limits.NeighborsPerUID
	return total, perUID, float64(perUID) / 4
}

// neighUse makes the kernel resolve (or re-verify) a next hop for an
// application's endpoint, which may not send NTF_USE itself.
func (a *Agent) neighUse(cn *conn, args ctl.NeighUseArgs) (err error) {
	defer func() {
		if err != nil {
			a.logFailure(cn.who, "neigh.use refused", "uid", cn.who.uid, "pid", cn.who.pid, "ifindex", args.Ifindex,
				"ip", clean(args.IP.String()), "result", fi.Code(err).Name(), "err", ctl.ClipText(err.Error(), ctl.MaxErrorText))
		}
	}()
	ip := args.IP.Unmap()
	if !ip.IsValid() || ip.Zone() != "" || ip.IsUnspecified() || ip.IsMulticast() || ip.IsLoopback() ||
		ip.Is4() && ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return fmt.Errorf("neigh use: address %s: %w", quote(args.IP.String()), fi.EINVAL)
	}
	var srcs []netip.Addr // the caller's endpoints' addresses there: its sources
	mine := false
	cn.mu.Lock()
	for _, e := range cn.eps {
		if e.ifindex == args.Ifindex {
			mine = true
			if l, err := netip.ParseAddrPort(e.local); err == nil && !l.Addr().IsUnspecified() {
				srcs = append(srcs, l.Addr().Unmap())
			}
		}
	}
	cn.mu.Unlock()
	if !mine {
		return fmt.Errorf("neigh use: this connection has no endpoint on ifindex %d: %w", args.Ifindex, fi.EACCES)
	}
	k := neighKey{args.Ifindex, ip}
	n := &a.neighs
	if !n.gws.nextHopOn(cn.who.uid, k, srcs) {
		return fmt.Errorf("neigh use %v on ifindex %d: not a next hop there (not on link, nor a gateway of a route through it): %w",
			ip, args.Ifindex, fi.EHOSTUNREACH)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	state, found, err := neighGet(k)
	if err != nil {
		return fmt.Errorf("neigh use %v on ifindex %d: read the neighbour entry: %v: %w", ip, args.Ifindex, err, fi.EIO)
	}
	switch {
	case found && state&(unix.NUD_PERMANENT|unix.NUD_NOARP) != 0:
		return nil // static: nothing to resolve, and NTF_USE would unmake it
	case found && state&unix.NUD_FAILED != 0:
		// Using it starts the kernel probing again: at the caller's rate
		// of new entries.
		if err := a.neighRate(cn.who.uid, k); err != nil {
			return err
		}
	case !found:
		if err := a.chargeNeigh(cn.who.uid, k); err != nil {
			return err
		}
	}
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	err = netlink.NeighSet(&netlink.Neigh{LinkIndex: args.Ifindex, Family: family, IP: ip.AsSlice(), Flags: netlink.NTF_USE})
	if err != nil {
		return fmt.Errorf("neigh use %v on ifindex %d: %w", ip, args.Ifindex, err)
	}
	return nil
}

// resolvedStates are the states of an entry a host answered for (or a
// static one): a real neighbour, charged to no one.
const resolvedStates = unix.NUD_REACHABLE | unix.NUD_STALE | unix.NUD_DELAY | unix.NUD_PROBE | unix.NUD_PERMANENT | unix.NUD_NOARP

// budget returns uid's budget, made if need be. The caller holds n.mu.
func (a *Agent) budget(uid uint32) *neighBudget {
	n := &a.neighs
	if n.byUID == nil {
		n.byUID = map[uint32]*neighBudget{}
	}
	b := n.byUID[uid]
	if b == nil {
		_, perUID, _ := a.neighLimits()
		b = &neighBudget{made: map[neighKey]time.Time{}, tokens: float64(perUID), last: time.Now()}
		n.byUID[uid] = b
	}
	return b
}

// neighRate takes one of uid's tokens for making the kernel probe k, or
// refuses with EAGAIN. The caller holds n.mu.
func (a *Agent) neighRate(uid uint32, k neighKey) error {
	_, perUID, rate := a.neighLimits()
	b := a.budget(uid)
	now := time.Now()
	b.tokens = min(float64(perUID), b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
	if b.tokens < 1 {
		return fmt.Errorf("neigh use %v on ifindex %d: uid %d has the kernel resolve new neighbours faster than %g a second: %w",
			k.ip, k.ifindex, uid, rate, fi.EAGAIN)
	}
	b.tokens--
	return nil
}

// chargeNeigh records an entry uid is about to make the kernel create, or
// refuses it: over uid's quota of unresolved entries (EDQUOT), over the
// agent's (EAGAIN), or faster than uid's rate (EAGAIN). Records of entries
// that resolved or are gone are dropped first; that takes a read of each,
// so it is done at most once a second (for uid, and for all), and a
// refusal in between is EAGAIN: the records may be out of date. The
// caller holds n.mu.
func (a *Agent) chargeNeigh(uid uint32, k neighKey) error {
	n := &a.neighs
	total, perUID, _ := a.neighLimits()
	b := a.budget(uid)
	now := time.Now()
	if len(b.made) >= perUID {
		if !n.prune(b, now) && len(b.made) >= perUID {
			return fmt.Errorf("neigh use %v on ifindex %d: uid %d has %d neighbour entries no host answered for yet, its quota; checked again within a second: %w",
				k.ip, k.ifindex, uid, len(b.made), fi.EAGAIN)
		}
		if len(b.made) >= perUID {
			return fmt.Errorf("neigh use %v on ifindex %d: uid %d has %d neighbour entries no host answered for yet, its quota: %w",
				k.ip, k.ifindex, uid, len(b.made), fi.EDQUOT)
		}
	}
	if n.total >= total {
		n.pruneAll(now)
		if n.total >= total {
			return fmt.Errorf("neigh use %v on ifindex %d: the agent has %d neighbour entries no host answered for yet, its limit: %w",
				k.ip, k.ifindex, n.total, fi.EAGAIN)
		}
	}
	if err := a.neighRate(uid, k); err != nil {
		return err
	}
	if _, ok := b.made[k]; !ok {
		n.total++
	}
	b.made[k] = now
	return nil
}

// prune drops b's records of entries that resolved (a host answered: a
// real neighbour) or that the kernel no longer has, unless it did within
// the last second; it reports whether it did. The caller holds n.mu.
func (n *neighState) prune(b *neighBudget, now time.Time) bool {
	if now.Sub(b.pruned) < time.Second {
		return false
	}
	b.pruned = now
	for k := range b.made {
		state, found, err := neighGet(k)
		if err == nil && (!found || state&resolvedStates != 0) {
			delete(b.made, k)
			n.total--
		}
	}
	return true
}

// pruneAll prunes every uid's records, at most once a second.
func (n *neighState) pruneAll(now time.Time) {
	if now.Sub(n.pruned) < time.Second {
		return
	}
	n.pruned = now
	for _, b := range n.byUID {
		b.pruned = time.Time{}
		n.prune(b, now)
	}
}

// sweepNeighbors drops the records of entries that resolved or are gone,
// and the budgets of uids with none left and their whole rate (gcLoop).
func (a *Agent) sweepNeighbors() {
	n := &a.neighs
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	n.pruneAll(now)
	_, perUID, rate := a.neighLimits()
	for uid, b := range n.byUID {
		if len(b.made) == 0 && b.tokens+now.Sub(b.last).Seconds()*rate >= float64(perUID) {
			delete(n.byUID, uid)
		}
	}
}

// neighGet reads the kernel's neighbour entry for k (RTM_GETNEIGH of one
// address, not a dump of the table): its state, or found false.
func neighGet(k neighKey) (state uint16, found bool, err error) {
	family := uint8(unix.AF_INET)
	if k.ip.Is6() {
		family = unix.AF_INET6
	}
	req := nl.NewNetlinkRequest(unix.RTM_GETNEIGH, 0)
	req.AddData(&netlink.Ndmsg{Family: family, Index: uint32(k.ifindex)})
	req.AddData(nl.NewRtAttr(unix.NDA_DST, k.ip.AsSlice()))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWNEIGH)
	if errors.Is(err, unix.ENOENT) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	for _, m := range msgs {
		const ndmsgLen = 12 // family, pad, pad16, ifindex, state, flags, type
		if len(m) < ndmsgLen || int(int32(binary.NativeEndian.Uint32(m[4:8]))) != k.ifindex {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[ndmsgLen:])
		if err != nil {
			continue
		}
		for _, at := range attrs {
			if ip, ok := netip.AddrFromSlice(at.Value); at.Attr.Type == unix.NDA_DST && ok && ip.Unmap() == k.ip {
				return binary.NativeEndian.Uint16(m[8:10]), true, nil
			}
		}
	}
	return 0, false, nil
}

// gatewayCache answers whether an address is a next hop on an interface.
// The gateways of the routes through each interface come from a dump of
// the routing tables, made again when an address is not among them, but
// for each uid at most once a second: a caller asking for addresses that
// are no next hop makes the agent read the tables no more often, and
// another uid's view is still current (a route added since its own last
// read is found).
type gatewayCache struct {
	mu    sync.Mutex
	gws   map[neighKey]bool
	asked map[uint32]time.Time // when each uid last had the tables read
}

// nextHopOn reports whether the kernel's routes make k.ip a next hop on
// k.ifindex, for uid: on link there (a route lookup from one of srcs, or from no
// particular source, that leaves through it with no gateway, from a route
// table: not the guess IPv4 makes for an output interface with no route
// at all), or a gateway of a route through it.
func (g *gatewayCache) nextHopOn(uid uint32, k neighKey, srcs []netip.Addr) bool {
	for _, src := range append([]netip.Addr{{}}, srcs...) {
		opts := &netlink.RouteGetOptions{OifIndex: k.ifindex}
		if src.IsValid() {
			if src.Is4() != k.ip.Is4() {
				continue
			}
			opts.SrcAddr = net.IP(src.AsSlice())
		}
		routes, err := netlink.RouteGetWithOptions(net.IP(k.ip.AsSlice()), opts)
		if err != nil || len(routes) == 0 {
			continue
		}
		rt := routes[0]
		if rt.Type == unix.RTN_UNICAST && rt.Table != unix.RT_TABLE_UNSPEC && rt.LinkIndex == k.ifindex && rt.Gw == nil && rt.Via == nil {
			return true
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gws[k] {
		return true
	}
	now := time.Now()
	if now.Sub(g.asked[uid]) < time.Second {
		return false
	}
	if g.asked == nil {
		g.asked = map[uint32]time.Time{}
	}
	for u, at := range g.asked {
		if now.Sub(at) >= time.Second {
			delete(g.asked, u)
		}
	}
	g.asked[uid], g.gws = now, map[neighKey]bool{}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
		if err != nil {
			continue
		}
		for _, rt := range routes {
			g.addGateway(rt.LinkIndex, rt.Gw, rt.Via)
			for _, nh := range rt.MultiPath {
				g.addGateway(nh.LinkIndex, nh.Gw, nh.Via)
			}
		}
	}
	return g.gws[k]
}

func (g *gatewayCache) addGateway(ifindex int, gw net.IP, via netlink.Destination) {
	if ip, ok := netip.AddrFromSlice(gw); ok {
		g.gws[neighKey{ifindex, ip.Unmap()}] = true
	}
	if v, ok := via.(*netlink.Via); ok {
		if ip, ok := netip.AddrFromSlice(v.Addr); ok {
			g.gws[neighKey{ifindex, ip.Unmap()}] = true
		}
	}
}

// gcThresh3 is the kernel's hard limit of neighbour entries (the smaller
// of IPv4's and IPv6's), or its default where the agent cannot read it
// (outside the initial network namespace the knob is not shown).
func gcThresh3() int {
	n := 0
	for _, p := range []string{"/proc/sys/net/ipv4/neigh/default/gc_thresh3", "/proc/sys/net/ipv6/neigh/default/gc_thresh3"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 0 && (n == 0 || v < n) {
			n = v
		}
	}
	if n == 0 {
		n = 1024
	}
	return n
}
