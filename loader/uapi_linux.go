//go:build linux

package loader

import (
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Compile-time checks of generic.go's kernel ABI values: each line fails
// to build (a negative constant converted to uint) if a value differs.
const (
	_ = uint(bpfFXDPHasFrags-unix.BPF_F_XDP_HAS_FRAGS) + uint(unix.BPF_F_XDP_HAS_FRAGS-bpfFXDPHasFrags)
	_ = uint(xdpAttachedDrv-nl.XDP_ATTACHED_DRV) + uint(nl.XDP_ATTACHED_DRV-xdpAttachedDrv)
	_ = uint(xdpAttachedSKB-nl.XDP_ATTACHED_SKB) + uint(nl.XDP_ATTACHED_SKB-xdpAttachedSKB)
)
