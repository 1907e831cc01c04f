package agent_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/xdpfab/xdpfab/agent"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"golang.org/x/sys/unix"
)

// scrapeText fetches /metrics as text, from inside host A's namespace.
func (n *node) scrapeText() string {
	n.t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return n.bed.A.Dial(network, addr)
	}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + n.metrics + "/metrics")
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		n.t.Fatal(err)
	}
	return string(b)
}

// lintMetrics checks a scrape by Prometheus' conventions (promlint, the
// checks of `promtool check metrics`), and keeps it in
// $XDPFAB_METRICS_SCRAPE when set, for .ci/run's promtool.
func lintMetrics(t *testing.T, text string) {
	t.Helper()
	problems, err := promlint.New(strings.NewReader(text)).Lint()
	if err != nil {
		t.Fatalf("lint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	if path := os.Getenv("XDPFAB_METRICS_SCRAPE"); path != "" {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// The agent's metrics follow Prometheus' conventions: lint clean, received
// frames a counter of their own (the outcomes add up to it, so sum() over
// xdpfab_xdp_packets_total counts every frame once), build information,
// Go and process collectors.
func TestMetricsConventions(t *testing.T) {
	n := newNode(t)
	n.startAgent()
	// Frames to no endpoint: the program passes them, counted.
	var uc *net.UDPConn
	if err := n.bed.B.Do(func() (err error) {
		uc, err = net.DialUDP("udp", nil, &net.UDPAddr{IP: n.bed.A.IPv4.AsSlice(), Port: 9})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	for range 20 {
		uc.Write([]byte("x"))
	}
	text := n.scrapeText()
	lintMetrics(t, text)
	m := parseMetrics(t, strings.NewReader(text))
	iface := testbed.LinkName
	rx := m[`xdpfab_xdp_rx_packets_total{iface="`+iface+`"}`]
	var sum float64
	for k, v := range m {
		if strings.HasPrefix(k, `xdpfab_xdp_packets_total{iface="`+iface+`"`) {
			sum += v
		}
	}
	if rx < 10 || sum != rx { // the first datagrams wait for ARP, which keeps only the last few
		t.Errorf("rx %v, outcomes add up to %v: want equal, at least 10", rx, sum)
	}
	if strings.Contains(text, `outcome="rx"`) {
		t.Errorf(`outcome="rx" is still among the outcomes`)
	}
	build := regexp.MustCompile(`(?m)^xdpfab_build_info\{bpf_object_sha256="([0-9a-f]{64})",goversion="go[^"]+",revision="[^"]*",version="[^"]+"\} 1$`).FindStringSubmatch(text)
	if build == nil || build[1] != bpf.ObjectSHA256() {
		t.Errorf("xdpfab_build_info missing or wrong:\n%s", grepLines(text, "build_info"))
	}
	for _, want := range []string{"go_goroutines ", "go_memstats_heap_alloc_bytes ", "process_start_time_seconds ",
		"process_resident_memory_bytes ", "process_open_fds ", "xdpfab_agent_restarts_total 0", "xdpfab_agent_clients "} {
		if !strings.Contains(text, "\n"+want) {
			t.Errorf("no %q in the scrape", want)
		}
	}
	// Every metric of ours is documented in OPERATIONS.md.
	doc, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`(?m)^# TYPE (xdpfab_\w+) `).FindAllStringSubmatch(text, -1) {
		if !strings.Contains(string(doc), "`"+name[1]+"`") {
			t.Errorf("docs/OPERATIONS.md does not list %s", name[1])
		}
	}
	for _, name := range []string{"xdpfab_cq_depth", "xdpfab_cq_lost_total", "xdpfab_cq_overrun", "xdpfab_endpoint_socket_events_total"} {
		if !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/OPERATIONS.md does not list %s", name)
		}
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Whoever reaches the metrics address may scrape (by default every local
// user, not only the socket's group), and each scrape reads every map and
// named AV: the agent gathers at most once a second and runs one scrape at
// a time per source, answering the source's others 503 at once (it used
// to run a collection for every connection that asked). Eight connections
// of one user scraping at once get both answers, and no connection is
// refused.
func TestMetricsScrapesBounded(t *testing.T) {
	a, bed, sock := inProcessAgent(t)
	root, err := client.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for i := range 32 { // something to collect
		if _, err := root.AVCreate(ctl.AVCreateArgs{Name: fmt.Sprintf("m%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return bed.A.Dial(network, addr)
	}}}
	defer hc.CloseIdleConnections()
	ok, busy := 0, 0
	for round := 0; round < 20 && (ok == 0 || busy == 0); round++ {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			wg.Go(func() {
				<-start
				resp, err := hc.Get("http://" + a.MetricsAddr() + "/metrics")
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				defer mu.Unlock()
				switch resp.StatusCode {
				case http.StatusOK:
					ok++
				case http.StatusServiceUnavailable:
					busy++
				default:
					t.Errorf("scrape: %s", resp.Status)
				}
			})
		}
		close(start)
		wg.Wait()
	}
	if ok == 0 || busy == 0 {
		t.Errorf("8 scrapes at once: %d answered, %d refused (503); want both", ok, busy)
	}
	t.Logf("%d answered, %d refused", ok, busy)
}

// tcpDialAs connects from h's namespace with a socket owned by uid (a
// socket belongs to the fsuid of the thread that makes it): another local
// user's connection.
func tcpDialAs(h *testbed.Host, uid int, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() (err error) {
		unix.Setfsuid(uid)
		defer unix.Setfsuid(0)
		c, err = net.Dial(network, addr)
		return err
	})
	return c, err
}

// Each source has one scrape at a time and eight connections, and a
// source on this node is the uid at the other end. Before, a local user
// who scraped in a loop kept the two scrapes the agent allowed in flight
// busy, so a local or remote Prometheus got 503 for most scrapes; and one
// who opened connections without a request held a descriptor of the
// agent's each, as many as it liked. A first fix made every local
// connection one source, which let that user keep a local Prometheus's
// connections out.
func TestMetricsSourcesBounded(t *testing.T) {
	a, bed, _ := inProcessAgent(t, func(c *agent.Config) { c.MetricsAddr = ":0" })
	_, port, err := net.SplitHostPort(a.MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	httpClient := func(dial func(network, addr string) (net.Conn, error)) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dial(network, addr)
		}}}
	}
	hostile := httpClient(func(network, addr string) (net.Conn, error) { return tcpDialAs(bed.A, 65534, network, addr) })
	prom := httpClient(bed.A.Dial)   // a local Prometheus (root here)
	remote := httpClient(bed.B.Dial) // and one on another host
	defer hostile.CloseIdleConnections()
	defer prom.CloseIdleConnections()
	defer remote.CloseIdleConnections()
	localURL := "http://127.0.0.1:" + port + "/metrics"
	remoteURL := "http://" + net.JoinHostPort(bed.A.IPv4.String(), port) + "/metrics"
	scrapes := func(hc *http.Client, url string, n int) (refused int) {
		for range n {
			resp, err := hc.Get(url)
			if err != nil {
				refused++
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				refused++
			}
		}
		return refused
	}

	// The hostile user scrapes in loops, from the node's own addresses.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		url := []string{localURL, remoteURL}[i%2]
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				scrapes(hostile, url, 1)
			}
		})
	}
	r1, r2 := scrapes(prom, localURL, 20), scrapes(remote, remoteURL, 20)
	close(stop)
	wg.Wait()
	hostile.CloseIdleConnections()
	if r1+r2 > 0 {
		t.Errorf("while another user scraped in a loop: %d of 20 local and %d of 20 remote scrapes refused", r1, r2)
	}

	// Then it holds connections without a request.
	fds := func() int {
		d, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(d)
	}
	prom.CloseIdleConnections()
	remote.CloseIdleConnections()
	time.Sleep(50 * time.Millisecond)
	before := fds()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range 200 {
		dst := []string{"127.0.0.1", bed.A.IPv4.String()}[i%2]
		c, err := tcpDialAs(bed.A, 65534, "tcp", net.JoinHostPort(dst, port))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(200 * time.Millisecond) // the server accepts (and closes what it refuses)
	// This process is both sides: 200 of the descriptors are the test's
	// (and a few the runtime's or a closing connection's).
	if grown := fds() - before - len(held); grown > 2*connsPerSourceForTest {
		t.Errorf("200 connections of one user held %d of the agent's descriptors, want about %d", grown, connsPerSourceForTest)
	}
	if r1, r2 := scrapes(prom, localURL, 5), scrapes(remote, remoteURL, 5); r1+r2 > 0 {
		t.Errorf("after another user's connection flood: %d of 5 local and %d of 5 remote scrapes refused", r1, r2)
	}

	// A scraper that makes a new connection every time, and never closes
	// the idle ones (as this package's test helper did): its oldest idle
	// connection gives way, no scrape fails.
	for i := range 20 {
		hc := httpClient(bed.A.Dial)
		if r := scrapes(hc, localURL, 1); r > 0 {
			t.Fatalf("scrape %d on a new connection, with %d idle ones: refused", i, i)
		}
	}
}

// connsPerSourceForTest is agent's connsPerSource.
const connsPerSourceForTest = 8
