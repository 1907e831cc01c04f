//go:build linux

package ep_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
)

// fi_tagged(3) FI_PEEK, FI_CLAIM and FI_DISCARD over unexpected messages:
// a peek reports a parked message without taking it (or ENOMSG), a claim
// keeps it for the receive with the same context, a discard drops it.
func TestPeekClaimDiscard(t *testing.T) {
	r := newRig(t, rigOpts{})
	toA := r.b.insert(t, r.a.local)
	bAtA := r.a.insert(t, r.b.local)
	buf := make([]byte, 64)
	arrive := func(tag uint64, msg string) {
		t.Helper()
		send(t, r.b, func() error { return r.b.ep.TSend([]byte(msg), toA, tag, nil) })
		time.Sleep(20 * time.Millisecond)
		r.a.ep.Progress() // no receive posted: parked
	}
	peek := func(tag uint64, ctx any, flags fi.Flags) {
		t.Helper()
		if err := r.a.ep.TRecvMsg(nil, fi.AddrUnspec, tag, 0, ctx, fi.Peek|flags); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing there: ENOMSG.
	peek(1, "none", 0)
	if _, _, ee := read(t, r.a.rx); ee == nil || ee.Err != fi.ENOMSG || ee.OpContext != "none" {
		t.Fatalf("peek with nothing parked: %+v", ee)
	}
	// A peek reports, and leaves the message for a receive.
	arrive(7, "seven")
	peek(7, "p", 0)
	if e, src, _ := read(t, r.a.rx); e.OpContext != "p" || e.Len != 5 || e.Tag != 7 || src != bAtA || e.Flags != fi.Recv|fi.Tagged {
		t.Fatalf("peek: %+v from %v", e, src)
	}
	r.a.ep.TRecv(buf, fi.AddrUnspec, 7, 0, "r")
	if e, _, _ := read(t, r.a.rx); e.OpContext != "r" || string(buf[:e.Len]) != "seven" {
		t.Fatalf("receive after peek: %+v", e)
	}
	// Peek and claim: no other receive takes it; the claim does.
	arrive(8, "eight")
	type claimCtx struct{ n int }
	peek(8, claimCtx{1}, fi.Claim)
	if e, _, _ := read(t, r.a.rx); e.OpContext != (claimCtx{1}) || e.Len != 5 {
		t.Fatalf("peek and claim: %+v", e)
	}
	r.a.ep.TRecv(buf, fi.AddrUnspec, 8, 0, "other")
	r.a.ep.Progress()
	empty(t, r.a.rx)
	if err := r.a.ep.TRecvMsg(buf[32:], fi.AddrUnspec, 0, 0, claimCtx{2}, fi.Claim); !errors.Is(err, fi.ENOMSG) {
		t.Errorf("claim with another context: %v, want ENOMSG", err)
	}
	if err := r.a.ep.TRecvMsg(buf[32:], fi.AddrUnspec, 0, 0, claimCtx{1}, fi.Claim); err != nil {
		t.Fatal(err)
	}
	if e, _, _ := read(t, r.a.rx); e.OpContext != (claimCtx{1}) || string(buf[32:32+e.Len]) != "eight" {
		t.Fatalf("claimed receive: %+v", e)
	}
	// The receive posted meanwhile gets the next message.
	arrive(8, "next")
	if e, _, _ := read(t, r.a.rx); e.OpContext != "other" || string(buf[:e.Len]) != "next" {
		t.Fatalf("the other receive: %+v", e)
	}
	// Peek and discard: reported, then gone.
	arrive(9, "nine")
	peek(9, "d", fi.Discard)
	if e, _, _ := read(t, r.a.rx); e.OpContext != "d" || e.Len != 4 {
		t.Fatalf("peek and discard: %+v", e)
	}
	peek(9, "gone?", 0)
	if _, _, ee := read(t, r.a.rx); ee == nil || ee.Err != fi.ENOMSG {
		t.Fatalf("peek after discard: %+v", ee)
	}
	// Claim, then discard the claimed message.
	arrive(10, "ten")
	peek(10, claimCtx{3}, fi.Claim)
	read(t, r.a.rx)
	if err := r.a.ep.TRecvMsg(nil, fi.AddrUnspec, 0, 0, claimCtx{3}, fi.Claim|fi.Discard); err != nil {
		t.Fatal(err)
	}
	if e, _, _ := read(t, r.a.rx); e.OpContext != (claimCtx{3}) || e.Len != 0 {
		t.Fatalf("discard of a claimed message: %+v", e)
	}
	// Bad requests change nothing.
	for _, c := range []struct {
		ctx   any
		flags fi.Flags
		want  fi.Errno
	}{
		{"x", fi.Discard, fi.EINVAL},
		{nil, fi.Peek | fi.Claim, fi.EINVAL},
		{[]int{1}, fi.Claim, fi.EINVAL},
		{"x", fi.Peek | fi.Claim | fi.Discard, fi.EINVAL},
		{"x", fi.MultiRecv, fi.EBADFLAGS},
	} {
		if err := r.a.ep.TRecvMsg(buf, fi.AddrUnspec, 0, 0, c.ctx, c.flags); fi.Code(err) != c.want {
			t.Errorf("trecvmsg %v with context %v: %v, want %v", c.flags, c.ctx, err, c.want)
		}
	}
	empty(t, r.a.rx)
	_ = ep.AnySource
}

// Peek, claim and discard work on same-host messages as on frames.
func TestPeekClaimLocal(t *testing.T) {
	n := newLocalNode(t)
	x := n.open(t, netip.AddrPortFrom(n.h.IPv4, 7000), av.Attr{}, nil)
	y := n.open(t, netip.AddrPortFrom(n.h.IPv4, 7001), av.Attr{}, nil)
	yAtX := x.insert(t, y.local)
	xAtY := y.insert(t, x.local)
	arrive := func(tag uint64, msg string) {
		t.Helper()
		send(t, x, func() error { return x.ep.TSend([]byte(msg), yAtX, tag, nil) })
		read(t, x.tx)
		y.ep.Progress() // no receive posted: parked
	}
	arrive(5, "five")
	if err := y.ep.TRecvMsg(nil, fi.AddrUnspec, 5, 0, "peek", fi.Peek|fi.Claim); err != nil {
		t.Fatal(err)
	}
	if e, src, _ := read(t, y.rx); e.OpContext != "peek" || e.Len != 4 || e.Tag != 5 || src != xAtY {
		t.Fatalf("peek and claim: %+v from %v", e, src)
	}
	buf := make([]byte, 64)
	y.ep.TRecv(buf, fi.AddrUnspec, 5, 0, "other")
	y.ep.Progress()
	empty(t, y.rx)
	if err := y.ep.TRecvMsg(buf[32:], fi.AddrUnspec, 0, 0, "peek", fi.Claim); err != nil {
		t.Fatal(err)
	}
	if e, _, _ := read(t, y.rx); e.OpContext != "peek" || string(buf[32:32+e.Len]) != "five" {
		t.Fatalf("claimed same-host message: %+v", e)
	}
	arrive(6, "six")
	if err := y.ep.TRecvMsg(nil, fi.AddrUnspec, 6, 0, "drop", fi.Peek|fi.Discard); err != nil {
		t.Fatal(err)
	}
	if e, _, _ := read(t, y.rx); e.OpContext != "drop" || e.Len != 3 {
		t.Fatalf("peek and discard: %+v", e)
	}
	if err := y.ep.TRecvMsg(nil, fi.AddrUnspec, 6, 0, "again", fi.Peek); err != nil {
		t.Fatal(err)
	}
	if _, _, ee := read(t, y.rx); ee == nil || ee.Err != fi.ENOMSG {
		t.Fatalf("peek after discard: %+v", ee)
	}
}
