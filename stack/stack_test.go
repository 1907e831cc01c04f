//go:build linux

package stack_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/stack"
)

func TestNoObjects(t *testing.T) {
	if _, err := stack.Open(nil, stack.Attr{}); !errors.Is(err, fi.EINVAL) {
		t.Fatalf("Open(nil) = %v, want EINVAL", err)
	}
	var s *stack.Stack
	if err := s.Close(); err != nil {
		t.Fatalf("nil Close = %v", err)
	}
}

// A stack on a real interface: a message to its own address comes back
// through XDP with the sender's fi_addr; Close closes everything, twice
// safely; a failed open leaves nothing behind.
func TestOpenSendClose(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{StaticNeighbors: true})
	objs, err := loader.Load(loader.Config{AVEntries: 64, MaxAVs: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	for _, h := range []*testbed.Host{bed.A, bed.B} {
		err := h.Do(func() error {
			a, err := objs.Attach(testbed.LinkName, loader.Native)
			if err == nil {
				t.Cleanup(func() { a.Close() })
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	attr := func(h *testbed.Host) stack.Attr {
		return stack.Attr{
			TxCQ: cq.Attr{Format: cq.FormatMsg},
			RxCQ: cq.Attr{Format: cq.FormatMsg},
			EP: ep.Attr{Ifname: testbed.LinkName, Local: netip.AddrPortFrom(h.IPv4, 7100), Caps: fi.Msg | fi.Source,
				BindMode: dataplane.BindCopy},
			Do: h.Do,
		}
	}
	a, err := stack.Open(objs, attr(bed.A))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := stack.Open(objs, attr(bed.B))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ids := make([]fi.Addr, 1)
	if _, err := b.AV.Insert([]netip.AddrPort{netip.AddrPortFrom(bed.A.IPv4, 7100)}, ids, 0, nil); err != nil {
		t.Fatal(err)
	}
	bAtA := make([]fi.Addr, 1)
	if _, err := a.AV.Insert([]netip.AddrPort{netip.AddrPortFrom(bed.B.IPv4, 7100)}, bAtA, 0, nil); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if err := b.EP.Recv(buf, fi.AddrUnspec, nil); err != nil {
		t.Fatal(err)
	}
	for {
		err := a.EP.Send([]byte("hello"), bAtA[0], nil)
		if err == nil {
			break
		}
		if !errors.Is(err, fi.EAGAIN) {
			t.Fatal(err)
		}
	}
	var e [1]cq.Entry
	var src [1]fi.Addr
	for {
		n, err := b.RxCQ.ReadFrom(e[:], src[:])
		if n == 1 {
			break
		}
		if !errors.Is(err, fi.EAGAIN) {
			t.Fatal(err)
		}
		a.TxCQ.Read(make([]cq.Entry, 1)) // manual progress
	}
	if string(buf[:e[0].Len]) != "hello" || src[0] != ids[0] {
		t.Fatalf("received %q from %v, want hello from %v", buf[:e[0].Len], src[0], ids[0])
	}

	av, tx := b.AV, b.TxCQ
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if b.EP != nil || b.AV != nil || b.TxCQ != nil || b.RxCQ != nil {
		t.Fatalf("Close left %+v", b)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := av.Len(); !errors.Is(err, fi.EOPBADSTATE) && !errors.Is(err, fi.EBADF) {
		t.Errorf("AV after Close: %v", err)
	}
	if _, err := tx.Read(make([]cq.Entry, 1)); err == nil || errors.Is(err, fi.EAGAIN) {
		t.Errorf("CQ after Close: %v", err)
	}
}

func TestFailedOpenClosesAll(t *testing.T) {
	testutil.RequirePrivileged(t)
	objs, err := loader.Load(loader.Config{AVEntries: 64, MaxAVs: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer objs.Close()
	for range 4 { // more than MaxAVs: each failed open must release its AV
		_, err := stack.Open(objs, stack.Attr{AV: &av.Attr{}, EP: ep.Attr{Ifname: "no-such-if0", Local: netip.MustParseAddrPort("198.18.0.1:1")}})
		if err == nil || errors.Is(err, fi.ENOSPC) {
			t.Fatalf("Open on a missing interface: %v", err)
		}
	}
}
