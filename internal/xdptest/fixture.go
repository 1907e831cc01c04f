package xdptest

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
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

// Inject runs the program on f repeat times in live-frame mode
// (BPF_F_TEST_XDP_LIVE_FRAMES), as if f arrived on h's interface, queue
// 0: redirects really reach bound sockets. It runs inside h's namespace,
// where the kernel resolves the ingress ifindex.
func Inject(dp *loader.Objects, h *testbed.Host, f []byte, repeat int) error {
	return h.Do(func() error {
		_, err := dp.Program.Run(&ebpf.RunOptions{
			Data:    f,
			Repeat:  uint32(repeat),
			Flags:   unix.BPF_F_TEST_XDP_LIVE_FRAMES,
			Context: bpf.XDPMD{DataEnd: uint32(len(f)), IngressIfindex: uint32(h.Ifindex)},
		})
		return err
	})
}
