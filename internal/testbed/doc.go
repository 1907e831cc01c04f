// Package testbed builds throw-away test hosts for xdpfab's kernel tests:
// two or more network namespaces joined by veth, addressed from the
// benchmarking ranges 198.18.0.0/15 and 2001:2::/48, and removed again when
// the test ends (also when it fails).
//
// With two hosts the namespaces are joined by one veth pair; with more, each
// host has a veth pair into a bridge namespace, so all hosts share one
// Ethernet segment and one subnet. Every host names its interface "veth0".
//
//	bed := testbed.New(t, testbed.Options{StaticNeighbors: true})
//	err := bed.B.Do(func() error {
//		// runs on an OS thread inside host B's namespace:
//		// sockets opened here belong to it for their whole life
//		return nil
//	})
//
// A Bed only provides hosts: it attaches no XDP program of its own. Tests
// that need one call (*Host).AttachXDP with their program; the attach mode
// (native by default, generic selectable) comes from Options.XDPMode.
//
// Namespaces are entered per OS thread (runtime.LockOSThread and setns), never
// with `ip netns exec`, which remounts /sys and hides a bpffs mounted at
// /sys/fs/bpf. A thread whose namespace cannot be restored is left locked so
// that it exits with its goroutine instead of returning to the scheduler.
//
// scripts/testbed.sh builds the same topology from a shell for manual work.
package testbed
