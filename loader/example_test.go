package loader_test

import (
	"fmt"
	"os"

	"github.com/xdpfab/xdpfab/loader"
)

// Load the dataplane pinned under a bpffs directory (mounted if needed),
// attach it to an interface, and leave it attached when the process exits.
// A later Load and Attach with the same PinRoot adopts the same maps and
// link instead of replacing them.
func ExampleLoad() {
	dp, err := loader.Load(loader.Config{PinRoot: "/sys/fs/bpf/xdpfab", AVEntries: 1 << 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // e.g. "needs root (CAP_BPF, CAP_NET_ADMIN): Operation not permitted (EPERM)"
		return
	}
	defer dp.Close()
	att, err := dp.Attach("eth1", loader.Native)
	if err != nil {
		fmt.Fprintln(os.Stderr, err) // e.g. another XDP program attached: EBUSY
		return
	}
	defer att.Close() // pinned: stays attached; att.Detach() removes it
	c, _ := dp.Counters()
	fmt.Println("translated so far:", c[1])
}
