package agent

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/internal/version"
)

// collector reads the kernel's state when a scrape gathers (at most once
// per gatherEvery; scrapes in between get that result). docs/OPERATIONS.md
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

// The metrics endpoint answers whoever reaches its address (by default
// every local user, not only the socket's group), so what one source can
// take of it is bounded, and a scrape costs the agent little:
//   - a collection (every map and named AV read) runs at most once per
//     gatherEvery: scrapes in between get the last one's result;
//   - each source has at most scrapesPerSource scrapes in flight and
//     connsPerSource connections open, all sources together maxScrapes and
//     maxMetricsConns; more scrapes are answered 503 at once, more
//     connections closed at once. A source is a remote address (an IPv6
//     address's /64), and every address of this node counts as one source
//     ("local"), so that a local user who loops over scrapes or opens
//     connections from many of the node's addresses takes one source's
//     share, never the agent's descriptors nor a remote Prometheus's turn.
const (
	gatherEvery      = time.Second
	scrapesPerSource = 1
	maxScrapes       = 16
	connsPerSource   = 8
	maxMetricsConns  = 64
)

func (a *Agent) serveMetrics() error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(a),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	src := &sources{conns: map[string]int{}, scrapes: map[string]int{}}
	mux := http.NewServeMux()
	mux.Handle("/metrics", src.limit(promhttp.HandlerFor(&cachedGatherer{g: reg, every: gatherEvery},
		promhttp.HandlerOpts{MaxRequestsInFlight: maxScrapes})))
	ln, err := net.Listen("tcp", a.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("agent: metrics on %s: %w", a.cfg.MetricsAddr, err)
	}
	// A scraper that does not read its answer holds one of the scrapes
	// at most WriteTimeout; idle connections go after IdleTimeout.
	a.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: 8 << 10}
	a.metricsAddr = ln.Addr().String()
	go a.http.Serve(&limitListener{Listener: ln, src: src})
	a.log.Info("metrics", "url", "http://"+a.metricsAddr+"/metrics")
	return nil
}

// cachedGatherer gathers at most once per every and hands the result to
// every scrape until then (the encoders only read it).
type cachedGatherer struct {
	g     prometheus.Gatherer
	every time.Duration

	mu  sync.Mutex
	at  time.Time
	mfs []*dto.MetricFamily
	err error
}

func (c *cachedGatherer) Gather() ([]*dto.MetricFamily, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || time.Since(c.at) >= c.every {
		c.mfs, c.err = c.g.Gather()
		c.at = time.Now()
	}
	return c.mfs, c.err
}

// sources counts what each source holds of the metrics endpoint.
type sources struct {
	mu             sync.Mutex
	conns, scrapes map[string]int
	nconns         int
	local          map[netip.Addr]bool // this node's addresses
	localAt        time.Time
}

// key names the source of remote: "local" for this node's addresses
// (loopback included), an IPv6 address's /64, an IPv4 address. Called
// with s.mu held.
func (s *sources) key(remote string) string {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return remote
	}
	ip := ap.Addr().Unmap()
	if time.Since(s.localAt) > 10*time.Second {
		s.local, s.localAt = map[netip.Addr]bool{}, time.Now()
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil {
					s.local[p.Addr().Unmap()] = true
				}
			}
		}
	}
	if ip.IsLoopback() || s.local[ip.WithZone("")] {
		return "local"
	}
	if ip.Is6() {
		p, _ := ip.WithZone("").Prefix(64)
		return p.String()
	}
	return ip.String()
}

// take counts one more of what key holds in m (conns or scrapes), false
// (nothing counted) past per, or past max in all when total is given.
// Called with s.mu held.
func take(m map[string]int, total *int, key string, per, max int) bool {
	if m[key] >= per || (total != nil && *total >= max) {
		return false
	}
	m[key]++
	if total != nil {
		*total++
	}
	return true
}

// give undoes take.
func (s *sources) give(m map[string]int, total *int, key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m[key]--; m[key] <= 0 {
		delete(m, key)
	}
	if total != nil {
		*total--
	}
}

// limit answers 503 to a scrape past its source's share (the handler's
// MaxRequestsInFlight bounds them all).
func (s *sources) limit(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		key := s.key(r.RemoteAddr)
		ok := take(s.scrapes, nil, key, scrapesPerSource, 0)
		s.mu.Unlock()
		if !ok {
			http.Error(w, "too many scrapes from this source at once", http.StatusServiceUnavailable)
			return
		}
		defer s.give(s.scrapes, nil, key)
		h.ServeHTTP(w, r)
	})
}

// limitListener closes connections past their source's share or the
// total at once, before the server spends anything on them.
type limitListener struct {
	net.Listener
	src *sources
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		s := l.src
		s.mu.Lock()
		key := s.key(c.RemoteAddr().String())
		ok := take(s.conns, &s.nconns, key, connsPerSource, maxMetricsConns)
		s.mu.Unlock()
		if ok {
			return &limitConn{Conn: c, src: s, key: key}, nil
		}
		c.Close()
	}
}

// limitConn gives its source's share back when it closes.
type limitConn struct {
	net.Conn
	src  *sources
	key  string
	once sync.Once
}

func (c *limitConn) Close() error {
	c.once.Do(func() { c.src.give(c.src.conns, &c.src.nconns, c.key) })
	return c.Conn.Close()
}

// MetricsAddr is the address metrics are served on (the real port when
// Config.MetricsAddr asked for port 0).
func (a *Agent) MetricsAddr() string { return a.metricsAddr }
