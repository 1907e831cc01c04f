//go:build linux

package ep_test

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/wire"
)

// Tests of the messages an endpoint keeps for receives not yet posted
// (parked), against a sender that sends what no receive will ever match.

// dialFrom is a kernel UDP socket in s's namespace connected to dst: a
// sender that is not in any AV and writes raw xdpfab datagrams.
func dialFrom(t *testing.T, s *side, dst netip.AddrPort) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	if err := s.h.Do(func() (err error) {
		c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dst))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// datagram is an xdpfab datagram with header h and payload p.
func datagram(h wire.Hdr, p string) []byte {
	b := make([]byte, wire.HdrLen+len(p))
	wire.PutHdr(b, h)
	copy(b[wire.HdrLen:], p)
	return b
}

// flood writes n copies of b through c, letting e take them off its ring
// every 16 (its ring must not overflow: the kernel would drop them before
// the endpoint sees them).
func flood(t *testing.T, c *net.UDPConn, e *ep.Endpoint, b []byte, n int) {
	t.Helper()
	for i := range n {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if i%16 == 15 {
			time.Sleep(2 * time.Millisecond)
			e.Progress()
		}
	}
	time.Sleep(20 * time.Millisecond)
	e.Progress()
}

// junk is a message no receive of the tests matches: peer group 0xbad.
var junk = datagram(wire.Hdr{Op: wire.OpMsg, Group: 0xbad}, "junk")

// smallCQEndpoint opens an endpoint on host A at port with a receive CQ of
// size entries of its own, for tests that run it out of CQ room.
func smallCQEndpoint(t *testing.T, r *rig, size int, port uint16) (*ep.Endpoint, *cq.CQ, netip.AddrPort) {
	t.Helper()
	rx, err := cq.Open(cq.Attr{Size: size, Format: cq.FormatTagged})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	l := netip.AddrPortFrom(r.a.h.IPv4, port)
	e := openEP(t, r.a.h, r.dp, ep.Attr{Ifname: testbed.LinkName, Local: l, AV: r.a.av, TxCQ: r.a.tx, RxCQ: rx, Caps: fi.Msg | fi.Tagged,
		BindMode: dataplane.BindCopy})
	return e, rx, l
}

// A sender fills a receive context's park with messages no receive will
// ever match. Before, the context then stopped taking frames off its
// ring at all, for good: a message for a posted receive never completed.
// Now the oldest kept message is dropped (counted) to make room, and the
// matching message is delivered.
func TestParkedJunkDoesNotBlockMatches(t *testing.T) {
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.Frames, a.RingSize = 512, 128 }}) // keeps 128
	c := dialFrom(t, r.b, r.a.local)
	flood(t, c, r.a.ep, junk, 200)
	buf := make([]byte, 64)
	if err := r.a.ep.Recv(buf, fi.AddrUnspec, "legit"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(datagram(wire.Hdr{Op: wire.OpMsg}, "hello")); err != nil {
		t.Fatal(err)
	}
	e, _, ee := read(t, r.a.rx)
	if ee != nil || e.OpContext != "legit" || string(buf[:e.Len]) != "hello" {
		t.Fatalf("got %+v %q (%+v), want the legit message", e, buf[:e.Len], ee)
	}
	if n := r.a.ep.Parked(); n > 128 {
		t.Fatalf("%d messages kept, limit 128", n)
	}
	if st := r.a.ep.RecvStats(); st.ParkDropped == 0 {
		t.Fatalf("200 unmatched messages and none dropped: %+v (kept %d)", st, r.a.ep.Parked())
	}
}

// Messages of an operation the endpoint lacks the capability for (tagged,
// without fi.Tagged) can never be received: they are dropped on arrival
// and counted, not kept.
func TestUnmatchableDroppedOnArrival(t *testing.T) {
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.Caps = fi.Msg | fi.Source }})
	c := dialFrom(t, r.b, r.a.local)
	flood(t, c, r.a.ep, datagram(wire.Hdr{Op: wire.OpTagged, Tag: 9}, "tagged"), 40)
	if n := r.a.ep.Parked(); n != 0 {
		t.Fatalf("%d tagged messages kept by an endpoint without fi.Tagged", n)
	}
	if st := r.a.ep.RecvStats(); st.Unmatchable != 40 {
		t.Fatalf("RecvStats %+v, want 40 unmatchable", st)
	}
}

// The endpoints of one process on one interface share its frames. Before,
// two of them each kept a quarter of those frames for junk, which took
// every frame the fill rings had: a third endpoint of the process on the
// interface received nothing. Now the device's contexts keep at most a
// quarter of its frames together, each an equal share (three contexts:
// 42 of 128 each), so one flooded endpoint leaves the others theirs.
func TestParkedJunkDoesNotStarveDevice(t *testing.T) {
	attr := func(a *ep.Attr) { a.Frames, a.RingSize = 512, 128 }
	r := newRig(t, rigOpts{epAttr: attr})
	mk := func(p uint16) (*ep.Endpoint, *cq.CQ, netip.AddrPort) {
		rx, err := cq.Open(cq.Attr{Size: 1024, Format: cq.FormatTagged})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := cq.Open(cq.Attr{Size: 1024})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rx.Close(); tx.Close() })
		l := netip.AddrPortFrom(r.a.h.IPv4, p)
		a := ep.Attr{Ifname: testbed.LinkName, Local: l, AV: r.a.av, TxCQ: tx, RxCQ: rx, Caps: fi.Msg | fi.Tagged, BindMode: dataplane.BindCopy}
		attr(&a)
		return openEP(t, r.a.h, r.dp, a), rx, l
	}
	e2, _, l2 := mk(7001)
	e3, rx3, l3 := mk(7002)
	flood(t, dialFrom(t, r.b, r.a.local), r.a.ep, junk, 128)
	flood(t, dialFrom(t, r.b, l2), e2, junk, 128)
	for i, e := range []*ep.Endpoint{r.a.ep, e2} {
		if n := e.Parked(); n > 128/3 {
			t.Errorf("endpoint %d keeps %d messages, its share is %d", i, n, 128/3)
		}
	}
	buf := make([]byte, 64)
	c3 := dialFrom(t, r.b, l3)
	for i := range 5 {
		if err := e3.Recv(buf, fi.AddrUnspec, i); err != nil {
			t.Fatal(err)
		}
		if _, err := c3.Write(datagram(wire.Hdr{Op: wire.OpMsg}, "hello")); err != nil {
			t.Fatal(err)
		}
		if e, _, ee := read(t, rx3); ee != nil || e.OpContext != i {
			t.Fatalf("third endpoint: %+v (%+v), want receive %d", e, ee, i)
		}
	}
}

// A message kept while its sender's AV entry is removed and the index
// given to another peer must not be attributed to that peer. Before, it
// kept the fi_addr it arrived with: a directed receive for the new peer
// received it, reported as from the new peer. Now it is from an unknown
// source: not for the directed receive; a receive from any source gets it
// with FI_ADDR_NOTAVAIL.
func TestParkedMessageAfterIndexReuse(t *testing.T) {
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.Caps |= fi.DirectedRecv }})
	bIdx := r.a.insert(t, r.b.local)
	aIdx := r.b.insert(t, r.a.local)
	send(t, r.b, func() error { return r.b.ep.TSend([]byte("from B"), aIdx, 42, nil) })
	read(t, r.b.tx)
	for i := 0; i < 200 && r.a.ep.Parked() == 0; i++ {
		r.a.ep.Progress()
		time.Sleep(5 * time.Millisecond)
	}
	if r.a.ep.Parked() != 1 {
		t.Fatalf("B's message not kept")
	}
	if err := r.a.av.Remove([]fi.Addr{bIdx}, 0); err != nil {
		t.Fatal(err)
	}
	other := netip.MustParseAddrPort("198.18.250.7:9999") // never sends
	if oIdx := r.a.insert(t, other); oIdx != bIdx {
		t.Fatalf("the new peer got index %d, not B's %d", oIdx, bIdx)
	}
	buf := make([]byte, 64)
	if err := r.a.ep.TRecv(buf, bIdx, 42, 0, "for other"); err != nil {
		t.Fatal(err)
	}
	empty(t, r.a.rx)
	if err := r.a.ep.TRecv(buf, fi.AddrUnspec, 42, 0, "any"); err != nil {
		t.Fatal(err)
	}
	e, src, ee := read(t, r.a.rx)
	if ee != nil || e.OpContext != "any" || src != fi.AddrNotAvail || string(buf[:e.Len]) != "from B" {
		t.Fatalf("got %+v from %v (%+v) %q, want B's message from FI_ADDR_NOTAVAIL", e, src, ee, buf[:e.Len])
	}
}

// Receives posted while the CQ is full leave kept messages that match
// them behind; they are delivered, in order, once the CQ has room. (A
// receive posted is compared with the kept messages alone only while
// none of them matches an earlier receive.)
func TestParkedDrainResumesAfterCQFull(t *testing.T) {
	r := newRig(t, rigOpts{})
	e, rx, l := smallCQEndpoint(t, r, 4, 7003)
	c := dialFrom(t, r.b, l)
	for i := range 10 {
		if _, err := c.Write(datagram(wire.Hdr{Op: wire.OpTagged, Tag: 7}, fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 200 && e.Parked() < 10; i++ {
		e.Progress()
		time.Sleep(5 * time.Millisecond)
	}
	if n := e.Parked(); n != 10 {
		t.Fatalf("%d of 10 messages kept", n)
	}
	bufs := make([][]byte, 10)
	for i := range bufs {
		bufs[i] = make([]byte, 8)
		if err := e.TRecv(bufs[i], fi.AddrUnspec, 7, 0, i); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		got, _, ee := read(t, rx)
		if ee != nil || got.OpContext != i || string(bufs[i][:got.Len]) != fmt.Sprint(i) {
			t.Fatalf("completion %d: %+v (%+v) %q", i, got, ee, bufs[i][:got.Len])
		}
	}
	if n := e.Parked(); n != 0 {
		t.Fatalf("%d messages still kept", n)
	}
}

// The same on the same-host path: a sender on the node sends tagged
// messages no receive matches, then one that a posted receive does, on
// the same channel. Before, the receiver kept 256 and then left the
// channel's next message where it was, for good: the matching one never
// arrived. Now the oldest kept ones are dropped (counted) and it does.
func TestLocalParkedJunkDoesNotStall(t *testing.T) {
	n := newLocalNode(t)
	x := n.open(t, netip.AddrPortFrom(n.h.IPv4, 7200), av.Attr{}, nil)
	y := n.open(t, netip.AddrPortFrom(n.h.IPv4, 7201), av.Attr{}, nil)
	yAtX := x.insert(t, y.local)
	for i := range 400 {
		send(t, x, func() error {
			y.ep.Progress()
			return x.ep.TInject([]byte("junk"), yAtX, 999)
		})
		if i%32 == 31 {
			y.ep.Progress()
		}
	}
	buf := make([]byte, 8)
	if err := y.ep.TRecv(buf, fi.AddrUnspec, 1, 0, "legit"); err != nil {
		t.Fatal(err)
	}
	send(t, x, func() error { return x.ep.TInject([]byte("hello"), yAtX, 1) })
	e, _, ee := read(t, y.rx)
	if ee != nil || e.OpContext != "legit" || string(buf[:e.Len]) != "hello" {
		t.Fatalf("got %+v %q (%+v), want the legit message", e, buf[:e.Len], ee)
	}
	if st := y.ep.RecvStats(); st.ParkDropped == 0 {
		t.Fatalf("400 unmatched messages and none dropped: %+v", st)
	}
}

// The same-host twin of TestParkedDrainResumesAfterCQFull: parked
// same-host messages left behind for want of CQ room are delivered by the
// next progress (before, only by the next receive posted).
func TestLocalParkedDrainResumesAfterCQFull(t *testing.T) {
	n := newLocalNode(t)
	rx, err := cq.Open(cq.Attr{Size: 4, Format: cq.FormatTagged})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	x := n.open(t, netip.AddrPortFrom(n.h.IPv4, 7200), av.Attr{}, nil)
	y := n.open(t, netip.AddrPortFrom(n.h.IPv4, 7201), av.Attr{}, func(a *ep.Attr) { a.RxCQ = rx })
	yAtX := x.insert(t, y.local)
	for i := range 10 {
		send(t, x, func() error { return x.ep.TInject([]byte(fmt.Sprint(i)), yAtX, 7) })
	}
	y.ep.Progress()
	bufs := make([][]byte, 10)
	for i := range bufs {
		bufs[i] = make([]byte, 8)
		if err := y.ep.TRecv(bufs[i], fi.AddrUnspec, 7, 0, i); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		got, _, ee := read(t, rx)
		if ee != nil || got.OpContext != i || string(bufs[i][:got.Len]) != fmt.Sprint(i) {
			t.Fatalf("completion %d: %+v (%+v) %q", i, got, ee, bufs[i][:got.Len])
		}
	}
}
