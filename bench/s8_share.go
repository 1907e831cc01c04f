package main

// Section 8: many applications on one interface queue (issue 12). N
// application processes (1, 2, 4, 8, 16) open endpoints through the agent
// on host A's interface, which has one queue: all are in one sharing
// domain. Each plays ping-pong with an endpoint of its own on host B, where
// one echo thread serves all N (one process, root, a private dataplane).
// The applications run on one CPU (taskset), the echo on the other, for a
// fixed time; every application counts its round trips. The aggregate
// message rate with N applications is compared with one application's: the
// shared fill and completion rings should add no serialisation that shows.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

var shareApps = []int{1, 2, 4, 8, 16}

// shareKinds are the two ways of waiting, for xdpfab and the kernel-UDP
// control: busy polling that gives the CPU up between polls, and blocking
// until the reply (xdpfab: automatic progress and fi_cq_sread).
var shareKinds = []string{"xdpfab", "udp", "xdpfab-block", "udp-block"}

const sharePort = 7400 // host A's applications from here, host B's echoes likewise

// shareResult is one application's run.
type shareResult struct {
	Count    int
	P50, P99 float64 // round trip, µs
	Err      string
}

func runShare(r *results, cfg *config) error {
	dur := 2 * time.Second
	if cfg.quick {
		dur = 500 * time.Millisecond
	}
	r.Setup["share_duration"] = dur.String()
	r.Setup["share_loadavg_start"] = loadAvg()
	bd, down, err := testbed.Up(testbed.Options{StaticNeighbors: true})
	if err != nil {
		return err
	}
	defer down()
	maxN := slices.Max(shareApps)
	var apps, echoes []netip.AddrPort
	for i := range maxN {
		apps = append(apps, netip.AddrPortFrom(bd.A.IPv4, uint16(sharePort+i)))
		echoes = append(echoes, netip.AddrPortFrom(bd.B.IPv4, uint16(sharePort+i)))
	}
	// Each echo serves only while its own kind runs: both spin on CPU 0,
	// and two spinning threads on one CPU would take turns of a scheduler
	// slice (milliseconds), each stalling the other's replies.
	xdpGate, udpGate := newGate(), newGate()
	stopEcho, err := shareEcho(cfg, bd.B, echoes, apps, xdpGate)
	if err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	defer stopEcho()

	ag, err := startAgent(cfg, bd.A)
	if err != nil {
		return err
	}
	defer ag.Close()
	c, sock := ag.c, ag.sock
	var addrs []string
	for _, e := range echoes {
		addrs = append(addrs, e.String())
	}
	if _, err := c.AVCreate(ctl.AVCreateArgs{Name: "share"}); err != nil {
		return err
	}
	if _, err := c.AVInsert(ctl.AVInsertArgs{Name: "share", Addrs: addrs}); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The control: the same N processes on the same CPU playing ping-pong
	// over kernel UDP sockets (nothing shared between them but the CPU),
	// against a kernel UDP echo on host B's other ports.
	udpEchoes := make([]netip.AddrPort, maxN)
	for i := range udpEchoes {
		udpEchoes[i] = netip.AddrPortFrom(bd.B.IPv4, uint16(sharePort+100+i))
	}
	stopUDP, err := shareUDPEcho(cfg, bd.B, udpEchoes, udpGate)
	if err != nil {
		return fmt.Errorf("udp echo: %w", err)
	}
	defer stopUDP()
	for _, kind := range shareKinds {
		xdp := strings.HasPrefix(kind, "xdpfab")
		xdpGate.set(xdp)
		udpGate.set(!xdp)
		for _, n := range shareApps {
			if !cfg.want(fmt.Sprintf("%s/%d", kind, n)) {
				continue
			}
			var aggs, p50s, p99s []float64
			for range cfg.reps {
				var res []shareResult
				var err error
				res, err = shareRun(cfg, bd.A, self, sock, apps[:n], dur, func(i int) []string {
					var env []string
					if !xdp {
						env = append(env, "XDPFAB_UDP_PEER="+udpEchoes[i].String())
					}
					if strings.HasSuffix(kind, "-block") {
						env = append(env, "XDPFAB_BLOCK=1")
					}
					return env
				})
				if err != nil {
					return fmt.Errorf("%s, %d applications: %w (agent: %s)", kind, n, err, ag.lastLog())
				}
				total, p50, p99 := 0, []float64{}, 0.0
				for _, x := range res {
					total += x.Count
					p50 = append(p50, x.P50)
					p99 = max(p99, x.P99)
				}
				aggs = append(aggs, float64(total)/dur.Seconds())
				p50s = append(p50s, median(p50))
				p99s = append(p99s, p99)
			}
			lbl := map[string]string{"apps": fmt.Sprint(n), "impl": kind}
			k := fmt.Sprintf("share/%s/%d", kind, n)
			r.add("share", k+"/rate", "round trips/s", aggs, lbl)
			r.add("share", k+"/p50", "us", p50s, lbl)
			r.add("share", k+"/p99", "us", p99s, lbl)
			fmt.Printf("  %-6s %2d applications: %9.0f round trips/s, p50 %6.1f us, worst p99 %8.1f us (load %s)\n",
				kind, n, median(aggs), median(p50s), median(p99s), loadAvg())
		}
	}
	// What the machine charges for the turns themselves: the same number of
	// processes of this program on the same CPU doing nothing but give it
	// up, as the pollers do between polls.
	xdpGate.set(false)
	for _, n := range shareApps {
		if !cfg.want(fmt.Sprintf("yield/%d", n)) {
			continue
		}
		var turns []float64
		for range cfg.reps {
			res, err := shareRun(cfg, bd.A, self, sock, apps[:n], dur, func(int) []string { return []string{"XDPFAB_YIELD=1"} })
			if err != nil {
				return fmt.Errorf("yield, %d processes: %w", n, err)
			}
			total := 0
			for _, x := range res {
				total += x.Count
			}
			turns = append(turns, dur.Seconds()*1e9/float64(total))
		}
		r.add("share", fmt.Sprintf("share/yield/%d/turn", n), "ns", turns, map[string]string{"apps": fmt.Sprint(n), "impl": "yield"})
		fmt.Printf("  yield  %2d processes: %6.0f ns per turn (load %s)\n", n, median(turns), loadAvg())
	}
	r.Setup["share_loadavg_end"] = loadAvg()
	return nil
}

// shareEcho serves every echo endpoint from one thread pinned to
// cfg.cpuLoad: each answers its own application.
func shareEcho(cfg *config, h *testbed.Host, locals, peers []netip.AddrPort, g *gate) (stop func(), err error) {
	dp, err := loader.Load(loader.Config{AVEntries: 1024, MaxAVs: 64})
	if err != nil {
		return nil, err
	}
	type echo struct {
		e      *ep.Endpoint
		a      *av.AV
		tx, rx *cq.CQ
		buf    []byte
	}
	var eps []*echo
	var att *loader.Attachment
	closeAll := func() {
		for _, x := range eps {
			x.e.Close()
			x.tx.Close()
			x.rx.Close()
			x.a.Close()
		}
		if att != nil {
			att.Close()
		}
		dp.Close()
	}
	err = h.Do(func() (err error) {
		if att, err = dp.Attach(testbed.LinkName, loader.Native); err != nil {
			return err
		}
		for i, l := range locals {
			x := &echo{buf: make([]byte, 2048)}
			x.a, _ = av.Open(dp, &av.Attr{})
			x.a.Insert(peers[i:i+1], make([]fi.Addr, 1), 0, nil)
			x.tx, _ = cq.Open(cq.Attr{Size: 256, Format: cq.FormatMsg})
			x.rx, _ = cq.Open(cq.Attr{Size: 256, Format: cq.FormatMsg})
			if x.e, err = ep.Open(dp, ep.Attr{Ifname: testbed.LinkName, Local: l, AV: x.a, TxCQ: x.tx, RxCQ: x.rx,
				BindMode: dataplane.BindCopy, Queues: 1, RingSize: 256, Frames: 8192, OpFlags: fi.InjectComplete}); err != nil {
				return err
			}
			eps = append(eps, x)
		}
		return nil
	})
	if err != nil {
		closeAll()
		return nil, err
	}
	quit := make(chan struct{})
	done := goOnThread(nil, cfg.cpuLoad, func() error {
		for _, x := range eps {
			x.e.Recv(x.buf, fi.AddrUnspec, nil)
		}
		var ent [1]cq.Entry
		for {
			select {
			case <-quit:
				return nil
			default:
			}
			if !g.open() {
				g.wait(quit)
				continue
			}
			for _, x := range eps {
				if n, _ := x.rx.Read(ent[:]); n == 1 {
					for x.e.Inject(x.buf[:ent[0].Len], 0) != nil {
						x.e.Progress()
					}
					x.e.Recv(x.buf, fi.AddrUnspec, nil)
				}
			}
		}
	})
	return func() { close(quit); <-done; closeAll() }, nil
}

// gate pauses a spinning echo loop: closed, the loop sleeps until it
// opens or the loop is told to quit.
type gate struct {
	on atomic.Bool
	mu sync.Mutex
	ch chan struct{} // closed when the gate opens
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open() bool { return g.on.Load() }

func (g *gate) set(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if on == g.on.Load() {
		return
	}
	g.on.Store(on)
	if on {
		close(g.ch)
	} else {
		g.ch = make(chan struct{})
	}
}

func (g *gate) wait(quit <-chan struct{}) {
	g.mu.Lock()
	ch := g.ch
	g.mu.Unlock()
	if g.on.Load() {
		return
	}
	select {
	case <-ch:
	case <-quit:
	}
}

// shareRun starts one application process per address (pinned to
// cfg.cpuMeasure), lets them all open their endpoints, starts them at
// once and collects their results.
// shareRun starts one application process per address in apps, each with
// the environment env(i) adds, lets them all go at once and collects their
// results.
func shareRun(cfg *config, h *testbed.Host, self, sock string, apps []netip.AddrPort, dur time.Duration, env func(i int) []string) ([]shareResult, error) {
	type proc struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Reader
	}
	var ps []*proc
	defer func() {
		for _, p := range ps {
			if p.cmd.ProcessState == nil {
				p.cmd.Process.Kill()
				p.cmd.Wait()
			}
		}
	}()
	for i, a := range apps {
		cmd := exec.CommandContext(cfg.ctx, "taskset", "-c", fmt.Sprint(cfg.cpuMeasure), self)
		cmd.Env = append(os.Environ(), "XDPFAB_BENCH_SHARE=1", "XDPFAB_SOCKET="+sock, "XDPFAB_LOCAL="+a.String(),
			"XDPFAB_PEER="+strconv.Itoa(i), "XDPFAB_DURATION="+dur.String())
		cmd.Env = append(cmd.Env, env(i)...)
		cmd.Stderr = os.Stderr
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		if err := h.Do(cmd.Start); err != nil {
			return nil, err
		}
		p := &proc{cmd: cmd, in: in, out: bufio.NewReader(out)}
		ps = append(ps, p)
		line, err := p.out.ReadString('\n')
		if strings.TrimSpace(line) != "ready" {
			return nil, fmt.Errorf("application %d: %q %v", i, line, err)
		}
	}
	for _, p := range ps {
		io.WriteString(p.in, "go\n")
	}
	var res []shareResult
	for i, p := range ps {
		var x shareResult
		if err := json.NewDecoder(p.out).Decode(&x); err != nil {
			return nil, fmt.Errorf("application %d: %v", i, err)
		}
		if x.Err != "" {
			return nil, fmt.Errorf("application %d: %s", i, x.Err)
		}
		p.in.Close()
		p.cmd.Wait()
		res = append(res, x)
	}
	return res, nil
}

// shareChild runs one application of section 8 when this program was
// started as one (XDPFAB_BENCH_SHARE), and reports whether it was.
func shareChild() bool {
	if os.Getenv("XDPFAB_BENCH_SHARE") == "" {
		return false
	}
	res, err := shareApp()
	if err != nil {
		res.Err = err.Error()
	}
	json.NewEncoder(os.Stdout).Encode(res)
	return true
}

func shareApp() (shareResult, error) {
	if os.Getenv("XDPFAB_YIELD") != "" {
		return shareYield()
	}
	if p := os.Getenv("XDPFAB_UDP_PEER"); p != "" {
		return shareUDPApp(netip.MustParseAddrPort(p))
	}
	local := netip.MustParseAddrPort(os.Getenv("XDPFAB_LOCAL"))
	peerIdx, _ := strconv.Atoi(os.Getenv("XDPFAB_PEER"))
	dur, _ := time.ParseDuration(os.Getenv("XDPFAB_DURATION"))
	block := os.Getenv("XDPFAB_BLOCK") != ""
	// A polling application makes every call from this goroutine
	// (FI_THREAD_DOMAIN: no locks); a blocking one has the endpoint's
	// progress goroutine beside it.
	progress, wait, threading := ep.ProgressManual, cq.WaitNone, fi.ThreadDomain
	if block {
		progress, wait, threading = ep.ProgressAuto, cq.WaitMutexCond, fi.ThreadSafe
	}
	st, closeAll, err := agentStack(os.Getenv("XDPFAB_SOCKET"),
		ctl.EPOpenArgs{Iface: testbed.LinkName, Local: local.String(), AV: "share", Caps: fi.Msg, RingSize: 64},
		ep.Attr{Ifname: testbed.LinkName, Local: local, Caps: fi.Msg, OpFlags: fi.InjectComplete, Progress: progress, Threading: threading}, 256, wait)
	if err != nil {
		return shareResult{}, err
	}
	defer closeAll()
	e, rx := st.EP, st.RxCQ
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return shareResult{}, err
	}
	peer := fi.Addr(peerIdx)
	msg, buf := make([]byte, 64), make([]byte, 2048)
	var ent [1]cq.Entry
	send := func() error {
		e.Recv(buf, fi.AddrUnspec, nil)
		for {
			err := e.Inject(msg, peer)
			if !errors.Is(err, fi.EAGAIN) {
				return err
			}
			e.Progress()
		}
	}
	poll := func() (bool, error) {
		var n int
		var err error
		if block {
			n, err = rx.SRead(ent[:], 5*time.Second)
		} else {
			n, err = rx.Read(ent[:])
		}
		if err != nil && !errors.Is(err, fi.EAGAIN) {
			return false, err
		}
		return n == 1, nil
	}
	return pingLoop(dur, send, poll)
}

// pingLoop plays round trips for dur: send, then poll until the reply is
// in (true), giving the CPU up every other empty poll (others share it),
// and reports the count and the round trips' p50 and p99.
func pingLoop(dur time.Duration, send func() error, poll func() (bool, error)) (shareResult, error) {
	rtts := samples[time.Duration](1 << 16)
	end := time.Now().Add(dur)
	// Two clock reads per round trip: its start is also the loop's check.
	for t0 := time.Now(); t0.Before(end); t0 = time.Now() {
		if err := send(); err != nil {
			return shareResult{}, err
		}
		for spins := 0; ; spins++ {
			ok, err := poll()
			if err != nil {
				return shareResult{}, err
			}
			if ok {
				break
			}
			if spins&1 == 1 {
				// Raw: a sched_yield through the runtime's system-call
				// path lets its monitor take the processor away and wake
				// another thread whenever the yield lasts (it does, with
				// N processes on the CPU): docs/platform.md#raw-system-calls-for-kicks.
				unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			}
			if spins&4095 == 4095 && time.Now().After(end.Add(5*time.Second)) {
				return shareResult{}, errors.New("no reply")
			}
		}
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	if len(rtts) == 0 {
		return shareResult{}, errors.New("no round trip in the run")
	}
	return shareResult{Count: len(rtts), P50: us(percentile(rtts, 0.5)), P99: us(percentile(rtts, 0.99))}, nil
}

// shareUDPEcho answers every datagram on the given addresses from one
// thread pinned to cfg.cpuLoad (non-blocking sockets, polled in turn).
func shareUDPEcho(cfg *config, h *testbed.Host, locals []netip.AddrPort, g *gate) (stop func(), err error) {
	var fds []int
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	err = h.Do(func() error {
		for _, l := range locals {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			fds = append(fds, fd)
			if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(l.Port()), Addr: l.Addr().As4()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		closeAll()
		return nil, err
	}
	quit := make(chan struct{})
	done := goOnThread(nil, cfg.cpuLoad, func() error {
		buf := make([]byte, 2048)
		for {
			select {
			case <-quit:
				return nil
			default:
			}
			if !g.open() {
				g.wait(quit)
				continue
			}
			for _, fd := range fds {
				if n, from, err := unix.Recvfrom(fd, buf, 0); err == nil {
					unix.Sendto(fd, buf[:n], 0, from)
				}
			}
		}
	})
	return func() { close(quit); <-done; closeAll() }, nil
}

// shareUDPApp is shareApp over a kernel UDP socket: the same loop, the
// same polite wait.
func shareUDPApp(peer netip.AddrPort) (shareResult, error) {
	block := os.Getenv("XDPFAB_BLOCK") != ""
	flags := unix.SOCK_DGRAM | unix.SOCK_CLOEXEC
	if !block {
		flags |= unix.SOCK_NONBLOCK
	}
	fd, err := unix.Socket(unix.AF_INET, flags, 0)
	if err != nil {
		return shareResult{}, err
	}
	defer unix.Close(fd)
	if block {
		tv := unix.NsecToTimeval((5 * time.Second).Nanoseconds())
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	}
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: int(peer.Port()), Addr: peer.Addr().As4()}); err != nil {
		return shareResult{}, err
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return shareResult{}, err
	}
	dur, _ := time.ParseDuration(os.Getenv("XDPFAB_DURATION"))
	msg, buf := make([]byte, 64), make([]byte, 2048)
	send := func() error {
		_, err := unix.Write(fd, msg)
		return err
	}
	poll := func() (bool, error) {
		_, err := unix.Read(fd, buf)
		return err == nil, nil
	}
	return pingLoop(dur, send, poll)
}

// shareYield gives the CPU up in a loop for the run's duration and counts
// the turns: the machine's cost of switching between the applications,
// without the applications.
func shareYield() (shareResult, error) {
	dur, _ := time.ParseDuration(os.Getenv("XDPFAB_DURATION"))
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return shareResult{}, err
	}
	n := 0
	for end := time.Now().Add(dur); ; {
		for range 64 {
			unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		}
		n += 64
		if time.Now().After(end) {
			return shareResult{Count: n}, nil
		}
	}
}

// reportShare writes section 8 of BENCHMARKS.md.
func reportShare(d *doc) {
	d.p("## 8. Many applications on one interface queue")
	d.p("")
	if d.skipped("share") {
		return
	}
	d.p("N application processes open endpoints through `xdpfab agent` on host A's interface, which has one "+
		"queue: all N are in one sharing domain (one UMEM, the queue's fill and completion rings taken in turns "+
		"through the domain's shared block, docs/ARCHITECTURE.md). Each plays 64-byte ping-pong with an endpoint "+
		"of its own on host B, where one thread (CPU %s) serves all of them; the N applications share CPU %s "+
		"(taskset) and give it up (a raw sched_yield system call: docs/platform.md#raw-system-calls-for-kicks) "+
		"while they wait; host B's echo for the other kind of run is parked meanwhile. Each repetition runs %s. Load average at the "+
		"start and end of the section: %s, %s.",
		d.r.Setup["cpu_load"], d.r.Setup["cpu_measure"], orNA(d.r.Setup["share_duration"]),
		orNA(d.r.Setup["share_loadavg_start"]), orNA(d.r.Setup["share_loadavg_end"]))
	d.p("")
	d.p("Target: the aggregate rate with N applications at least 0.9× one application's. The control row is the " +
		"same N processes on the same CPU doing the same loop over kernel UDP sockets to a kernel UDP echo: " +
		"nothing is shared between them but the CPU, so its ratio is what time-sharing one CPU costs; the " +
		"sharing domain adds serialisation only where its ratio falls below the control's. Each runs twice: " +
		"polling (spinning on the CQ or a non-blocking socket, giving the CPU up with sched_yield every other " +
		"poll) and blocking (xdpfab: automatic progress, the application asleep in fi_cq_sread; UDP: a blocking " +
		"read): N pollers time-share one CPU, N blocked processes leave it to whoever has work.")
	d.p("")
	var rows [][]string
	for _, kind := range shareKinds {
		title := map[string]string{"xdpfab": "xdpfab, one sharing domain, polling", "udp": "control: kernel UDP, polling",
			"xdpfab-block": "xdpfab, one sharing domain, blocking (automatic progress, sread)", "udp-block": "control: kernel UDP, blocking read"}[kind]
		for _, n := range shareApps {
			k := fmt.Sprintf("share/%s/%d", kind, n)
			rows = append(rows, []string{title, fmt.Sprint(n), d.v(k+"/rate", 0), d.ratio(k+"/rate", "share/"+kind+"/1/rate"), d.v(k+"/p50", 1), d.v(k+"/p99", 1)})
		}
	}
	d.table([]string{"path", "applications", "aggregate round trips/s", "÷ one application", "per-application p50 µs (median)", "worst application's p99 µs"}, rows)
	d.p("")
	d.p("What the turns themselves cost: the same number of processes of this program on CPU %s doing nothing "+
		"but give the CPU up (raw sched_yield) in a loop. With one process the call returns to its caller; with "+
		"more, every call switches to another process's address space, as every polling application's wait "+
		"does. Beside it, 1 / the polling xdpfab applications' aggregate rate, which is the CPU time of a "+
		"round trip when several applications keep the CPU busy (for one application it is its latency: the "+
		"CPU waits for the reply), and that time less one turn: xdpfab's own work, with what the switch "+
		"made it miss in caches and TLB.", d.r.Setup["cpu_measure"])
	d.p("")
	rows = nil
	for _, n := range shareApps {
		turn := d.med(fmt.Sprintf("share/yield/%d/turn", n))
		rate := d.med(fmt.Sprintf("share/xdpfab/%d/rate", n))
		rt, work := "n/a", "n/a"
		if !math.IsNaN(rate) && rate > 0 {
			rt = ff(1e6/rate, 2)
			if n == 1 {
				rt += " (latency)"
			} else if !math.IsNaN(turn) {
				work = ff(1e6/rate-turn/1e3, 2)
			}
		}
		rows = append(rows, []string{fmt.Sprint(n), d.v(fmt.Sprintf("share/yield/%d/turn", n), 0), rt, work})
	}
	d.table([]string{"processes", "one turn (sched_yield only), ns", "xdpfab polling: CPU µs per round trip", "less one turn, µs"}, rows)
	d.notes("share")
}
