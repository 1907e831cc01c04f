// Command xdpfab is the xdpfab node tool: the agent, the AV commands,
// status, stats, the demo and pingpong. Run `xdpfab help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/xdpfab/xdpfab/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
