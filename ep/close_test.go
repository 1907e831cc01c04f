//go:build linux

package ep_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"golang.org/x/sys/unix"
)

// A failed Open undoes what it did: the AV is not left bound, no socket or
// descriptor stays open.
func TestFailedOpenUndoes(t *testing.T) {
	r := newRig(t, rigOpts{})
	fds0 := fdTargets()
	err := r.a.h.Do(func() error {
		_, err := ep.Open(r.dp, ep.Attr{Ifname: testbed.LinkName, Local: netip.AddrPortFrom(r.a.local.Addr(), port+5),
			AV: r.a.av, TxCQ: r.a.tx, RxCQ: r.a.rx, Queues: 64, BindMode: dataplane.BindCopy})
		return err
	})
	if !errors.Is(err, fi.EINVAL) {
		t.Fatalf("open on 64 queues of a 1-queue veth: %v", err)
	}
	if left := newFDs(fds0); len(left) > 0 {
		t.Errorf("failed Open left descriptors open: %v", left)
	}
	r.a.ep.Close()
	if err := r.a.av.Close(); err != nil {
		t.Errorf("AV still bound after a failed Open: %v", err)
	}
}

// Hostile sizes are refused with EINVAL before anything is allocated (a
// queue count of 2^62 crashed the agent in makeslice; 2^34 ran it out of
// memory), by Open and by Prepare alike.
func TestHugeSizesRefused(t *testing.T) {
	r := newRig(t, rigOpts{})
	base := ep.Attr{Ifname: testbed.LinkName, Local: netip.AddrPortFrom(r.a.local.Addr(), port+6),
		AV: r.a.av, TxCQ: r.a.tx, RxCQ: r.a.rx, BindMode: dataplane.BindCopy}
	for name, adj := range map[string]func(*ep.Attr){
		"queues 2^62":  func(a *ep.Attr) { a.Queues = 1 << 62 },
		"queues 2^34":  func(a *ep.Attr) { a.Queues = 1 << 34 },
		"queues 2":     func(a *ep.Attr) { a.Queues = 2 }, // the veth has one
		"frames 2^40":  func(a *ep.Attr) { a.Frames = 1 << 40 },
		"ring 2^40":    func(a *ep.Attr) { a.RingSize = 1 << 40 },
		"posted 2^40":  func(a *ep.Attr) { a.MaxPosted = 1 << 40 },
		"contexts 2^9": func(a *ep.Attr) { a.RxContexts = 1 << 9 },
	} {
		attr := base
		adj(&attr)
		fds0 := fdTargets()
		err := r.a.h.Do(func() error {
			if e, err := ep.Open(r.dp, attr); err == nil {
				e.Close()
				return nil
			} else if !errors.Is(err, fi.EINVAL) {
				return err
			}
			p, err := ep.Prepare(r.dp, attr)
			if err == nil {
				p.Close()
			}
			return err
		})
		if !errors.Is(err, fi.EINVAL) {
			t.Errorf("%s: %v, want EINVAL from Open and Prepare", name, err)
		}
		if left := newFDs(fds0); len(left) > 0 {
			t.Errorf("%s: descriptors left open: %v", name, left)
		}
	}
}

// Operations after Close fail with EOPBADSTATE; none panics.
func TestUseAfterClose(t *testing.T) {
	r := newRig(t, rigOpts{})
	toA := r.b.insert(t, r.a.local)
	ctx := &struct{}{}
	r.a.ep.Recv(make([]byte, 8), fi.AddrUnspec, ctx)
	r.a.ep.Close()
	for name, err := range map[string]error{
		"cancel": r.a.ep.Cancel(ctx),
		"recv":   r.a.ep.Recv(make([]byte, 8), fi.AddrUnspec, nil),
		"send":   r.a.ep.Send([]byte("x"), toA, nil),
	} {
		if !errors.Is(err, fi.EOPBADSTATE) {
			t.Errorf("%s after close: %v", name, err)
		}
	}
	r.a.ep.Progress()
}

// An endpoint closed with messages still on its rings gives their frames
// back to the device: the other endpoint on the interface keeps receiving.
func TestCloseReturnsFrames(t *testing.T) {
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.Frames = 256 }})
	toA := r.b.insert(t, r.a.local)
	bAtA := r.a.insert(t, r.b.local)
	for round := range 3 {
		second := netip.AddrPortFrom(r.a.local.Addr(), port+1)
		tx2, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
		rx2, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
		e2 := openEP(t, r.a.h, r.dp, ep.Attr{Ifname: testbed.LinkName, Local: second, AV: r.a.av, TxCQ: tx2, RxCQ: rx2,
			BindMode: dataplane.BindCopy, Frames: 256})
		toA2 := r.b.insert(t, second)
		for range 100 { // unread: parked or left on e2's rings
			send(t, r.b, func() error { return r.b.ep.Inject([]byte("lost?"), toA2) })
		}
		r.b.ep.Progress()
		e2.Close()
		tx2.Close()
		rx2.Close()
		for i := range 100 {
			r.a.ep.Recv(make([]byte, 16), fi.AddrUnspec, i)
			send(t, r.b, func() error { return r.b.ep.Inject([]byte("still here"), toA) })
			if e, src, ee := read(t, r.a.rx); ee != nil || src != bAtA || e.OpContext != i {
				t.Fatalf("round %d message %d: %+v %+v", round, i, e, ee)
			}
		}
	}
}

// Prepare and Adopt in one process: the agent's and the application's
// halves of an endpoint. A failed Adopt closes every descriptor it got.
func TestPrepareAdopt(t *testing.T) {
	r := newRig(t, rigOpts{})
	toA := r.b.insert(t, netip.AddrPortFrom(r.a.local.Addr(), port+2))
	local := netip.AddrPortFrom(r.a.local.Addr(), port+2)
	attr := ep.Attr{Ifname: testbed.LinkName, Local: local, AV: r.a.av, RxContexts: 1, BindMode: dataplane.BindCopy}
	prepare := func() *ep.Prepared {
		var p *ep.Prepared
		if err := r.a.h.Do(func() (err error) { p, err = ep.Prepare(r.dp, attr); return err }); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dup := func(fds []int) []int {
		out := make([]int, len(fds))
		for i, fd := range fds {
			var err error
			if out[i], err = unix.Dup(fd); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}

	// The second endpoint on the interface needs its own device: close
	// the rig's first (a device queue belongs to one UMEM).
	r.a.ep.Close()
	p := prepare()
	info, fds := p.Handover()
	tx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
	rx, _ := cq.Open(cq.Attr{Format: cq.FormatMsg})
	defer tx.Close()
	defer rx.Close()
	var e *ep.Endpoint
	err := r.a.h.Do(func() (err error) {
		e, err = ep.Adopt(info, dup(fds), ep.AdoptAttr{Attr: ep.Attr{Ifname: testbed.LinkName, Local: local, AV: r.a.av, TxCQ: tx, RxCQ: rx},
			Release: p.Close})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e.Recv(make([]byte, 16), fi.AddrUnspec, "adopted")
	send(t, r.b, func() error { return r.b.ep.Send([]byte("hi"), toA, nil) })
	if en, _, ee := read(t, rx); ee != nil || en.OpContext != "adopted" {
		t.Fatalf("adopted endpoint: %+v %+v", en, ee)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	// Adopt fails (context 0's socket handed over twice): nothing leaks.
	p = prepare()
	defer p.Close()
	info, fds = p.Handover()
	bad := dup(fds)
	unix.Close(bad[len(bad)-1])
	bad[len(bad)-1], _ = unix.Dup(bad[len(bad)-2])
	_, err = ep.Adopt(info, bad, ep.AdoptAttr{Attr: ep.Attr{Ifname: testbed.LinkName, Local: local, AV: r.a.av, TxCQ: tx, RxCQ: rx}})
	if err == nil {
		t.Fatal("Adopt of a doubled socket succeeded")
	}
	for _, fd := range bad {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
			t.Errorf("failed Adopt left descriptor %d open", fd)
		}
	}
}
