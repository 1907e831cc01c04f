//go:build !linux

package client

import (
	"fmt"

	"github.com/xdpfab/xdpfab/fi"
)

// The agent runs on Linux only (it loads BPF and creates AF_XDP sockets),
// and its control socket is SOCK_SEQPACKET, which macOS has no Unix
// sockets of: off Linux Dial fails with fi.EOPNOTSUPP, as OpenAVPinned does
// (package loader).
var errNotLinux = fmt.Errorf("connect to the xdpfab agent: the agent runs on Linux only: %w", fi.EOPNOTSUPP)

func checkOS() error { return errNotLinux }
