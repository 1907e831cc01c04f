// Package testbed is package netlab for tests: New builds a bed of
// network-namespace hosts whose removal is registered with the test's
// Cleanup, and AttachXDP attaches a program until the test ends. The types
// are netlab's.
//
//	bed := testbed.New(t, testbed.Options{StaticNeighbors: true})
//	err := bed.B.Do(func() error {
//		// runs on an OS thread inside host B's namespace
//		return nil
//	})
package testbed

import (
	"errors"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/xdpfab/xdpfab/internal/netlab"
)

// The bed's types: see package netlab.
type (
	Bed     = netlab.Bed
	Host    = netlab.Host
	NS      = netlab.NS
	Options = netlab.Options
	XDPMode = netlab.XDPMode
)

// LinkName is the name of every host's interface inside its namespace.
const LinkName = netlab.LinkName

// The XDP modes, for tests that range over them.
const (
	Native  = netlab.Native
	Generic = netlab.Generic
)

// Up is netlab.Up, for callers outside a test.
var Up = netlab.Up

// New builds a bed and registers its removal with tb.Cleanup. It fails tb
// (after removing whatever it made) if any step fails.
func New(tb testing.TB, opts Options) *Bed {
	tb.Helper()
	bed, down, err := netlab.Up(opts)
	if err != nil {
		tb.Fatalf("testbed: %v", err)
	}
	tb.Cleanup(down)
	return bed
}

// AttachXDP attaches prog to h's interface in the bed's XDPMode and
// detaches it at the end of the test.
func AttachXDP(tb testing.TB, h *Host, prog *ebpf.Program) link.Link {
	tb.Helper()
	l, err := h.AttachXDP(prog)
	if err != nil {
		tb.Fatalf("testbed: %v", err)
	}
	tb.Cleanup(func() {
		if err := l.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
			tb.Errorf("testbed: detach XDP from %s: %v", h.Name(), err)
		}
	})
	return l
}
