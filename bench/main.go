// Command bench is xdpfab's benchmark suite (`make bench`, `make
// bench-quick`): it builds network namespaces, measures xdpfab beside its
// peers in the same run, and writes BENCHMARKS.md, PNG plots and the raw
// results as JSON. bench/run.sh installs what it needs and runs it as root.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

type config struct {
	quick      bool
	reps       int
	out        string // directory receiving BENCHMARKS.md and bench/
	fiav       string // the compiled libfabric AV helper, "" to skip
	xskfloor   string // the compiled C AF_XDP ping-pong (the floor), "" to skip
	cpuLoad    int    // CPU of the load generator / server side
	cpuMeasure int    // CPU of the measured receiver / client side
	ctx        context.Context
	cases      map[string]bool // -cases: only these receivers/variants
	// saveBaseline: also write this run's sections of that baseline
	// (baseline.go) to its file.
	saveBaseline *baseline
}

// want reports whether case key is selected by -cases.
func (c *config) want(key string) bool { return len(c.cases) == 0 || c.cases[key] }

type section struct {
	name  string
	title string
	run   func(*results, *config) error
}

var sections = []section{
	{"xdp", "1. XDP translation cost per packet", runXDPCost},
	{"rx", "2. Receive capacity", runRxCapacity},
	{"pp", "3. Ping-pong latency", runPingPong},
	{"av", "4. AV control plane", runAV},
	{"cq", "5. Completion queue", runCQ},
	{"scale", "6. Scaling", runScaling},
	{"local", "7. Same-host ping-pong", runLocal},
	{"share", "8. Many applications on one queue", runShare},
}

func main() {
	if localChild() { // a process of section 7
		return
	}
	if shareChild() { // a process of section 8
		return
	}
	cfg := &config{}
	var only string
	flag.BoolVar(&cfg.quick, "quick", false, "smoke-test sizes and durations (bench-quick)")
	flag.IntVar(&cfg.reps, "reps", 5, "repetitions of every measurement")
	flag.StringVar(&cfg.out, "out", "out", "output directory (BENCHMARKS.md, bench/*.png, bench/results.json)")
	flag.StringVar(&cfg.fiav, "fiav", "", "path of the compiled libfabric AV helper (bench/fiav/fiav.c); empty skips that peer")
	flag.StringVar(&cfg.xskfloor, "xskfloor", "", "path of the compiled C AF_XDP ping-pong (bench/xskfloor/xskfloor.c); empty skips the floor")
	regen := flag.String("report-from", "", "only regenerate BENCHMARKS.md and the plots from this results.json")
	saveBase := flag.String("save-baseline", "", "also write this run's sections of the named baseline to its file (av-hashmap: xdp and av; latency: pp)")
	cases := flag.String("cases", "", "comma-separated case keys to run within the sections (default all)")
	prof := flag.String("cpuprofile", "", "write a CPU profile (for looking into a result)")
	flag.StringVar(&only, "sections", "", "comma-separated sections to run (default all): "+sectionNames())
	flag.Parse()
	var err error
	if err = loadBaselines(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if *saveBase != "" {
		if cfg.saveBaseline = baselineNamed(*saveBase); cfg.saveBaseline == nil {
			fmt.Fprintln(os.Stderr, "bench: no baseline named", *saveBase)
			os.Exit(2)
		}
	}
	if *regen != "" {
		if err := reportFrom(*regen, cfg); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench: needs root (network namespaces, XDP, BPF)")
		os.Exit(1)
	}
	cfg.cases = map[string]bool{}
	for _, c := range strings.Split(*cases, ",") {
		if c = strings.TrimSpace(c); c != "" {
			cfg.cases[c] = true
		}
	}
	cfg.cpuLoad, cfg.cpuMeasure = 0, 1
	if runtime.NumCPU() < 2 {
		cfg.cpuMeasure = 0
	}
	if *prof != "" {
		f, err := os.Create(*prof)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.ctx = ctx
	if err := run(cfg, only); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func sectionNames() string {
	var n []string
	for _, s := range sections {
		n = append(n, s.name)
	}
	return strings.Join(n, ",")
}

func run(cfg *config, only string) error {
	want := map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	r := newResults(cfg.quick, cfg.reps)
	describeSetup(r, cfg)
	dir := filepath.Join(cfg.out, "bench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var failed []string
	for _, s := range sections {
		if len(want) > 0 && !want[s.name] {
			continue
		}
		if cfg.ctx.Err() != nil {
			return cfg.ctx.Err()
		}
		fmt.Printf("== %s\n", s.title)
		t0 := time.Now()
		if err := s.run(r, cfg); err != nil {
			fmt.Fprintf(os.Stderr, "bench: section %s: %v\n", s.name, err)
			r.Skipped[s.name] = err.Error()
			failed = append(failed, s.name)
		}
		r.SectionTimes[s.name] = time.Since(t0).Seconds()
		fmt.Printf("   (%s: %.1f s)\n", s.name, time.Since(t0).Seconds())
	}
	r.Finished = time.Now().UTC()
	if b := cfg.saveBaseline; b != nil {
		if err := saveBaseline(r, b.file, b.sections); err != nil {
			return err
		}
	}
	if err := r.writeJSON(filepath.Join(dir, "results.json")); err != nil {
		return err
	}
	if err := writeReport(r, cfg); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if len(failed) > 0 {
		return fmt.Errorf("sections failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

func describeSetup(r *results, cfg *config) {
	r.Setup["kernel"] = kernelRelease()
	r.Setup["cpus"] = fmt.Sprint(runtime.NumCPU())
	r.Setup["gomaxprocs"] = fmt.Sprint(runtime.GOMAXPROCS(0))
	r.Setup["cpu_model"] = cpuModel()
	r.Setup["go"] = runtime.Version()
	r.Setup["cpu_load"] = fmt.Sprint(cfg.cpuLoad)
	r.Setup["cpu_measure"] = fmt.Sprint(cfg.cpuMeasure)
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if i := strings.Index(l, ":"); i >= 0 {
				return strings.TrimSpace(l[i+1:])
			}
		}
	}
	return "unknown"
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// reportFrom regenerates the report from a results.json of an earlier run.
func reportFrom(path string, cfg *config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	r := newResults(false, 0)
	if err := json.Unmarshal(b, r); err != nil {
		return err
	}
	for _, m := range r.Measurements {
		r.byKey[m.Key] = m
	}
	if err := os.MkdirAll(filepath.Join(cfg.out, "bench"), 0o755); err != nil {
		return err
	}
	return writeReport(r, cfg)
}
