package cli

import (
	"github.com/spf13/cobra"
	"github.com/xdpfab/xdpfab/internal/demo"
)

func demoCommand(e *env) *cobra.Command {
	var o demo.Options
	c := &cobra.Command{
		Use:   "demo [-n N] [--size B] [-6] [--generic]",
		Short: "ping-pong through XDP and AF_XDP between two namespaces it creates (root)",
		Long: `Creates two network namespaces joined by veth, attaches the XDP program on
both, and ping-pongs between endpoints, showing the sender of each message as
the XDP program reported it (an fi_addr, and a user ID) and the latency per
transfer. Removes everything it made. Needs root.`,
		Args: noArgs,
	}
	c.Flags().IntVarP(&o.Messages, "n", "n", 10000, "number of ping-pongs (1 or more)")
	c.Flags().IntVar(&o.Size, "size", 64, "message size in bytes (1 or more, at most what the veth MTU carries)")
	c.Flags().BoolVarP(&o.IPv6, "ipv6", "6", false, "use IPv6 (2001:2::/48) instead of IPv4 (198.18.0.0/15)")
	c.Flags().BoolVar(&o.Generic, "generic", false, "attach XDP in generic mode instead of native")
	c.RunE = runE(func(c *cobra.Command, _ []string) error {
		if o.Messages < 1 {
			return usagef("-n %d: want 1 or more ping-pongs", o.Messages)
		}
		if o.Size < 1 {
			return usagef("--size %d: want 1 or more bytes", o.Size)
		}
		return demo.Run(c.Context(), e.out, o)
	})
	return c
}
