//go:build linux

package ep_test

import (
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

// Several endpoints on one interface share the device's UMEM (a device
// queue belongs to one UMEM): both receive, send completions go to the
// endpoint that sent, and one closing leaves the other working.
func TestEndpointsShareInterface(t *testing.T) {
	r := newRig(t, rigOpts{})
	second := netip.AddrPortFrom(r.a.local.Addr(), port+1)
	tx2, _ := cq.Open(cq.Attr{Size: 64, Format: cq.FormatMsg})
	rx2, _ := cq.Open(cq.Attr{Size: 64, Format: cq.FormatMsg})
	t.Cleanup(func() { tx2.Close(); rx2.Close() })
	e2 := openEP(t, r.a.h, r.dp, ep.Attr{Ifname: testbed.LinkName, Local: second, AV: r.a.av, TxCQ: tx2, RxCQ: rx2, BindMode: dataplane.BindCopy})
	toA1 := r.b.insert(t, r.a.local)
	toA2 := r.b.insert(t, second)
	bAtA := r.a.insert(t, r.b.local)
	b1, b2 := make([]byte, 16), make([]byte, 16)
	for round := range 3 {
		r.a.ep.Recv(b1, fi.AddrUnspec, "ep1")
		e2.Recv(b2, fi.AddrUnspec, "ep2")
		send(t, r.b, func() error { return r.b.ep.Send([]byte("one"), toA1, nil) })
		send(t, r.b, func() error { return r.b.ep.Send([]byte("two"), toA2, nil) })
		if e, src, _ := read(t, r.a.rx); e.OpContext != "ep1" || string(b1[:3]) != "one" || src != bAtA {
			t.Fatalf("round %d endpoint 1: %+v", round, e)
		}
		if e, _, _ := read(t, rx2); e.OpContext != "ep2" || string(b2[:3]) != "two" {
			t.Fatalf("round %d endpoint 2: %+v", round, e)
		}
		// Each endpoint's send completes on its own CQ.
		send(t, r.a, func() error { return r.a.ep.Send([]byte("x"), bAtA, "from ep1") })
		send(t, r.a, func() error { return e2.Send([]byte("y"), bAtA, "from ep2") })
		if e, _, _ := read(t, r.a.tx); e.OpContext != "from ep1" {
			t.Fatalf("endpoint 1 send completion: %+v", e)
		}
		if e, _, _ := read(t, tx2); e.OpContext != "from ep2" {
			t.Fatalf("endpoint 2 send completion: %+v", e)
		}
	}
	if err := e2.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		r.a.ep.Recv(b1, fi.AddrUnspec, i)
		send(t, r.b, func() error { return r.b.ep.Send([]byte("after"), toA1, nil) })
		if e, _, _ := read(t, r.a.rx); e.OpContext != i {
			t.Fatalf("after the other endpoint closed: %+v", e)
		}
	}
	// A second endpoint on the same address and port is refused.
	err := r.a.h.Do(func() error {
		_, err := ep.Open(r.dp, ep.Attr{Ifname: testbed.LinkName, Local: r.a.local, AV: r.a.av, TxCQ: tx2, RxCQ: rx2, BindMode: dataplane.BindCopy})
		return err
	})
	if err == nil || fi.Code(err) != fi.EADDRINUSE {
		t.Errorf("second endpoint on %v: %v", r.a.local, err)
	}
}

// An endpoint that asks for a bind mode other than the one the interface's
// sockets already have is refused: its sockets would share their UMEM.
func TestSharedInterfaceBindMode(t *testing.T) {
	r := newRig(t, rigOpts{}) // copy mode: veth has no zero-copy
	tx2, _ := cq.Open(cq.Attr{Size: 64, Format: cq.FormatMsg})
	rx2, _ := cq.Open(cq.Attr{Size: 64, Format: cq.FormatMsg})
	t.Cleanup(func() { tx2.Close(); rx2.Close() })
	attr := ep.Attr{Ifname: testbed.LinkName, Local: netip.AddrPortFrom(r.a.local.Addr(), port+1), AV: r.a.av,
		TxCQ: tx2, RxCQ: rx2, BindMode: dataplane.BindZeroCopy}
	err := r.a.h.Do(func() error {
		_, err := ep.Open(r.dp, attr)
		return err
	})
	if fi.Code(err) != fi.EINVAL {
		t.Fatalf("zero-copy endpoint on a copy-mode interface: %v", err)
	}
	attr.BindMode = dataplane.BindAuto
	e2 := openEP(t, r.a.h, r.dp, attr)
	if err := e2.Close(); err != nil {
		t.Fatal(err)
	}
}
