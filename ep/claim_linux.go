//go:build linux

package ep

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// claimPort binds a kernel UDP socket to the endpoint's address and port
// for the endpoint's lifetime, so that the kernel and xdpfab never serve
// one port twice: an address:port a kernel socket already holds (a DNS
// resolver on 0.0.0.0:53, say) is refused with EADDRINUSE, a later kernel
// bind to it fails, and an address that is not local fails with
// EADDRNOTAVAIL. The socket receives nothing: a filter drops every
// datagram the kernel would queue on it (those the XDP program passes up).
// Call it on a thread in the endpoint's network namespace.
func claimPort(local netip.AddrPort) (*os.File, error) {
	ip := local.Addr().Unmap()
	family := unix.AF_INET
	if ip.Is6() {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("claim %v: socket: %w", local, err)
	}
	f := os.NewFile(uintptr(fd), "xdpfab-claim")
	fail := func(what string, err error) (*os.File, error) {
		f.Close()
		return nil, fmt.Errorf("claim %v: %s: %w", local, what, err)
	}
	drop := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
	prog := unix.SockFprog{Len: uint16(len(drop)), Filter: &drop[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		return fail("drop filter", err)
	}
	var sa unix.Sockaddr
	if family == unix.AF_INET {
		sa = &unix.SockaddrInet4{Port: int(local.Port()), Addr: ip.As4()}
	} else {
		// Exactly the IPv6 address: an IPv6 endpoint receives no IPv4.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return fail("IPV6_V6ONLY", err)
		}
		sa = &unix.SockaddrInet6{Port: int(local.Port()), Addr: ip.As16()}
	}
	if err := unix.Bind(fd, sa); err != nil {
		switch {
		case errors.Is(err, unix.EADDRINUSE):
			return fail("a kernel socket (or another endpoint) holds it", fi.EADDRINUSE)
		case errors.Is(err, unix.EADDRNOTAVAIL):
			return fail("not an address of this host's namespace", fi.EADDRNOTAVAIL)
		case errors.Is(err, unix.EACCES):
			return fail("a privileged port needs CAP_NET_BIND_SERVICE", fi.EACCES)
		}
		return fail("bind", err)
	}
	return f, nil
}
