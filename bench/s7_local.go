package main

// Section 7: same-host ping-pong between two processes (issue 12): two
// applications on one node, each with an endpoint opened through the
// agent (xdpfab agent, in the bed's namespace), exchanging messages
// through xdpfab's same-host channels, against fi_pingpong -p udp -e
// dgram with both sides in the same namespace (the kernel's UDP over
// loopback). The two xdpfab processes are this program run again
// (XDPFAB_BENCH_LOCAL), pinned like fi_pingpong's with taskset.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

var localSizes = []int{64, 1024}

// localChildResult is what a ping-pong process reports.
type localChildResult struct {
	Mean, P50, P99 float64
	Err            string
}

func runLocal(r *results, cfg *config) error {
	iters, warm := 20000, 1000
	if cfg.quick {
		iters, warm = 2000, 200
	}
	r.Setup["local_iterations"] = fmt.Sprint(iters)
	bd, down, err := testbed.Up(testbed.Options{StaticNeighbors: true})
	if err != nil {
		return err
	}
	defer down()
	add := func(key, title string, size int, res []localChildResult) {
		var mean, p50, p99 []float64
		for _, x := range res {
			mean, p50, p99 = append(mean, x.Mean), append(p50, x.P50), append(p99, x.P99)
		}
		lbl := map[string]string{"impl": title, "size": fmt.Sprint(size)}
		k := fmt.Sprintf("local/%s/%d", key, size)
		r.add("local", k+"/mean", "us", mean, lbl)
		if res[0].P50 > 0 {
			r.add("local", k+"/p50", "us", p50, lbl)
			r.add("local", k+"/p99", "us", p99, lbl)
		}
		fmt.Printf("  %-16s %5d B: mean %7.2f us  p50 %7.2f  p99 %7.2f  (load %s)\n", key, size, median(mean), median(p50), median(p99), loadAvg())
	}
	r.Setup["local_loadavg_start"] = loadAvg()

	// fi_pingpong, both sides in host A, to A's address.
	if cfg.want("fi-udp-local") {
		for _, size := range localSizes {
			var res []localChildResult
			for range cfg.reps {
				mean, err := runFiPingPong(cfg, bd.A, bd.A, "udp", "dgram", size, iters)
				if err != nil {
					r.note("local", "fi_pingpong -p udp -e dgram -S %d on one host: %v", size, err)
					res = nil
					break
				}
				res = append(res, localChildResult{Mean: mean})
			}
			if res != nil {
				add("fi-udp-local", "fi_pingpong -p udp -e dgram, both sides on one host", size, res)
			}
		}
	}
	if cfg.want("xdpfab-local") {
		if err := xdpfabLocal(r, cfg, bd, iters, warm, add); err != nil {
			return fmt.Errorf("xdpfab-local: %w", err)
		}
	}
	r.Setup["local_loadavg_end"] = loadAvg()
	return nil
}

// xdpfabLocal runs an agent in host A and the two ping-pong processes,
// both with endpoints on the bed's interface (one sharing domain: the
// bench runs as root), on two ports of A's address.
func xdpfabLocal(r *results, cfg *config, bd *testbed.Bed, iters, warm int, add func(string, string, int, []localChildResult)) error {
	ag, err := startAgent(cfg, bd.A)
	if err != nil {
		return err
	}
	defer ag.Close()
	c, sock := ag.c, ag.sock
	srvAddr, cliAddr := netip.AddrPortFrom(bd.A.IPv4, rxPort), netip.AddrPortFrom(bd.A.IPv4, rxPort+1)
	if _, err := c.AVCreate(ctl.AVCreateArgs{Name: "pp"}); err != nil {
		return err
	}
	if _, err := c.AVInsert(ctl.AVInsertArgs{Name: "pp", Addrs: []string{srvAddr.String(), cliAddr.String()}}); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for _, size := range localSizes {
		var res []localChildResult
		for range cfg.reps {
			x, err := localPingPong(cfg, bd.A, self, sock, srvAddr, cliAddr, size, iters, warm)
			if err != nil {
				return fmt.Errorf("%d B: %w", size, err)
			}
			res = append(res, x)
		}
		add("xdpfab-local", "xdpfab same-host channel, two processes through the agent, manual progress", size, res)
	}
	return nil
}

// localPingPong runs one server and one client process and returns the
// client's result.
func localPingPong(cfg *config, h *testbed.Host, self, sock string, srv, cli netip.AddrPort, size, iters, warm int) (localChildResult, error) {
	ctx, cancel := context.WithTimeout(cfg.ctx, 2*time.Minute)
	defer cancel()
	start := func(role string, cpu int, local netip.AddrPort, iface string, out io.Writer) (*exec.Cmd, error) {
		cmd := exec.CommandContext(ctx, "taskset", "-c", fmt.Sprint(cpu), self)
		cmd.Env = append(os.Environ(), "XDPFAB_BENCH_LOCAL="+role, "XDPFAB_SOCKET="+sock, "XDPFAB_LOCAL="+local.String(),
			"XDPFAB_IFACE="+iface, "XDPFAB_SIZE="+fmt.Sprint(size), "XDPFAB_ITERS="+fmt.Sprint(iters), "XDPFAB_WARM="+fmt.Sprint(warm))
		cmd.Stdout, cmd.Stderr = out, os.Stderr
		return cmd, h.Do(cmd.Start)
	}
	var srvOut, cliOut bytes.Buffer
	s, err := start("server", cfg.cpuLoad, srv, testbed.LinkName, &srvOut)
	if err != nil {
		return localChildResult{}, err
	}
	defer func() {
		if s.ProcessState == nil {
			s.Process.Kill()
			s.Wait()
		}
	}()
	// The server says "ready" once its endpoint is open.
	for deadline := time.Now().Add(10 * time.Second); !bytes.Contains(srvOut.Bytes(), []byte("ready")); {
		if time.Now().After(deadline) {
			return localChildResult{}, fmt.Errorf("server not ready: %s", srvOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cl, err := start("client", cfg.cpuMeasure, cli, testbed.LinkName, &cliOut)
	if err != nil {
		return localChildResult{}, err
	}
	cerr := cl.Wait()
	serr := s.Wait()
	var res localChildResult
	if err := json.Unmarshal(bytes.TrimSpace(cliOut.Bytes()), &res); err != nil {
		return res, fmt.Errorf("client: %v %v: %s", cerr, err, cliOut.String())
	}
	if res.Err != "" {
		return res, errors.New(res.Err)
	}
	if serr != nil {
		return res, fmt.Errorf("server: %v: %s", serr, srvOut.String())
	}
	return res, nil
}

// localChild runs one side of the same-host ping-pong when this program
// was started as one (XDPFAB_BENCH_LOCAL), and reports whether it was.
func localChild() bool {
	role := os.Getenv("XDPFAB_BENCH_LOCAL")
	if role == "" {
		return false
	}
	res, err := localSide(role)
	if err != nil {
		res.Err = err.Error()
	}
	if role == "client" || err != nil {
		json.NewEncoder(os.Stdout).Encode(res)
	}
	if err != nil {
		os.Exit(1)
	}
	return true
}

func localSide(role string) (localChildResult, error) {
	atoi := func(k string) int { n, _ := strconv.Atoi(os.Getenv(k)); return n }
	size, iters, warm := atoi("XDPFAB_SIZE"), atoi("XDPFAB_ITERS"), atoi("XDPFAB_WARM")
	local := netip.MustParseAddrPort(os.Getenv("XDPFAB_LOCAL"))
	iface := os.Getenv("XDPFAB_IFACE")
	st, closeAll, err := agentStack(os.Getenv("XDPFAB_SOCKET"), ctl.EPOpenArgs{Iface: iface, Local: local.String(), AV: "pp", Caps: fi.Msg | fi.Source},
		ep.Attr{Ifname: iface, Local: local, Caps: fi.Msg | fi.Source, Threading: fi.ThreadDomain}, 1024, cq.WaitNone)
	if err != nil {
		return localChildResult{}, err
	}
	defer closeAll()
	e := st.EP
	x := &xdpfabRx{Stack: st}
	total := iters + warm
	deadline := time.Now().Add(2 * time.Minute)
	buf := make([]byte, e.MaxMsgSize())
	if role == "server" {
		fmt.Println("ready")
		x.want = 1 // the client, in the AV
		for range total {
			if err := e.Recv(buf, fi.AddrUnspec, nil); err != nil {
				return localChildResult{}, err
			}
			n, err := x.waitOne(true, deadline)
			if err != nil {
				return localChildResult{}, err
			}
			if err := sendSpin(x, buf[:n], x.want); err != nil {
				return localChildResult{}, err
			}
		}
		return localChildResult{}, nil
	}
	x.want = 0 // the server
	msg := make([]byte, size)
	halves := samples[time.Duration](iters)
	var startT time.Time
	for i := range total {
		if i == warm {
			startT = time.Now()
		}
		if err := e.Recv(buf, fi.AddrUnspec, nil); err != nil {
			return localChildResult{}, err
		}
		t0 := time.Now()
		if err := sendSpin(x, msg, x.want); err != nil {
			return localChildResult{}, err
		}
		n, err := x.waitOne(true, deadline)
		if err != nil {
			return localChildResult{}, err
		}
		if n != size {
			return localChildResult{}, fmt.Errorf("echo of %d B came back with %d B", size, n)
		}
		if i >= warm {
			halves = append(halves, time.Since(t0)/2)
		}
	}
	elapsed := time.Since(startT)
	slices.Sort(halves)
	return localChildResult{Mean: us(elapsed) / float64(iters) / 2, P50: us(percentile(halves, 0.5)), P99: us(percentile(halves, 0.99))}, nil
}

// loadAvg is /proc/loadavg's first three fields.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := bytes.Fields(b)
	if len(f) < 3 {
		return "n/a"
	}
	return string(bytes.Join(f[:3], []byte(" ")))
}

// reportLocal writes section 7 of BENCHMARKS.md.
func reportLocal(d *doc) {
	d.p("## 7. Same-host ping-pong")
	d.p("")
	if d.skipped("local") {
		return
	}
	d.p("Two processes on one node, %s ping-pongs per repetition (after a warm-up), client on CPU %s, server on "+
		"CPU %s, half round trips counted as `fi_pingpong` counts its `usec/xfer` (see section 3). Load average "+
		"(/proc/loadavg) at the start and end of the section: %s, %s.",
		d.r.Setup["local_iterations"], d.r.Setup["cpu_measure"], d.r.Setup["cpu_load"],
		orNA(d.r.Setup["local_loadavg_start"]), orNA(d.r.Setup["local_loadavg_end"]))
	d.p("")
	d.p("- **xdpfab**: each process opens its endpoint through `xdpfab agent` (its own process) and sends to the " +
		"other's address, on the same host: the endpoints talk through a same-host channel (shared memory set up " +
		"by the agent; docs/ARCHITECTURE.md), manual progress. Both endpoints are on the namespace's interface, " +
		"in one sharing domain, on two ports of its address. Each side injects its message, as fi_pingpong does " +
		"below its provider's inject size (see section 3).")
	d.p("- **fi_pingpong** `-p udp -e dgram`, server and client in the same namespace, the client to the " +
		"namespace's own address: the kernel's UDP over loopback, which is also what a kernel path for xdpfab's " +
		"same-host peers would cost at least.")
	d.p("")
	d.p("Goal: xdpfab's p50 and mean at most 0.5× fi_pingpong's mean, i.e. both ratios in the tables at least 2×.")
	d.p("")
	for _, size := range localSizes {
		x, f := fmt.Sprintf("local/xdpfab-local/%d", size), fmt.Sprintf("local/fi-udp-local/%d", size)
		d.p("**%d B**", size)
		d.p("")
		d.table([]string{"implementation", "mean µs/xfer", "p50 µs", "p99 µs", "fi_pingpong mean ÷ this mean", "fi_pingpong mean ÷ this p50"},
			[][]string{
				{"xdpfab same-host channel, two processes", d.v(x+"/mean", 2), d.v(x+"/p50", 2), d.v(x+"/p99", 2), d.ratio(f+"/mean", x+"/mean"), d.ratio(f+"/mean", x+"/p50")},
				{"fi_pingpong -p udp -e dgram, one host", d.v(f+"/mean", 2), "n/a", "n/a", "1.00×", "n/a"},
			})
	}
	d.notes("local")
}
