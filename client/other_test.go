//go:build !linux

package client_test

import (
	"errors"
	"testing"

	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/fi"
)

// Off Linux the package builds, and what needs the agent or BPF fails with
// fi.EOPNOTSUPP.
func TestNotLinux(t *testing.T) {
	if _, err := client.Dial(""); !errors.Is(err, fi.EOPNOTSUPP) {
		t.Errorf("Dial = %v, want EOPNOTSUPP", err)
	}
	if _, _, err := client.OpenAVPinned(t.TempDir(), "av"); !errors.Is(err, fi.EOPNOTSUPP) {
		t.Errorf("OpenAVPinned = %v, want EOPNOTSUPP", err)
	}
}
