//go:build linux

package ep_test

import (
	"errors"
	"testing"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
)

func TestSendVariants(t *testing.T) {
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.OpFlags = fi.InjectComplete }})
	toA := r.b.insert(t, r.a.local)
	r.a.insert(t, r.b.local)
	if r.b.ep.TxCompletion() != fi.InjectComplete {
		t.Errorf("TxCompletion %v", r.b.ep.TxCompletion())
	}
	var e [1]cq.Entry
	// Inject-complete: the completion is there when Send returns.
	if err := r.b.ep.Send([]byte("a"), toA, "ic"); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.b.tx.Read(e[:]); n != 1 || e[0].OpContext != "ic" {
		t.Errorf("inject-complete send: %d %+v", n, e[0])
	}
	// Transmit-complete per send: only once the kernel is done.
	if err := r.b.ep.SendMsg([]byte("b"), toA, 0, "tc", fi.TransmitComplete); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := read(t, r.b.tx); got.OpContext != "tc" {
		t.Errorf("transmit-complete send: %+v", got)
	}
	// Inject: no completion at all.
	if err := r.b.ep.Inject([]byte("c"), toA); err != nil {
		t.Fatal(err)
	}
	if err := r.b.ep.TInject([]byte("d"), toA, 9); err != nil {
		t.Fatal(err)
	}
	// FI_MORE: queued without waking the kernel, sent with the last one.
	for i := range 8 {
		if err := r.b.ep.SendMsg([]byte{byte(i)}, toA, 0, nil, fi.More|fi.Inject); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.b.ep.Inject([]byte("last"), toA); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	for i := range 11 {
		r.a.ep.Recv(buf, fi.AddrUnspec, i)
	}
	r.a.ep.TRecv(buf, fi.AddrUnspec, 9, 0, "tagged")
	got := 0
	for got < 12 {
		if _, _, ee := read(t, r.a.rx); ee != nil {
			t.Fatal(ee)
		}
		got++
	}
	empty(t, r.b.tx)
}

// Bad sends fail with the right errno and change nothing.
func TestSendErrors(t *testing.T) {
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.Caps = fi.Msg }})
	toA := r.b.insert(t, r.a.local)
	big := make([]byte, r.b.ep.MaxMsgSize()+1)
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"too large", r.b.ep.Send(big, toA, nil), fi.EMSGSIZE},
		{"not in the AV", r.b.ep.Send([]byte("x"), toA+1, nil), fi.EINVAL},
		{"bad flags", r.b.ep.SendMsg([]byte("x"), toA, 0, nil, fi.MultiRecv), fi.EBADFLAGS},
		{"tagged without FI_TAGGED", r.b.ep.TSend([]byte("x"), toA, 1, nil), fi.EOPNOTSUPP},
		{"recv tagged without FI_TAGGED", r.b.ep.TRecv(big, fi.AddrUnspec, 1, 0, nil), fi.EOPNOTSUPP},
		{"directed without FI_DIRECTED_RECV", r.b.ep.Recv(big, toA, nil), fi.EINVAL},
		{"recvmsg flags", r.b.ep.RecvMsg(big, fi.AddrUnspec, nil, fi.More), fi.EBADFLAGS},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	empty(t, r.b.tx)
	if err := r.b.ep.Send(big[:r.b.ep.MaxMsgSize()], toA, "max"); err != nil {
		t.Errorf("largest message: %v", err)
	}
	r.b.ep.Close()
	if err := r.b.ep.Send([]byte("x"), toA, nil); !errors.Is(err, fi.EOPBADSTATE) {
		t.Errorf("send after close: %v", err)
	}
	if err := r.b.ep.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

// Open refuses bad attributes with the right errno.
func TestOpenErrors(t *testing.T) {
	r := newRig(t, rigOpts{})
	good := ep.Attr{Ifname: "veth0", Local: r.a.local, AV: r.a.av, TxCQ: r.a.tx, RxCQ: r.a.rx}
	for _, tc := range []struct {
		name string
		mod  func(*ep.Attr)
		want error
	}{
		{"no AV", func(a *ep.Attr) { a.AV = nil }, fi.ENOAV},
		{"no CQ", func(a *ep.Attr) { a.RxCQ = nil }, fi.ENOCQ},
		{"no port", func(a *ep.Attr) { a.Local = netipAddrPort(a.Local.Addr(), 0) }, fi.EINVAL},
		{"no interface", func(a *ep.Attr) { a.Ifname = "nope0" }, fi.ENODEV},
		{"source_err without source", func(a *ep.Attr) { a.Caps = fi.SourceErr }, fi.EINVAL},
		{"unknown cap", func(a *ep.Attr) { a.Caps = fi.RMA }, fi.EINVAL},
		{"contexts without rx_ctx_bits", func(a *ep.Attr) { a.RxContexts = 2 }, fi.EINVAL},
		{"bound port", func(a *ep.Attr) {}, fi.EADDRINUSE},
	} {
		a := good
		tc.mod(&a)
		err := r.a.h.Do(func() error { _, err := ep.Open(r.dp, a); return err })
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := r.a.av.Close(); !errors.Is(err, fi.EBUSY) {
		t.Errorf("AV close with an endpoint bound: %v", err)
	}
	if err := r.a.rx.Close(); !errors.Is(err, fi.EBUSY) {
		t.Errorf("CQ close with an endpoint bound: %v", err)
	}
}
