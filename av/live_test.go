//go:build linux

package av_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/xdptest"
	"github.com/xdpfab/xdpfab/wire"
)

// fabtests av_removal_test / av_reinsert_test with real frames: a datagram
// from the peer is injected on host A's interface (live frames), redirected
// into an AF_XDP socket, and the fi_addr in front of it is read from the
// UMEM. Remove the peer: the next datagram is from an unknown source.
// Re-insert: translated again. Also fabtests av_insert_stages: inserts
// before and after an endpoint is bound both translate.
func TestRemovalReinsertLive(t *testing.T) {
	dp := newDP(t, 4096)
	bed := testbed.New(t, testbed.Options{})
	x := xdptest.BindXSK(t, dp, bed.A, 0, 0)
	a := openAV(t, dp, av.Attr{})
	local := netip.AddrPortFrom(bed.A.IPv4, 7000)
	p := netip.AddrPortFrom(bed.B.IPv4, 5000)

	// Stage 1: an address inserted before the endpoint exists.
	if _, err := a.Insert(peers(0, 2), nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := a.BindEndpoint(); err != nil {
		t.Fatal(err)
	}
	defer a.UnbindEndpoint()
	if err := dp.EP.Put(bpf.EPKey{Local: bpf.MakeAddr(local)}, bpf.EPVal{EpId: 1, AvId: a.ID(), RxCtxs: 1, Queues: 1}); err != nil {
		t.Fatal(err)
	}
	defer dp.EP.Delete(bpf.EPKey{Local: bpf.MakeAddr(local)})
	// Stage 2: inserted after.
	out := notAvail(1)
	if _, err := a.Insert([]netip.AddrPort{p}, out, 0, nil); err != nil || out[0] != 2 {
		t.Fatal(out, err)
	}

	s := wire.Frame{Src: p, Dst: local, Hdr: wire.Hdr{Op: wire.OpMsg}, Payload: []byte("ping")}
	copy(s.SrcMAC[:], bed.B.MAC)
	copy(s.DstMAC[:], bed.A.MAC)
	send := func(from netip.AddrPort) wire.Meta {
		t.Helper()
		s.Src = from
		if err := xdptest.Inject(dp, bed.A, wire.Build(s), 1); err != nil {
			t.Fatal(err)
		}
		var d [1]dataplane.Desc
		for range 100 {
			if x.Receive(d[:]) == 1 {
				m, ok := wire.ParseMeta(x.UMEM.Packet(d[0])) // the descriptor's first bytes
				x.Fill([]uint64{x.UMEM.FrameAddr(d[0].Addr)})
				if !ok {
					t.Fatal("no metadata")
				}
				return m
			}
			x.Poll(10 * time.Millisecond)
		}
		t.Fatal("no frame received")
		return wire.Meta{}
	}
	if m := send(peer(1)); m.FiAddr != 1 || m.Flags&wire.MetaKnown == 0 {
		t.Errorf("inserted before bind: %+v", m)
	}
	if m := send(p); m.FiAddr != 2 {
		t.Errorf("transfer before remove: fi_addr %d, want 2", m.FiAddr)
	}
	if err := a.Remove([]fi.Addr{2}, 0); err != nil {
		t.Fatal(err)
	}
	if m := send(p); m.FiAddr != uint64(fi.AddrNotAvail) || m.Flags&wire.MetaKnown != 0 {
		t.Errorf("transfer after remove attributed to %d (flags %#x)", m.FiAddr, m.Flags)
	}
	out = notAvail(1)
	if _, err := a.Insert([]netip.AddrPort{p}, out, 0, nil); err != nil || out[0] != 2 {
		t.Fatal(out, err)
	}
	if m := send(p); m.FiAddr != 2 || m.Flags&wire.MetaKnown == 0 {
		t.Errorf("transfer after reinsert: %+v", m)
	}
}
