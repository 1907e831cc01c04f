package agent

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/procid"
)

// clientEP is an endpoint the agent prepared for a client.
type clientEP struct {
	p       *ep.Prepared
	local   string
	pid     int32
	umem    int64             // bytes counted against the owner's quota
	slots   int               // XSKMAP slots counted against the owner's quota
	dom     *agentDomain      // the sharing domain it is in, or nil
	hold    *queueHold        // a private endpoint's queues, or nil
	ifindex int               // the interface it was prepared on
	report  *ctl.EPReportArgs // the application's latest CQ statistics
}

// checkEPOpen validates an endpoint request against the agent's limits
// and attachments, before anything is allocated.
func (a *Agent) checkEPOpen(args ctl.EPOpenArgs) (netip.AddrPort, error) {
	local, err := netip.ParseAddrPort(args.Local)
	if err != nil || local.Addr().Zone() != "" {
		return local, fmt.Errorf("ep open: local address %s: want ADDR:PORT: %w", quote(args.Local), fi.EINVAL)
	}
	l := a.cfg.Limits
	switch {
	case !l.Ports.Contains(local.Port()):
		return local, fmt.Errorf("ep open: port %d is outside the ports the agent lets applications claim (%v): %w",
			local.Port(), l.Ports, fi.EACCES)
	case args.Frames < 0 || args.Frames > l.Frames:
		return local, fmt.Errorf("ep open: %d frames, at most %d: %w", args.Frames, l.Frames, fi.EINVAL)
	case args.RingSize < 0 || args.RingSize > l.RingSize:
		return local, fmt.Errorf("ep open: ring size %d, at most %d: %w", args.RingSize, l.RingSize, fi.EINVAL)
	case args.RxContexts < 0 || args.RxContexts > l.RxContexts:
		return local, fmt.Errorf("ep open: %d receive contexts, at most %d: %w", args.RxContexts, l.RxContexts, fi.EINVAL)
	case args.Queues < 0 || args.Queues > ep.MaxQueues || args.FirstQueue < 0 || args.FirstQueue >= ep.MaxQueues:
		return local, fmt.Errorf("ep open: queues %d+%d, at most %d: %w", args.FirstQueue, args.Queues, ep.MaxQueues, fi.EINVAL)
	case args.Private && args.Domain != "":
		return local, fmt.Errorf("ep open: a private endpoint is in no sharing domain (domain %s): %w", quote(args.Domain), fi.EINVAL)
	}
	if !a.attachedTo(args.Iface) {
		return local, fmt.Errorf("ep open: the agent serves no interface %s (it attached to %v): %w",
			quote(args.Iface), a.cfg.Ifaces, fi.ENODEV)
	}
	return local, nil
}

// attachedTo reports whether the agent's program is attached to iface.
func (a *Agent) attachedTo(iface string) bool {
	for _, att := range a.attachments() {
		if att.Ifname == iface {
			return true
		}
	}
	return false
}

// reserveEP counts an endpoint of umem bytes and slots XSKMAP slots
// against uid's quotas.
func (a *Agent) reserveEP(uid uint32, umem int64, slots int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	u, l := a.usageOf(uid), a.cfg.Limits
	all := a.usersHold()
	switch {
	case uid != 0 && all.endpoints >= a.userEndpoints():
		return fmt.Errorf("ep open: the agent holds %d endpoints for uids other than root, its limit: %w", all.endpoints, fi.EAGAIN)
	case uid != 0 && all.umem+umem > l.UMEMBytes:
		return fmt.Errorf("ep open: the agent holds %d bytes of frame memory for uids other than root, %d more exceed its limit of %d: %w",
			all.umem, umem, l.UMEMBytes, fi.EAGAIN)
	case uid != 0 && all.slots+slots > a.userXSKSlots():
		return fmt.Errorf("ep open: the endpoints of uids other than root hold %d XSKMAP slots, the endpoint's %d (receive contexts x queues) "+
			"more exceed their limit of %d (the other slots of the %d are kept for root): %w",
			all.slots, slots, a.userXSKSlots(), a.dp.XSKs.MaxEntries(), fi.EAGAIN)
	case u.endpoints >= l.EndpointsPerUID:
		return fmt.Errorf("ep open: uid %d holds %d endpoints, its quota: %w", uid, u.endpoints, fi.EDQUOT)
	case u.slots+slots > a.xskQuota():
		return fmt.Errorf("ep open: the endpoints of uid %d hold %d XSKMAP slots, the endpoint's %d (receive contexts x queues) more exceed its quota of %d: %w",
			uid, u.slots, slots, a.xskQuota(), fi.EDQUOT)
	case u.umem+umem > l.UMEMBytesPerUID && u.lingering > 0:
		return fmt.Errorf("ep open: uid %d holds %d bytes of frame memory (%d of them of closed endpoints whose sockets the kernel may still hold: "+
			"charged until the kernel shows them closed, or, without CONFIG_XDP_SOCKETS_DIAG, until the process that opened them exits), "+
			"%d more exceed its quota of %d: %w", uid, u.umem, u.lingering, umem, l.UMEMBytesPerUID, fi.EDQUOT)
	case u.umem+umem > l.UMEMBytesPerUID:
		return fmt.Errorf("ep open: uid %d holds %d bytes of frame memory, %d more exceed its quota of %d: %w",
			uid, u.umem, umem, l.UMEMBytesPerUID, fi.EDQUOT)
	}
	u.endpoints++
	u.umem += umem
	u.slots += slots
	return nil
}

// releaseEP gives an endpoint's quota back.
func (a *Agent) releaseEP(uid uint32, umem int64, slots int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	u := a.usageOf(uid)
	u.endpoints--
	u.umem -= umem
	u.slots -= slots
	a.forgetIdle(uid)
}

// xskSlots bounds the XSKMAP slots an endpoint request takes, one per
// receive context and queue, before anything is made: its queues are the
// request's, else those of the sharing domain it joins, else (a domain to
// be made, or a private endpoint) every queue of the interface from its
// first on, at most ep.MaxQueues. The endpoint made may take fewer (those
// it could bind): chargeSlots then charges what it took.
func (a *Agent) xskSlots(args ctl.EPOpenArgs, ifindex int, domain string) int {
	queues := args.Queues
	if queues == 0 && domain != "" {
		a.qmu.Lock()
		for _, h := range a.holds[ifindex] {
			if h.dom != nil && h.dom.name == domain {
				queues = h.dom.dom.Config().Queues
			}
		}
		a.qmu.Unlock()
	}
	if queues == 0 {
		queues = min(max(rxQueues(ifindex)-args.FirstQueue, 1), ep.MaxQueues)
	}
	return max(args.RxContexts, 1) * queues
}

// chargeSlots sets the XSKMAP slots e is charged for to what it took,
// slots: fewer than reserved give the rest back; more (the interface's
// queues changed meanwhile) must fit the quotas as reserveEP's did.
func (a *Agent) chargeSlots(uid uint32, e *clientEP, slots int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	u, more := a.usageOf(uid), slots-e.slots
	switch {
	case more > 0 && uid != 0 && a.usersHold().slots+more > a.userXSKSlots():
		return fmt.Errorf("ep open: the endpoint took %d XSKMAP slots, %d were counted, and %d more exceed the limit of uids other than root: %w",
			slots, e.slots, more, fi.EAGAIN)
	case more > 0 && u.slots+more > a.xskQuota():
		return fmt.Errorf("ep open: the endpoint took %d XSKMAP slots, %d were counted, and %d more exceed the quota of uid %d: %w",
			slots, e.slots, more, uid, fi.EDQUOT)
	}
	u.slots += more
	e.slots = slots
	return nil
}

// reserveUMEM counts a sharing domain's frame memory against the quota of
// the uid whose request made it.
func (a *Agent) reserveUMEM(uid uint32, umem int64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	u, l := a.usageOf(uid), a.cfg.Limits
	if all := a.usersHold().umem; uid != 0 && all+umem > l.UMEMBytes {
		return fmt.Errorf("ep open: the agent holds %d bytes of frame memory for uids other than root, a sharing domain's %d more exceed its limit of %d: %w",
			all, umem, l.UMEMBytes, fi.EAGAIN)
	}
	if u.umem+umem > l.UMEMBytesPerUID {
		return fmt.Errorf("ep open: uid %d holds %d bytes of frame memory, a sharing domain's %d more exceed its quota of %d: %w",
			uid, u.umem, umem, l.UMEMBytesPerUID, fi.EDQUOT)
	}
	u.umem += umem
	return nil
}

func (a *Agent) releaseUMEM(uid uint32, umem int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.usageOf(uid).umem -= umem
	a.forgetIdle(uid)
}

// epOpen prepares an endpoint for the client and hands its descriptors
// over; the connection owns it from then on.
func (a *Agent) epOpen(cn *conn, args ctl.EPOpenArgs, rec *auditRec) (_ ctl.EPOpenResult, _ []int, err error) {
	rec.add("iface", clean(args.Iface), "local", clean(args.Local), "av", clean(args.AV), "rx_contexts", args.RxContexts, "queues", args.Queues, "frames", args.Frames)
	local, err := a.checkEPOpen(args)
	if err != nil {
		return ctl.EPOpenResult{}, nil, err
	}
	v, err := a.namedAV(args.AV)
	if err != nil {
		return ctl.EPOpenResult{}, nil, fmt.Errorf("ep open: %w", err)
	}
	// An endpoint binds its AV, and the AV cannot be destroyed while it
	// lives (fi_close of a bound AV is EBUSY). So binding another uid's AV
	// needs the right to change it (its group, admins), not only to read
	// it: else any uid could keep the owner from destroying it for as long
	// as it liked. Root's AVs are the exception: the operator's AVs for
	// jobs (xdpfab av create as root) are there to be bound, and root can
	// end what holds them. Reading needs no endpoint (av lookup and list,
	// client.OpenAV). The owner is the handle's AV's, before anything is
	// counted or made.
	var meta bpf.AVMeta
	if err := a.dp.AVMeta.Lookup(v.ID(), &meta); err != nil || meta.InUse == 0 || meta.NameString() != args.AV {
		return ctl.EPOpenResult{}, nil, fmt.Errorf("ep open: AV %q is gone: %w", args.AV, fi.ENOENT)
	}
	if o := (av.Owner{UID: meta.OwnerUid, Group: meta.GroupGid}); o.UID != 0 {
		if err := a.mayWrite(cn.who, "ep open: bind AV", args.AV, o); err != nil {
			return ctl.EPOpenResult{}, nil, err
		}
	}
	var domain string
	if !args.Private {
		if domain, err = a.domainName(cn.who, args.Domain); err != nil {
			return ctl.EPOpenResult{}, nil, err
		}
	}
	attr := ep.Attr{
		Ifname: args.Iface, Local: local, AV: v, Caps: args.Caps, RxContexts: args.RxContexts, FirstQueue: args.FirstQueue, Queues: args.Queues,
		Frames: args.Frames, RingSize: args.RingSize, DropUnknown: args.DropUnknown,
		BindMode: a.cfg.BindMode, Logger: a.log, OwnerPID: int(cn.who.pid), OwnerStart: cn.who.start,
		Charged: true, ChargedUID: cn.who.uid, // for an agent that restarts meanwhile (inherit.go)
	}
	// The XSKMAP's part for uids other than root is its bottom (as many
	// slots as they may hold together), root's the rest: holes the
	// others leave cannot keep root from a long run of slots.
	if cn.who.uid != 0 {
		attr.XSKBelow = uint32(a.userXSKSlots())
	} else {
		attr.XSKFrom = uint32(a.userXSKSlots())
	}
	// The interface's queues bound the endpoint's XSKMAP slots, so it is
	// looked up first; one that is not there is refused after the quotas
	// all the same.
	ifc, ifErr := net.InterfaceByName(args.Iface)
	e := &clientEP{local: args.Local, pid: cn.who.pid}
	if ifErr == nil {
		e.ifindex = ifc.Index
	}
	e.slots = a.xskSlots(args, e.ifindex, domain)
	if args.Private {
		e.umem = umemBytes(args.Frames)
	}
	if err := a.reserveEP(cn.who.uid, e.umem, e.slots); err != nil {
		// Frame memory of endpoints closed a moment ago may still be
		// charged (linger.go): look again before refusing.
		a.sweepLingering()
		if err = a.reserveEP(cn.who.uid, e.umem, e.slots); err != nil {
			return ctl.EPOpenResult{}, nil, err
		}
	}
	defer func() {
		if err != nil {
			a.releaseEP(cn.who.uid, e.umem, e.slots)
		}
	}()
	if ifErr != nil {
		return ctl.EPOpenResult{}, nil, fmt.Errorf("ep open: interface %q: %w", args.Iface, fi.ENODEV)
	}
	// The descriptors the endpoint's handover will carry (its frames'
	// memfd, an anchor socket per queue, a socket per context and queue,
	// the domain's block and transmit socket), bounded before any is made
	// when the request names its queues (with none, the queues are what
	// the device or the domain binds: the check after Prepare counts).
	if _, n, err := queueRange(ifc.Index, args.FirstQueue, args.Queues); err == nil && args.Queues > 0 {
		need := 1 + n + max(1, args.RxContexts)*n
		if !args.Private {
			need += 2
		}
		if need > ctl.MaxFDs {
			return ctl.EPOpenResult{}, nil, fmt.Errorf("ep open: %d contexts x %d queues need %d descriptors, one message carries %d: %w",
				max(1, args.RxContexts), n, need, ctl.MaxFDs, fi.EINVAL)
		}
	}
	// Queue arbitration under the queue lock: two requests for the same
	// free queues get one each, not both. The endpoint is made after it,
	// outside the lock: making it can wait (a bind the kernel refuses for
	// a while; a sharing domain's block lock, up to a second, which a
	// member of that domain may hold), and must not hold up other uids'
	// opens and closes meanwhile. The hold, or the domain's opening count,
	// keeps what was arbitrated until then.
	a.qmu.Lock()
	if args.Private {
		e.hold, err = a.holdPrivate(args, ifc.Index, cn.who)
	} else if e.dom, err = a.joinDomain(cn.who, args, ifc.Index, domain); err == nil {
		e.dom.opening++
	}
	a.qmu.Unlock()
	if err == nil && args.Private {
		if e.p, err = ep.Prepare(a.dp, attr); err != nil {
			a.releaseHold(e)
		}
	} else if err == nil {
		e.p, err = e.dom.dom.Prepare(a.dp, attr)
		var inodes []uint64
		if err == nil {
			inodes = socketInodes(e.p)
		}
		a.qmu.Lock()
		e.dom.opening--
		if err == nil {
			if e.dom.inodes == nil {
				e.dom.inodes = map[uint64]bool{}
			}
			for _, ino := range inodes {
				e.dom.inodes[ino] = true
			}
			if e.dom.owners == nil {
				e.dom.owners = map[procid.ID]bool{}
			}
			e.dom.owners[procid.ID{PID: uint32(cn.who.pid), Start: cn.who.start}] = true
		}
		a.qmu.Unlock()
	}
	if err != nil {
		if e.dom != nil {
			a.retireEP(e, "open failed") // closes the domain if it was made for this request
		}
		return ctl.EPOpenResult{}, nil, err
	}
	p := e.p
	info, fds := p.Handover()
	a.dropInheritedID(info.ID) // its id is free again: the inherited one is gone (inherit.go)
	if len(fds) > ctl.MaxFDs {
		a.closeEP(e, "too many descriptors")
		return ctl.EPOpenResult{}, nil, fmt.Errorf("ep open: %d contexts x %d queues need %d descriptors, one message carries %d: %w",
			info.RxContexts, info.Queues, len(fds), ctl.MaxFDs, fi.EINVAL)
	}
	if err := a.chargeSlots(cn.who.uid, e, info.RxContexts*info.Queues); err != nil {
		a.closeEP(e, "XSKMAP slots over quota")
		return ctl.EPOpenResult{}, nil, err
	}
	if domain != "" {
		rec.add("domain", domain)
	}
	cn.mu.Lock()
	cn.eps = append(cn.eps, e)
	cn.mu.Unlock()
	rec.add("id", info.ID)
	return ctl.EPOpenResult{Handover: info}, fds, nil
}

func (a *Agent) epClose(cn *conn, id uint32) error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for i, e := range cn.eps {
		if e.p.ID() == id {
			cn.eps = append(cn.eps[:i], cn.eps[i+1:]...)
			a.closedPrivate(cn.who.uid, e, procid.ID{PID: uint32(cn.who.pid), Start: cn.who.start})
			// Its same-host channels first (localops.go), while the id is
			// still its own: closeEP frees the id for the next endpoint.
			a.localDropEP(id)
			// The application closed it: it no longer runs its data path.
			return a.closeEP(e, "closed")
		}
	}
	return fmt.Errorf("ep close: endpoint %d is not this connection's: %w", id, fi.ENOENT)
}

// epReport records an application's CQ statistics.
func (a *Agent) epReport(cn *conn, r ctl.EPReportArgs) error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for _, e := range cn.eps {
		if e.p.ID() == r.ID {
			e.report = &r
			return nil
		}
	}
	return fmt.Errorf("ep report: endpoint %d is not this connection's: %w", r.ID, fi.ENOENT)
}

// releaseClient frees what a connection owned: its process closed it or
// died.
func (a *Agent) releaseClient(cn *conn) {
	a.localDropConn(cn) // same-host channels (localops.go)
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for _, e := range cn.eps {
		a.closedPrivate(cn.who.uid, e, procid.ID{PID: uint32(cn.who.pid), Start: cn.who.start})
		err := e.p.Close()
		a.audit(cn.who, "ep.close", err, &auditRec{attrs: []any{"id", e.p.ID(), "local", e.local, "reason", "connection closed"}})
		a.releaseHold(e)
		if e.dom != nil {
			// The process may still run the endpoint's data path (it
			// closed only its connection): its frames and slot are taken
			// back once it is gone.
			a.afterExit(procid.ID{PID: uint32(cn.who.pid), Start: cn.who.start}, func() { a.retireEP(e, "owner process gone") })
		}
	}
	cn.eps = nil
}

// closeEP closes an endpoint whose application is done with it, and gives
// back its queues or its slot in the sharing domain.
func (a *Agent) closeEP(e *clientEP, reason string) error {
	err := e.p.Close()
	a.releaseHold(e)
	if e.dom != nil {
		a.retireEP(e, reason)
	}
	return err
}

// releaseHold gives a private endpoint's queues back (nothing for a
// sharing domain's: the domain holds them).
func (a *Agent) releaseHold(e *clientEP) {
	if e.hold != nil {
		a.qmu.Lock()
		a.unhold(e.ifindex, e.hold)
		a.qmu.Unlock()
	}
}

var (
	cqDepthDesc = prometheus.NewDesc("xdpfab_cq_depth", "Entries queued in an application endpoint's CQ (as last reported).",
		[]string{"endpoint", "local", "cq"}, nil)
	cqLostDesc = prometheus.NewDesc("xdpfab_cq_lost_total", "Completions an application endpoint's CQ lost to overrun (as last reported).",
		[]string{"endpoint", "local", "cq"}, nil)
	cqOverrunDesc = prometheus.NewDesc("xdpfab_cq_overrun", "1 when an application endpoint's CQ is in the fatal overrun state.",
		[]string{"endpoint", "local", "cq"}, nil)
)

var sockStatsDesc = prometheus.NewDesc("xdpfab_endpoint_socket_events_total",
	"AF_XDP socket statistics (XDP_STATISTICS) of client endpoints, summed over their sockets.",
	[]string{"endpoint", "local", "event"}, nil)

// collectEndpoints exports per-endpoint socket statistics.
func (a *Agent) collectEndpoints(ch chan<- prometheus.Metric) {
	for _, cn := range a.conns() {
		cn.mu.Lock()
		for _, e := range cn.eps {
			st, err := e.p.Stats()
			if err != nil {
				continue
			}
			id := fmt.Sprint(e.p.ID())
			for _, kv := range statPairs(st) {
				ch <- prometheus.MustNewConstMetric(sockStatsDesc, prometheus.CounterValue, float64(kv.v), id, e.local, kv.k)
			}
			if r := e.report; r != nil {
				for _, q := range []struct {
					name string
					s    cq.Stats
				}{{"tx", r.TX}, {"rx", r.RX}} {
					over := 0.0
					if q.s.Overrun {
						over = 1
					}
					ch <- prometheus.MustNewConstMetric(cqDepthDesc, prometheus.GaugeValue, float64(q.s.Depth), id, e.local, q.name)
					ch <- prometheus.MustNewConstMetric(cqLostDesc, prometheus.CounterValue, float64(q.s.Lost), id, e.local, q.name)
					ch <- prometheus.MustNewConstMetric(cqOverrunDesc, prometheus.GaugeValue, over, id, e.local, q.name)
				}
			}
		}
		cn.mu.Unlock()
	}
}

type kv struct {
	k string
	v uint64
}

func statPairs(s dataplane.Stats) []kv {
	return []kv{{"rx_dropped", s.RxDropped}, {"rx_invalid_descs", s.RxInvalidDescs}, {"tx_invalid_descs", s.TxInvalidDescs},
		{"rx_ring_full", s.RxRingFull}, {"rx_fill_ring_empty", s.RxFillRingEmptyDescs}, {"tx_ring_empty", s.TxRingEmptyDescs}}
}

// endpointOwner is the pid of the application that opened endpoint id
// through the agent, or 0.
func (a *Agent) endpointOwner(id uint32) int32 {
	a.mu.Lock()
	h, inherited := a.inherited[id]
	a.mu.Unlock()
	if inherited {
		return int32(h.owner.PID)
	}
	for _, cn := range a.conns() {
		cn.mu.Lock()
		for _, e := range cn.eps {
			if e.p.ID() == id {
				cn.mu.Unlock()
				return e.pid
			}
		}
		cn.mu.Unlock()
	}
	return 0
}

// conns copies the set of connections.
func (a *Agent) conns() []*conn {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*conn, 0, len(a.clients))
	for c := range a.clients {
		out = append(out, c)
	}
	return out
}
