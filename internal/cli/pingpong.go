package cli

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/internal/pingpong"
	"github.com/xdpfab/xdpfab/loader"
)

func pingpongCommand(e *env) *cobra.Command {
	g := &cobra.Command{
		Use:   "pingpong",
		Short: "fi_pingpong-style server and client over xdpfab endpoints",
		Long: `Ping-pong between two xdpfab endpoints, reporting like libfabric's fi_pingpong:
bytes, iters, total, time, MB/sec, usec/xfer (elapsed / (iters x 2)) and
Mxfers/sec, one line per message size, then three columns fi_pingpong lacks:
the p50, p99 and p99.9 of the per-iteration half round trips (one transfer,
as usec/xfer counts it), in microseconds. Start the server first; it echoes every
message to its sender, which it learns from the first message (FI_SOURCE_ERR).
By default (--via auto) the endpoint comes from the agent when one answers on
--socket: no privilege is needed beyond the socket's group, the run's AV is a
named AV of the caller's (pingpong-PORT, destroyed at the end), and the
endpoint is in the caller's sharing domain, so several servers and clients
share an interface. Without an agent (or with --via direct) it runs in the
process, as root, on the agent's dataplane under --pin-root when one is
pinned, else on one it attaches for the run.`,
	}
	g.AddCommand(pingpongRole(e, "server"), pingpongRole(e, "client"))
	return g
}

func pingpongRole(e *env, role string) *cobra.Command {
	var (
		iface, local, peer, mode, pinRoot string
		via, socket                       string
		sizes                             []string
		iters, warmup                     int
		busy                              time.Duration
	)
	use := "server --iface IF --local ADDR:PORT"
	long := "Echoes every message back to its sender until interrupted."
	if role == "client" {
		use = "client --iface IF --local ADDR:PORT --peer ADDR:PORT [-S SIZES] [-I ITERS]"
		long = `Runs --warmup untimed and -I timed ping-pongs per message size against the
server and prints one fi_pingpong line per size, with the p50, p99 and
p99.9 of the half round trips after fi_pingpong's columns. Without -S it runs
fi_pingpong's default sizes (64, 256, 1k, 4k, 64k, 1m) that fit the endpoint's
largest message (one frame less its headers: 1440 bytes on an IPv4 endpoint
at MTU 1500, so 64, 256 and 1k there), as fi_pingpong does, and says which it
left out; an -S size larger than that is reported as skipped.`
	}
	c := &cobra.Command{Use: use, Short: "fi_pingpong-style " + role + " over xdpfab endpoints", Long: long, Args: noArgs}
	f := c.Flags()
	f.StringVar(&iface, "iface", "", "interface (required)")
	f.StringVar(&local, "local", "", "local address and UDP port, ADDR:PORT (required)")
	if role == "client" {
		f.StringVar(&peer, "peer", "", "the server's address and port, ADDR:PORT (required)")
		f.StringSliceVarP(&sizes, "sizes", "S", nil, "message sizes in bytes, comma-separated (default: fi_pingpong's that fit)")
		f.IntVarP(&iters, "iters", "I", 10000, fmt.Sprintf("timed iterations per size (1 to %d)", pingpong.MaxIters))
		f.IntVar(&warmup, "warmup", 100, fmt.Sprintf("untimed iterations before each size (0 to %d)", pingpong.MaxIters))
		c.MarkFlagRequired("peer")
	}
	f.DurationVar(&busy, "busy-poll", 0, "socket busy-poll time (e.g. 50us); 0 disables")
	f.StringVar(&mode, "mode", "native", "XDP mode if pingpong attaches: native or generic")
	f.StringVar(&pinRoot, "pin-root", envDefault("XDPFAB_PIN_ROOT", "/sys/fs/bpf/xdpfab"), "a running agent's pin root ($XDPFAB_PIN_ROOT)")
	f.StringVar(&via, "via", "auto", "how to get the endpoint: agent (through the control socket), direct (in the process, root), auto (agent if one answers)")
	f.StringVar(&socket, "socket", envDefault("XDPFAB_SOCKET", ctl.DefaultSocket), "the agent's control socket ($XDPFAB_SOCKET)")
	c.MarkFlagRequired("iface")
	c.MarkFlagRequired("local")
	c.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions([]string{"native", "generic"}, cobra.ShellCompDirectiveNoFileComp))
	c.RegisterFlagCompletionFunc("via", cobra.FixedCompletions([]string{"auto", "agent", "direct"}, cobra.ShellCompDirectiveNoFileComp))
	c.RunE = runE(func(c *cobra.Command, _ []string) error {
		o := pingpong.Options{Iface: iface, Iters: 1, BusyPoll: busy, PinRoot: pinRoot, Socket: socket}
		switch via {
		case "auto":
		case "agent":
			o.Via = pingpong.ViaAgent
		case "direct":
			o.Via = pingpong.ViaDirect
		default:
			return usagef("--via %s: want auto, agent or direct", via)
		}
		if iface == "" {
			return usagef("--iface: want an interface name")
		}
		if busy < 0 {
			return usagef("--busy-poll %v: want 0 or a positive duration", busy)
		}
		var err error
		if o.Mode, err = loader.ParseMode(mode); err != nil {
			return usagef("--mode: %v", err)
		}
		if o.Local, err = netip.ParseAddrPort(local); err != nil {
			return invalidf("--local %q: %v (want ADDR:PORT)", local, err)
		}
		if role == "server" {
			return pingpong.Server(c.Context(), e.out, o)
		}
		if o.Peer, err = netip.ParseAddrPort(peer); err != nil {
			return invalidf("--peer %q: %v (want ADDR:PORT)", peer, err)
		}
		for _, s := range sizes {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				return usagef("-S %s: sizes are positive numbers of bytes", s)
			}
			o.Sizes = append(o.Sizes, n)
		}
		if iters < 1 || iters > pingpong.MaxIters {
			return usagef("-I %d: want 1 or more iterations, at most %d (each one's time is kept for the percentiles)", iters, pingpong.MaxIters)
		}
		if warmup < 0 || warmup > pingpong.MaxIters {
			return usagef("--warmup %d: want 0 or more, at most %d", warmup, pingpong.MaxIters)
		}
		o.Iters, o.Warmup = iters, warmup
		return pingpong.Client(c.Context(), e.out, o)
	})
	return c
}
