// Package netlab builds throw-away hosts for the demo, the benchmarks and
// (through package netlab) the kernel tests: two or more network
// namespaces joined by veth, addressed from the benchmarking ranges
// 198.18.0.0/15 and 2001:2::/48, and removed again by the function Up
// returns (and by Up itself when it fails half way).
//
// With two hosts the namespaces are joined by one veth pair; with more, each
// host has a veth pair into a bridge namespace, so all hosts share one
// Ethernet segment and one subnet. Every host names its interface "veth0".
//
//	bed, down, err := netlab.Up(netlab.Options{StaticNeighbors: true})
//	if err != nil {
//		return err
//	}
//	defer down()
//	err = bed.B.Do(func() error {
//		// runs on an OS thread inside host B's namespace:
//		// sockets opened here belong to it for their whole life
//		return nil
//	})
//
// A Bed only provides hosts: it attaches no XDP program of its own. Users
// that need one call (*Host).AttachXDP with their program; the attach mode
// (native by default, generic selectable) comes from Options.XDPMode.
//
// Namespaces are named xdpfab-<pid>-<random>; Up removes those of beds
// whose creating process is gone (a test binary killed before its
// cleanup), never those of a live process.
//
// Namespaces are entered per OS thread (runtime.LockOSThread and setns), never
// with `ip netns exec`, which remounts /sys and hides a bpffs mounted at
// /sys/fs/bpf. A thread whose namespace cannot be restored is left locked so
// that it exits with its goroutine instead of returning to the scheduler.
//
// scripts/testbed.sh builds the same topology from a shell for manual work.
package netlab
