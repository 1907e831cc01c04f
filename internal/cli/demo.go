package cli

import (
	"context"

	"github.com/xdpfab/xdpfab/internal/demo"
)

func init() {
	register(command{name: "demo", args: "[-n N] [-size B] [-6] [-generic]",
		short: "ping-pong through XDP and AF_XDP between two namespaces it creates (root)",
		long: `Creates two network namespaces joined by veth, attaches the XDP program on
both, and ping-pongs between endpoints, showing the sender of each message as
the XDP program reported it (an fi_addr, and a user ID) and the latency per
transfer. Removes everything it made. Needs root.`,
		run: func(ctx context.Context, e *env, args []string) error {
			fs := flags(e, "demo", "[-n N] [-size B] [-6] [-generic]", commands[indexOf("demo")].long)
			var o demo.Options
			fs.IntVar(&o.Messages, "n", 10000, "number of ping-pongs")
			fs.IntVar(&o.Size, "size", 64, "message size in bytes")
			fs.BoolVar(&o.IPv6, "6", false, "use IPv6 (2001:2::/48) instead of IPv4 (198.18.0.0/15)")
			fs.BoolVar(&o.Generic, "generic", false, "attach XDP in generic mode instead of native")
			if err := parse(fs, args); err != nil {
				return err
			}
			return demo.Run(ctx, e.out, o)
		}})
}
