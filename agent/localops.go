package agent

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// Same-host channels: the agent sets up a shared-memory channel from an
// endpoint it prepared to another endpoint it prepared on this node, when
// the first sends to the second's address (package ep, shm.go). The agent
// is the party that vouches for the sender's address: the receiver learns
// it from the agent's reply, never from the channel. It is never on the
// per-message path.
type localState struct {
	mu   sync.Mutex
	next uint64
	eps  map[uint32]*localEP
	// users counts the channels set up for senders other than root
	// (Limits.Channels).
	users int
	// Duplicates of descriptors sent in a connection's last reply: closed
	// at its next same-host request or when it ends (a reply is written
	// after its handler returns, when another connection may have closed
	// the originals).
	sent map[*conn][]int
}

// localEP is an endpoint taking part in same-host channels.
type localEP struct {
	cn      *conn
	id      uint32
	local   netip.AddrPort
	maxMsg  int
	bell    *ep.Doorbell // nil: it only sends (not attached)
	pending []*localChan // set up towards it, not yet accepted
	in, out []*localChan
}

type localChan struct {
	ch       *ep.LocalChannel
	info     ep.LocalChannelInfo
	from, to *localEP
	user     bool // counted in localState.users
}

// localEndpoint returns what the agent knows of endpoint id of cn, or
// ENOENT.
func (a *Agent) localEndpoint(cn *conn, id uint32, op string) (netip.AddrPort, int, error) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for _, e := range cn.eps {
		if e.p.ID() == id {
			info, _ := e.p.Handover()
			local, err := netip.ParseAddrPort(e.local)
			if err != nil {
				return local, 0, fmt.Errorf("%s: endpoint %d: %w", op, id, fi.EIO)
			}
			return netip.AddrPortFrom(local.Addr().Unmap(), local.Port()), info.MaxMsg, nil
		}
	}
	return netip.AddrPort{}, 0, fmt.Errorf("%s: endpoint %d is not this connection's: %w", op, id, fi.ENOENT)
}

// begin starts a same-host request of cn: it closes the descriptors of the
// connection's previous reply (written by now). The caller holds l.mu.
func (l *localState) begin(cn *conn) {
	if l.eps == nil {
		l.eps, l.sent = map[uint32]*localEP{}, map[*conn][]int{}
	}
	closeFDs(l.sent[cn])
	delete(l.sent, cn)
}

// replyWriter is reply with a channel's memfd and a write end of the
// receiver's wake-up pipe of the sender's own (ep.Doorbell.Writer).
func (l *localState) replyWriter(cn *conn, memfd int, bell *ep.Doorbell) ([]int, error) {
	w, err := bell.Writer()
	if err != nil {
		return nil, err
	}
	defer unix.Close(w)
	return l.reply(cn, memfd, w)
}

// reply duplicates fds for cn's reply.
func (l *localState) reply(cn *conn, fds ...int) ([]int, error) {
	out := make([]int, 0, len(fds))
	for _, fd := range fds {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			closeFDs(out)
			return nil, fmt.Errorf("dup: %w", err)
		}
		out = append(out, d)
	}
	l.sent[cn] = out
	return out, nil
}

// localAttach gives endpoint id of cn its doorbell: from now on the node's
// other endpoints can set up channels towards it.
func (a *Agent) localAttach(cn *conn, args ctl.LocalEPArgs, rec *auditRec) (ctl.None, []int, error) {
	rec.add("id", args.ID)
	local, maxMsg, err := a.localEndpoint(cn, args.ID, "local attach")
	if err != nil {
		return ctl.None{}, nil, err
	}
	l := &a.local
	l.mu.Lock()
	defer l.mu.Unlock()
	l.begin(cn)
	le := l.eps[args.ID]
	if le != nil && le.cn != cn {
		// Another connection's record of an endpoint id that is this
		// connection's now (localEndpoint said so): stale, drop it.
		l.dropLocked(args.ID)
		le = nil
	}
	if le == nil {
		le = &localEP{cn: cn, id: args.ID, local: local, maxMsg: maxMsg}
	}
	if le.bell == nil {
		if le.bell, err = ep.NewDoorbell(); err != nil {
			return ctl.None{}, nil, fmt.Errorf("local attach: %w", err)
		}
	}
	l.eps[args.ID] = le
	fds, err := l.reply(cn, le.bell.FDs()...)
	return ctl.None{}, fds, err
}

// localConnect sets up (or returns again) the channel from endpoint id of
// cn to the endpoint of the node that receives datagrams to dest.
func (a *Agent) localConnect(cn *conn, args ctl.LocalConnectArgs, rec *auditRec) (ep.LocalChannelInfo, []int, error) {
	rec.add("id", args.ID, "dest", clean(args.Dest))
	dest, err := netip.ParseAddrPort(args.Dest)
	if err != nil || dest.Addr().Zone() != "" || dest.Addr().IsUnspecified() || dest.Port() == 0 {
		return ep.LocalChannelInfo{}, nil, fmt.Errorf("local connect: destination %s: want ADDR:PORT: %w", quote(args.Dest), fi.EINVAL)
	}
	dest = netip.AddrPortFrom(dest.Addr().Unmap(), dest.Port())
	local, maxMsg, err := a.localEndpoint(cn, args.ID, "local connect")
	if err != nil {
		return ep.LocalChannelInfo{}, nil, err
	}
	if local.Addr().Is4() != dest.Addr().Is4() {
		return ep.LocalChannelInfo{}, nil, fmt.Errorf("local connect: %v is not of the endpoint's address family: %w", dest, fi.EADDRNOTAVAIL)
	}
	hostAddr := isHostAddr(dest.Addr())
	l := &a.local
	l.mu.Lock()
	defer l.mu.Unlock()
	l.begin(cn)
	to := l.receiver(dest, hostAddr)
	if to == nil {
		return ep.LocalChannelInfo{}, nil, fmt.Errorf("local connect: no endpoint opened through the agent receives at %v: %w", dest, fi.EADDRNOTAVAIL)
	}
	from := l.eps[args.ID]
	if from != nil && from.cn != cn {
		l.dropLocked(args.ID) // stale, as in localAttach
		from = nil
		if to = l.receiver(dest, hostAddr); to == nil {
			return ep.LocalChannelInfo{}, nil, fmt.Errorf("local connect: no endpoint opened through the agent receives at %v: %w", dest, fi.EADDRNOTAVAIL)
		}
	}
	if from == nil {
		from = &localEP{cn: cn, id: args.ID, local: local, maxMsg: maxMsg}
	}
	for _, c := range from.out {
		if c.to == to && c.info.Dest == dest {
			fds, err := l.replyWriter(cn, c.ch.FD(), to.bell)
			return c.info, fds, err
		}
	}
	switch {
	case len(from.out) >= ep.MaxShmChannels:
		return ep.LocalChannelInfo{}, nil, fmt.Errorf("local connect: endpoint %d sends on %d same-host channels, its quota: %w", args.ID, len(from.out), fi.EDQUOT)
	case len(to.in) >= ep.MaxShmChannels:
		return ep.LocalChannelInfo{}, nil, fmt.Errorf("local connect: the endpoint at %v receives on %d same-host channels, its quota: %w", dest, len(to.in), fi.EDQUOT)
	case cn.who.uid != to.cn.who.uid && foreignIn(to, cn.who.uid) >= maxForeignIn:
		return ep.LocalChannelInfo{}, nil, fmt.Errorf("local connect: the endpoint at %v receives on %d same-host channels from uid %d, "+
			"the most one other uid may hold towards it: %w", dest, maxForeignIn, cn.who.uid, fi.EDQUOT)
	case !cn.who.root() && l.users >= a.cfg.Limits.Channels:
		return ep.LocalChannelInfo{}, nil, fmt.Errorf("local connect: the agent holds %d same-host channels for uids other than root, its limit: %w",
			l.users, fi.EAGAIN)
	}
	ch, slots, slotSize, err := ep.NewLocalChannel(maxMsg)
	if err != nil {
		return ep.LocalChannelInfo{}, nil, fmt.Errorf("local connect: %w", err)
	}
	l.next++
	c := &localChan{ch: ch, from: from, to: to, user: !cn.who.root(),
		info: ep.LocalChannelInfo{ID: l.next, Src: ep.ShmSource(local, dest), Dest: dest, Slots: slots, SlotSize: slotSize}}
	fds, err := l.replyWriter(cn, ch.FD(), to.bell)
	if err != nil {
		ch.Close()
		return ep.LocalChannelInfo{}, nil, fmt.Errorf("local connect: %w", err)
	}
	l.eps[args.ID] = from
	if c.user {
		l.users++
	}
	from.out = append(from.out, c)
	to.in = append(to.in, c)
	to.pending = append(to.pending, c)
	to.bell.Ring()
	rec.add("channel", c.info.ID, "src", c.info.Src.String(), "to_pid", to.cn.who.pid)
	return c.info, fds, nil
}

// maxForeignIn bounds the channels towards one endpoint from endpoints of
// one other uid: a quarter of what it may receive on, so that no other uid
// can fill its quota (channels live until an end closes) and shut out the
// rest of the node.
const maxForeignIn = ep.MaxShmChannels / 4

// foreignIn counts the channels towards to from endpoints of uid. The
// caller holds l.mu.
func foreignIn(to *localEP, uid uint32) int {
	n := 0
	for _, c := range to.in {
		if c.from.cn != nil && c.from.cn.who.uid == uid {
			n++
		}
	}
	return n
}

// receiver finds the attached endpoint that receives datagrams to dest:
// bound to it, else its family's wildcard on its port if dest is an
// address of the host. The caller holds l.mu.
func (l *localState) receiver(dest netip.AddrPort, hostAddr bool) *localEP {
	var wild *localEP
	for _, le := range l.eps {
		switch {
		case le.bell == nil || le.local.Port() != dest.Port():
		case le.local.Addr() == dest.Addr():
			return le
		case le.local.Addr().IsUnspecified() && le.local.Addr().Is4() == dest.Addr().Is4() && hostAddr:
			wild = le
		}
	}
	return wild
}

// isHostAddr reports whether ip is an address of the agent's network
// namespace.
func isHostAddr(ip netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// localAccept hands endpoint id of cn the channels set up towards it since
// its last call, at most ctl.MaxLocalAccept.
func (a *Agent) localAccept(cn *conn, args ctl.LocalEPArgs) (ctl.LocalAcceptResult, []int, error) {
	l := &a.local
	l.mu.Lock()
	defer l.mu.Unlock()
	l.begin(cn)
	le := l.eps[args.ID]
	if le == nil || le.cn != cn || le.bell == nil {
		return ctl.LocalAcceptResult{}, nil, fmt.Errorf("local accept: endpoint %d is not an attached endpoint of this connection: %w", args.ID, fi.ENOENT)
	}
	n := min(len(le.pending), ctl.MaxLocalAccept)
	res := ctl.LocalAcceptResult{Channels: make([]ep.LocalChannelInfo, 0, n)}
	fds := make([]int, 0, n)
	for _, c := range le.pending[:n] {
		res.Channels = append(res.Channels, c.info)
		fds = append(fds, c.ch.FD())
	}
	out, err := l.reply(cn, fds...)
	if err != nil {
		return ctl.LocalAcceptResult{}, nil, fmt.Errorf("local accept: %w", err)
	}
	le.pending = slices.Delete(le.pending, 0, n)
	if len(le.pending) > 0 {
		le.bell.Ring() // the rest on the next call
	}
	return res, out, nil
}

// localDropEP closes the channels of endpoint id (closed, or its process
// gone) and forgets it. The peers see their side closed.
func (a *Agent) localDropEP(id uint32) {
	l := &a.local
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dropLocked(id)
}

func (l *localState) dropLocked(id uint32) {
	le := l.eps[id]
	if le == nil {
		return
	}
	delete(l.eps, id)
	// A copy: the loop edits the lists (an endpoint's channel to itself
	// is in both, and in other's, which is le's then). Appending le.out
	// to le.in in place, as this did, let the first deletion overwrite the
	// rest of the loop's slice: a nil channel, a panic, the agent gone.
	seen := map[*localChan]bool{}
	for _, c := range slices.Concat(le.in, le.out) {
		if seen[c] {
			continue
		}
		seen[c] = true
		if c.user {
			l.users--
		}
		c.ch.Shut()
		other := c.to
		if other == le {
			other = c.from
		}
		other.in = slices.DeleteFunc(other.in, func(x *localChan) bool { return x == c })
		other.out = slices.DeleteFunc(other.out, func(x *localChan) bool { return x == c })
		other.pending = slices.DeleteFunc(other.pending, func(x *localChan) bool { return x == c })
		if other == c.to {
			other.bell.Ring() // wake it to notice
		}
		c.ch.Close()
	}
	le.bell.Close()
}

// localDropConn drops what a connection held: its endpoints' channels and
// the descriptors of its last reply.
func (a *Agent) localDropConn(cn *conn) {
	l := &a.local
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, le := range l.eps {
		if le.cn == cn {
			l.dropLocked(id)
		}
	}
	closeFDs(l.sent[cn])
	delete(l.sent, cn)
}
