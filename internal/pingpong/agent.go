package pingpong

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/xdpfab/xdpfab/av"
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
// (pingpong-PORT, which the caller must own), a read-only view of it, and
// the endpoint the agent prepared in the caller's sharing domain.
type agentSession struct {
	c     *client.Client
	dp    *loader.Objects
	name  string
	owned bool // the AV is this user's, destroyed at the end
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
	if err := as.openAV(s); err != nil {
		return nil, err
	}
	if s.TxCQ, err = cq.Open(cqAttr); err != nil {
		return nil, err
	}
	if s.RxCQ, err = cq.Open(cqAttr); err != nil {
		return nil, err
	}
	caps := fi.Msg | fi.Source
	if server {
		caps |= fi.SourceErr
	}
	s.EP, err = c.OpenEndpoint(ctl.EPOpenArgs{Iface: o.Iface, Local: o.Local.String(), AV: as.name, Caps: caps},
		ep.Attr{Ifname: o.Iface, Local: o.Local, AV: s.AV, TxCQ: s.TxCQ, RxCQ: s.RxCQ, Caps: caps, BusyPoll: o.BusyPoll, Threading: fi.ThreadDomain})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// openAV creates the session's AV and opens a read-only view of it. The
// AV must be this user's: the agent refuses to create a name another uid
// holds (EEXIST, naming it), and one it opens for this user because this
// user is in its group is still its owner's, who could change or destroy
// it under the run: refused too. An AV of this port's earlier run that
// was not destroyed (killed) is this user's: the run starts afresh.
func (as *agentSession) openAV(s *session) error {
	info, err := as.c.AVCreate(ctl.AVCreateArgs{Name: as.name})
	if err != nil {
		return err
	}
	if as.dp, s.AV, err = as.c.OpenAV(as.name); err != nil {
		return err
	}
	if err := as.mine(); err != nil {
		return err
	}
	if info.Entries == 0 {
		return nil
	}
	s.AV.Close()
	as.dp.Close()
	s.AV, as.dp, as.owned = nil, nil, false
	if err := as.c.AVDestroy(as.name); err != nil {
		return err
	}
	if _, err := as.c.AVCreate(ctl.AVCreateArgs{Name: as.name}); err != nil {
		return err
	}
	if as.dp, s.AV, err = as.c.OpenAV(as.name); err != nil {
		return err
	}
	return as.mine()
}

// mine refuses the session's AV unless this user owns it.
func (as *agentSession) mine() error {
	o, err := av.OwnerOf(as.dp, as.name)
	if err != nil {
		return err
	}
	if me := uint32(os.Geteuid()); o.UID != me {
		return fmt.Errorf("pingpong: AV %s belongs to uid %d, not to this user (uid %d), who could change it during the run; use another port, or have it destroyed: %w",
			as.name, o.UID, me, fi.EEXIST)
	}
	return nil
}

func (as *agentSession) close(s *session) {
	s.Stack.Close() // endpoint, CQs, the AV view
	if as.dp != nil {
		as.dp.Close()
	}
	if as.owned {
		as.c.AVDestroy(as.name)
	}
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
