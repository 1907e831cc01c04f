package pingpong

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/stack"
)

// errNoAgent: nothing answers on the control socket (ViaAuto falls back).
var errNoAgent = errors.New("no agent")

// agentSession is a run's objects through the agent: a named AV of its own
// (pingpong-PORT, the caller's), a read-only view of it, and the endpoint
// the agent prepared in the caller's sharing domain.
type agentSession struct {
	c    *client.Client
	dp   *loader.Objects
	name string
}

func openAgent(o Options, server bool) (_ *session, err error) {
	if o.Socket == "" && o.Via == ViaAuto {
		return nil, errNoAgent
	}
	c, err := client.Dial(o.Socket)
	if err != nil {
		if o.Via == ViaAuto {
			return nil, errNoAgent
		}
		return nil, err
	}
	as := &agentSession{c: c, name: fmt.Sprintf("pingpong-%d", o.Local.Port())}
	s := &session{Stack: &stack.Stack{}, agent: as}
	defer func() {
		if err != nil {
			as.close(s)
		}
	}()
	// An AV of this port's earlier run that was not destroyed (killed)
	// is this caller's: start afresh.
	if _, err := c.AVCreate(ctl.AVCreateArgs{Name: as.name}); errors.Is(err, fi.EEXIST) {
		if err := c.AVDestroy(as.name); err != nil {
			return nil, err
		}
		_, err = c.AVCreate(ctl.AVCreateArgs{Name: as.name})
		if err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	if as.dp, s.AV, err = c.OpenAV(as.name); err != nil {
		return nil, err
	}
	if s.TxCQ, err = cq.Open(cq.Attr{Size: 1024, Format: cq.FormatMsg}); err != nil {
		return nil, err
	}
	if s.RxCQ, err = cq.Open(cq.Attr{Size: 1024, Format: cq.FormatMsg}); err != nil {
		return nil, err
	}
	caps := fi.Msg | fi.Source
	if server {
		caps |= fi.SourceErr
	}
	s.EP, err = c.OpenEndpoint(ctl.EPOpenArgs{Iface: o.Iface, Local: o.Local.String(), AV: as.name, Caps: caps},
		ep.Attr{Ifname: o.Iface, Local: o.Local, AV: s.AV, TxCQ: s.TxCQ, RxCQ: s.RxCQ, Caps: caps, BusyPoll: o.BusyPoll})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (as *agentSession) close(s *session) {
	s.Stack.Close() // endpoint, CQs, the AV view
	if as.dp != nil {
		as.dp.Close()
	}
	as.c.AVDestroy(as.name)
	as.c.Close()
}

// insert puts a peer into the session's AV: directly, or through the agent.
func (s *session) insert(ap netip.AddrPort) (fi.Addr, error) {
	if s.agent == nil {
		out := []fi.Addr{fi.AddrNotAvail}
		if _, err := s.AV.Insert([]netip.AddrPort{ap}, out, 0, nil); err != nil {
			return fi.AddrNotAvail, err
		}
		return out[0], nil
	}
	r, err := s.agent.c.AVInsert(ctl.AVInsertArgs{Name: s.agent.name, Addrs: []string{ap.String()}})
	switch {
	case err != nil:
		return fi.AddrNotAvail, err
	case len(r.FiAddrs) != 1 || r.Errnos[0] != 0:
		return fi.AddrNotAvail, fmt.Errorf("insert %v: %w", ap, fi.Errno(r.Errnos[0]))
	}
	return r.FiAddrs[0], nil
}
