package xdptest

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
)

// XSK is an AF_XDP socket a test bound on a host and put in XSKMAP slots.
type XSK struct {
	*dataplane.Socket
	UMEM *dataplane.UMEM
}

// BindXSK opens a UMEM and a socket on h's interface, queue, from inside
// h's namespace (copy mode: veth has no zero-copy), fills the fill ring, and puts the socket in the given
// XSKMAP slots of dp. Everything is closed with the test.
func BindXSK(tb testing.TB, dp *loader.Objects, h *testbed.Host, queue int, slots ...uint32) *XSK {
	tb.Helper()
	u, err := dataplane.NewUMEM(dataplane.UMEMConfig{NumFrames: 1024})
	if err != nil {
		tb.Fatal(err)
	}
	var s *dataplane.Socket
	err = h.Do(func() (err error) {
		s, err = dataplane.Open(h.Ifindex, queue, u, dataplane.SocketConfig{Mode: dataplane.BindCopy})
		return err
	})
	if err != nil {
		u.Close()
		tb.Fatalf("open xsk on %s: %v", h.Name(), err)
	}
	tb.Cleanup(func() {
		for _, slot := range slots {
			dp.XSKs.Delete(slot)
		}
		s.Close()
		u.Close()
	})
	s.FillFree()
	for _, slot := range slots {
		if err := dp.XSKs.Update(slot, uint32(s.FD()), ebpf.UpdateAny); err != nil {
			tb.Fatalf("xskmap slot %d: %v", slot, err)
		}
	}
	return &XSK{Socket: s, UMEM: u}
}

// Inject makes the program see f repeat times as if f arrived on h's
// interface, queue 0: redirects really reach bound sockets
// (testbed.Host.Inject: live-frame test runs, or real frames from another
// host of the bed where the kernel refuses those).
func Inject(dp *loader.Objects, h *testbed.Host, f []byte, repeat int) error {
	return h.Inject(dp.Program, f, repeat)
}
