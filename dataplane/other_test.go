//go:build !linux

package dataplane_test

import (
	"errors"
	"testing"

	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
)

// Off Linux the package builds, and everything that needs AF_XDP fails
// with fi.EOPNOTSUPP.
func TestNotLinux(t *testing.T) {
	if _, err := dataplane.NewUMEM(dataplane.UMEMConfig{Shared: true}); !errors.Is(err, fi.EOPNOTSUPP) {
		t.Errorf("NewUMEM(Shared) = %v, want EOPNOTSUPP", err)
	}
	umem, err := dataplane.NewUMEM(dataplane.UMEMConfig{})
	if err != nil {
		t.Fatalf("NewUMEM: %v", err)
	}
	defer umem.Close()
	if _, err := dataplane.Open(1, 0, umem, dataplane.SocketConfig{}); !errors.Is(err, fi.EOPNOTSUPP) {
		t.Errorf("Open = %v, want EOPNOTSUPP", err)
	}
	if _, err := dataplane.AdoptSocket(0, 1, 0, umem, dataplane.AdoptConfig{RxSize: 64}); !errors.Is(err, fi.EOPNOTSUPP) {
		t.Errorf("AdoptSocket = %v, want EOPNOTSUPP", err)
	}
	if _, err := dataplane.ThreadNetns(); !errors.Is(err, fi.EOPNOTSUPP) {
		t.Errorf("ThreadNetns = %v, want EOPNOTSUPP", err)
	}
}
