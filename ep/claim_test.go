//go:build linux

package ep_test

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

// An endpoint claims its port in the kernel: it cannot take a port a
// kernel socket holds (a wildcard endpoint on a resolver's port would have
// black-holed its traffic), the kernel cannot give the endpoint's port to
// a socket while the endpoint lives, and an address that is not the
// host's is refused.
func TestEndpointClaimsPort(t *testing.T) {
	r := newRig(t, rigOpts{})
	attr := func(local netip.AddrPort) ep.Attr {
		return ep.Attr{Ifname: testbed.LinkName, Local: local, AV: r.a.av, TxCQ: r.a.tx, RxCQ: r.a.rx, BindMode: dataplane.BindCopy}
	}
	open := func(local netip.AddrPort) error {
		return r.a.h.Do(func() error {
			e, err := ep.Open(r.dp, attr(local))
			if err == nil {
				e.Close()
			}
			return err
		})
	}
	// A kernel socket on the wildcard address and port 5353.
	kernel, err := r.a.h.ListenPacket("udp4", "0.0.0.0:5353")
	if err != nil {
		t.Fatal(err)
	}
	defer kernel.Close()
	for _, local := range []netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:5353"), netip.AddrPortFrom(r.a.local.Addr(), 5353)} {
		if err := open(local); !errors.Is(err, fi.EADDRINUSE) {
			t.Errorf("endpoint on %v held by a kernel socket: %v, want EADDRINUSE", local, err)
		}
	}
	// The rig's endpoint holds r.a.local: the kernel cannot bind it.
	if c, err := r.a.h.ListenPacket("udp4", r.a.local.String()); err == nil {
		c.Close()
		t.Errorf("kernel socket bound the endpoint's %v", r.a.local)
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("kernel bind of the endpoint's port: %v", err)
	}
	// Not this host's address (host B's is on the segment, not local).
	if err := open(netip.AddrPortFrom(r.b.local.Addr(), 7200)); !errors.Is(err, fi.EADDRNOTAVAIL) {
		t.Errorf("endpoint on another host's address: %v, want EADDRNOTAVAIL", err)
	}
	// Closed, the port is free again for the kernel.
	local := netip.AddrPortFrom(r.a.local.Addr(), 7201)
	if err := open(local); err != nil {
		t.Fatal(err)
	}
	c, err := r.a.h.ListenPacket("udp4", local.String())
	if err != nil {
		t.Fatalf("port still held after Close: %v", err)
	}
	c.Close()
}
