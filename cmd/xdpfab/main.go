// Command xdpfab is the xdpfab node agent and tool. For now it only carries
// the README's demo entry point; the agent, the AV commands, stats and
// pingpong arrive with their issues.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: xdpfab <command>

commands:
  demo    run the dataplane between two network namespaces (not yet: needs endpoints)
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "demo":
		fmt.Println("xdpfab demo: not yet. The address vector, XDP translation, AF_XDP sockets and")
		fmt.Println("completion queues are in and tested (make test); the end-to-end demo needs the")
		fmt.Println("endpoint layer (issue 4).")
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "xdpfab: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}
