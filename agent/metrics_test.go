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
)

// scrapeText fetches /metrics as text, from inside host A's namespace.
func (n *node) scrapeText() string {
	n.t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return n.bed.A.Dial(network, addr)
	}}}
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
// named AV: the agent runs one scrape at a time per source, answers the
// source's others 503 and closes its connections past eight at once (it
// used to run a collection for every connection that asked). 64 scrapes
// at once get both answers.
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
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return bed.A.Dial(network, addr)
	}}}
	defer hc.CloseIdleConnections()
	ok, busy := 0, 0
	for round := 0; round < 5 && busy == 0; round++ {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 64 {
			wg.Go(func() {
				<-start
				resp, err := hc.Get("http://" + a.MetricsAddr() + "/metrics")
				if err != nil {
					// Past the source's connections: closed at once.
					mu.Lock()
					busy++
					mu.Unlock()
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
		t.Errorf("64 scrapes at once: %d answered, %d refused (503); want both", ok, busy)
	}
	t.Logf("%d answered, %d refused", ok, busy)
}

// A source takes one scrape at a time and eight connections, and every
// address of the node is one source. Before, a local user who scraped in a
// loop from a few connections kept the two scrapes the agent allowed in
// flight busy, and a remote Prometheus got 503 for most of its scrapes;
// and one who opened connections without a request held a descriptor of
// the agent's each, as many as it liked.
func TestMetricsSourcesBounded(t *testing.T) {
	a, bed, _ := inProcessAgent(t, func(c *agent.Config) { c.MetricsAddr = ":0" })
	_, port, err := net.SplitHostPort(a.MetricsAddr())
	if err != nil {
		t.Fatal(err)
	}
	client := func(h *testbed.Host) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return h.Dial(network, addr)
		}}}
	}
	local, remote := client(bed.A), client(bed.B)
	defer local.CloseIdleConnections()
	defer remote.CloseIdleConnections()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 { // the local user, in loops
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if resp, err := local.Get("http://127.0.0.1:" + port + "/metrics"); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	refused := 0
	url := "http://" + net.JoinHostPort(bed.A.IPv4.String(), port) + "/metrics"
	for range 20 { // Prometheus, from host B
		resp, err := remote.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			refused++
		}
	}
	close(stop)
	wg.Wait()
	if refused > 0 {
		t.Errorf("remote scrapes while a local user scraped in a loop: %d of 20 refused", refused)
	}

	// Connections without a request, from the node's own addresses.
	fds := func() int {
		d, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(d)
	}
	local.CloseIdleConnections()
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
		c, err := bed.A.Dial("tcp", net.JoinHostPort(dst, port))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(200 * time.Millisecond) // the server accepts (and closes what it refuses)
	// This process is both sides: 200 of the descriptors are the test's
	// (and a few the runtime's or a closing connection's).
	if grown := fds() - before - len(held); grown > 2*connsPerSourceForTest {
		t.Errorf("200 connections from the node held %d of the agent's descriptors, want about %d", grown, connsPerSourceForTest)
	}
	resp, err := remote.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("remote scrape after the connection flood: %s", resp.Status)
	}
}

// connsPerSourceForTest is agent's connsPerSource.
const connsPerSourceForTest = 8
