package client

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
)

// enableLocal makes endpoint e (the agent's id) take part in same-host
// channels: it reaches, and is reachable by, the node's other endpoints
// opened through the agent. An agent that predates the operation (ENOSYS)
// leaves the endpoint without them, as before.
func (c *Client) enableLocal(e *ep.Endpoint, id uint32) error {
	_, fds, err := call(c, ctl.OpLocalAttach, ctl.LocalEPArgs{ID: id})
	if errors.Is(err, fi.ENOSYS) {
		return nil
	}
	if err != nil {
		return err
	}
	return e.EnableLocal(localBroker{c: c, id: id}, fds)
}

// localBroker is ep.LocalBroker on the agent's protocol.
type localBroker struct {
	c  *Client
	id uint32
}

func (b localBroker) Connect(dest netip.AddrPort) (ep.LocalChannelInfo, []int, error) {
	info, fds, err := call(b.c, ctl.OpLocalConnect, ctl.LocalConnectArgs{ID: b.id, Dest: dest.String()})
	if err == nil && (len(fds) != 2 || info.Dest != netip.AddrPortFrom(dest.Addr().Unmap(), dest.Port())) {
		closeAll(fds)
		return info, nil, fmt.Errorf("local connect: %d descriptors for a channel to %v: %w", len(fds), info.Dest, fi.EIO)
	}
	return info, fds, err
}

func (b localBroker) Accept() ([]ep.LocalChannelInfo, []int, error) {
	r, fds, err := call(b.c, ctl.OpLocalAccept, ctl.LocalEPArgs{ID: b.id})
	if err == nil && len(fds) != len(r.Channels) {
		closeAll(fds)
		return nil, nil, fmt.Errorf("local accept: %d descriptors for %d channels: %w", len(fds), len(r.Channels), fi.EIO)
	}
	return r.Channels, fds, err
}
