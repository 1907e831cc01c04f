package loader

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
)

// The local-address table (xdpfab_local): the host's unicast addresses,
// which a wildcard endpoint (bound to 0.0.0.0 or ::) receives on. The XDP
// program passes a datagram to a wildcard endpoint's port whose
// destination is not in it to the kernel (counted not_local), as it does
// broadcast, multicast and loopback destinations to any endpoint. Package
// ep keeps the table in step with the kernel's addresses while wildcard
// endpoints exist; tests fill it by hand.
//
// Like the endpoint table, it is not per network namespace: a dataplane
// shared by namespaces holds the addresses of all of them.

func localKey(a netip.Addr) bpf.Addr { return bpf.MakeAddr(netip.AddrPortFrom(a, 0)) }

// writableLocal is the guard of the local-address methods.
func (d *Objects) writableLocal(op string) error {
	if err := d.loaded(op); err != nil {
		return err
	}
	if d.Local == nil {
		return fmt.Errorf("%s: read-only dataplane (no local-address table): %w", op, fi.EINVAL)
	}
	return nil
}

// PutLocalAddr records a as an address of the host, seen on interface
// ifindex (informational). An IPv4-mapped IPv6 address is stored as IPv4.
func (d *Objects) PutLocalAddr(a netip.Addr, ifindex int) error {
	if err := d.writableLocal("loader: put local address"); err != nil {
		return err
	}
	if !a.IsValid() {
		return fmt.Errorf("loader: put local address: invalid address: %w", fi.EINVAL)
	}
	if err := d.Local.Put(localKey(a), uint32(ifindex)); err != nil {
		return fmt.Errorf("loader: put local address %v: %w", a, err)
	}
	return nil
}

// DeleteLocalAddr removes a from the host's addresses; one that is not
// there is no error.
func (d *Objects) DeleteLocalAddr(a netip.Addr) error {
	if err := d.writableLocal("loader: delete local address"); err != nil {
		return err
	}
	if err := d.Local.Delete(localKey(a)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("loader: delete local address %v: %w", a, err)
	}
	return nil
}

// LocalAddrs returns the recorded host addresses, each with the ifindex it
// was recorded with.
func (d *Objects) LocalAddrs() (map[netip.Addr]int, error) {
	if err := d.writableLocal("loader: local addresses"); err != nil {
		return nil, err
	}
	out := map[netip.Addr]int{}
	var k bpf.Addr
	var v uint32
	it := d.Local.Iterate()
	for it.Next(&k, &v) {
		out[k.AddrPort().Addr()] = int(v)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("loader: local addresses: %w", err)
	}
	return out, nil
}
