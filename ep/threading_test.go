//go:build linux

package ep_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

// An endpoint opened with fi.ThreadDomain and manual progress runs without
// locks and works as any other: messages both ways, each attributed to its
// sender's fi_addr (the race detector watches the unlocked paths, all on
// this goroutine as the model demands).
func TestThreadDomainPingPong(t *testing.T) {
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.Threading = fi.ThreadDomain }})
	for _, s := range []*side{r.a, r.b} {
		if got := s.ep.Threading(); got != fi.ThreadDomain {
			t.Fatalf("%s: Threading() = %v, want %v", s.h.Name(), got, fi.ThreadDomain)
		}
	}
	aOfB, bOfA := r.a.insert(t, r.b.local), r.b.insert(t, r.a.local)
	bufA, bufB := make([]byte, 2048), make([]byte, 2048)
	for i := range 200 {
		msg := []byte(fmt.Sprintf("ping %d", i))
		if err := r.b.ep.Recv(bufB, fi.AddrUnspec, nil); err != nil {
			t.Fatal(err)
		}
		send(t, r.a, func() error { return r.a.ep.Inject(msg, aOfB) })
		e, src, ee := read(t, r.b.rx)
		if ee != nil || src != bOfA || string(bufB[:e.Len]) != string(msg) {
			t.Fatalf("message %d at B: %q from %v (error entry %+v), want %q from %v", i, bufB[:e.Len], src, ee, msg, bOfA)
		}
		if err := r.a.ep.Recv(bufA, fi.AddrUnspec, nil); err != nil {
			t.Fatal(err)
		}
		send(t, r.b, func() error { return r.b.ep.Send(bufB[:e.Len], bOfA, nil) })
		if _, _, ee := read(t, r.b.tx); ee != nil {
			t.Fatalf("send completion at B: %+v", ee)
		}
		e, src, ee = read(t, r.a.rx)
		if ee != nil || src != aOfB || string(bufA[:e.Len]) != string(msg) {
			t.Fatalf("reply %d at A: %q from %v (error entry %+v), want %q from %v", i, bufA[:e.Len], src, ee, msg, aOfB)
		}
	}
}

// The threading model: a model libfabric does not define, or a serial
// group with a model other than FI_THREAD_DOMAIN, is EINVAL and leaves
// nothing behind; any model but FI_THREAD_DOMAIN with manual progress is
// served thread safe. A device (this process, one interface) that runs
// without locks serves one domain: an endpoint of another (thread safe, a
// progress goroutine of its own, no serial group or another one) is
// refused (EBUSY), one of the same serial group joins; and an endpoint
// asking for FI_THREAD_DOMAIN on a device that has locks is served thread
// safe.
func TestThreadingModels(t *testing.T) {
	g := ep.NewSerialGroup()
	r := newRig(t, rigOpts{epAttr: func(a *ep.Attr) { a.Threading, a.SerialGroup = fi.ThreadDomain, g }})
	h := r.bed.A
	base := func(p uint16, th fi.Threading, pm ep.ProgressMode) ep.Attr {
		tx, rx := cqPair(t, cq.Attr{Size: 64})
		return ep.Attr{Ifname: testbed.LinkName, Local: netip.AddrPortFrom(h.IPv4, p), AV: r.a.av, TxCQ: tx, RxCQ: rx,
			BindMode: dataplane.BindCopy, Threading: th, Progress: pm}
	}
	tryOpen := func(a ep.Attr) (*ep.Endpoint, error) {
		var e *ep.Endpoint
		err := h.Do(func() (err error) { e, err = ep.Open(r.dp, a); return err })
		if err == nil {
			t.Cleanup(func() { e.Close() })
		}
		return e, err
	}
	withGroup := func(a ep.Attr, g *ep.SerialGroup) ep.Attr { a.SerialGroup = g; return a }
	for _, a := range []ep.Attr{base(port+1, -1, ep.ProgressManual), base(port+1, fi.ThreadEndpoint+1, ep.ProgressManual),
		base(port+1, 1000, ep.ProgressManual), withGroup(base(port+1, fi.ThreadSafe, ep.ProgressManual), g),
		withGroup(base(port+1, fi.ThreadEndpoint, ep.ProgressManual), g)} {
		if e, err := tryOpen(a); !errors.Is(err, fi.EINVAL) {
			t.Errorf("threading %v, serial group %v: %v, want EINVAL", a.Threading, a.SerialGroup != nil, err)
			if e != nil {
				e.Close()
			}
		}
	}
	// A's device runs without locks for g's endpoints (the rig's): no
	// other endpoint joins it.
	for _, a := range []ep.Attr{base(port+1, fi.ThreadSafe, ep.ProgressManual), base(port+1, fi.ThreadUnspec, ep.ProgressManual),
		base(port+1, fi.ThreadEndpoint, ep.ProgressManual), withGroup(base(port+1, fi.ThreadDomain, ep.ProgressAuto), g),
		base(port+1, fi.ThreadDomain, ep.ProgressManual), withGroup(base(port+1, fi.ThreadDomain, ep.ProgressManual), ep.NewSerialGroup())} {
		if _, err := tryOpen(a); !errors.Is(err, fi.EBUSY) {
			t.Errorf("%v, progress %d, serial group %v beside an endpoint without locks: %v, want EBUSY", a.Threading, a.Progress, a.SerialGroup, err)
		}
	}
	// The refusals took nothing: the port opens, for an endpoint of g.
	e, err := tryOpen(withGroup(base(port+1, fi.ThreadDomain, ep.ProgressManual), g))
	if err != nil {
		t.Fatalf("second endpoint of the serial group: %v", err)
	}
	if got := e.Threading(); got != fi.ThreadDomain {
		t.Errorf("second endpoint: Threading() = %v", got)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	// On B's device, new once its endpoint is gone, every other model is
	// served thread safe.
	if err := r.b.ep.Close(); err != nil {
		t.Fatal(err)
	}
	h = r.bed.B
	for _, c := range []struct {
		th fi.Threading
		pm ep.ProgressMode
	}{{fi.ThreadUnspec, ep.ProgressManual}, {fi.ThreadSafe, ep.ProgressManual}, {fi.ThreadFID, ep.ProgressManual},
		{fi.ThreadCompletion, ep.ProgressManual}, {fi.ThreadEndpoint, ep.ProgressManual}, {fi.ThreadDomain, ep.ProgressAuto}} {
		a := base(port+2, c.th, c.pm)
		a.Local = netip.AddrPortFrom(h.IPv4, port+2)
		e, err := tryOpen(a)
		if err != nil {
			t.Fatalf("%v, progress %d: %v", c.th, c.pm, err)
		}
		if got := e.Threading(); got != fi.ThreadSafe {
			t.Errorf("%v, progress %d: Threading() = %v, want %v", c.th, c.pm, got, fi.ThreadSafe)
		}
		// A device with locks serves a FI_THREAD_DOMAIN endpoint with them.
		if c.th == fi.ThreadSafe {
			b := base(port+3, fi.ThreadDomain, ep.ProgressManual)
			b.Local = netip.AddrPortFrom(h.IPv4, port+3)
			e2, err := tryOpen(b)
			if err != nil {
				t.Fatalf("FI_THREAD_DOMAIN beside a thread-safe endpoint: %v", err)
			}
			if got := e2.Threading(); got != fi.ThreadSafe {
				t.Errorf("FI_THREAD_DOMAIN beside a thread-safe endpoint: Threading() = %v, want %v", got, fi.ThreadSafe)
			}
			e2.Close()
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var zero ep.Endpoint
	if got := zero.Threading(); got != fi.ThreadUnspec {
		t.Errorf("zero endpoint: Threading() = %v", got)
	}
}

// Only the agent records an endpoint as charged to a uid (Prepare): Open
// refuses Charged, so a process's own endpoints are charged to no one
// after an agent restart.
func TestOpenRefusesCharged(t *testing.T) {
	r := newRig(t, rigOpts{})
	tx, rx := cqPair(t, cq.Attr{Size: 64})
	err := r.bed.A.Do(func() error {
		e, err := ep.Open(r.dp, ep.Attr{Ifname: testbed.LinkName, Local: netip.AddrPortFrom(r.bed.A.IPv4, port+5), AV: r.a.av,
			TxCQ: tx, RxCQ: rx, BindMode: dataplane.BindCopy, Charged: true, ChargedUID: 65534})
		if err == nil {
			e.Close()
		}
		return err
	})
	if !errors.Is(err, fi.EINVAL) {
		t.Errorf("Open with Charged: %v, want EINVAL", err)
	}
}
