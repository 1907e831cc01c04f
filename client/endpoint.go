package client

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

// OpenEndpoint has the agent prepare an endpoint on req.Iface (its
// sockets, UMEM and XDP registration) and runs its data path in this
// process, which needs no capability. attr supplies what Adopt needs: the
// AV (OpenAV gives a read-only view of req.AV), the CQs and the rest; its
// Local must equal req.Local. The endpoint ends when closed or when the
// connection does.
func (c *Client) OpenEndpoint(req ctl.EPOpenArgs, attr ep.Attr) (*ep.Endpoint, error) {
	r, fds, err := call(c, ctl.OpEPOpen, req)
	if err != nil {
		return nil, err
	}
	id := r.Handover.ID
	e, err := ep.Adopt(r.Handover, fds, ep.AdoptAttr{
		Attr: attr,
		NeighUse: func(ifindex int, ip netip.Addr) error {
			_, err := do(c, ctl.OpNeighUse, ctl.NeighUseArgs{Ifindex: ifindex, IP: ip})
			return err
		},
		Release: func() error { return c.epClose(id) },
	})
	if err != nil {
		c.epClose(id)
		return nil, fmt.Errorf("ep open: %w", err)
	}
	if err := c.enableLocal(e, id); err != nil { // same-host peers (local.go)
		e.Close()
		return nil, fmt.Errorf("ep open: same-host channels: %w", err)
	}
	go c.report(e, id, attr.TxCQ, firstRx(attr))
	return e, nil
}

// ReportInterval is how often an application's endpoint reports its CQ
// statistics to the agent (for the agent's metrics).
var ReportInterval = 2 * time.Second

// report sends the CQs' statistics to the agent until the endpoint closes.
func (c *Client) report(e *ep.Endpoint, id uint32, tx, rx *cq.CQ) {
	t := time.NewTicker(ReportInterval)
	defer t.Stop()
	for range t.C {
		if e.Closed() {
			return
		}
		if _, err := do(c, ctl.OpEPReport, ctl.EPReportArgs{ID: id, TX: tx.Stats(), RX: rx.Stats()}); err != nil {
			return // the connection or the endpoint is gone
		}
	}
}

func (c *Client) epClose(id uint32) error {
	_, err := do(c, ctl.OpEPClose, ctl.EPCloseArgs{ID: id})
	return err
}

func firstRx(a ep.Attr) *cq.CQ {
	if len(a.RxCQs) > 0 {
		return a.RxCQs[0]
	}
	return a.RxCQ
}

// OpenAV opens a read-only view of the node's named AV on map descriptors
// the agent hands over, for endpoints to resolve destinations and for
// lookups without a round trip to the agent. Writes go through the agent
// (AVInsert, AVRemove, ...). Close the Objects after the AV.
func (c *Client) OpenAV(name string) (*loader.Objects, *av.AV, error) {
	// The maps and this AV's table: every AV's would not fit one
	// message on a node with many.
	args := ctl.MapsOpenArgs{AV: name}
	_, fds, err := call(c, ctl.OpMapsOpen, args)
	if err != nil {
		return nil, nil, err
	}
	dp, err := loader.FromFDs(fds)
	if err != nil {
		return nil, nil, err
	}
	// A table replaced by growth: fetch the current descriptors.
	dp.SetTableSource(func() ([]int, error) {
		_, fds, err := call(c, ctl.OpMapsOpen, args)
		return fds, err
	})
	return openAV(dp, name)
}

// OpenAVPinned is OpenAV through the agent's pins (pinRoot: its
// --pin-root), for a process that can reach them (see
// loader.ShareWithGroup) and wants no agent connection.
func OpenAVPinned(pinRoot, name string) (*loader.Objects, *av.AV, error) {
	dp, err := loader.OpenPinned(pinRoot)
	if err != nil {
		return nil, nil, err
	}
	return openAV(dp, name)
}

func openAV(dp *loader.Objects, name string) (*loader.Objects, *av.AV, error) {
	a, err := av.Open(dp, &av.Attr{Name: name, Flags: fi.Read})
	if err != nil {
		dp.Close()
		return nil, nil, err
	}
	return dp, a, nil
}
