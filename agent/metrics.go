package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
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
//   - a source has scrapesPerSource scrapes in flight (more are answered
//     503 at once) and connsPerSource connections; all sources together
//     maxScrapes and maxMetricsConns. A connection past a source's share,
//     or past the total, takes the place of the oldest connection that is
//     idle or has not sent a request yet (of its source; past the total,
//     of the largest group of sources, an IPv6 /64 counting as one), or is
//     closed at once when there is none.
//
// A source is a remote address, or for a connection from this node (any
// of its addresses, loopback included) the uid owning the socket at the
// other end (sock_diag): a local user who loops over scrapes or opens
// connections takes its own share, not a local Prometheus's. Without
// sock_diag all of this node is one source.
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
	ln, err := net.Listen("tcp", a.cfg.MetricsAddr)
	if err != nil {
		return fmt.Errorf("agent: metrics on %s: %w", a.cfg.MetricsAddr, err)
	}
	src := &sources{conns: map[string][]*limitConn{}, scrapes: map[string]int{}}
	if src.diag, err = newInetDiag(); err != nil { // in the listener's namespace
		a.log.Warn("metrics: connections from this node count as one source", "err", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", src.limit(promhttp.HandlerFor(&cachedGatherer{g: reg, every: gatherEvery},
		promhttp.HandlerOpts{MaxRequestsInFlight: maxScrapes})))
	// A scraper that does not read its answer holds one of the scrapes
	// at most WriteTimeout; idle connections go after IdleTimeout.
	a.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: 8 << 10,
		ConnState: func(c net.Conn, st http.ConnState) {
			if lc, ok := c.(*limitConn); ok {
				lc.state.Store(int32(st))
			}
		},
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		}}
	a.http.RegisterOnShutdown(func() { src.diag.Close() })
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

// connKey is the request context's key of its *limitConn.
type connKey struct{}

// sources counts what each source holds of the metrics endpoint.
type sources struct {
	diag *inetDiag // nil: no uids, this node is one source

	mu      sync.Mutex
	conns   map[string][]*limitConn // oldest first
	nconns  int
	scrapes map[string]int
	local   map[netip.Addr]bool // this node's addresses
	localAt time.Time
}

// key names the source of connection c: "uid:N" for a connection from
// this node (its addresses, loopback included), "local" when the uid
// cannot be learnt, else the remote address.
func (s *sources) key(c net.Conn) string {
	self, err1 := netip.ParseAddrPort(c.LocalAddr().String())
	peer, err2 := netip.ParseAddrPort(c.RemoteAddr().String())
	if err1 != nil || err2 != nil {
		return c.RemoteAddr().String()
	}
	ip := peer.Addr().Unmap().WithZone("")
	if !ip.IsLoopback() && !s.isLocal(ip) {
		return ip.String()
	}
	if uid, err := s.diag.uid(unmapPort(peer), unmapPort(self)); err == nil {
		return fmt.Sprintf("uid:%d", uid)
	}
	return "local"
}

// unmapPort is ap with its address unmapped (an IPv4 peer of a dual-stack
// listener has an IPv4 socket); a zone stays (the socket's device).
func unmapPort(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// isLocal reports whether ip is one of this node's addresses (re-read
// every 10 s).
func (s *sources) isLocal(ip netip.Addr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	return s.local[ip]
}

// admit counts c for its source and returns the connection it displaces
// (to be closed by the caller), or ok false when there is no room for c.
func (s *sources) admit(c *limitConn) (victim *limitConn, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case len(s.conns[c.key]) >= connsPerSource:
		victim = evictable(s.conns[c.key])
	case s.nconns >= maxMetricsConns:
		// From the largest group of sources, an IPv6 /64 counting as one
		// (a host has as many addresses in its /64 as it likes).
		groups := map[string][]*limitConn{}
		var most string
		for key, cs := range s.conns {
			g := group(key)
			groups[g] = append(groups[g], cs...)
			if len(groups[g]) > len(groups[most]) {
				most = g
			}
		}
		cs := groups[most]
		slices.SortFunc(cs, func(a, b *limitConn) int { return a.at.Compare(b.at) })
		victim = evictable(cs)
	default:
		s.conns[c.key] = append(s.conns[c.key], c)
		s.nconns++
		return nil, true
	}
	if victim == nil {
		return nil, false
	}
	s.dropLocked(victim)
	s.conns[c.key] = append(s.conns[c.key], c)
	s.nconns++
	return victim, true
}

// group is the group of source key: an IPv6 address's /64, else the key.
func group(key string) string {
	if ip, err := netip.ParseAddr(key); err == nil && ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return key
}

// evictable is the oldest of cs that is idle or has not sent a request
// yet, nil if all are serving one.
func evictable(cs []*limitConn) *limitConn {
	for _, c := range cs {
		if st := http.ConnState(c.state.Load()); st == http.StateNew || st == http.StateIdle {
			return c
		}
	}
	return nil
}

// drop stops counting c (once).
func (s *sources) drop(c *limitConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLocked(c)
}

func (s *sources) dropLocked(c *limitConn) {
	if c.gone {
		return
	}
	c.gone = true
	cs := s.conns[c.key]
	for i, x := range cs {
		if x == c {
			cs = append(cs[:i], cs[i+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(s.conns, c.key)
	} else {
		s.conns[c.key] = cs
	}
	s.nconns--
}

// limit answers 503 to a scrape past its source's share (the handler's
// MaxRequestsInFlight bounds them all).
func (s *sources) limit(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := "?"
		if c, ok := r.Context().Value(connKey{}).(*limitConn); ok {
			key = c.key
		}
		s.mu.Lock()
		ok := s.scrapes[key] < scrapesPerSource
		if ok {
			s.scrapes[key]++
		}
		s.mu.Unlock()
		if !ok {
			http.Error(w, "too many scrapes from this source at once", http.StatusServiceUnavailable)
			return
		}
		defer func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.scrapes[key]--; s.scrapes[key] <= 0 {
				delete(s.scrapes, key)
			}
		}()
		h.ServeHTTP(w, r)
	})
}

// limitListener admits connections by their source's share and the total
// (sources.admit) before the server spends anything on them.
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
		lc := &limitConn{Conn: c, src: l.src, key: l.src.key(c), at: time.Now()}
		victim, ok := l.src.admit(lc)
		if victim != nil {
			victim.Conn.Close() // its server goroutine sees the error and ends
		}
		if ok {
			return lc, nil
		}
		c.Close()
	}
}

// limitConn is an admitted connection: its source, its HTTP state
// (ConnState), and the share it gives back when it closes.
type limitConn struct {
	net.Conn
	src   *sources
	key   string
	at    time.Time    // accepted
	state atomic.Int32 // http.ConnState
	gone  bool         // no longer counted; guarded by src.mu
}

func (c *limitConn) Close() error {
	c.src.drop(c)
	return c.Conn.Close()
}

// CloseWrite lets the server end its side gracefully after an error
// reply, as it does on a bare TCP connection.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// MetricsAddr is the address metrics are served on (the real port when
// Config.MetricsAddr asked for port 0).
func (a *Agent) MetricsAddr() string { return a.metricsAddr }
