//go:build !linux

package loader_test

import (
	"errors"
	"testing"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

// Off Linux the package builds and nothing can be loaded or opened.
func TestNotLinux(t *testing.T) {
	if _, err := loader.Load(loader.Config{}); !errors.Is(err, fi.EOPNOTSUPP) {
		t.Errorf("Load = %v, want EOPNOTSUPP", err)
	}
	if _, err := loader.OpenPinned(t.TempDir()); !errors.Is(err, fi.EOPNOTSUPP) {
		t.Errorf("OpenPinned = %v, want EOPNOTSUPP", err)
	}
	if _, err := loader.FromFDs(nil); !errors.Is(err, fi.EOPNOTSUPP) {
		t.Errorf("FromFDs = %v, want EOPNOTSUPP", err)
	}
}
