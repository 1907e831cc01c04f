//go:build linux

package ep_test

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/wire"
)

// localNode is one namespace with the XDP program attached and several
// endpoints of this process on it.
type localNode struct {
	dp  *loader.Objects
	h   *testbed.Host
	alt netip.Addr // a second address of the host
	far netip.Addr // an address with no route
}

func newLocalNode(t *testing.T) *localNode {
	t.Helper()
	testutil.RequirePrivileged(t)
	dp, err := loader.Load(loader.Config{AVEntries: 1024, MaxAVs: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	bed := testbed.New(t, testbed.Options{StaticNeighbors: true})
	n := &localNode{dp: dp, h: bed.A, far: netip.MustParseAddr("198.19.254.254")}
	if bed.Net4.Contains(n.far) {
		n.far = netip.MustParseAddr("198.18.254.254")
	}
	// A second address in the bed's subnet that no host has.
	n.alt = bed.Net4.Addr()
	for range 200 {
		n.alt = n.alt.Next()
	}
	err = n.h.Do(func() error {
		att, err := dp.Attach(testbed.LinkName, loader.Native)
		if err != nil {
			return err
		}
		t.Cleanup(func() { att.Close() })
		l, err := netlink.LinkByName(testbed.LinkName)
		if err != nil {
			return err
		}
		return netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: n.alt.AsSlice(), Mask: net.CIDRMask(32, 32)}})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// open opens an endpoint with its own AV and CQs.
func (n *localNode) open(t *testing.T, local netip.AddrPort, avAttr av.Attr, adj func(*ep.Attr)) *side {
	t.Helper()
	s := &side{h: n.h, local: local}
	var err error
	if s.av, err = av.Open(n.dp, &avAttr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.av.Close() })
	for _, q := range []**cq.CQ{&s.tx, &s.rx} {
		if *q, err = cq.Open(cq.Attr{Size: 1024, Format: cq.FormatTagged}); err != nil {
			t.Fatal(err)
		}
		c := *q
		t.Cleanup(func() { c.Close() })
	}
	ea := ep.Attr{Ifname: testbed.LinkName, Local: local, AV: s.av, TxCQ: s.tx, RxCQ: s.rx,
		Caps: fi.Msg | fi.Tagged | fi.Source | fi.DirectedRecv, BindMode: dataplane.BindCopy}
	if adj != nil {
		adj(&ea)
	}
	s.ep = openEP(t, n.h, n.dp, ea)
	return s
}

// TestLocalSameProcess: endpoints of one process on one node, on the same
// and on another local address and a wildcard, exchange messages through
// same-host channels with every CQ semantic of the remote path.
func TestLocalSameProcess(t *testing.T) {
	n := newLocalNode(t)
	ip := n.h.IPv4
	x := n.open(t, netip.AddrPortFrom(ip, 7000), av.Attr{}, nil)
	y := n.open(t, netip.AddrPortFrom(ip, 7001), av.Attr{}, nil)
	z := n.open(t, netip.AddrPortFrom(n.alt, 7000), av.Attr{}, nil)
	w := n.open(t, netip.AddrPortFrom(netip.IPv4Unspecified(), 7002), av.Attr{Flags: fi.AVUserID}, nil)

	yAtX := x.insert(t, y.local)
	xAtY := y.insert(t, x.local)
	yAtZ := z.insert(t, y.local)
	wAtX := x.insert(t, netip.AddrPortFrom(n.alt, 7002)) // the wildcard, on the second address
	buf := make([]byte, 256)

	t.Run("known", func(t *testing.T) {
		y.ep.Recv(buf, fi.AddrUnspec, "r1")
		send(t, x, func() error { return x.ep.Send([]byte("hello"), yAtX, "s1") })
		e, src, ee := read(t, y.rx)
		if ee != nil || src != xAtY || string(buf[:e.Len]) != "hello" || e.OpContext != "r1" || e.Flags != fi.Recv|fi.Msg {
			t.Fatalf("got %+v src %v err %+v", e, src, ee)
		}
		if e, _, _ := read(t, x.tx); e.OpContext != "s1" || e.Flags != fi.Send|fi.Msg {
			t.Fatalf("send completion %+v", e)
		}
	})
	t.Run("unknown_other_address", func(t *testing.T) {
		y.ep.Recv(buf, fi.AddrUnspec, "r2")
		send(t, z, func() error { return z.ep.Inject([]byte("from z"), yAtZ) })
		e, src, ee := read(t, y.rx)
		if ee != nil || src != fi.AddrNotAvail || string(buf[:e.Len]) != "from z" {
			t.Fatalf("got %+v src %v err %+v", e, src, ee)
		}
		empty(t, z.tx) // inject: no completion
	})
	t.Run("tagged_directed_data", func(t *testing.T) {
		// A directed receive for z does not take x's message; the one for x does.
		zAtY := y.insert(t, z.local)
		other := make([]byte, 64)
		y.ep.TRecv(other, zAtY, 0x55, 0, "for z")
		y.ep.TRecv(buf, xAtY, 0x55, 0, "for x")
		send(t, x, func() error { return x.ep.TSendData([]byte("tagged"), 0xdada, yAtX, 0x55, nil) })
		e, src, ee := read(t, y.rx)
		if ee != nil || src != xAtY || e.OpContext != "for x" || e.Tag != 0x55 || e.Data != 0xdada ||
			e.Flags != fi.Recv|fi.Tagged|fi.RemoteCQData || string(buf[:e.Len]) != "tagged" {
			t.Fatalf("got %+v src %v err %+v", e, src, ee)
		}
		read(t, x.tx)
		if err := y.ep.Cancel("for z"); err != nil {
			t.Fatal(err)
		}
		read(t, y.rx)
	})
	t.Run("unexpected_then_posted", func(t *testing.T) {
		send(t, x, func() error { return x.ep.Inject([]byte("early"), yAtX) })
		for range 20 {
			y.ep.Progress() // parks it
		}
		y.ep.Recv(buf, fi.AddrUnspec, "late")
		e, src, _ := read(t, y.rx)
		if e.OpContext != "late" || src != xAtY || string(buf[:e.Len]) != "early" {
			t.Fatalf("got %+v src %v", e, src)
		}
	})
	t.Run("multi_recv", func(t *testing.T) {
		big := make([]byte, 2*y.ep.MaxMsgSize())
		if err := y.ep.RecvMsg(big, fi.AddrUnspec, "multi", fi.MultiRecv); err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"one", "two"} {
			send(t, x, func() error { return x.ep.Inject([]byte(m), yAtX) })
		}
		for _, m := range []string{"one", "two"} {
			e, _, _ := read(t, y.rx)
			if string(e.Buf) != m || e.OpContext != "multi" {
				t.Fatalf("multi-recv got %+v, want %q", e, m)
			}
		}
		y.ep.Cancel("multi")
		read(t, y.rx)
	})
	t.Run("wildcard_user_id", func(t *testing.T) {
		// x is bound to ip:7000, its source whatever address it sends
		// to; w's AV (FI_AV_USER_ID) knows it under a user ID.
		if err := w.av.SetUserID(w.insert(t, x.local), 0xbeef, 0); err != nil {
			t.Fatal(err)
		}
		w.ep.Recv(buf, fi.AddrUnspec, nil)
		send(t, x, func() error { return x.ep.Inject([]byte("to wildcard"), wAtX) })
		e, src, ee := read(t, w.rx)
		if ee != nil || src != 0xbeef || string(buf[:e.Len]) != "to wildcard" {
			t.Fatalf("got %+v src %v err %+v", e, src, ee)
		}
	})
	t.Run("unroutable_not_wildcard", func(t *testing.T) {
		// An address with no route is not the host's: the wildcard on its
		// port does not receive it; the send fails with neigh's error.
		far := x.insert(t, netip.AddrPortFrom(n.far, 7002))
		if err := x.ep.Send([]byte("x"), far, nil); !errors.Is(err, fi.ENETUNREACH) {
			t.Fatalf("send to an unroutable address: %v", err)
		}
	})
	t.Run("no_endpoint", func(t *testing.T) {
		none := x.insert(t, netip.AddrPortFrom(ip, 7999))
		if err := x.ep.Send([]byte("x"), none, nil); !errors.Is(err, fi.EADDRNOTAVAIL) {
			t.Fatalf("send to a local address without endpoint: %v", err)
		}
	})
	if st := y.ep.LocalStats(); st.In != 2 || st.BadChannels != 0 {
		t.Errorf("receiver stats %+v", st)
	}
}

// TestLocalPolicy: the unknown-source policies and auth keys apply to
// same-host messages as the XDP program applies them to frames.
func TestLocalPolicy(t *testing.T) {
	n := newLocalNode(t)
	ip := n.h.IPv4
	x := n.open(t, netip.AddrPortFrom(ip, 7100), av.Attr{}, nil)
	serr := n.open(t, netip.AddrPortFrom(ip, 7101), av.Attr{}, func(a *ep.Attr) { a.Caps |= fi.SourceErr })
	drop := n.open(t, netip.AddrPortFrom(ip, 7102), av.Attr{}, func(a *ep.Attr) { a.DropUnknown = true })
	buf := make([]byte, 64)

	serr.ep.Recv(buf, fi.AddrUnspec, "first")
	send(t, x, func() error { return x.ep.Inject([]byte("who"), x.insert(t, serr.local)) })
	_, _, ee := read(t, serr.rx)
	if ee == nil || ee.Err != fi.EADDRNOTAVAIL {
		t.Fatalf("want EADDRNOTAVAIL error completion, got %+v", ee)
	}
	if ap, err := fi.DecodeSockaddr(ee.ErrData); err != nil || ap != x.local {
		t.Errorf("err_data %v %v, want %v", ap, err, x.local)
	}

	drop.ep.Recv(buf, fi.AddrUnspec, nil)
	toDrop := x.insert(t, drop.local)
	for range 3 {
		send(t, x, func() error { return x.ep.Inject([]byte("dropped"), toDrop) })
	}
	for range 20 {
		drop.ep.Progress()
	}
	empty(t, drop.rx)
	if st := drop.ep.LocalStats(); st.Dropped != 3 {
		t.Errorf("dropped %d, want 3", st.Dropped)
	}

	// Auth keys: the receiver, enabled with key K, knows two senders bound
	// to K; the one that carries K is known, the keyless one is not.
	key := []byte{1, 2, 3, 4}
	rav, err := av.Open(n.dp, &av.Attr{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rav.Close() })
	kh, err := rav.InsertAuthKey(key, 0)
	if err != nil {
		t.Fatal(err)
	}
	sav, err := av.Open(n.dp, &av.Attr{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sav.Close() })
	skh, err := sav.InsertAuthKey(key, 0)
	if err != nil {
		t.Fatal(err)
	}
	rx, _ := cq.Open(cq.Attr{Format: cq.FormatTagged})
	tx, _ := cq.Open(cq.Attr{Format: cq.FormatTagged})
	t.Cleanup(func() { rx.Close(); tx.Close() })
	recvSide := &side{h: n.h, av: rav, rx: rx, tx: tx, local: netip.AddrPortFrom(ip, 7104)}
	recvSide.ep = openEP(t, n.h, n.dp, ep.Attr{Ifname: testbed.LinkName, Local: recvSide.local, AV: rav, TxCQ: tx, RxCQ: rx,
		Caps: fi.Msg | fi.Source, AuthKey: kh, BindMode: dataplane.BindCopy})
	stx, _ := cq.Open(cq.Attr{Format: cq.FormatTagged})
	srx, _ := cq.Open(cq.Attr{Format: cq.FormatTagged})
	t.Cleanup(func() { stx.Close(); srx.Close() })
	keyed := &side{h: n.h, av: sav, rx: srx, tx: stx, local: netip.AddrPortFrom(ip, 7105)}
	keyed.ep = openEP(t, n.h, n.dp, ep.Attr{Ifname: testbed.LinkName, Local: keyed.local, AV: sav, TxCQ: stx, RxCQ: srx,
		Caps: fi.Msg | fi.Source, AuthKey: skh, BindMode: dataplane.BindCopy})
	out := []fi.Addr{kh, kh}
	if _, err := rav.Insert([]netip.AddrPort{keyed.local, x.local}, out, fi.AuthKey, nil); err != nil {
		t.Fatal(err)
	}
	// keyed carries the key: known. x is bound to the key in the AV but
	// sends without it: unknown.
	recvSide.ep.Recv(buf, fi.AddrUnspec, nil)
	send(t, keyed, func() error { return keyed.ep.Inject([]byte("keyed"), keyed.insert(t, recvSide.local)) })
	if e, src, ee := read(t, rx); ee != nil || src != out[0] || string(buf[:e.Len]) != "keyed" {
		t.Fatalf("keyed sender: %+v src %v err %+v", e, src, ee)
	}
	recvSide.ep.Recv(buf, fi.AddrUnspec, nil)
	send(t, x, func() error { return x.ep.Inject([]byte("keyless"), x.insert(t, recvSide.local)) })
	if e, src, ee := read(t, rx); ee != nil || src != fi.AddrNotAvail || string(buf[:e.Len]) != "keyless" {
		t.Fatalf("keyless sender: %+v src %v err %+v", e, src, ee)
	}
}

// TestLocalFlowControl: a full channel is EAGAIN, never a silent drop;
// consuming makes room; closing the receiver makes sends fail.
func TestLocalFlowControl(t *testing.T) {
	n := newLocalNode(t)
	ip := n.h.IPv4
	x := n.open(t, netip.AddrPortFrom(ip, 7200), av.Attr{}, nil)
	y := n.open(t, netip.AddrPortFrom(ip, 7201), av.Attr{}, nil)
	yAtX := x.insert(t, y.local)
	sent := 0
	for {
		err := x.ep.Inject([]byte{byte(sent)}, yAtX)
		if errors.Is(err, fi.EAGAIN) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sent++
		if sent > 10000 {
			t.Fatal("no back-pressure")
		}
	}
	if sent < ep.ShmSlots {
		t.Fatalf("EAGAIN after %d sends", sent)
	}
	buf := make([]byte, 8)
	for i := range sent {
		y.ep.Recv(buf, fi.AddrUnspec, nil)
		e, _, _ := read(t, y.rx)
		if e.Len != 1 || buf[0] != byte(i) {
			t.Fatalf("message %d: %+v %v (order or loss)", i, e, buf[0])
		}
	}
	send(t, x, func() error { return x.ep.Inject([]byte("room"), yAtX) })
	y.ep.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := x.ep.Inject([]byte("gone"), yAtX)
		if errors.Is(err, fi.EADDRNOTAVAIL) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("send to a closed local endpoint: %v", err)
		}
	}
}

// TestLocalHostile plays a hostile sender: it writes garbage into its own
// channel. The receiver stays up, counts and closes that channel only;
// the other senders' channels carry on, and the scribbler's next send sets
// up a fresh channel.
func TestLocalHostile(t *testing.T) {
	n := newLocalNode(t)
	ip := n.h.IPv4
	x := n.open(t, netip.AddrPortFrom(ip, 7300), av.Attr{}, nil)
	z := n.open(t, netip.AddrPortFrom(n.alt, 7300), av.Attr{}, nil)
	y := n.open(t, netip.AddrPortFrom(ip, 7301), av.Attr{}, nil)
	yAtX, yAtZ := x.insert(t, y.local), z.insert(t, y.local)
	buf := make([]byte, 64)
	for _, s := range []*side{x, z} {
		y.ep.Recv(buf, fi.AddrUnspec, nil)
		send(t, s, func() error { return s.ep.Inject([]byte("hi"), s.insert(t, y.local)) })
		read(t, y.rx)
	}
	// Each attack is on a fresh channel whose one message was consumed:
	// the next slot is slot 1, the tail 1.
	for i, attack := range []func(mem, next []byte){
		func(mem, next []byte) { // a well-formed header with a length beyond the slot, published
			wire.PutHdr(next[8:], wire.Hdr{Op: wire.OpMsg})
			binary.NativeEndian.PutUint32(next, 0xffffffff)
			binary.NativeEndian.PutUint64(mem[0:], 2)
		},
		func(mem, next []byte) { // a tail far beyond the head
			binary.NativeEndian.PutUint64(mem[0:], 1<<40)
		},
		func(mem, next []byte) { // a header that is not one
			binary.NativeEndian.PutUint32(next, 8)
			copy(next[8:], "garbage garbage garbage garbage!")
			binary.NativeEndian.PutUint64(mem[0:], 2)
		},
	} {
		if !x.ep.ShmScribble(y.local, attack) {
			t.Fatalf("attack %d: x has no channel to y", i)
		}
		for range 10 {
			y.ep.Progress()
		}
		if st := y.ep.LocalStats(); st.BadChannels != uint64(i+1) || st.In != 1 {
			t.Fatalf("attack %d: receiver stats %+v", i, st)
		}
		// z is not affected.
		y.ep.Recv(buf, fi.AddrUnspec, "z")
		send(t, z, func() error { return z.ep.Inject([]byte("still here"), yAtZ) })
		if e, _, _ := read(t, y.rx); e.OpContext != "z" || string(buf[:e.Len]) != "still here" {
			t.Fatalf("attack %d: other channel: %+v", i, e)
		}
		// x's next send finds its channel closed and sets up another.
		y.ep.Recv(buf, fi.AddrUnspec, "x")
		send(t, x, func() error { return x.ep.Inject([]byte("again"), yAtX) })
		if e, _, _ := read(t, y.rx); e.OpContext != "x" || string(buf[:e.Len]) != "again" {
			t.Fatalf("attack %d: fresh channel: %+v", i, e)
		}
	}
}

// TestLocalQuota: channels beyond the quota, on either side, are EDQUOT.
func TestLocalQuota(t *testing.T) {
	n := newLocalNode(t)
	ip := n.h.IPv4
	defer ep.SetShmQuota(2)()
	y := n.open(t, netip.AddrPortFrom(ip, 7400), av.Attr{}, nil)
	var senders []*side
	for i := range 3 {
		senders = append(senders, n.open(t, netip.AddrPortFrom(ip, uint16(7401+i)), av.Attr{}, nil))
	}
	for i, s := range senders {
		err := s.ep.Inject([]byte("x"), s.insert(t, y.local))
		if want := i < 2; (err == nil) != want || (!want && !errors.Is(err, fi.EDQUOT)) {
			t.Fatalf("sender %d to one receiver: %v", i, err)
		}
	}
	x := senders[0]
	var dests []*side
	for i := range 2 {
		dests = append(dests, n.open(t, netip.AddrPortFrom(ip, uint16(7410+i)), av.Attr{}, nil))
	}
	// x already sends to y: one more is fine, the third is over.
	if err := x.ep.Inject([]byte("x"), x.insert(t, dests[0].local)); err != nil {
		t.Fatal(err)
	}
	if err := x.ep.Inject([]byte("x"), x.insert(t, dests[1].local)); !errors.Is(err, fi.EDQUOT) {
		t.Fatalf("third channel of one sender: %v", err)
	}
}

// TestLocalAutoProgress: a receiver asleep in automatic progress is woken
// by the sender (its eventfd), not by the poll timeout.
func TestLocalAutoProgress(t *testing.T) {
	n := newLocalNode(t)
	ip := n.h.IPv4
	x := n.open(t, netip.AddrPortFrom(ip, 7500), av.Attr{}, nil)
	y := n.open(t, netip.AddrPortFrom(ip, 7501), av.Attr{}, func(a *ep.Attr) { a.Progress = ep.ProgressAuto })
	yAtX := x.insert(t, y.local)
	buf := make([]byte, 64)
	y.ep.Recv(buf, fi.AddrUnspec, nil)
	send(t, x, func() error { return x.ep.Inject([]byte("setup"), yAtX) })
	read(t, y.rx)
	const rounds = 20
	start := time.Now()
	for range rounds {
		y.ep.Recv(buf, fi.AddrUnspec, nil)
		time.Sleep(5 * time.Millisecond) // the progress goroutine goes to sleep
		t0 := time.Now()
		send(t, x, func() error { return x.ep.Inject([]byte("wake"), yAtX) })
		var e [1]cq.Entry
		for {
			if n, _ := y.rx.Read(e[:]); n == 1 { // no progress from this read: automatic
				break
			}
			if time.Since(t0) > 5*time.Second {
				t.Fatal("no completion")
			}
		}
	}
	// A wake by the 50 ms poll timeout would take 25 ms on average.
	if per := (time.Since(start) - rounds*5*time.Millisecond) / rounds; per > 15*time.Millisecond {
		t.Errorf("%v per wake-up: the eventfd did not wake the receiver", per)
	}
}
