package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
)

// av insertsym of host names: the agent resolves them itself, before it
// takes any lock, with a bound on the names and the time of one request.
// Resolving them in the AV (av.AV.InsertSym, one name after another)
// would hold the name's and the owner's locks meanwhile: every other
// change of the AV, and every insert into its owner's other AVs, waited
// for up to 16384 lookups a member of the AV's group asked for.
const (
	// maxNamesPerCall bounds the host names of one request.
	maxNamesPerCall = 1024
	// resolvers is how many of one request's names are resolved at once.
	resolvers = 8
)

// resolveTimeout bounds the resolution of one request's names (tests
// shorten it).
var resolveTimeout = 10 * time.Second

// lookupHost resolves a host name (tests replace it).
var lookupHost = func(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

func (a *Agent) avInsertSym(who caller, args ctl.AVInsertSymArgs, rec *auditRec) (ctl.InsertResult, error) {
	const what = "av insertsym"
	rec.add("av", clean(args.Name), "nodes", args.NodeCnt, "services", args.SvcCnt)
	if err := a.mayWriteAV(who, what, args.Name); err != nil {
		return ctl.InsertResult{}, err
	}
	if args.NodeCnt < 0 || args.SvcCnt < 0 {
		return ctl.InsertResult{}, fmt.Errorf("%s: node count %d, service count %d: %w", what, args.NodeCnt, args.SvcCnt, fi.EINVAL)
	}
	nodes, svcs := args.NodeCnt, args.SvcCnt // 0 inserts nothing, as fi_av_insertsym
	if nodes > maxPerCall || svcs > maxPerCall || nodes*svcs > maxPerCall {
		return ctl.InsertResult{}, fmt.Errorf("%s: %d x %d addresses in one request, at most %d (split the range): %w",
			what, nodes, svcs, maxPerCall, fi.EINVAL)
	}
	// Host names are resolved here, outside every lock; numeric nodes
	// are the AV's to count up, from a service the agent turned into its
	// port number here too (a service name is an NSS lookup).
	var addrs []netip.AddrPort
	if _, err := netip.ParseAddr(args.Node); err != nil && nodes > 0 && svcs > 0 && args.Node != "" {
		var err error
		if addrs, err = a.resolveSym(args); err != nil {
			return ctl.InsertResult{}, fmt.Errorf("%s: %w", what, err)
		}
	} else if err == nil && nodes > 0 && svcs > 0 {
		port, err := servicePort(args.Service)
		if err != nil {
			return ctl.InsertResult{}, fmt.Errorf("%s: %w", what, err)
		}
		args.Service = strconv.Itoa(int(port))
	}
	var r ctl.InsertResult
	err := a.changeAV(who, what, args.Name, func(ref avRef) error {
		release, err := a.reserveEntries(what, ref, nodes*svcs)
		if err != nil {
			return err
		}
		defer release()
		r = ctl.InsertResult{FiAddrs: make([]fi.Addr, nodes*svcs), Errnos: make([]fi.Errno, nodes*svcs)}
		flags := args.Flags | fi.SyncErr
		if addrs != nil {
			r.Inserted, err = ref.v.Insert(addrs, r.FiAddrs, flags, r.Errnos)
		} else {
			r.Inserted, err = ref.v.InsertSym(args.Node, nodes, args.Service, svcs, r.FiAddrs, flags, r.Errnos)
		}
		if err != nil && !partial(err) {
			return err
		}
		return nil
	})
	if err != nil {
		return ctl.InsertResult{}, err
	}
	insertOutcome(rec, r)
	return r, nil
}

// resolveSym resolves insertsym's host names, node major as
// fi_av_insertsym orders them: a name with a numeric suffix counts up its
// suffix (host07, host08), each name resolved on its own; a name without
// one needs a node count of 1. A name that does not resolve fails the
// request before anything is inserted, as av.AV.InsertSym does: ENOENT,
// or EAGAIN for a temporary failure and for names not resolved within
// resolveTimeout.
func (a *Agent) resolveSym(args ctl.AVInsertSymArgs) ([]netip.AddrPort, error) {
	if args.NodeCnt > maxNamesPerCall {
		return nil, fmt.Errorf("%d host names in one request, at most %d (split the range): %w", args.NodeCnt, maxNamesPerCall, fi.EINVAL)
	}
	port, err := servicePort(args.Service)
	if err != nil {
		return nil, err
	}
	if int(port)+args.SvcCnt-1 > 65535 {
		return nil, fmt.Errorf("service %d + %d runs past port 65535: %w", port, args.SvcCnt, fi.EINVAL)
	}
	names, err := hostNames(args.Node, args.NodeCnt)
	if err != nil {
		return nil, err
	}
	format := fi.FormatUnspec
	if v, err := a.namedAV(args.Name); err == nil {
		format = v.Attr().AddrFormat
	}
	ips, err := resolveAll(names, format)
	if err != nil {
		return nil, err
	}
	addrs := make([]netip.AddrPort, 0, len(ips)*args.SvcCnt)
	for _, ip := range ips {
		for s := range args.SvcCnt {
			addrs = append(addrs, netip.AddrPortFrom(ip, port+uint16(s)))
		}
	}
	return addrs, nil
}

// servicePort is a port number or a UDP service's name (/etc/services).
func servicePort(service string) (uint16, error) {
	if service == "" {
		return 0, fmt.Errorf("empty service: %w", fi.EINVAL)
	}
	if p, err := strconv.ParseUint(service, 10, 16); err == nil {
		return uint16(p), nil // port 0 fails per address, as in the AV
	}
	if len(service) > ctl.MaxQuoted {
		return 0, fmt.Errorf("service name of %d bytes: %w", len(service), fi.EINVAL)
	}
	p, err := net.LookupPort("udp", service)
	if err != nil || p <= 0 || p > 65535 {
		return 0, fmt.Errorf("service %s: not a port number or known UDP service: %w", quote(service), fi.EINVAL)
	}
	return uint16(p), nil
}

// hostNames expands node into count names, counting up its numeric
// suffix with its width (host007, host008).
func hostNames(node string, count int) ([]string, error) {
	i := len(node)
	for i > 0 && node[i-1] >= '0' && node[i-1] <= '9' {
		i--
	}
	width := len(node) - i
	if width == 0 || width > 18 {
		if count > 1 {
			return nil, fmt.Errorf("host %s has no numeric suffix to count %d nodes from: %w", quote(node), count, fi.EINVAL)
		}
		return []string{node}, nil
	}
	num, _ := strconv.ParseUint(node[i:], 10, 64)
	names := make([]string, count)
	for k := range names {
		names[k] = node[:i] + fmt.Sprintf("%0*d", width, num+uint64(k))
	}
	return names, nil
}

// resolveAll resolves names, resolvers at a time, within resolveTimeout
// together: each to its first address of the AV's format.
func resolveAll(names []string, format fi.AddrFormat) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	ips := make([]netip.Addr, len(names))
	errs := make([]error, len(names))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(resolvers, len(names)) {
		wg.Go(func() {
			for k := range next {
				ips[k], errs[k] = resolveOne(ctx, names[k], format)
				if errs[k] != nil {
					cancel() // the request fails: the rest need not be looked up
				}
			}
		})
	}
	for k := range names {
		if ctx.Err() != nil {
			break
		}
		next <- k
	}
	close(next)
	wg.Wait()
	// The first name that failed of itself (the others were called off),
	// else the deadline.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%d host names not resolved within %v: %w", len(names), resolveTimeout, fi.EAGAIN)
	}
	return ips, nil
}

// resolveOne resolves name to its first address of the AV's format, as
// the AV would.
func resolveOne(ctx context.Context, name string, format fi.AddrFormat) (netip.Addr, error) {
	ips, err := lookupHost(ctx, name)
	if err != nil {
		if ctx.Err() != nil {
			return netip.Addr{}, ctx.Err()
		}
		code := fi.ENOENT
		var dns *net.DNSError
		if errors.As(err, &dns) && (dns.IsTemporary || dns.IsTimeout) {
			code = fi.EAGAIN
		}
		return netip.Addr{}, fmt.Errorf("resolve %s: %s: %w", quote(name), ctl.ClipText(err.Error(), ctl.MaxQuoted), code)
	}
	for _, ip := range ips {
		ip = ip.Unmap()
		if format == fi.FormatSockaddrIn && !ip.Is4() || format == fi.FormatSockaddrIn6 && !ip.Is6() {
			continue
		}
		return ip, nil
	}
	return netip.Addr{}, fmt.Errorf("resolve %s: no address of the AV's format %v: %w", quote(name), format, fi.ENOENT)
}
