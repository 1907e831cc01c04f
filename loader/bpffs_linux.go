//go:build linux

package loader

import "golang.org/x/sys/unix"

// checkOS: BPF and XDP are what this package loads, and Linux has them.
func checkOS() error { return nil }

// mount mounts a bpffs instance on dir, readable by its owner only.
func mount(dir string) error { return unix.Mount("bpf", dir, "bpf", 0, "mode=0700") }

// unmount detaches the file system on dir (MNT_DETACH).
func unmount(dir string) error { return unix.Unmount(dir, unix.MNT_DETACH) }
