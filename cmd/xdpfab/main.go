// Command xdpfab is the xdpfab node tool. `xdpfab demo` runs the whole
// dataplane between two network namespaces it creates and removes; the
// agent, AV, stats and pingpong commands arrive with their issues.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/xdpfab/xdpfab/internal/demo"
)

const usage = `usage: xdpfab <command> [flags]

commands:
  demo    ping-pong through XDP and AF_XDP between two network namespaces it
          creates and removes, showing the sender's fi_addr / user ID that XDP
          computed for every message, and the latency (needs root)
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch os.Args[1] {
	case "demo":
		fs := flag.NewFlagSet("demo", flag.ExitOnError)
		var o demo.Options
		fs.IntVar(&o.Messages, "n", 10000, "number of ping-pongs")
		fs.IntVar(&o.Size, "size", 64, "message size in bytes")
		fs.BoolVar(&o.IPv6, "6", false, "use IPv6 (2001:2::/48) instead of IPv4 (198.18.0.0/15)")
		fs.BoolVar(&o.Generic, "generic", false, "attach XDP in generic mode instead of native")
		fs.Parse(os.Args[2:])
		if err := demo.Run(ctx, os.Stdout, o); err != nil {
			fmt.Fprintln(os.Stderr, "xdpfab demo:", err)
			os.Exit(1)
		}
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "xdpfab: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}
