//go:build !linux

package neigh_test

import (
	"errors"
	"testing"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/neigh"
)

// Off Linux the package builds and New fails with fi.EOPNOTSUPP.
func TestNotLinux(t *testing.T) {
	if r, err := neigh.New(neigh.Options{}); !errors.Is(err, fi.EOPNOTSUPP) {
		t.Errorf("New = %v, %v; want EOPNOTSUPP", r, err)
	}
}
