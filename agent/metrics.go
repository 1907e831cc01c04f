package agent

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/version"
)

// collector reads the kernel's state at scrape time: nothing is cached, so
// a scrape shows what the maps and sockets say now. docs/OPERATIONS.md
// lists every metric.
type collector struct {
	a                                     *Agent
	rx, packets, avEntries, mapEntries    *prometheus.Desc
	mapSize, endpoints, clients, restarts *prometheus.Desc
	buildInfo                             *prometheus.Desc
	holdEndpoints, holdSlots              *prometheus.Desc
}

func newCollector(a *Agent) *collector {
	return &collector{
		a:          a,
		rx:         prometheus.NewDesc("xdpfab_xdp_rx_packets_total", "Frames the XDP program saw on an interface.", []string{"iface"}, nil),
		packets:    prometheus.NewDesc("xdpfab_xdp_packets_total", "Frames the XDP program saw, by what it did with them; every frame counts in exactly one outcome, so the sum over outcomes is xdpfab_xdp_rx_packets_total.", []string{"iface", "outcome"}, nil),
		avEntries:  prometheus.NewDesc("xdpfab_av_entries", "Addresses in a named address vector.", []string{"av"}, nil),
		mapEntries: prometheus.NewDesc("xdpfab_map_entries", "Entries in a BPF map.", []string{"map"}, nil),
		mapSize:    prometheus.NewDesc("xdpfab_map_max_entries", "Capacity of a BPF map.", []string{"map"}, nil),
		endpoints:  prometheus.NewDesc("xdpfab_endpoints", "Endpoints in the XDP endpoint table.", nil, nil),
		clients:    prometheus.NewDesc("xdpfab_agent_clients", "Connected control-socket clients.", nil, nil),
		restarts:   prometheus.NewDesc("xdpfab_agent_restarts_total", "Agent starts that adopted the pinned dataplane an earlier agent left (persisted in the maps).", nil, nil),
		buildInfo: prometheus.NewDesc("xdpfab_build_info", "The agent's build; always 1.",
			[]string{"version", "revision", "goversion", "bpf_object_sha256"}, nil),
		holdEndpoints: prometheus.NewDesc("xdpfab_queue_hold_endpoints", "Endpoints on a hold of an interface's rx queues: a sharing domain's (domain set), or 1 for a private endpoint (domain empty).",
			[]string{"iface", "queues", "domain"}, nil),
		holdSlots: prometheus.NewDesc("xdpfab_queue_hold_endpoints_max", "Endpoints a sharing domain may hold (--domain-endpoints).",
			[]string{"iface", "queues", "domain"}, nil),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	s, err := a.status(false)
	if err != nil {
		a.log.Warn("metrics", "err", err)
		return
	}
	// One series per attached interface; frames of other ifindexes (the
	// program attached elsewhere, or ifindexes past the counter table)
	// are "other".
	rows, err := a.dp.CountersByIfindex()
	if err != nil {
		a.log.Warn("metrics", "err", err)
		return
	}
	emit := func(iface string, row [bpf.NumCounters]uint64) {
		for i, v := range row {
			if bpf.Counter(i) == bpf.CounterRX {
				ch <- prometheus.MustNewConstMetric(c.rx, prometheus.CounterValue, float64(v), iface)
				continue
			}
			ch <- prometheus.MustNewConstMetric(c.packets, prometheus.CounterValue, float64(v), iface, bpf.Counter(i).String())
		}
	}
	for _, att := range s.Attachments {
		emit(att.Iface, rows[att.Ifindex])
		delete(rows, att.Ifindex)
	}
	var other [bpf.NumCounters]uint64
	for _, row := range rows {
		for i, v := range row {
			other[i] += v
		}
	}
	emit("other", other)
	for _, v := range s.AVs {
		ch <- prometheus.MustNewConstMetric(c.avEntries, prometheus.GaugeValue, float64(v.Entries), v.Name)
	}
	for _, m := range s.Maps {
		ch <- prometheus.MustNewConstMetric(c.mapEntries, prometheus.GaugeValue, float64(m.Entries), m.Name)
		ch <- prometheus.MustNewConstMetric(c.mapSize, prometheus.GaugeValue, float64(m.MaxEntries), m.Name)
	}
	ch <- prometheus.MustNewConstMetric(c.endpoints, prometheus.GaugeValue, float64(len(s.Endpoints)))
	ch <- prometheus.MustNewConstMetric(c.clients, prometheus.GaugeValue, float64(s.Clients))
	ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(s.Restarts))
	v := version.Get()
	ch <- prometheus.MustNewConstMetric(c.buildInfo, prometheus.GaugeValue, 1, v.Version, v.Commit, v.GoVersion, v.BPFObject)
	for _, q := range s.Queues {
		queues := fmt.Sprintf("%d-%d", q.FirstQueue, q.FirstQueue+q.Queues-1)
		if q.Name == "" {
			ch <- prometheus.MustNewConstMetric(c.holdEndpoints, prometheus.GaugeValue, 1, q.Iface, queues, "")
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.holdEndpoints, prometheus.GaugeValue, float64(q.Users), q.Iface, queues, q.Name)
		ch <- prometheus.MustNewConstMetric(c.holdSlots, prometheus.GaugeValue, float64(q.Slots), q.Iface, queues, q.Name)
	}
	a.collectEndpoints(ch)
}

// maxScrapes bounds the scrapes served at once; more are answered 503
// at once. The endpoint answers whoever reaches its address (by default
// every local user, not only the socket's group), and each scrape reads
// every map and named AV: a user that scrapes in a loop from many
// connections costs the agent at most this many collections at a time.
const maxScrapes = 2

func (a *Agent) serveMetrics() error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(a),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{MaxRequestsInFlight: maxScrapes}))
	ln, err := net.Listen("tcp", a.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("agent: metrics on %s: %w", a.cfg.MetricsAddr, err)
	}
	// A scraper that does not read its answer holds one of the scrapes
	// at most WriteTimeout; idle connections go after IdleTimeout.
	a.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: 8 << 10}
	a.metricsAddr = ln.Addr().String()
	go a.http.Serve(ln)
	a.log.Info("metrics", "url", "http://"+a.metricsAddr+"/metrics")
	return nil
}

// MetricsAddr is the address metrics are served on (the real port when
// Config.MetricsAddr asked for port 0).
func (a *Agent) MetricsAddr() string { return a.metricsAddr }
