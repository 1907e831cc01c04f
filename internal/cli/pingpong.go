package cli

import (
	"context"
	"net/netip"
	"strconv"

	"github.com/xdpfab/xdpfab/internal/pingpong"
	"github.com/xdpfab/xdpfab/loader"
)

func init() {
	long := `Ping-pong between two xdpfab endpoints, reporting like libfabric's fi_pingpong:
bytes, iters, total, time, MB/sec, usec/xfer (elapsed / (iters x 2)) and
Mxfers/sec, one line per message size. Start the server first; it echoes every
message to its sender, which it learns from the first message (FI_SOURCE_ERR).
Uses the agent's dataplane under --pin-root when one runs, else attaches the XDP
program for the run. Needs root.`
	for _, role := range []string{"server", "client"} {
		args := "--iface IF --local ADDR:PORT"
		if role == "client" {
			args += " --peer ADDR:PORT [-S SIZES] [-I ITERS]"
		}
		register(command{name: "pingpong " + role, args: args, short: "fi_pingpong-style " + role + " over xdpfab endpoints", long: long,
			run: func(ctx context.Context, e *env, argv []string) error {
				fs := flags(e, "pingpong "+role, args, long)
				iface := fs.String("iface", "", "interface")
				local := fs.String("local", "", "local address and UDP port")
				// The client's run parameters; the server echoes whatever comes.
				peer, sizes, iters, warmup := new(string), new(string), new(int), new(int)
				*sizes, *iters, *warmup = "64", 1, 0
				if role == "client" {
					peer = fs.String("peer", "", "the server's address and port")
					sizes = fs.String("S", "64,1024,4096", "message sizes, comma-separated")
					iters = fs.Int("I", 10000, "iterations per size")
					warmup = fs.Int("warmup", 100, "untimed iterations before each size")
				}
				busy := fs.Duration("busy-poll", 0, "socket busy-poll time (e.g. 50us); 0 disables")
				mode := fs.String("mode", "native", "XDP mode if pingpong attaches: native or generic")
				pinRoot := fs.String("pin-root", envDefault("XDPFAB_PIN_ROOT", "/sys/fs/bpf/xdpfab"), "a running agent's pin root")
				if err := parse(fs, argv); err != nil {
					return err
				}
				o := pingpong.Options{Iface: *iface, Iters: *iters, Warmup: *warmup, BusyPoll: *busy, PinRoot: *pinRoot}
				var err error
				if o.Mode, err = loader.ParseMode(*mode); err != nil {
					return usagef("%v", err)
				}
				if o.Local, err = netip.ParseAddrPort(*local); err != nil || *iface == "" {
					return usagef("--iface and --local ADDR:PORT are required")
				}
				for _, s := range splitComma(*sizes) {
					n, err := strconv.Atoi(s)
					if err != nil || n <= 0 {
						return usagef("-S %s: sizes are positive numbers", *sizes)
					}
					o.Sizes = append(o.Sizes, n)
				}
				if *iters <= 0 || *warmup < 0 {
					return usagef("-I must be positive, --warmup not negative")
				}
				if role == "server" {
					return pingpong.Server(ctx, e.out, o)
				}
				if o.Peer, err = netip.ParseAddrPort(*peer); err != nil {
					return usagef("--peer ADDR:PORT is required")
				}
				return pingpong.Client(ctx, e.out, o)
			}})
	}
}
