package cli

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/xdpfab/xdpfab/agent"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/loader"
)

func agentCommand(e *env) *cobra.Command {
	var (
		ifaces                                 []string
		mode, pinRoot, socket, group, metrics  string
		logFormat, logLevel, adminGroup, ports string
		detach                                 bool
		avEntries, maxAVs                      uint32
		userAVs, epsTotal, chansTotal          int
		userEntries, xskPerUID, xskTotal       int
		neighTotal, neighPerUID                int
		umemTotal                              int64
		gcEvery                                time.Duration
		shareGroups                            []string
		domSlots, domRx, domTx                 int
		umemPerUID                             int64
	)
	c := &cobra.Command{
		Use:   "agent --iface IF [flags]",
		Short: "run the node agent: attach XDP, serve the control socket and metrics",
		Long: `Runs the node agent. It loads the XDP program and maps (or re-adopts the ones
pinned under --pin-root by an earlier agent, keeping every AV entry), attaches
the program to each --iface (adopting a pinned link), serves the control socket
for the xdpfab CLI and unprivileged applications, and Prometheus metrics.

Under systemd (Type=notify) it reports READY=1 once the program is attached
and the socket listens, and pings the watchdog when the unit sets
WatchdogSec=. Every change made through it is logged (audit lines, msg=audit).

On SIGTERM or SIGINT it exits cleanly and leaves the pinned link attached, so
traffic keeps flowing while no agent runs; --detach-on-exit removes it instead.
Needs CAP_BPF, CAP_PERFMON (the verifier refuses the program's pointer
arithmetic without it), CAP_NET_ADMIN, CAP_NET_RAW and CAP_IPC_LOCK, or root.`,
		Args: noArgs,
	}
	f := c.Flags()
	f.StringArrayVar(&ifaces, "iface", nil, "interface to attach to (repeat for several; required)")
	f.StringVar(&mode, "mode", "native", "XDP attach mode: native or generic")
	f.StringVar(&pinRoot, "pin-root", envDefault("XDPFAB_PIN_ROOT", "/sys/fs/bpf/xdpfab"), "bpffs directory holding the pinned maps and links ($XDPFAB_PIN_ROOT)")
	f.StringVar(&socket, "socket", envDefault("XDPFAB_SOCKET", ctl.DefaultSocket), "control socket path ($XDPFAB_SOCKET)")
	f.StringVar(&group, "socket-group", "", "group (name or number) allowed to use the control socket (mode 0660); default: root only")
	f.StringVar(&metrics, "metrics", "127.0.0.1:9464", "address for Prometheus /metrics; empty disables")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.BoolVar(&detach, "detach-on-exit", false, "remove the XDP program when the agent exits")
	f.Uint32Var(&avEntries, "av-entries", 0, "AV entries of the node, all AVs together; nothing is preallocated (0: the default, 262144; must match pinned maps)")
	f.StringVar(&adminGroup, "admin-group", "", "group (name or number) whose members may detach and change every AV, besides root")
	f.DurationVar(&gcEvery, "gc-interval", 5*time.Second, "how often to reclaim what dead processes left in the maps (endpoints, AVs, reserved capacity)")
	f.StringVar(&ports, "ports", agent.DefaultLimits.Ports.String(), "UDP ports applications may claim for endpoints (LOW-HIGH)")
	f.Uint32Var(&maxAVs, "max-avs", 0, "AV slots of the node, named and anonymous AVs together (0: the default, 256; must match pinned maps)")
	f.IntVar(&userAVs, "user-avs", 0, "named AVs uids other than root may own together; the other slots are kept for root and --admin-group (0: three quarters of --max-avs)")
	f.IntVar(&userEntries, "user-av-entries", 0, "entries the named AVs of all uids but root may hold together; the others are kept for root (0: three quarters of --av-entries, 196608 by default)")
	f.Int64Var(&umemPerUID, "umem-per-uid", agent.DefaultLimits.UMEMBytesPerUID, "bytes of frame memory (UMEM, pinned) one uid's endpoints and sharing domains may hold")
	f.Int64Var(&umemTotal, "umem-total", 0, "bytes of frame memory (UMEM, pinned) the endpoints and sharing domains of all uids but root may hold together (0: half the node's memory)")
	f.IntVar(&epsTotal, "endpoints-total", 0, "endpoints all uids but root may hold together (0: three quarters of the endpoint table, 768)")
	f.IntVar(&xskPerUID, "xsk-slots-per-uid", 0, "XSKMAP slots (one per receive context and queue) one uid's endpoints may hold (0: a quarter of the XSKMAP, 256)")
	f.IntVar(&xskTotal, "xsk-slots-total", 0, "XSKMAP slots the endpoints of all uids but root may hold together (0: three quarters of the XSKMAP, 768)")
	f.IntVar(&chansTotal, "channels-total", 0, fmt.Sprintf("same-host channels the endpoints of all uids but root may send on together (0: %d)", agent.DefaultChannels))
	f.IntVar(&neighTotal, "neighbors-total", 0, "neighbour entries no host answered for that neigh.use may have made for all uids together (0: half the kernel's gc_thresh3)")
	f.IntVar(&neighPerUID, "neighbors-per-uid", 0, "neighbour entries no host answered for that neigh.use may have made for one uid, which creates at most a quarter of them a second (0: an eighth of gc_thresh3)")
	f.StringArrayVar(&shareGroups, "share-group", nil, "group (name or number) whose members may share frame memory across uids as sharing domain group:NAME (repeat for several); without, a sharing domain is one uid's")
	f.IntVar(&domSlots, "domain-endpoints", agent.DefaultLimits.DomainSlots, "endpoints a sharing domain holds at most")
	f.IntVar(&domRx, "domain-rx-frames", agent.DefaultLimits.DomainRxFrames, "4 KiB frames of a sharing domain's receive pool, shared by its endpoints")
	f.IntVar(&domTx, "domain-tx-frames", agent.DefaultLimits.DomainTxFrames, "4 KiB frames each endpoint of a sharing domain transmits with")
	c.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions([]string{"native", "generic"}, cobra.ShellCompDirectiveNoFileComp))
	c.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
	c.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions([]string{"debug", "info", "warn", "error"}, cobra.ShellCompDirectiveNoFileComp))
	c.MarkFlagRequired("iface")
	c.RunE = runE(func(c *cobra.Command, _ []string) error {
		for _, i := range ifaces {
			if i == "" {
				return usagef("--iface: want an interface name")
			}
		}
		if domSlots < 1 || domSlots > 254 || domRx < 64 || domTx < 16 {
			return usagef("--domain-endpoints %d (1-254), --domain-rx-frames %d (>= 64), --domain-tx-frames %d (>= 16)", domSlots, domRx, domTx)
		}
		if umemPerUID < 1<<20 {
			return usagef("--umem-per-uid %d: want at least 1 MiB", umemPerUID)
		}
		if umemTotal != 0 && umemTotal < 1<<20 {
			return usagef("--umem-total %d: want at least 1 MiB, or 0 for the default", umemTotal)
		}
		for _, v := range []struct {
			flag string
			n    int
		}{{"--user-avs", userAVs}, {"--endpoints-total", epsTotal}, {"--channels-total", chansTotal},
			{"--neighbors-total", neighTotal}, {"--neighbors-per-uid", neighPerUID}, {"--user-av-entries", userEntries},
			{"--xsk-slots-per-uid", xskPerUID}, {"--xsk-slots-total", xskTotal}} {
			if v.n < 0 {
				return usagef("%s %d: want 0 (the default) or more", v.flag, v.n)
			}
		}
		if gcEvery <= 0 {
			return usagef("--gc-interval %v: want a positive duration", gcEvery)
		}
		portRange, err := agent.ParsePortRange(ports)
		if err != nil {
			return usagef("--ports: %v", err)
		}
		m, err := loader.ParseMode(mode)
		if err != nil {
			return usagef("--mode: %v", err)
		}
		var level slog.Level
		if err := level.UnmarshalText([]byte(logLevel)); err != nil {
			return usagef("--log-level %s: %v", logLevel, err)
		}
		opts := &slog.HandlerOptions{Level: level, ReplaceAttr: byName}
		var h slog.Handler
		switch logFormat {
		case "text":
			h = slog.NewTextHandler(os.Stderr, opts)
		case "json":
			h = slog.NewJSONHandler(os.Stderr, opts)
		default:
			return usagef("--log-format %s: want text or json", logFormat)
		}
		log := slog.New(h)
		slog.SetDefault(log)
		a, err := agent.New(agent.Config{
			Ifaces: ifaces, Mode: m, PinRoot: pinRoot, Socket: socket, SocketGroup: group,
			MetricsAddr: metrics, DetachOnExit: detach, Logger: log, AdminGroup: adminGroup, ShareGroups: shareGroups,
			Limits: agent.Limits{Ports: portRange, DomainSlots: domSlots, DomainRxFrames: domRx, DomainTxFrames: domTx,
				UMEMBytesPerUID: umemPerUID, UMEMBytes: umemTotal, Endpoints: epsTotal, Channels: chansTotal, AVs: userAVs,
				Neighbors: neighTotal, NeighborsPerUID: neighPerUID, Entries: userEntries, XSKSlotsPerUID: xskPerUID, XSKSlots: xskTotal},
			GCInterval: gcEvery,
			Sizes:      loader.Config{AVEntries: avEntries, MaxAVs: maxAVs},
		})
		if err != nil {
			return err
		}
		return a.Run(c.Context())
	})
	return c
}

// byName logs values that have a name by their name: enums (a loader.Mode,
// an fi.Errno) and other Stringers, which the JSON handler would otherwise
// write as numbers ("mode":384) or structs.
func byName(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() != slog.KindAny {
		return a
	}
	switch v := a.Value.Any().(type) {
	case error:
		return slog.String(a.Key, v.Error())
	case fmt.Stringer:
		return slog.String(a.Key, v.String())
	}
	return a
}
