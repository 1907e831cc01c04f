//go:build linux

package loader

import (
	"time"

	"golang.org/x/sys/unix"
)

// waitReaders returns once every XDP run that could still hold a table
// just replaced in (or deleted from) xdpfab_avtab has finished. XDP runs
// inside an RCU read-side section (NAPI, generic XDP and BPF_PROG_TEST_RUN
// alike), and membarrier's MEMBARRIER_CMD_GLOBAL waits for an RCU grace
// period (synchronize_rcu). Kernels with nohz_full CPUs refuse it; there
// the wait falls back to a pause far longer than any XDP run.
func waitReaders() {
	const cmdGlobal = 1 // MEMBARRIER_CMD_GLOBAL
	if _, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, cmdGlobal, 0, 0); errno != 0 {
		time.Sleep(50 * time.Millisecond)
	}
}
