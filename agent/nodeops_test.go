//go:build linux

package agent_test

import (
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"golang.org/x/sys/unix"
)

// openEP sends ep.open for c on host A's interface at port (args' Iface
// and Local are set here), closes the descriptors the reply carries (the
// agent keeps the endpoint until ep.close or the connection's end) and
// returns the endpoint's id.
func (n *node) openEP(c *client.Client, port uint16, args ctl.EPOpenArgs) (uint32, error) {
	args.Iface, args.Local = testbed.LinkName, netip.AddrPortFrom(n.bed.A.IPv4, port).String()
	var res ctl.EPOpenResult
	fds, err := c.Call(ctl.OpEPOpen.Name(), args, &res)
	for _, fd := range fds {
		unix.Close(fd)
	}
	return res.Handover.ID, err
}

// neighUser opens a private endpoint of uid on queue (bound to AV av) and
// returns its client's neigh.use.
func (n *node) neighUser(uid, queue int, av string) func(netip.Addr) error {
	n.t.Helper()
	c := mustDialAs(n.t, n.socket, uid, nobody)
	if _, err := n.openEP(c, uint16(7000+queue), ctl.EPOpenArgs{AV: av, Private: true, FirstQueue: queue, Queues: 1, Frames: 64}); err != nil {
		n.t.Fatal(err)
	}
	return func(ip netip.Addr) error {
		_, err := c.Call(ctl.OpNeighUse.Name(), ctl.NeighUseArgs{Ifindex: n.bed.A.Ifindex, IP: ip}, nil)
		return err
	}
}

// localAttach makes c's endpoint id reachable on the same-host path.
func localAttach(t *testing.T, c *client.Client, id uint32) {
	t.Helper()
	fds, err := c.Call(ctl.OpLocalAttach.Name(), ctl.LocalEPArgs{ID: id}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// localConnect asks for a same-host channel from c's endpoint from to the
// endpoint receiving at dest.
func localConnect(c *client.Client, from uint32, dest netip.AddrPort) error {
	var info ep.LocalChannelInfo
	fds, err := c.Call(ctl.OpLocalConnect.Name(), ctl.LocalConnectArgs{ID: from, Dest: dest.String()}, &info)
	for _, fd := range fds {
		unix.Close(fd)
	}
	return err
}
