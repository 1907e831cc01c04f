package agent

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/procid"
	"golang.org/x/sys/unix"
)

// Many applications on one interface (docs/OPERATIONS.md#many-applications-on-a-node).
//
// The agent hands out an interface's rx queues: to sharing domains, whose
// endpoints (of any number of processes) share the queues' UMEM, and to
// private endpoints, which get queues and a UMEM of their own. A queue is
// held by one holder at a time; a request that needs a queue someone else
// holds is refused with EBUSY naming the holder and the free queues.
// Processes of one sharing domain can read each other's frames, so a
// domain is one uid's ("uid:1000"), or an operator-declared group's
// ("group:NAME", --share-group), never a mix.

// queueHold is a range of one interface's rx queues and who holds it.
type queueHold struct {
	iface    string
	first, n int
	who      string
	dom      *agentDomain // nil: a private endpoint
}

// agentDomain is a sharing domain the agent made.
type agentDomain struct {
	name    string
	iface   string
	ifindex int
	dom     *ep.Domain
	uid     uint32 // whose UMEM quota pays for it
	umem    int64
	opening int // endpoint opens between joinDomain and their Prepare's end (qmu)
	// inodes are the sockets its endpoints were handed, owners the
	// processes they were opened for (qmu): they say when the domain's
	// frame memory stops being pinned (linger.go).
	inodes map[uint64]bool
	owners map[procid.ID]bool
}

// domainName is the sharing domain a caller asks for: its uid's by
// default, or an operator-declared group it is a member of.
func (a *Agent) domainName(who caller, want string) (string, error) {
	if want == "" || want == "uid:"+strconv.FormatUint(uint64(who.uid), 10) {
		return "uid:" + strconv.FormatUint(uint64(who.uid), 10), nil
	}
	g, ok := strings.CutPrefix(want, "group:")
	if !ok || !slices.Contains(a.cfg.ShareGroups, g) {
		return "", fmt.Errorf("ep open: sharing domain %s: want \"\" (the caller's uid), or group:NAME for a group the operator declared (--share-group %v): %w",
			quote(want), a.cfg.ShareGroups, fi.EINVAL)
	}
	gid, err := lookupGroup(g)
	if err != nil {
		return "", fmt.Errorf("ep open: sharing group %q: %w", g, fi.EINVAL)
	}
	if !who.inGroup(uint32(gid)) && !who.root() {
		return "", fmt.Errorf("ep open: sharing domain %q: uid %d is not a member of group %s: %w", want, who.uid, g, fi.EACCES)
	}
	return want, nil
}

// rxQueues is the interface's rx queue count as the kernel reports it.
func rxQueues(ifindex int) int {
	if l, err := netlink.LinkByIndex(ifindex); err == nil && l.Attrs().NumRxQueues > 0 {
		return l.Attrs().NumRxQueues
	}
	return 1
}

// queueRange resolves a request's queues: Queues 0 is every queue from
// first on.
func queueRange(ifindex, first, n int) (int, int, error) {
	have := rxQueues(ifindex)
	if n == 0 {
		n = have - first
	}
	if first < 0 || n < 1 || first+n > have {
		return 0, 0, fmt.Errorf("ep open: queues %d..%d, the interface has %d: %w", first, first+n-1, have, fi.EINVAL)
	}
	return first, n, nil
}

// conflict returns the hold overlapping first..first+n-1 on ifindex, or
// nil. The caller holds a.qmu.
func (a *Agent) conflict(ifindex, first, n int) *queueHold {
	for _, h := range a.holds[ifindex] {
		if h.first < first+n && first < h.first+h.n {
			return h
		}
	}
	return nil
}

// busy is the refusal of a queue range someone holds.
func (a *Agent) busy(ifindex int, iface string, first, n int, h *queueHold) error {
	have := rxQueues(ifindex)
	var free []string
	for q := range have {
		if a.conflict(ifindex, q, 1) == nil {
			free = append(free, strconv.Itoa(q))
		}
	}
	hint := "none: the interface has no free queue (more queues, e.g. ethtool -L, or the same sharing domain, would do)"
	if len(free) > 0 {
		hint = strings.Join(free, ",") + " (ask for first_queue and queues among them)"
	}
	return fmt.Errorf("ep open: queues %d..%d of %s: queues %d..%d are held by %s; free queues: %s: %w",
		first, first+n-1, iface, h.first, h.first+h.n-1, h.who, hint, fi.EBUSY)
}

// joinDomain returns the sharing domain name on ifindex, making it if it
// does not exist (its queues must be free then). The caller holds a.qmu.
func (a *Agent) joinDomain(who caller, args ctl.EPOpenArgs, ifindex int, name string) (*agentDomain, error) {
	for _, h := range a.holds[ifindex] {
		if h.dom != nil && h.dom.name == name {
			c := h.dom.dom.Config()
			if args.Queues != 0 && args.Queues != c.Queues || args.FirstQueue != 0 && args.FirstQueue != c.FirstQueue {
				return nil, fmt.Errorf("ep open: sharing domain %s listens on queues %d..%d of %s, the request names %d+%d: %w",
					name, c.FirstQueue, c.FirstQueue+c.Queues-1, args.Iface, args.FirstQueue, args.Queues, fi.EINVAL)
			}
			return h.dom, nil
		}
	}
	first, n, err := queueRange(ifindex, args.FirstQueue, args.Queues)
	if err != nil {
		return nil, err
	}
	if h := a.conflict(ifindex, first, n); h != nil {
		return nil, a.busy(ifindex, args.Iface, first, n, h)
	}
	l := a.cfg.Limits
	umem := int64(l.DomainRxFrames+l.DomainSlots*l.DomainTxFrames) * dataplane.DefaultFrameSize
	if err := a.reserveUMEM(who.uid, umem); err != nil {
		return nil, err
	}
	// Queues 0 (every queue from first on) lets the domain take the
	// queues it can bind: a veth reports more than it has.
	dom, err := ep.NewDomain(ep.DomainConfig{Ifname: args.Iface, FirstQueue: first, Queues: args.Queues, Slots: l.DomainSlots,
		RxFrames: l.DomainRxFrames, TxFrames: l.DomainTxFrames, BindMode: a.cfg.BindMode, Logger: a.log})
	if err != nil {
		a.releaseUMEM(who.uid, umem)
		return nil, err
	}
	c := dom.Config()
	d := &agentDomain{name: name, iface: args.Iface, ifindex: ifindex, dom: dom, uid: who.uid, umem: umem}
	a.holds[ifindex] = append(a.holds[ifindex], &queueHold{iface: args.Iface, first: c.FirstQueue, n: c.Queues, who: "sharing domain " + name, dom: d})
	a.log.Info("sharing domain made", "domain", name, "iface", args.Iface, "queues", fmt.Sprintf("%d..%d", c.FirstQueue, c.FirstQueue+c.Queues-1),
		"slots", c.Slots, "rx_frames", c.RxFrames, "tx_frames", c.TxFrames)
	return d, nil
}

// holdPrivate records a private endpoint's queues. The caller holds a.qmu.
func (a *Agent) holdPrivate(args ctl.EPOpenArgs, ifindex int, who caller) (*queueHold, error) {
	first, n, err := queueRange(ifindex, args.FirstQueue, args.Queues)
	if err != nil {
		return nil, err
	}
	if h := a.conflict(ifindex, first, n); h != nil {
		return nil, a.busy(ifindex, args.Iface, first, n, h)
	}
	h := &queueHold{iface: args.Iface, first: first, n: n, who: fmt.Sprintf("a private endpoint (%s, uid %d)", args.Local, who.uid)}
	a.holds[ifindex] = append(a.holds[ifindex], h)
	return h, nil
}

// unhold gives a hold's queues back. The caller holds a.qmu.
func (a *Agent) unhold(ifindex int, h *queueHold) {
	a.holds[ifindex] = slices.DeleteFunc(a.holds[ifindex], func(x *queueHold) bool { return x == h })
	if len(a.holds[ifindex]) == 0 {
		delete(a.holds, ifindex)
	}
}

// retireEP takes back a sharing domain's endpoint once its application is
// done with it (it closed it, or is gone), and closes the domain when it
// was the last.
func (a *Agent) retireEP(e *clientEP, reason string) {
	if p := e.p; p != nil {
		err := p.Reclaim()
		a.log.Info("sharing domain endpoint reclaimed", "id", p.ID(), "local", e.local, "frames", p.Reclaimed(), "reason", reason, "err", err)
	}
	a.qmu.Lock()
	defer a.qmu.Unlock()
	d := e.dom
	if d == nil || d.dom.Users() > 0 || d.opening > 0 {
		return
	}
	for _, h := range a.holds[d.ifindex] {
		if h.dom == d {
			if err := d.dom.Close(); err != nil {
				a.log.Warn("close sharing domain", "domain", d.name, "err", err)
				return
			}
			a.unhold(d.ifindex, h)
			a.lingerDomain(d)
			a.log.Info("sharing domain closed", "domain", d.name, "iface", d.iface)
			return
		}
	}
}

// afterExit runs f once the process id is gone: at once if it is, else
// when its pidfd says so (or the agent stops: then never). Without a pidfd
// (the agent out of descriptors, say) it looks every 200 ms: a live
// process is never taken for gone.
func (a *Agent) afterExit(id procid.ID, f func()) {
	if !id.Alive() {
		f()
		return
	}
	fd, err := unix.PidfdOpen(int(id.PID), 0)
	a.serving.Add(1)
	go func() {
		defer a.serving.Done()
		if err == nil {
			defer unix.Close(fd)
		}
		for {
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				if !id.Alive() {
					f()
					return
				}
			} else {
				fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				n, perr := unix.Poll(fds, 200)
				if n > 0 || (perr != nil && perr != unix.EINTR) {
					f()
					return
				}
			}
			if a.stopping.Load() {
				return
			}
		}
	}()
}

// domainInfos describes the sharing domains for status.
func (a *Agent) domainInfos() []ctl.DomainInfo {
	a.qmu.Lock()
	defer a.qmu.Unlock()
	var out []ctl.DomainInfo
	for _, hs := range a.holds {
		for _, h := range hs {
			info := ctl.DomainInfo{Iface: h.iface, Holder: h.who, FirstQueue: h.first, Queues: h.n}
			if d := h.dom; d != nil {
				c := d.dom.Config()
				info.Name, info.Users, info.Slots, info.RxFrames, info.TxFrames = d.name, d.dom.Users(), c.Slots, c.RxFrames, c.TxFrames
			}
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(x, y ctl.DomainInfo) int { return strings.Compare(x.Iface+x.Holder, y.Iface+y.Holder) })
	return out
}
