//go:build linux

package ep_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

// An unknown sender under each policy.
func TestUnknownSender(t *testing.T) {
	t.Run("notavail", func(t *testing.T) {
		r := newRig(t, rigOpts{})
		aAtB := r.b.insert(t, r.a.local) // B knows A; A does not know B
		buf := make([]byte, 64)
		r.a.ep.Recv(buf, fi.AddrUnspec, "r")
		send(t, r.b, func() error { return r.b.ep.Send([]byte("who am i"), aAtB, nil) })
		e, src, ee := read(t, r.a.rx)
		if ee != nil || src != fi.AddrNotAvail || string(buf[:e.Len]) != "who am i" {
			t.Errorf("unknown sender: %+v src %v err %+v", e, src, ee)
		}
	})
	t.Run("source_err", func(t *testing.T) {
		r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.Caps |= fi.SourceErr }})
		aAtB := r.b.insert(t, r.a.local)
		buf := make([]byte, 64)
		r.a.ep.Recv(buf, fi.AddrUnspec, "first")
		r.a.ep.Recv(buf, fi.AddrUnspec, "second")
		send(t, r.b, func() error { return r.b.ep.Send([]byte("one"), aAtB, nil) })
		_, _, ee := read(t, r.a.rx)
		if ee == nil || ee.Err != fi.EADDRNOTAVAIL || ee.OpContext != "first" {
			t.Fatalf("want an EADDRNOTAVAIL error completion, got %+v", ee)
		}
		// err_data is the raw source: inserting it makes the next one known.
		out := []fi.Addr{fi.AddrNotAvail}
		if n, err := r.a.av.InsertRaw([][]byte{ee.ErrData}, out, 0, nil); n != 1 || err != nil {
			t.Fatalf("insert err_data: %v", err)
		}
		if ap, _ := r.a.av.LookupAddr(out[0]); ap != r.b.local {
			t.Errorf("err_data names %v, want %v", ap, r.b.local)
		}
		send(t, r.b, func() error { return r.b.ep.Send([]byte("two"), aAtB, nil) })
		e, src, ee := read(t, r.a.rx)
		if ee != nil || src != out[0] || e.OpContext != "second" {
			t.Errorf("after insert: %+v src %v err %+v", e, src, ee)
		}
	})
	t.Run("drop", func(t *testing.T) {
		r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.DropUnknown = true }})
		aAtB := r.b.insert(t, r.a.local)
		buf := make([]byte, 64)
		r.a.ep.Recv(buf, fi.AddrUnspec, "r")
		before, _ := r.dp.Counters()
		for range 5 {
			send(t, r.b, func() error { return r.b.ep.Send([]byte("x"), aAtB, nil) })
			read(t, r.b.tx)
		}
		waitCounter(t, r, bpf.CounterDropPolicy, before[bpf.CounterDropPolicy]+5)
		empty(t, r.a.rx)
	})
}

func waitCounter(t *testing.T, r *rig, c bpf.Counter, want uint64) {
	t.Helper()
	var got [bpf.NumCounters]uint64
	for range 200 {
		got, _ = r.dp.Counters()
		if got[c] >= want {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Errorf("counter %s = %d, want %d", c, got[c], want)
}

// fabtests av_removal_test / av_reinsert_test across namespaces: no message
// after the remove is attributed to the old fi_addr.
func TestRemoveMidStream(t *testing.T) {
	r := newRig(t, rigOpts{})
	aAtB := r.b.insert(t, r.a.local)
	bAtA := r.a.insert(t, r.b.local)
	buf := make([]byte, 64)
	exchange := func(i int) fi.Addr {
		t.Helper()
		r.a.ep.Recv(buf, fi.AddrUnspec, i)
		send(t, r.b, func() error { return r.b.ep.Send([]byte{byte(i)}, aAtB, nil) })
		read(t, r.b.tx)
		e, src, ee := read(t, r.a.rx)
		if ee != nil || e.OpContext != i {
			t.Fatalf("message %d: %+v %+v", i, e, ee)
		}
		return src
	}
	for i := range 20 {
		if src := exchange(i); src != bAtA {
			t.Fatalf("message %d from %v, want %v", i, src, bAtA)
		}
	}
	if err := r.a.av.Remove([]fi.Addr{bAtA}, 0); err != nil {
		t.Fatal(err)
	}
	// Another peer takes the freed index: B must not be reported as it.
	other := r.a.insert(t, netip.MustParseAddrPort("198.19.1.1:9"))
	if other != bAtA {
		t.Fatalf("freed index not reused: %v", other)
	}
	for i := 20; i < 40; i++ {
		if src := exchange(i); src != fi.AddrNotAvail {
			t.Fatalf("message %d after remove attributed to %v", i, src)
		}
	}
	r.a.av.Remove([]fi.Addr{other}, 0)
	again := r.a.insert(t, r.b.local)
	for i := 40; i < 60; i++ {
		if src := exchange(i); src != again {
			t.Fatalf("message %d after reinsert from %v, want %v", i, src, again)
		}
	}
}

func TestTaggedAndData(t *testing.T) {
	r := newRig(t, rigOpts{})
	aAtB := r.b.insert(t, r.a.local)
	r.a.insert(t, r.b.local)
	b1, b2, b3 := make([]byte, 64), make([]byte, 64), make([]byte, 64)
	r.a.ep.TRecv(b1, fi.AddrUnspec, 0x1200, 0x00ff, "12xx")
	r.a.ep.TRecv(b2, fi.AddrUnspec, 0x7777, 0, "7777")
	r.a.ep.Recv(b3, fi.AddrUnspec, "msg")
	send(t, r.b, func() error { return r.b.ep.TSendData([]byte("tagged 7777"), 42, aAtB, 0x7777, nil) })
	send(t, r.b, func() error { return r.b.ep.TSend([]byte("tagged 1234"), aAtB, 0x1234, nil) })
	send(t, r.b, func() error { return r.b.ep.SendData([]byte("plain"), 99, aAtB, nil) })
	got := map[any]struct {
		flags fi.Flags
		tag   uint64
		data  uint64
	}{}
	for range 3 {
		e, _, ee := read(t, r.a.rx)
		if ee != nil {
			t.Fatal(ee)
		}
		got[e.OpContext] = struct {
			flags fi.Flags
			tag   uint64
			data  uint64
		}{e.Flags, e.Tag, e.Data}
	}
	if g := got["7777"]; g.flags != fi.Recv|fi.Tagged|fi.RemoteCQData || g.tag != 0x7777 || g.data != 42 || string(b2[:11]) != "tagged 7777" {
		t.Errorf("tagged with data: %+v %q", g, b2)
	}
	if g := got["12xx"]; g.flags != fi.Recv|fi.Tagged || g.tag != 0x1234 || string(b1[:11]) != "tagged 1234" {
		t.Errorf("tagged with ignore bits: %+v", g)
	}
	if g := got["msg"]; g.flags != fi.Recv|fi.Msg|fi.RemoteCQData || g.data != 99 {
		t.Errorf("message with data: %+v", g)
	}
	// A tagged message waits for its receive (parked), then matches.
	send(t, r.b, func() error { return r.b.ep.TSend([]byte("late"), aAtB, 5, nil) })
	for i := 0; r.a.ep.Parked() == 0; i++ {
		if i == 200 {
			t.Fatal("the early tagged message was never parked")
		}
		r.a.ep.Progress()
		time.Sleep(5 * time.Millisecond)
	}
	empty(t, r.a.rx)
	r.a.ep.TRecv(b1, fi.AddrUnspec, 5, 0, "late")
	if e, _, ee := read(t, r.a.rx); ee != nil || e.OpContext != "late" || string(b1[:4]) != "late" {
		t.Errorf("late receive: %+v %+v", e, ee)
	}
	if n := r.a.ep.Parked(); n != 0 {
		t.Errorf("%d frames still parked after their receive matched", n)
	}
	// Truncation: the message is larger than the buffer.
	small := make([]byte, 4)
	r.a.ep.Recv(small, fi.AddrUnspec, "small")
	send(t, r.b, func() error { return r.b.ep.Send([]byte("0123456789"), aAtB, nil) })
	if _, _, ee := read(t, r.a.rx); ee == nil || ee.Err != fi.ETRUNC || ee.OLen != 6 || ee.Len != 4 || string(small) != "0123" {
		t.Errorf("truncation: %+v", ee)
	}
}

func TestMultiRecv(t *testing.T) {
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.MinMultiRecv = 100 }})
	aAtB := r.b.insert(t, r.a.local)
	r.a.insert(t, r.b.local)
	buf := make([]byte, 350)
	if err := r.a.ep.RecvMsg(buf, fi.AddrUnspec, "multi", fi.MultiRecv); err != nil {
		t.Fatal(err)
	}
	if err := r.a.ep.RecvMsg(make([]byte, 50), fi.AddrUnspec, "tiny", fi.MultiRecv); !errors.Is(err, fi.EINVAL) {
		t.Errorf("multi-recv buffer below the minimum: %v", err)
	}
	msg := bytes.Repeat([]byte{'m'}, 100)
	off := 0
	for i := range 3 {
		msg[0] = byte('0' + i)
		send(t, r.b, func() error { return r.b.ep.Send(msg, aAtB, nil) })
		e, _, ee := read(t, r.a.rx)
		if ee != nil || e.OpContext != "multi" || e.Len != 100 || len(e.Buf) != 100 || e.Buf[0] != byte('0'+i) || &e.Buf[0] != &buf[off] {
			t.Fatalf("multi-recv %d: %+v %+v", i, e, ee)
		}
		last := i == 2 // 350 - 300 < 100: released
		if (e.Flags&fi.MultiRecv != 0) != last {
			t.Errorf("multi-recv %d: FI_MULTI_RECV flag %v, want %v", i, e.Flags&fi.MultiRecv != 0, last)
		}
		off += 100
	}
	// The buffer is released: the next message waits for a new receive.
	send(t, r.b, func() error { return r.b.ep.Send(msg, aAtB, nil) })
	r.a.ep.Progress()
	empty(t, r.a.rx)
}

func TestCancel(t *testing.T) {
	r := newRig(t, rigOpts{})
	ctx := &struct{ n int }{7}
	if err := r.a.ep.Recv(make([]byte, 10), fi.AddrUnspec, ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.a.ep.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	_, _, ee := read(t, r.a.rx)
	if ee == nil || ee.Err != fi.ECANCELED || ee.Flags != fi.Recv|fi.Msg || ee.Len != 0 || ee.OpContext != ctx {
		t.Errorf("cancel completion: %+v", ee)
	}
	if err := r.a.ep.Cancel(ctx); !errors.Is(err, fi.ENOENT) {
		t.Errorf("second cancel: %v", err)
	}
	if err := r.a.ep.Cancel([]int{1}); !errors.Is(err, fi.ENOENT) {
		t.Errorf("cancel with an uncomparable context: %v", err)
	}
}

// Receive contexts: fi_rx_addr picks the context; the XDP program steers
// the frame to that context's socket.
func TestReceiveContexts(t *testing.T) {
	r := newRig(t, rigOpts{avAttr: av.Attr{RxCtxBits: 2}, epAttr: func(a *ep.Attr) { a.RxContexts = 3 }})
	aAtB := r.b.insert(t, r.a.local)
	r.a.insert(t, r.b.local)
	bufs := make([][]byte, 3)
	for i := range bufs {
		bufs[i] = make([]byte, 16)
		r.a.ep.Rx(i).Recv(bufs[i], fi.AddrUnspec, i)
	}
	for _, i := range []int{2, 0, 1} {
		send(t, r.b, func() error { return r.b.ep.Send([]byte{'c', byte('0' + i)}, fi.RxAddr(aAtB, i, 2), nil) })
	}
	for range 3 {
		e, _, ee := read(t, r.a.rx)
		if ee != nil || string(bufs[e.OpContext.(int)][:2]) != "c"+string(rune('0'+e.OpContext.(int))) {
			t.Errorf("context completion %+v %+v (buffers %q)", e, ee, bufs)
		}
	}
	if r.a.ep.Rx(3) != nil {
		t.Error("Rx(3) of 3 contexts")
	}
	// Context 3 does not exist: the XDP program drops it as malformed.
	before, _ := r.dp.Counters()
	send(t, r.b, func() error { return r.b.ep.Send([]byte("x"), fi.RxAddr(aAtB, 3, 2), nil) })
	waitCounter(t, r, bpf.CounterMalformed, before[bpf.CounterMalformed]+1)
}

// Peer groups: the group rides on the wire and only a receive of that
// group takes the message.
func TestPeerGroups(t *testing.T) {
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.Caps |= fi.DirectedRecv }})
	aAtB := r.b.insert(t, r.a.local)
	bAtA := r.a.insert(t, r.b.local)
	g0, g7 := make([]byte, 16), make([]byte, 16)
	r.a.ep.Recv(g0, fi.AddrUnspec, "group 0")
	r.a.ep.Recv(g7, fi.GroupAddr(ep.AnySource, 7), "group 7")
	send(t, r.b, func() error { return r.b.ep.Send([]byte("to 7"), fi.GroupAddr(aAtB, 7), nil) })
	e, src, _ := read(t, r.a.rx)
	if e.OpContext != "group 7" || string(g7[:4]) != "to 7" || src != bAtA {
		t.Errorf("group 7 message went to %v (src %v)", e.OpContext, src)
	}
	send(t, r.b, func() error { return r.b.ep.Send([]byte("to 0"), aAtB, nil) })
	if e, _, _ := read(t, r.a.rx); e.OpContext != "group 0" {
		t.Errorf("group 0 message went to %v", e.OpContext)
	}
	// Directed receive: only from B's fi_addr.
	d := make([]byte, 16)
	r.a.ep.Recv(d, bAtA+1, "from someone else")
	r.a.ep.Recv(d, bAtA, "from B")
	send(t, r.b, func() error { return r.b.ep.Send([]byte("b"), aAtB, nil) })
	if e, _, _ := read(t, r.a.rx); e.OpContext != "from B" {
		t.Errorf("directed receive matched %v", e.OpContext)
	}
}

// Traffic that is not xdpfab's stays with the kernel: a plain UDP service
// on the same interface keeps working while xdpfab is attached, also on
// the endpoint's address.
func TestKernelTrafficUntouched(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.b.insert(t, r.a.local)
	svc := netip.AddrPortFrom(r.a.local.Addr(), 9999)
	conn, err := r.a.h.ListenPacket("udp", svc.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	before, _ := r.dp.Counters()
	c, err := r.b.h.Dial("udp", svc.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 10 {
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 16)
		n, from, err := conn.ReadFrom(b)
		if err != nil || n != 1 || b[0] != byte(i) {
			t.Fatalf("kernel UDP %d: %v %v", i, err, b[:n])
		}
		// And the reply direction.
		conn.WriteTo([]byte("ok"), from)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(b); err != nil || string(b[:n]) != "ok" {
			t.Fatalf("kernel UDP reply: %v", err)
		}
	}
	after, _ := r.dp.Counters()
	if after[bpf.CounterPass]-before[bpf.CounterPass] < 10 {
		t.Errorf("passed counter moved %d, want >= 10", after[bpf.CounterPass]-before[bpf.CounterPass])
	}
	for _, k := range []bpf.Counter{bpf.CounterMalformed, bpf.CounterRedirectFail, bpf.CounterTranslated, bpf.CounterUnknown} {
		if after[k] != before[k] {
			t.Errorf("counter %s moved for kernel traffic", k)
		}
	}
	// A plain UDP datagram to the endpoint's own port is not xdpfab's
	// either: no header, so the program drops it as malformed rather than
	// feeding it to the endpoint.
	pc, _ := r.b.h.Dial("udp", r.a.local.String())
	defer pc.Close()
	pc.Write([]byte("not xdpfab"))
	waitCounter(t, r, bpf.CounterMalformed, before[bpf.CounterMalformed]+1)
}

// Close and reopen an endpoint 100 times: no leaked sockets, mappings or
// map entries.
func TestReopen(t *testing.T) {
	r := newRig(t, rigOpts{})
	aAtB := r.b.insert(t, r.a.local)
	r.a.insert(t, r.b.local)
	attr := ep.Attr{Ifname: testbed.LinkName, Local: r.a.local, AV: r.a.av, TxCQ: r.a.tx, RxCQ: r.a.rx, BindMode: dataplane.BindCopy}
	fdsOpen, mapsOpen := resources(t)
	r.a.ep.Close()
	fds0, maps0 := resources(t)
	if mapsOpen-maps0 < 2 || fdsOpen-fds0 < 1 {
		t.Fatalf("closing an endpoint released %d fds and %d mappings: the count sees nothing", fdsOpen-fds0, mapsOpen-maps0)
	}
	for i := range 100 {
		var e *ep.Endpoint
		err := r.a.h.Do(func() (err error) { e, err = ep.Open(r.dp, attr); return err })
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		if i%25 == 0 { // and it works
			buf := make([]byte, 8)
			e.Recv(buf, fi.AddrUnspec, i)
			send(t, r.b, func() error { return r.b.ep.Send([]byte("hi"), aAtB, nil) })
			read(t, r.b.tx)
			if en, _, ee := read(t, r.a.rx); ee != nil || en.OpContext != i {
				t.Fatalf("reopen %d: %+v %+v", i, en, ee)
			}
		}
		if err := e.Close(); err != nil {
			t.Fatalf("close %d: %v", i, err)
		}
	}
	fds1, maps1 := resources(t)
	if fds1 > fds0 || maps1 > maps0 {
		t.Errorf("after 100 reopens: fds %d -> %d, mappings %d -> %d", fds0, fds1, maps0, maps1)
	}
	var k bpf.EPKey
	var v bpf.EPVal
	n := 0
	for it := r.dp.EP.Iterate(); it.Next(&k, &v); {
		n++
	}
	if n != 1 { // B's endpoint
		t.Errorf("endpoint table holds %d entries, want 1", n)
	}
	// The AV is free again.
	if err := r.a.av.Close(); err != nil {
		t.Errorf("AV close after the endpoints closed: %v", err)
	}
}

// resources counts open fds and the mappings an endpoint makes: its
// socket rings (mapped from "socket:[...]") and its 16 MiB UMEM. Other
// anonymous mappings come and go with the Go heap.
func resources(t *testing.T) (fds, maps int) {
	t.Helper()
	ents, _ := readDir("/proc/self/fd")
	m, _ := readFile("/proc/self/maps")
	for _, l := range strings.Split(string(m), "\n") {
		var lo, hi uint64
		if _, err := fmt.Sscanf(l, "%x-%x", &lo, &hi); err != nil {
			continue
		}
		if strings.Contains(l, "socket:") || hi-lo == 4096*4096 {
			maps++
		}
	}
	return ents, maps
}
