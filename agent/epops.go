package agent

import (
	"fmt"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
)

// clientEP is an endpoint the agent prepared for a ctl.
type clientEP struct {
	p      *ep.Prepared
	local  string
	pid    int32
	report *ctl.EPReportArgs // the application's latest CQ statistics
}

// epOpen prepares an endpoint for the client and hands its descriptors
// over; the connection owns it from then on.
func (a *Agent) epOpen(cn *conn, args ctl.EPOpenArgs) (ctl.EPOpenResult, []int, error) {
	local, err := netip.ParseAddrPort(args.Local)
	if err != nil {
		return ctl.EPOpenResult{}, nil, fmt.Errorf("ep open: local address %q: %w", args.Local, fi.EINVAL)
	}
	v, err := a.namedAV(args.AV)
	if err != nil {
		return ctl.EPOpenResult{}, nil, fmt.Errorf("ep open: %w", err)
	}
	p, err := ep.Prepare(a.dp, ep.Attr{
		Ifname: args.Iface, Local: local, AV: v, Caps: args.Caps, RxContexts: args.RxContexts, Queues: args.Queues,
		Frames: args.Frames, RingSize: args.RingSize, DropUnknown: args.DropUnknown,
		BindMode: a.cfg.BindMode, Logger: a.log,
	})
	if err != nil {
		return ctl.EPOpenResult{}, nil, err
	}
	info, fds := p.Handover()
	if len(fds) > ctl.MaxFDs {
		p.Close()
		return ctl.EPOpenResult{}, nil, fmt.Errorf("ep open: %d contexts x %d queues need %d descriptors, one message carries %d: %w",
			info.RxContexts, info.Queues, len(fds), ctl.MaxFDs, fi.EINVAL)
	}
	e := &clientEP{p: p, local: args.Local}
	if cn.cred != nil {
		e.pid = cn.cred.Pid
	}
	cn.mu.Lock()
	cn.eps = append(cn.eps, e)
	cn.mu.Unlock()
	a.log.Info("endpoint prepared", "id", info.ID, "local", args.Local, "iface", args.Iface, "pid", e.pid)
	return ctl.EPOpenResult{Handover: info}, fds, nil
}

func (a *Agent) epClose(cn *conn, id uint32) error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for i, e := range cn.eps {
		if e.p.ID() == id {
			cn.eps = append(cn.eps[:i], cn.eps[i+1:]...)
			a.log.Info("endpoint closed", "id", id)
			return e.p.Close()
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
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for _, e := range cn.eps {
		a.log.Info("releasing endpoint of a gone client", "id", e.p.ID(), "pid", e.pid)
		if err := e.p.Close(); err != nil {
			a.log.Warn("release endpoint", "id", e.p.ID(), "err", err)
		}
	}
	cn.eps = nil
}

// neighUse makes the kernel resolve (or re-verify) a next hop for an
// application's endpoint, which may not send NTF_USE itself.
func (a *Agent) neighUse(args ctl.NeighUseArgs) error {
	if !args.IP.IsValid() || args.IP.IsUnspecified() || args.IP.IsMulticast() {
		return fmt.Errorf("neigh use: address %v: %w", args.IP, fi.EINVAL)
	}
	family := netlink.FAMILY_V4
	if !args.IP.Unmap().Is4() {
		family = netlink.FAMILY_V6
	}
	err := netlink.NeighSet(&netlink.Neigh{LinkIndex: args.Ifindex, Family: family, IP: args.IP.AsSlice(), Flags: netlink.NTF_USE})
	if err != nil {
		return fmt.Errorf("neigh use %v on ifindex %d: %w", args.IP, args.Ifindex, err)
	}
	return nil
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
