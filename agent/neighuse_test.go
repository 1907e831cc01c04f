package agent_test

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

// neighbors lists host A's neighbour entries on its interface (ip neigh,
// in the bed's namespace), by address.
func (n *node) neighbors(t *testing.T) map[netip.Addr]int {
	t.Helper()
	out := map[netip.Addr]int{}
	err := n.bed.A.Do(func() error {
		list, err := netlink.NeighList(n.bed.A.Ifindex, netlink.FAMILY_ALL)
		for _, e := range list {
			if ip, ok := netip.AddrFromSlice(e.IP); ok {
				out[ip.Unmap()] = e.State
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// neigh.use makes the kernel create a neighbour entry, and probe for it,
// with the agent's CAP_NET_ADMIN, in a table all namespaces share
// (gc_thresh3). A group member with an endpoint on the interface used to
// have it done for any unicast address: 200 addresses that are no next
// hop there (no route: IPv4 "assumes" them on link for an output
// interface) made 200 entries and their probes. The agent now takes only
// a next hop the kernel's routes give on that interface, on link or a
// gateway (EHOSTUNREACH else), leaves static entries alone, and bounds the unresolved entries a
// uid has it create (EDQUOT); an honest use still resolves its peer.
func TestNeighUseOnlyNextHops(t *testing.T) {
	n := newNodeWith(t, testbed.Options{RxQueues: 2, TxQueues: 2})
	n.startAgent("--socket-group", "65534")
	root, err := client.Dial(n.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if _, err := root.AVCreate(ctl.AVCreateArgs{Name: "nb"}); err != nil {
		t.Fatal(err)
	}
	// A client of uid with an endpoint on the interface, and its neigh.use.
	withEndpoint := func(uid int, queue int) func(netip.Addr) error { return n.neighUser(uid, queue, "nb") }
	use := withEndpoint(nobody, 0)

	// 200 addresses of other subnets: no route leads there.
	before := n.neighbors(t)
	v4, v6 := n.bed.Net4.Addr().As4(), n.bed.Net6.Addr().As16()
	v4[2] ^= 1
	v6[7] ^= 1
	var offLink []netip.Addr
	for i := range 100 {
		v4[3], v6[15] = byte(i+1), byte(i+1)
		offLink = append(offLink, netip.AddrFrom4(v4), netip.AddrFrom16(v6))
	}
	refused := 0
	for _, ip := range offLink {
		if err := use(ip); errors.Is(err, fi.EHOSTUNREACH) {
			refused++
		} else if refused == 0 {
			t.Errorf("neigh.use %v, no next hop on the interface: %v, want EHOSTUNREACH", ip, err)
		}
	}
	if refused != len(offLink) {
		t.Errorf("%d of %d addresses that are no next hop refused", refused, len(offLink))
	}
	after := n.neighbors(t)
	made := 0
	for _, ip := range offLink {
		if _, ok := after[ip]; ok {
			if _, was := before[ip]; !was {
				made++
			}
		}
	}
	if made > 0 {
		t.Errorf("neigh.use of %d addresses that are no next hop made the kernel create %d entries", len(offLink), made)
	}

	// The honest use: the peer, both families.
	for _, ip := range []netip.Addr{n.bed.B.IPv4, n.bed.B.IPv6} {
		if err := use(ip); err != nil {
			t.Errorf("neigh.use of the peer %v: %v", ip, err)
		}
		if _, ok := n.neighbors(t)[ip]; !ok {
			t.Errorf("no neighbour entry for the peer %v after neigh.use", ip)
		}
	}

	// A gateway is a next hop, even one outside the interface's subnets
	// (onlink); what lies behind it is not.
	gw, behind := n.bed.Net4.Addr().As4(), n.bed.Net4.Addr().As4()
	gw[2], gw[3] = gw[2]^3, 1
	behind[2] ^= 2
	err = n.bed.A.Do(func() error {
		return netlink.RouteAdd(&netlink.Route{LinkIndex: n.bed.A.Ifindex, Dst: &net.IPNet{IP: net.IP(behind[:]), Mask: net.CIDRMask(24, 32)},
			Gw: net.IP(gw[:]), Flags: int(netlink.FLAG_ONLINK)})
	})
	if err != nil {
		t.Fatal(err)
	}
	// (uid nobody read the routes less than a second ago, before the
	// route was there: another uid's view is current.)
	scan := withEndpoint(4343, 1)
	if err := scan(netip.AddrFrom4(gw)); err != nil {
		t.Errorf("neigh.use of a gateway (onlink): %v", err)
	}
	behind[3] = 9
	if err := use(netip.AddrFrom4(behind)); !errors.Is(err, fi.EHOSTUNREACH) {
		t.Errorf("neigh.use of an address behind a gateway: %v, want EHOSTUNREACH", err)
	}

	// A static entry is left as it is (NTF_USE would make it INCOMPLETE).
	static := n.bed.Net4.Addr().As4()
	static[3] = 250
	err = n.bed.A.Do(func() error {
		return netlink.NeighSet(&netlink.Neigh{LinkIndex: n.bed.A.Ifindex, Family: netlink.FAMILY_V4, IP: net.IP(static[:]),
			HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 1}, State: netlink.NUD_PERMANENT})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := use(netip.AddrFrom4(static)); err != nil {
		t.Errorf("neigh.use of a static neighbour: %v", err)
	}
	if st := n.neighbors(t)[netip.AddrFrom4(static)]; st != netlink.NUD_PERMANENT {
		t.Errorf("a static neighbour after neigh.use: state %#x, want PERMANENT", st)
	}

	// On-link addresses no host answers for, from another uid: 128 (an
	// eighth of the kernel's default gc_thresh3) at most, then EDQUOT.
	onLink := n.bed.Net4.Addr().As4()
	quota := 0
	for i := 3; i < 250; i++ {
		onLink[3] = byte(i)
		err := scan(netip.AddrFrom4(onLink))
		if err == nil {
			quota++
			continue
		}
		wantErrno(t, "neigh.use past the quota", err, fi.EDQUOT)
		break
	}
	// The gateway's entry, which no host answers for either, is one.
	if quota+1 != 1024/8 {
		t.Errorf("%d unresolved neighbours made before the quota, and the gateway's; want %d in all", quota, 1024/8)
	}
}
