//go:build linux

package ep_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

// recvHeld receives n messages from B at e, one at a time, and returns the
// most frames e kept back from a fill ring after any of them.
func recvHeld(t *testing.T, r *rig, e *ep.Endpoint, rx *cq.CQ, to fi.Addr, n int) int {
	t.Helper()
	buf, most := make([]byte, 2048), 0
	for i := range n {
		if err := e.Recv(buf, fi.AddrUnspec, nil); err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprint("m", i)
		send(t, r.b, func() error { return r.b.ep.Inject([]byte(msg), to) })
		if ent, _, ee := read(t, rx); ee != nil || string(buf[:ent.Len]) != msg {
			t.Fatalf("message %d: %q (error entry %+v)", i, buf[:ent.Len], ee)
		}
		most = max(most, e.HeldForRefill())
	}
	return most
}

// Received frames go back to the fill ring in batches: a receive context
// keeps at most 16 per queue back (a sharing domain's endpoint what the
// domain counted in its share: a quarter of a small ring); the batching
// is real (it does keep some).
func TestRefillBatched(t *testing.T) {
	r := newRig(t, rigOpts{})
	to := r.b.insert(t, r.a.local)
	if most := recvHeld(t, r, r.a.ep, r.a.rx, to, 100); most == 0 || most > 16 {
		t.Errorf("an endpoint of 4096 frames kept up to %d frames back, want 1..16", most)
	}
	// A sharing domain's endpoints on A's queue, rings of 64 and 16.
	r.a.ep.Close()
	var dom *ep.Domain
	if err := r.a.h.Do(func() (err error) {
		dom, err = ep.NewDomain(ep.DomainConfig{Ifname: testbed.LinkName, Slots: 4, RxFrames: 1024, TxFrames: 64})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dom.Close() })
	for i, c := range []struct{ ring, want int }{{64, 16}, {16, 4}} {
		local := netip.AddrPortFrom(r.a.local.Addr(), uint16(7100+i))
		tx, rx := cqPair(t, cq.Attr{Size: 256, Format: cq.FormatMsg})
		var p *ep.Prepared
		if err := r.a.h.Do(func() (err error) {
			p, err = dom.Prepare(r.dp, ep.Attr{Ifname: testbed.LinkName, Local: local, AV: r.a.av, RingSize: c.ring, Caps: fi.Msg})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		info, _ := p.Handover()
		if info.Share == nil || info.Share.Lazy != c.want {
			t.Fatalf("ring %d: handover's share %+v, want lazy %d", c.ring, info.Share, c.want)
		}
		var e *ep.Endpoint
		r.a.h.Do(func() error {
			e = adoptInProcess(t, p, ep.Attr{Ifname: testbed.LinkName, AV: r.a.av, TxCQ: tx, RxCQ: rx, Local: local, Caps: fi.Msg})
			return nil
		})
		t.Cleanup(func() { e.Close() })
		if most := recvHeld(t, r, e, rx, r.b.insert(t, local), 60); most == 0 || most > c.want {
			t.Errorf("domain endpoint with rings of %d kept up to %d frames back, want 1..%d", c.ring, most, c.want)
		}
	}
}

// The contexts of a device keep back at most an eighth of a queue's fill
// share between them, however many there are: nine contexts on a UMEM of
// 256 frames (128 for the fill ring) each keeping 15 emptied the ring
// after 128 messages, and receiving stopped for good (helper-30's case);
// a bound per context that shrank with the count of contexts still let
// them keep 43 between them (helper-31). A context that finds nothing
// for a while gives back what it kept.
func TestRefillManyContexts(t *testing.T) {
	r := newRig(t, rigOpts{avAttr: av.Attr{RxCtxBits: 4}, epAttr: func(a *ep.Attr) {
		a.Frames, a.RxContexts, a.Queues = 256, 9, 1
	}})
	to := r.b.insert(t, r.a.local)
	buf := make([]byte, 2048)
	for i := range 270 {
		if err := r.a.ep.Rx(i%9).Recv(buf, fi.AddrUnspec, nil); err != nil {
			t.Fatal(err)
		}
		msg := fmt.Sprint("m", i)
		send(t, r.b, func() error { return r.b.ep.Inject([]byte(msg), fi.RxAddr(to, i%9, 4)) })
		if ent, _, ee := read(t, r.a.rx); ee != nil || string(buf[:ent.Len]) != msg {
			t.Fatalf("message %d: %q (error entry %+v)", i, buf[:ent.Len], ee)
		}
		if held := r.a.ep.HeldForRefill(); held > 128/8 {
			t.Fatalf("after message %d the contexts keep %d frames back", i, held)
		}
	}
	var ent [1]cq.Entry
	for range 200 {
		r.a.rx.Read(ent[:])
	}
	if held := r.a.ep.HeldForRefill(); held != 0 {
		t.Errorf("idle for 200 reads, a context still keeps %d frames back", held)
	}
}

// On a device of several queues the parked frames of one queue stay
// within half its fill share: the device's parking budget (a quarter of
// the UMEM) is the whole fill share of a queue when there are two, so one
// flow's unmatched messages could empty that queue's fill ring, and with
// no frame arriving no drop would ever free one (helper-31's case). The
// oldest of the queue's parked messages make room: the newest arrive.
func TestParkPerQueue(t *testing.T) {
	r := newRig(t, rigOpts{bedOpts: testbed.Options{RxQueues: 2, TxQueues: 2}, epAttr: func(a *ep.Attr) {
		a.Frames = 256 // a fill share of 64 per queue, a parking budget of 64
	}})
	to := r.b.insert(t, r.a.local)
	for i := range 200 {
		msg := fmt.Sprint("m", i)
		send(t, r.b, func() error { return r.b.ep.Inject([]byte(msg), to) })
		r.a.ep.Progress() // nothing posted: A parks it
	}
	for range 100 {
		r.a.ep.Progress()
	}
	buf := make([]byte, 2048)
	var got []string
	for {
		if err := r.a.ep.Recv(buf, fi.AddrUnspec, nil); err != nil {
			t.Fatal(err)
		}
		var ent [1]cq.Entry
		n, _ := r.a.rx.Read(ent[:])
		if n == 0 {
			break
		}
		got = append(got, string(buf[:ent[0].Len]))
	}
	if len(got) == 0 || got[len(got)-1] != "m199" || len(got) > 32 {
		t.Errorf("parked messages delivered: %d, the last %q; want at most 32, the last m199", len(got), got[len(got)-min(len(got), 1):])
	}
}

// A context may always park two messages, whatever the others hold: an
// endpoint that opens after another flooded the queue with messages no
// receive matches still keeps the two it gets before its receives
// (helper-32: the per-queue limit dropped them).
func TestParkFloorAfterFlood(t *testing.T) {
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.Frames = 512 }}) // a fill share of 256, a parking budget of 128
	to := r.b.insert(t, r.a.local)
	for i := range 300 {
		send(t, r.b, func() error { return r.b.ep.Inject([]byte(fmt.Sprint("junk", i)), to) })
		r.a.ep.Progress()
	}
	tx, rx := cqPair(t, cq.Attr{Size: 64, Format: cq.FormatMsg})
	local := netip.AddrPortFrom(r.a.local.Addr(), port+1)
	late := openEP(t, r.a.h, r.dp, ep.Attr{Ifname: testbed.LinkName, Local: local, AV: r.a.av, TxCQ: tx, RxCQ: rx, BindMode: dataplane.BindCopy})
	toLate := r.b.insert(t, local)
	for i := range 2 {
		send(t, r.b, func() error { return r.b.ep.Inject([]byte(fmt.Sprint("late", i)), toLate) })
	}
	for range 20 {
		late.Progress()
	}
	buf := make([]byte, 64)
	for i := range 2 {
		if err := late.Recv(buf, fi.AddrUnspec, nil); err != nil {
			t.Fatal(err)
		}
		if ent, _, ee := read(t, rx); ee != nil || string(buf[:ent.Len]) != fmt.Sprint("late", i) {
			t.Fatalf("late endpoint's message %d: %q (error entry %+v)", i, buf[:ent.Len], ee)
		}
	}
	if d := late.RecvStats().ParkDropped; d != 0 {
		t.Errorf("the late endpoint dropped %d parked messages", d)
	}
}
