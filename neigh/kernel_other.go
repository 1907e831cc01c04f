//go:build !linux

package neigh

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"

	"github.com/xdpfab/xdpfab/fi"
)

// The resolver asks the kernel through rtnetlink (kernel_linux.go), which
// only Linux has: here New fails with errNotLinux, so no Resolver exists
// and the rest is never called.
var errNotLinux = fmt.Errorf("neigh: the resolver needs Linux (rtnetlink): %w", fi.EOPNOTSUPP)

type sockets struct{}

func (r *Resolver) openSockets() error  { return errNotLinux }
func (r *Resolver) closeSockets()       {}
func (r *Resolver) checkOptions() error { return errNotLinux }
func (r *Resolver) monitor()            {}

func (r *Resolver) neighGet(k hopKey) (kneigh, bool, error) { return kneigh{}, false, errNotLinux }
func (r *Resolver) neighUse(k hopKey) error                 { return errNotLinux }
func (r *Resolver) linkGet(ifindex int) (linkInfo, error)   { return linkInfo{}, errNotLinux }
func (r *Resolver) zoneIndex(z string) (int, error)         { return 0, errNotLinux }

func (r *Resolver) routeGet(dst netip.Addr, oif int, src netip.Addr) (netlink.Route, error) {
	return netlink.Route{}, errNotLinux
}

func viaAddr(d netlink.Destination) (netip.Addr, bool) { return netip.Addr{}, false }
