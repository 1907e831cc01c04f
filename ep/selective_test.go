//go:build linux

package ep_test

import (
	"errors"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
)

// FI_SELECTIVE_COMPLETION (fi_cq(3)): on CQs bound with it, an operation
// reports its success only with FI_COMPLETION (the flags of SendMsg and
// RecvMsg, OpFlags for the calls without flags); errors are always
// reported; without it every operation reports, FI_COMPLETION or not.
func TestSelectiveCompletion(t *testing.T) {
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.SelectiveCompletion = fi.Transmit | fi.Recv }})
	toB, toA := r.a.insert(t, r.b.local), r.b.insert(t, r.a.local)
	buf := make([]byte, 64)
	// Plain calls: no completion on either side, but the data arrives.
	r.b.ep.Recv(buf, fi.AddrUnspec, "quiet recv")
	send(t, r.a, func() error { return r.a.ep.Send([]byte("one"), toB, "quiet send") })
	r.b.ep.RecvMsg(buf[32:], fi.AddrUnspec, "asked", fi.Completion)
	send(t, r.a, func() error { return r.a.ep.SendMsg([]byte("two"), toB, 0, "asked send", fi.Completion) })
	// The second receive's completion comes, the first's never: the
	// first message landed in buf all the same.
	if e, _, _ := read(t, r.b.rx); e.OpContext != "asked" || string(buf[32:32+e.Len]) != "two" {
		t.Fatalf("receive with FI_COMPLETION: %+v", e)
	}
	if string(buf[:3]) != "one" {
		t.Errorf("the quiet receive got %q", buf[:3])
	}
	if e, _, _ := read(t, r.a.tx); e.OpContext != "asked send" {
		t.Errorf("send completion: %+v, want only the one that asked", e)
	}
	empty(t, r.a.tx)
	empty(t, r.b.rx)
	// Errors are reported though not asked for: a truncated receive.
	r.b.ep.Recv(buf[:2], fi.AddrUnspec, "too small")
	send(t, r.a, func() error { return r.a.ep.Send([]byte("three"), toB, nil) })
	if _, _, ee := read(t, r.b.rx); ee == nil || ee.Err != fi.ETRUNC || ee.OpContext != "too small" {
		t.Errorf("truncation on a quiet receive: %+v", ee)
	}
	// Cancel reports ECANCELED.
	r.b.ep.Recv(buf, fi.AddrUnspec, "cancel me")
	if err := r.b.ep.Cancel("cancel me"); err != nil {
		t.Fatal(err)
	}
	if _, _, ee := read(t, r.b.rx); ee == nil || ee.Err != fi.ECANCELED {
		t.Errorf("cancel on a quiet receive: %+v", ee)
	}
	// Unknown flags are still refused.
	if err := r.a.ep.SendMsg(nil, toB, 0, nil, fi.MultiRecv); !errors.Is(err, fi.EBADFLAGS) {
		t.Errorf("send with FI_MULTI_RECV: %v", err)
	}
	_ = toA
}

// OpFlags with FI_COMPLETION makes the calls without flags report on a
// selective CQ; without selective completion FI_COMPLETION changes nothing.
func TestSelectiveCompletionOpFlags(t *testing.T) {
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) {
		a.SelectiveCompletion = fi.Transmit
		a.OpFlags = fi.Completion
	}})
	toB := r.a.insert(t, r.b.local)
	r.a.insert(t, r.b.local)
	buf := make([]byte, 64)
	r.b.ep.Recv(buf, fi.AddrUnspec, "b")
	send(t, r.a, func() error { return r.a.ep.Send([]byte("x"), toB, "plain send") })
	if e, _, _ := read(t, r.a.tx); e.OpContext != "plain send" {
		t.Errorf("plain send with OpFlags FI_COMPLETION: %+v", e)
	}
	if e, _, _ := read(t, r.b.rx); e.OpContext != "b" {
		t.Errorf("receive without selective completion: %+v", e)
	}
	// Injected sends never report.
	send(t, r.a, func() error { return r.a.ep.SendMsg([]byte("y"), toB, 0, nil, fi.Inject|fi.Completion) })
	time.Sleep(20 * time.Millisecond)
	empty(t, r.a.tx)
}
