//go:build !linux

package ep

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/xdpfab/xdpfab/fi"
)

// claimPort needs Linux (see claim_linux.go).
func claimPort(local netip.AddrPort) (*os.File, error) {
	return nil, fmt.Errorf("claim %v: AF_XDP endpoints need Linux: %w", local, fi.EOPNOTSUPP)
}
