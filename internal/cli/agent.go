package cli

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/xdpfab/xdpfab/agent"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/loader"
)

func init() {
	register(command{
		name: "agent", args: "--iface IF [flags]",
		short: "run the node agent: attach XDP, serve the control socket and metrics",
		long: `Runs the node agent. It loads the XDP program and maps (or re-adopts the ones
pinned under --pin-root by an earlier agent, keeping every AV entry), attaches
the program to each --iface (adopting a pinned link), serves the control socket
for the xdpfab CLI and unprivileged applications, and Prometheus metrics.

On SIGTERM or SIGINT it exits cleanly and leaves the pinned link attached, so
traffic keeps flowing while no agent runs; --detach-on-exit removes it instead.
Needs CAP_BPF, CAP_PERFMON (the verifier refuses the program's pointer
arithmetic without it), CAP_NET_ADMIN, CAP_NET_RAW and CAP_IPC_LOCK, or root.`,
		run: runAgent,
	})
}

func runAgent(ctx context.Context, e *env, args []string) error {
	fs := flags(e, "agent", "--iface IF [flags]", commands[indexOf("agent")].long)
	var ifaces stringList
	fs.Var(&ifaces, "iface", "interface to attach to (repeat for several)")
	mode := fs.String("mode", "native", "XDP attach mode: native or generic")
	pinRoot := fs.String("pin-root", envDefault("XDPFAB_PIN_ROOT", "/sys/fs/bpf/xdpfab"), "bpffs directory holding the pinned maps and links")
	socket := fs.String("socket", envDefault("XDPFAB_SOCKET", ctl.DefaultSocket), "control socket path")
	group := fs.String("socket-group", "", "group (name or number) allowed to use the control socket (mode 0660); default: root only")
	metrics := fs.String("metrics", "127.0.0.1:9464", "address for Prometheus /metrics; empty disables")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	detach := fs.Bool("detach-on-exit", false, "remove the XDP program when the agent exits")
	avEntries := fs.Uint("av-entries", 0, "capacity of the AV maps (0: default 262144; must match pinned maps)")
	adminGroup := fs.String("admin-group", "", "group (name or number) whose members may detach and change every AV, besides root")
	gcEvery := fs.Duration("gc-interval", 5*time.Second, "how often to reclaim what dead processes left in the maps (endpoints, AVs, reserved capacity)")
	ports := fs.String("ports", agent.DefaultLimits.Ports.String(), "UDP ports applications may claim for endpoints (LOW-HIGH)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if len(ifaces) == 0 {
		return usagef("--iface is required")
	}
	if *gcEvery <= 0 {
		return usagef("--gc-interval %v: want a positive duration", *gcEvery)
	}
	portRange, err := agent.ParsePortRange(*ports)
	if err != nil {
		return usagef("--ports: %v", err)
	}
	m, err := loader.ParseMode(*mode)
	if err != nil {
		return usagef("%v", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("--log-level %s: %v", *logLevel, err)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch *logFormat {
	case "text":
		h = slog.NewTextHandler(os.Stderr, opts)
	case "json":
		h = slog.NewJSONHandler(os.Stderr, opts)
	default:
		return usagef("--log-format %s: want text or json", *logFormat)
	}
	log := slog.New(h)
	slog.SetDefault(log)
	a, err := agent.New(agent.Config{
		Ifaces: ifaces, Mode: m, PinRoot: *pinRoot, Socket: *socket, SocketGroup: *group,
		MetricsAddr: *metrics, DetachOnExit: *detach, Logger: log, AdminGroup: *adminGroup,
		Limits: agent.Limits{Ports: portRange}, GCInterval: *gcEvery,
		Sizes: loader.Config{AVEntries: uint32(*avEntries)},
	})
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func indexOf(name string) int {
	for i, c := range commands {
		if c.name == name {
			return i
		}
	}
	panic("no command " + name)
}
