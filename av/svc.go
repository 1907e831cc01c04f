package av

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/xdpfab/xdpfab/fi"
)

// InsertSvc inserts the address of node and service (fi_av_insertsvc): the
// same as InsertSym(node, 1, service, 1, ...). node is a numeric address,
// a host name, or an FI_ADDR_STR address with an empty service.
func (a *AV) InsertSvc(node, service string, fiAddr []fi.Addr, flags fi.Flags, ctx any) (int, error) {
	if err := a.usable("av insertsvc"); err != nil {
		return 0, err
	}
	if strings.Contains(node, "://") {
		if service != "" {
			return 0, fmt.Errorf("av insertsvc: FI_ADDR_STR node %q with service %q (must be empty): %w", node, service, fi.EINVAL)
		}
		srcs := make([]source, 1)
		srcs[0].ap, srcs[0].err = fi.ParseAddrStr(node)
		return a.insert("av insertsvc", sources{srcs: srcs}, fiAddr, flags, ctx)
	}
	return a.insertSym("av insertsvc", node, 1, service, 1, fiAddr, flags, ctx)
}

// InsertSym inserts nodeCnt x svcCnt addresses (fi_av_insertsym), node
// major: for node "10.1.1.1", 2, service "5000", 2 the order is
// 10.1.1.1:5000, 10.1.1.1:5001, 10.1.1.2:5000, 10.1.1.2:5001. A host name
// with a numeric suffix counts up its suffix (host10, host11), each name
// resolved on its own; a host name without one needs nodeCnt 1.
func (a *AV) InsertSym(node string, nodeCnt int, service string, svcCnt int, fiAddr []fi.Addr, flags fi.Flags, ctx any) (int, error) {
	if err := a.usable("av insertsym"); err != nil {
		return 0, err
	}
	return a.insertSym("av insertsym", node, nodeCnt, service, svcCnt, fiAddr, flags, ctx)
}

func (a *AV) insertSym(op, node string, nodeCnt int, service string, svcCnt int, fiAddr []fi.Addr, flags fi.Flags, ctx any) (int, error) {
	if nodeCnt < 0 || svcCnt < 0 || nodeCnt > 1<<24 || svcCnt > 1<<24 || nodeCnt*svcCnt > 1<<24 {
		return 0, fmt.Errorf("%s: nodecnt %d x svccnt %d: %w", op, nodeCnt, svcCnt, fi.EINVAL)
	}
	if nodeCnt == 0 || svcCnt == 0 {
		return 0, nil // nothing to insert, as an insert of count 0 (libfabric's util AV alike)
	}
	if node == "" {
		return 0, fmt.Errorf("%s: empty node: %w", op, fi.EINVAL)
	}
	port, err := lookupPort(service)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if int(port)+svcCnt-1 > 65535 {
		return 0, fmt.Errorf("%s: service %d + %d runs past port 65535: %w", op, port, svcCnt, fi.EINVAL)
	}
	nodes, err := a.nodeRange(node, nodeCnt)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	srcs := make([]source, 0, nodeCnt*svcCnt)
	for _, n := range nodes {
		for s := range svcCnt {
			if n.err != nil {
				srcs = append(srcs, source{err: n.err})
				continue
			}
			srcs = append(srcs, source{ap: netip.AddrPortFrom(n.ip, port+uint16(s))})
		}
	}
	return a.insert(op, sources{srcs: srcs}, fiAddr, flags, ctx)
}

type nodeAddr struct {
	ip  netip.Addr
	err error
}

// nodeRange expands node into count consecutive nodes. Numeric addresses
// count up the address; names count up their numeric suffix, each resolved
// separately (libfabric's reference resolves the first name every time: a
// bug not copied). A name that does not resolve fails the whole call before
// anything is inserted, as libfabric's util AV does (it returns the
// resolver's error): ENOENT for a name that does not exist, EAGAIN for a
// temporary failure.
func (a *AV) nodeRange(node string, count int) ([]nodeAddr, error) {
	out := make([]nodeAddr, 0, count)
	if ip, err := netip.ParseAddr(node); err == nil {
		for i := range count {
			if i > 0 {
				ip = ip.Next()
				if !ip.IsValid() {
					return nil, fmt.Errorf("node %s + %d overflows the address space: %w", node, count, fi.EINVAL)
				}
			}
			out = append(out, nodeAddr{ip: ip})
		}
		return out, nil
	}
	base, num, width, hasNum := splitSuffix(node)
	if count > 1 && !hasNum {
		return nil, fmt.Errorf("host %q has no numeric suffix to count %d nodes from: %w", node, count, fi.EINVAL)
	}
	for i := range count {
		name := node
		if hasNum {
			name = base + fmt.Sprintf("%0*d", width, num+uint64(i))
		}
		ip, err := a.resolve(name)
		if err != nil {
			return nil, err
		}
		out = append(out, nodeAddr{ip: ip})
	}
	return out, nil
}

// splitSuffix splits "host007" into ("host", 7, 3, true).
func splitSuffix(s string) (string, uint64, int, bool) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	if i == len(s) || len(s)-i > 18 {
		return s, 0, 0, false
	}
	n, _ := strconv.ParseUint(s[i:], 10, 64)
	return s[:i], n, len(s) - i, true
}

func (a *AV) resolve(name string) (netip.Addr, error) {
	lookup := a.attr.LookupHost
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	ips, err := lookup(context.Background(), name)
	if err != nil {
		code := fi.ENOENT
		var dns *net.DNSError
		if errors.As(err, &dns) && (dns.IsTemporary || dns.IsTimeout) {
			code = fi.EAGAIN
		}
		return netip.Addr{}, fmt.Errorf("resolve %q: %v: %w", name, err, code)
	}
	for _, ip := range ips {
		if a.attr.familyOK(netip.AddrPortFrom(ip, 1)) {
			return ip.Unmap(), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("resolve %q: no address of the AV's format %v: %w", name, a.attr.AddrFormat, fi.ENOENT)
}

func lookupPort(service string) (uint16, error) {
	if service == "" {
		return 0, fmt.Errorf("empty service: %w", fi.EINVAL)
	}
	if p, err := strconv.ParseUint(service, 10, 16); err == nil {
		return uint16(p), nil // port 0 fails per element, as in libfabric's util AV
	}
	p, err := net.LookupPort("udp", service)
	if err != nil || p <= 0 || p > 65535 {
		return 0, fmt.Errorf("service %q: not a port number or known UDP service: %w", service, fi.EINVAL)
	}
	return uint16(p), nil
}
