//go:build !linux

package loader

import (
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
)

// errNotLinux is the error of Load, OpenPinned and FromFDs off Linux.
var errNotLinux = fmt.Errorf("loader: BPF and XDP need Linux: %w", fi.EOPNOTSUPP)

func checkOS() error           { return errNotLinux }
func mount(dir string) error   { return errNotLinux }
func unmount(dir string) error { return errNotLinux }
