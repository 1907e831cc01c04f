package neigh

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
)

// Hop is everything needed to put an IP packet for one destination on the
// wire as an Ethernet frame: where it leaves, and both ends of the link.
type Hop struct {
	// Ifindex is the egress interface, in the resolver's namespace.
	Ifindex int
	// SrcIP is the source address: Options.SrcIP if set, else the address
	// the kernel's route lookup selected.
	SrcIP netip.Addr
	// SrcMAC is the egress interface's address, DstMAC the next hop's (the
	// destination itself, a gateway, or a broadcast/multicast address).
	SrcMAC, DstMAC [6]byte
	// Gateway is the next hop when the destination is not on-link (IPv6
	// gateways are often link-local: Ifindex is their scope), else zero.
	Gateway netip.Addr
	// MTU is the route's MTU (including a learned path MTU) if it has one,
	// else the interface's.
	MTU int
}

// Options shape a Resolver. The zero value resolves like an unbound socket.
type Options struct {
	// Ifindex, if not 0, is the interface every destination must be
	// reached through (the endpoint's interface), as for a socket bound to
	// it with SO_BINDTODEVICE. A destination whose route leaves elsewhere
	// fails with EHOSTUNREACH; IPv6 link-local destinations need no zone.
	Ifindex int
	// SrcIP, if valid and not unspecified, is the endpoint's bound address:
	// it is the source of every Hop of its family and takes part in the
	// route lookup (source-based policy routing). Destinations of the other
	// family fail with EINVAL. It must be a local address.
	SrcIP netip.Addr
	// Timeout bounds Resolve (default 1s). When it expires with the next
	// hop still unresolved, Resolve reports EHOSTUNREACH (and ETIMEDOUT).
	Timeout time.Duration
	// Use, if set, replaces the resolver's own NTF_USE request: it must
	// make the kernel resolve (or re-verify) ip on ifindex. NTF_USE needs
	// CAP_NET_ADMIN; an unprivileged application passes a function that
	// asks the xdpfab agent to do it. A lookup it fails fails with
	// fi.EAGAIN, fi.EDQUOT or fi.EHOSTUNREACH if its error carries one
	// (the agent's refusals: retry later, too many unresolved neighbours,
	// not a next hop there), else fi.EIO.
	Use func(ifindex int, ip netip.Addr) error
	// TTL is how long a result, positive or negative, is served from the
	// cache before the kernel is asked again (default 5s; entries are
	// swept every TTL/4, so they live up to 1.25 TTL). Neighbour and route
	// notifications update or drop entries sooner.
	TTL time.Duration
}

const (
	defaultTimeout = time.Second
	defaultTTL     = 5 * time.Second
	// recheck is how long a pending next hop is answered with EAGAIN from
	// the cache before the kernel is asked again. Neighbour notifications
	// end the wait earlier; this bounds the damage of a missed one and the
	// syscall rate of a caller spinning on EAGAIN.
	recheck = 100 * time.Millisecond
)

// hopKey names a next hop: a neighbour entry in the kernel.
type hopKey struct {
	ifindex int
	ip      netip.Addr
}

// nextHop is the cached state of one neighbour, shared by every destination
// routed through it, so one notification updates all of them.
type nextHop struct {
	state nhState
	mac   [6]byte
	until int64 // pending/failed: when to ask the kernel again
	seq   uint64
}

type nhState uint8

const (
	nhUnknown nhState = iota // ask the kernel
	nhValid                  // mac is what the kernel transmits to
	nhPending                // the kernel is resolving (INCOMPLETE)
	nhFailed                 // the kernel gave up (FAILED)
)

// entry is the cached answer for one destination.
type entry struct {
	hop     Hop      // DstMAC comes from nh
	nh      *nextHop // nil: err is the answer (no route, local, ...)
	err     error    // returned while nh.state == errState
	errFor  nhState
	expires int64
}

// kneigh is one neighbour as the kernel reported it.
type kneigh struct {
	ifindex int
	ip      netip.Addr
	state   uint16
	mac     []byte
}

// linkInfo is what a Hop needs from an interface.
type linkInfo struct {
	mac [6]byte
	mtu int
}

// Resolver answers, for a destination IP, which interface, addresses and
// next-hop MAC the kernel would use. It is bound to the network namespace
// that was current on the calling thread when New ran, and safe for
// concurrent use from any goroutine.
type Resolver struct {
	opts  Options
	epoch time.Time
	ttl   int64

	// io serialises Close against requests in flight: a closed
	// netlink.Handle silently falls back to sockets in the caller's
	// namespace, which must never be used.
	io      sync.RWMutex
	closed  atomic.Bool
	sockets // netlink (kernel_linux.go)

	mu    sync.RWMutex
	gen   atomic.Uint64 // bumped under every write lock of mu (lock): Cache
	dsts  map[netip.Addr]*entry
	hops  map[hopKey]*nextHop
	links map[int]linkInfo
	wake  chan struct{} // closed and replaced on every cache change

	monDone chan struct{}
	done    chan struct{}
	misses  atomic.Uint64 // slow-path lookups, for tests
}

// New creates a resolver for the network namespace of the calling thread.
// Call it on a thread inside the namespace (for example under
// runtime.LockOSThread after setns); the resolver can then be used from any
// goroutine. It fails with ENODEV if opts.Ifindex does not exist and with
// EADDRNOTAVAIL if opts.SrcIP is not a local address.
func New(opts Options) (*Resolver, error) {
	if opts.Timeout < 0 || opts.TTL < 0 || opts.Ifindex < 0 {
		return nil, fmt.Errorf("neigh: negative option: %w", fi.EINVAL)
	}
	if opts.Timeout == 0 {
		opts.Timeout = defaultTimeout
	}
	if opts.TTL == 0 {
		opts.TTL = defaultTTL
	}
	if opts.SrcIP.IsUnspecified() {
		opts.SrcIP = netip.Addr{}
	}
	opts.SrcIP = opts.SrcIP.Unmap().WithZone("")
	r := &Resolver{
		opts:    opts,
		epoch:   time.Now(),
		ttl:     int64(opts.TTL),
		dsts:    map[netip.Addr]*entry{},
		hops:    map[hopKey]*nextHop{},
		links:   map[int]linkInfo{},
		wake:    make(chan struct{}),
		monDone: make(chan struct{}),
		done:    make(chan struct{}),
	}
	if err := r.openSockets(); err != nil {
		r.closeSockets()
		return nil, err
	}
	if err := r.checkOptions(); err != nil {
		r.closeSockets()
		return nil, err
	}
	go r.monitor()
	go r.sweeper()
	return r, nil
}

// usable fails with fi.EINVAL for a nil *Resolver or one that did not come
// from New (its zero value, which has no cache).
func (r *Resolver) usable(dst netip.Addr) error {
	switch {
	case r == nil:
		return fmt.Errorf("neigh %s: nil resolver: %w", dst, fi.EINVAL)
	case r.done == nil:
		return fmt.Errorf("neigh %s: resolver not opened (zero value, not from New): %w", dst, fi.EINVAL)
	}
	return nil
}

// Close stops the resolver and releases its sockets. Later calls fail with
// EBADF. Close is idempotent, and closing a nil or zero Resolver returns
// nil: there is nothing to release.
func (r *Resolver) Close() error {
	if r == nil || r.done == nil {
		return nil
	}
	r.io.Lock()
	if r.closed.Swap(true) {
		r.io.Unlock()
		return nil
	}
	r.closeSockets()
	r.io.Unlock()
	<-r.monDone
	r.lock()
	r.dsts, r.hops, r.links = map[netip.Addr]*entry{}, map[hopKey]*nextHop{}, map[int]linkInfo{}
	r.mu.Unlock()
	close(r.done)
	return nil
}

// lock takes mu for writing and invalidates every Cache's answer.
func (r *Resolver) lock() {
	r.mu.Lock()
	r.gen.Add(1)
}

func (r *Resolver) now() int64 { return int64(time.Since(r.epoch)) }

// Lookup returns the hop for dst without blocking. A cached answer costs no
// system call and no allocation. Otherwise Lookup asks the kernel (route,
// then neighbour); if the next hop's link-layer address is not known yet it
// makes the kernel resolve it (ARP or NDP, as if the kernel itself had a
// packet to send) and fails with EAGAIN: retry the send later, or call
// Resolve to wait. Other errors: ENETUNREACH (no route), EHOSTUNREACH
// (unreachable route, next hop failed to answer, or the route leaves
// through another interface than Options.Ifindex), EADDRNOTAVAIL (dst is a
// local address), EINVAL (IPv6 link-local dst without zone or Ifindex,
// family differs from Options.SrcIP), EBADF after Close, EINVAL on a nil
// or zero Resolver.
func (r *Resolver) Lookup(dst netip.Addr) (Hop, error) {
	if r == nil || r.done == nil {
		return Hop{}, r.usable(dst)
	}
	r.mu.RLock()
	if e := r.dsts[dst]; e != nil {
		// No clock read for answers that stand until the sweeper drops
		// them (it costs as much as the rest of a hit in a VM); pending
		// and failed next hops are re-checked on their own schedule.
		nh := e.nh
		switch {
		case nh == nil:
			err := e.err
			r.mu.RUnlock()
			return Hop{}, err
		case nh.state == nhValid:
			hop := e.hop
			hop.DstMAC = nh.mac
			r.mu.RUnlock()
			return hop, nil
		case nh.state == e.errFor:
			if now := r.now(); now < nh.until && now < e.expires {
				err := e.err
				r.mu.RUnlock()
				return Hop{}, err
			}
		}
	}
	r.mu.RUnlock()
	return r.lookupSlow(dst)
}

// Resolve is Lookup that waits while the next hop is being resolved, until
// it is, the kernel gives up (EHOSTUNREACH), Options.Timeout passes
// (EHOSTUNREACH and ETIMEDOUT), ctx's deadline passes (ETIMEDOUT) or ctx is
// cancelled (ECANCELED). It wakes on neighbour notifications, not on a
// timer, so it returns as soon as the kernel has the answer. A nil ctx, or
// a nil or zero Resolver, is EINVAL.
func (r *Resolver) Resolve(ctx context.Context, dst netip.Addr) (Hop, error) {
	if err := r.usable(dst); err != nil {
		return Hop{}, err
	}
	if ctx == nil {
		return Hop{}, fmt.Errorf("neigh %s: nil context: %w", dst, fi.EINVAL)
	}
	timeout := time.NewTimer(r.opts.Timeout)
	defer timeout.Stop()
	poll := time.NewTicker(recheck)
	defer poll.Stop()
	for {
		r.mu.RLock()
		wake := r.wake
		r.mu.RUnlock()
		hop, err := r.Lookup(dst)
		if !errors.Is(err, fi.EAGAIN) {
			return hop, err
		}
		select {
		case <-wake:
		case <-poll.C:
		case <-timeout.C:
			return Hop{}, fmt.Errorf("neigh %s: next hop did not answer within %v: %w (%w)",
				dst, r.opts.Timeout, fi.EHOSTUNREACH, fi.ETIMEDOUT)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return Hop{}, fmt.Errorf("neigh %s: %w (%w)", dst, fi.ETIMEDOUT, ctx.Err())
			}
			return Hop{}, fmt.Errorf("neigh %s: %w (%w)", dst, fi.ECANCELED, ctx.Err())
		case <-r.done:
			return Hop{}, r.closedErr(dst)
		}
	}
}

func (r *Resolver) closedErr(dst netip.Addr) error {
	return fmt.Errorf("neigh %s: resolver closed: %w", dst, fi.EBADF)
}

// lookupSlow asks the kernel and caches the answer.
func (r *Resolver) lookupSlow(dst netip.Addr) (Hop, error) {
	r.misses.Add(1)
	r.io.RLock()
	defer r.io.RUnlock()
	if r.closed.Load() {
		return Hop{}, r.closedErr(dst)
	}
	hop, key, static, err := r.route(dst)
	if err != nil {
		var errno fi.Errno
		if errors.As(err, &errno) && errno != fi.EIO {
			r.store(dst, &entry{err: err}, hopKey{})
		}
		return Hop{}, err
	}
	if static != nil { // broadcast, multicast: no neighbour entry
		hop.DstMAC = *static
		r.store(dst, &entry{hop: hop, nh: &nextHop{state: nhValid, mac: *static}}, hopKey{})
		return hop, nil
	}

	// The next-hop record exists before the kernel is asked, so that a
	// notification racing with the request is not lost. seq tells whether
	// one arrived meanwhile; if so its state is kept and our read, which
	// may be older, is dropped.
	now := r.now()
	r.lock()
	nh := r.hops[key]
	if nh == nil {
		nh = &nextHop{}
		r.hops[key] = nh
	}
	seq, state, until := nh.seq, nh.state, nh.until
	r.mu.Unlock()
	if state == nhFailed && now < until {
		// The kernel gave up on this next hop recently: do not make it
		// probe again on every retry.
		return Hop{}, r.storeHop(dst, hop, key, nh)
	}

	kn, found, err := r.neighGet(key)
	if err != nil {
		return Hop{}, fmt.Errorf("neigh %s: read neighbour %s on ifindex %d: %w (%v)", dst, key.ip, key.ifindex, fi.EIO, err)
	}
	use, trigger := false, false
	now = r.now()
	r.lock()
	if nh.seq == seq {
		switch {
		case found && kn.state&nudUsable != 0 && len(kn.mac) == 6:
			nh.state = nhValid
			copy(nh.mac[:], kn.mac)
			// A STALE entry is usable but unverified: using it, as a
			// kernel transmission would, makes the kernel re-verify it
			// (DELAY, then a unicast probe), so a peer that moved is
			// noticed and the notification fixes the cached MAC. AF_XDP
			// traffic never does this by itself.
			use = kn.state&nudStale != 0
		case found && kn.state&nudIncomplete != 0:
			nh.state, nh.until = nhPending, now+int64(recheck)
		case found && kn.state&nudNoUse != 0:
			// A static entry without an Ethernet address: nothing to
			// resolve, and NTF_USE would destroy a PERMANENT entry.
			r.mu.Unlock()
			return Hop{}, fmt.Errorf("neigh %s: static neighbour %s on ifindex %d has no Ethernet address: %w",
				dst, key.ip, key.ifindex, fi.EHOSTUNREACH)
		default: // missing, NONE, or FAILED longer ago than a TTL
			trigger = true
		}
	}
	if trigger || nh.state == nhUnknown {
		nh.state, nh.until = nhPending, now+int64(recheck)
		trigger = true
	}
	r.mu.Unlock()
	if trigger || use {
		if err := r.neighUse(key); err != nil && trigger {
			r.lock()
			if nh.state == nhPending {
				nh.state = nhUnknown
			}
			r.mu.Unlock()
			return Hop{}, fmt.Errorf("neigh %s: resolve %s on ifindex %d: %w (%v)", dst, key.ip, key.ifindex, useErrno(err), err)
		}
	}
	err = r.storeHop(dst, hop, key, nh)
	if trigger && err == nil {
		// The kernel answered while we were asking (about 15 us on
		// veth); the cache already has it, but this call started the
		// resolution and says so, which keeps the first answer for a
		// new next hop predictable.
		err = fmt.Errorf("neigh %s: resolving next hop %s on ifindex %d: %w", dst, key.ip, key.ifindex, fi.EAGAIN)
	}
	if err != nil {
		return Hop{}, err
	}
	r.mu.RLock()
	hop.DstMAC = nh.mac
	r.mu.RUnlock()
	return hop, nil
}

// useErrno is the errno of a failed NTF_USE request: a refusal that
// Options.Use reports (the xdpfab agent's) as fi.EAGAIN (retry later),
// fi.EDQUOT (the caller holds too many unresolved neighbours) or
// fi.EHOSTUNREACH (not a next hop there) is that; anything else fi.EIO.
func useErrno(err error) fi.Errno {
	switch c := fi.Code(err); c {
	case fi.EAGAIN, fi.EDQUOT, fi.EHOSTUNREACH:
		return c
	}
	return fi.EIO
}

// storeHop caches hop for dst with next hop nh and returns the error that
// nh's current state means (nil when it is resolved).
func (r *Resolver) storeHop(dst netip.Addr, hop Hop, key hopKey, nh *nextHop) error {
	r.mu.RLock()
	state := nh.state
	r.mu.RUnlock()
	e := &entry{hop: hop, nh: nh, errFor: state}
	switch state {
	case nhValid:
	case nhFailed:
		e.err = fmt.Errorf("neigh %s: next hop %s on ifindex %d did not answer: %w", dst, key.ip, key.ifindex, fi.EHOSTUNREACH)
	default:
		e.err = fmt.Errorf("neigh %s: resolving next hop %s on ifindex %d: %w", dst, key.ip, key.ifindex, fi.EAGAIN)
	}
	r.store(dst, e, key)
	return e.err
}

// store caches e for dst for one TTL. An entry whose next hop is no longer
// the registered record for key (a flush ran meanwhile) is not cached: no
// notification would reach it.
func (r *Resolver) store(dst netip.Addr, e *entry, key hopKey) {
	e.expires = r.now() + r.ttl
	r.lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return
	}
	if key.ip.IsValid() && r.hops[key] != e.nh {
		return
	}
	r.dsts[dst] = e
}

// sweeper drops expired entries every sweepPeriod until Close, so an entry
// lives from TTL to TTL plus a quarter, and the cache holds the
// destinations of about the last TTL.
func (r *Resolver) sweeper() {
	t := time.NewTicker(sweepPeriod(r.opts.TTL))
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case <-t.C:
			r.sweep()
		}
	}
}

func sweepPeriod(ttl time.Duration) time.Duration {
	return max(ttl/4, time.Millisecond)
}

func (r *Resolver) sweep() {
	now := r.now()
	r.lock()
	defer r.mu.Unlock()
	live := make(map[*nextHop]bool, len(r.hops))
	for d, e := range r.dsts {
		if now >= e.expires {
			delete(r.dsts, d)
		} else if e.nh != nil {
			live[e.nh] = true
		}
	}
	for k, nh := range r.hops {
		// A record without entries may belong to a slow path in flight;
		// dropping it only costs that path its caching.
		if !live[nh] {
			delete(r.hops, k)
		}
	}
}

// route finds the egress interface, source and next hop for dst. For
// broadcast and multicast destinations static is the fixed DstMAC.
func (r *Resolver) route(dst netip.Addr) (hop Hop, key hopKey, static *[6]byte, err error) {
	fail := func(e fi.Errno, format string, args ...any) (Hop, hopKey, *[6]byte, error) {
		return Hop{}, hopKey{}, nil, fmt.Errorf("neigh %s: %s: %w", dst, fmt.Sprintf(format, args...), e)
	}
	if !dst.IsValid() {
		return fail(fi.EINVAL, "invalid address")
	}
	ip := dst.Unmap().WithZone("")
	oif := r.opts.Ifindex
	if z := dst.Zone(); z != "" {
		zi, err := r.zoneIndex(z)
		if err != nil {
			return fail(fi.ENODEV, "zone %q", z)
		}
		if oif != 0 && zi != oif {
			return fail(fi.EINVAL, "zone %q is not ifindex %d", z, oif)
		}
		oif = zi
	}
	if ip.Is6() && oif == 0 && (ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast()) {
		// sendto(2) fails the same way without sin6_scope_id.
		return fail(fi.EINVAL, "link-local destination needs a zone or Options.Ifindex")
	}
	src := r.opts.SrcIP
	if src.IsValid() && src.Is4() != ip.Is4() {
		return fail(fi.EINVAL, "family differs from source %s", src)
	}

	rt, err := r.routeGet(ip, oif, src)
	if err == nil && oif != 0 && rt.Table == rtTableUnspec && rt.Type == rtnUnicast {
		// With an output interface and no route through it, IPv4
		// "assumes the destination is on link" (ip_route_output_key):
		// that guess would ARP for any address out of this interface.
		err = unix.ENETUNREACH
	}
	if err != nil {
		e := kernelErr(err)
		if e == fi.ENETUNREACH && oif != 0 {
			// Tell "no route at all" from "routed elsewhere".
			if other, err2 := r.routeGet(ip, 0, src); err2 == nil && other.Type == rtnUnicast {
				return fail(fi.EHOSTUNREACH, "route leaves through ifindex %d, not %d", other.LinkIndex, oif)
			}
		}
		if e == fi.EIO {
			return Hop{}, hopKey{}, nil, fmt.Errorf("neigh %s: route lookup: %w (%v)", dst, e, err)
		}
		return fail(e, "route lookup")
	}

	switch rt.Type {
	case rtnUnicast:
	case rtnLocal:
		// Our own address: frames from an AF_XDP socket leave the host
		// and never reach the local stack.
		return fail(fi.EADDRNOTAVAIL, "local address")
	case rtnBroadcast:
		static = &[6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	case rtnMulticast:
		static = multicastMAC(ip)
	case rtnBlackhole:
		return fail(fi.ENETUNREACH, "blackhole route")
	default:
		return fail(fi.EHOSTUNREACH, "route type %d", rt.Type)
	}

	li, err := r.link(rt.LinkIndex)
	if err != nil {
		var errno fi.Errno
		if errors.As(err, &errno) {
			return Hop{}, hopKey{}, nil, fmt.Errorf("neigh %s: %w", dst, err)
		}
		return Hop{}, hopKey{}, nil, fmt.Errorf("neigh %s: interface %d: %w (%v)", dst, rt.LinkIndex, fi.EIO, err)
	}
	hop = Hop{Ifindex: rt.LinkIndex, SrcMAC: li.mac, MTU: li.mtu, SrcIP: src}
	if rt.MTU > 0 {
		hop.MTU = rt.MTU
	}
	if !hop.SrcIP.IsValid() {
		hop.SrcIP, _ = netip.AddrFromSlice(rt.Src)
		hop.SrcIP = hop.SrcIP.Unmap()
		if !hop.SrcIP.IsValid() {
			return fail(fi.EADDRNOTAVAIL, "no source address on ifindex %d", rt.LinkIndex)
		}
	}
	key = hopKey{ifindex: rt.LinkIndex, ip: ip}
	switch {
	case rt.Via != nil: // e.g. IPv4 via an IPv6 next hop (RFC 5549)
		if gw, ok := viaAddr(rt.Via); ok {
			key.ip = gw.Unmap()
			hop.Gateway = key.ip
		}
	case rt.Gw != nil:
		if gw, ok := netip.AddrFromSlice(rt.Gw); ok {
			key.ip = gw.Unmap()
			hop.Gateway = key.ip
		}
	}
	return hop, key, static, nil
}

// link returns the interface's MAC and MTU, cached until a link, address or
// route notification.
func (r *Resolver) link(ifindex int) (linkInfo, error) {
	r.mu.RLock()
	li, ok := r.links[ifindex]
	r.mu.RUnlock()
	if ok {
		return li, nil
	}
	li, err := r.linkGet(ifindex)
	if err != nil {
		return linkInfo{}, err
	}
	r.lock()
	r.links[ifindex] = li
	r.mu.Unlock()
	return li, nil
}

func multicastMAC(ip netip.Addr) *[6]byte {
	b := ip.As16()
	if ip.Is4() {
		return &[6]byte{0x01, 0x00, 0x5e, b[13] & 0x7f, b[14], b[15]}
	}
	return &[6]byte{0x33, 0x33, b[12], b[13], b[14], b[15]}
}

// neighEvent applies a neighbour notification to the next hop it names.
func (r *Resolver) neighEvent(n kneigh, deleted bool) {
	r.lock()
	defer r.mu.Unlock()
	nh := r.hops[hopKey{ifindex: n.ifindex, ip: n.ip}]
	if nh == nil {
		return
	}
	now := r.now()
	switch {
	case deleted:
		nh.state = nhUnknown
	case n.state&nudUsable != 0 && len(n.mac) == 6:
		// Also how a peer that moved (new MAC in a gratuitous ARP or
		// after re-verification) reaches the cache at once.
		nh.state = nhValid
		copy(nh.mac[:], n.mac)
	case n.state&nudFailed != 0:
		nh.state, nh.until = nhFailed, now+r.ttl
	case n.state&nudIncomplete != 0:
		nh.state, nh.until = nhPending, now+int64(recheck)
	default:
		nh.state = nhUnknown
	}
	nh.seq++
	r.wakeLocked()
}

// flush forgets everything: routes, sources or interfaces changed.
func (r *Resolver) flush() {
	r.lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return
	}
	for _, nh := range r.hops {
		// Slow paths in flight hold these records; make them re-read.
		nh.seq++
	}
	r.dsts = map[netip.Addr]*entry{}
	r.hops = map[hopKey]*nextHop{}
	r.links = map[int]linkInfo{}
	r.wakeLocked()
}

func (r *Resolver) wakeLocked() {
	close(r.wake)
	r.wake = make(chan struct{})
}

// kernelErr maps an error from a route lookup to the fi vocabulary. Every
// answer but fi.EIO describes the routing state, which Resolve may cache
// until the next route change; fi.EIO is a failed request.
func kernelErr(err error) fi.Errno {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return fi.EIO
	}
	switch errno {
	case unix.ENETUNREACH:
		return fi.ENETUNREACH
	case unix.EHOSTUNREACH:
		return fi.EHOSTUNREACH
	case unix.EACCES, unix.EPERM: // prohibit route
		return fi.EACCES
	case unix.EINVAL:
		return fi.EINVAL
	case unix.ENODEV:
		return fi.ENODEV
	case unix.ENETDOWN:
		return fi.ENETDOWN
	}
	return fi.EIO
}
