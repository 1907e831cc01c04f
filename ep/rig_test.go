//go:build linux

package ep_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"github.com/xdpfab/xdpfab/loader"
)

const port = 7000

// side is one host of the rig: its AV, CQs and endpoint.
type side struct {
	h      *testbed.Host
	av     *av.AV
	tx, rx *cq.CQ
	ep     *ep.Endpoint
	local  netip.AddrPort
	att    *loader.Attachment // the dataplane's program on h's interface
}

type rig struct {
	dp   *loader.Objects
	bed  *testbed.Bed
	a, b *side
	v6   bool
}

type rigOpts struct {
	v6      bool
	avAttr  av.Attr
	epAttr  func(*ep.Attr) // adjusts both endpoints' attributes
	bedOpts testbed.Options
	// dynamicNeigh leaves neighbour resolution (ARP/NDP) to the kernel
	// instead of installing static entries.
	dynamicNeigh bool
	// mode is the XDP attach mode (default native).
	mode loader.Mode
}

// newRig builds two namespaces, attaches the XDP program on both, and opens
// an AV, two CQs and an endpoint on each side. Nothing is inserted.
func newRig(t testing.TB, o rigOpts) *rig {
	t.Helper()
	testutil.RequirePrivileged(t)
	dp, err := loader.Load(loader.Config{AVEntries: 8192, MaxAVs: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	o.bedOpts.StaticNeighbors = !o.dynamicNeigh
	r := &rig{dp: dp, bed: testbed.New(t, o.bedOpts), v6: o.v6}
	r.a = r.side(t, r.bed.A, o)
	r.b = r.side(t, r.bed.B, o)
	return r
}

func (r *rig) side(t testing.TB, h *testbed.Host, o rigOpts) *side {
	t.Helper()
	s := &side{h: h, local: netip.AddrPortFrom(h.Addr(r.v6), port)}
	err := h.Do(func() error {
		att, err := r.dp.Attach(testbed.LinkName, o.mode)
		if err != nil {
			return err
		}
		s.att = att
		t.Cleanup(func() { att.Close() })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	attr := o.avAttr
	if s.av, err = av.Open(r.dp, &attr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.av.Close() })
	for _, q := range []**cq.CQ{&s.tx, &s.rx} {
		if *q, err = cq.Open(cq.Attr{Size: 4096, Format: cq.FormatTagged}); err != nil {
			t.Fatal(err)
		}
		c := *q
		t.Cleanup(func() { c.Close() })
	}
	ea := ep.Attr{Ifname: testbed.LinkName, Local: s.local, AV: s.av, TxCQ: s.tx, RxCQ: s.rx, Caps: fi.Msg | fi.Tagged | fi.Source,
		BindMode: dataplane.BindCopy} // veth has no zero-copy
	if o.epAttr != nil {
		o.epAttr(&ea)
	}
	s.ep = openEP(t, h, r.dp, ea)
	return s
}

func openEP(t testing.TB, h *testbed.Host, dp *loader.Objects, attr ep.Attr) *ep.Endpoint {
	t.Helper()
	var e *ep.Endpoint
	err := h.Do(func() (err error) {
		e, err = ep.Open(dp, attr)
		return err
	})
	if err != nil {
		t.Fatalf("ep.Open on %s: %v", h.Name(), err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// insert puts peer's address into s's AV and returns its fi_addr.
func (s *side) insert(t testing.TB, peer netip.AddrPort) fi.Addr {
	t.Helper()
	out := []fi.Addr{fi.AddrNotAvail}
	if _, err := s.av.Insert([]netip.AddrPort{peer}, out, 0, nil); err != nil {
		t.Fatal(err)
	}
	return out[0]
}

// cqPair opens a transmit and a receive CQ of attr, closed when the test
// ends.
func cqPair(t testing.TB, attr cq.Attr) (tx, rx *cq.CQ) {
	t.Helper()
	for _, q := range []**cq.CQ{&tx, &rx} {
		c, err := cq.Open(attr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		*q = c
	}
	return tx, rx
}

// tryRead returns the next completion of q (or its error entry), waiting up
// to a generous deadline that only guards against hangs. Safe to call from
// any goroutine.
func tryRead(q *cq.CQ) (cq.Entry, fi.Addr, *cq.ErrEntry, error) {
	var buf [1]cq.Entry
	var src [1]fi.Addr
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n, err := q.ReadFrom(buf[:], src[:])
		if n == 1 {
			return buf[0], src[0], nil, nil
		}
		if errors.Is(err, fi.EAVAIL) {
			var e cq.ErrEntry
			if err := q.ReadErr(&e); err != nil {
				return cq.Entry{}, 0, nil, fmt.Errorf("readerr: %w", err)
			}
			return cq.Entry{}, e.SrcAddr, &e, nil
		}
		if !errors.Is(err, fi.EAGAIN) {
			return cq.Entry{}, 0, nil, fmt.Errorf("read: %w", err)
		}
	}
	return cq.Entry{}, 0, nil, errors.New("no completion within 10 s")
}

// read is tryRead for the test's own goroutine.
func read(t *testing.T, q *cq.CQ) (cq.Entry, fi.Addr, *cq.ErrEntry) {
	t.Helper()
	e, src, ee, err := tryRead(q)
	if err != nil {
		t.Fatal(err)
	}
	return e, src, ee
}

// empty checks q has nothing more after progressing.
func empty(t *testing.T, q *cq.CQ) {
	t.Helper()
	var buf [1]cq.Entry
	for range 50 {
		if n, err := q.Read(buf[:]); n != 0 || !errors.Is(err, fi.EAGAIN) {
			t.Fatalf("unexpected completion: %+v %v", buf[0], err)
		}
		time.Sleep(time.Millisecond)
	}
}

// trySend sends with retries on EAGAIN (transient: ring or CQ busy, or
// the next hop still resolving). Safe to call from any goroutine.
func trySend(s *side, f func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		err := f()
		if err == nil || !errors.Is(err, fi.EAGAIN) {
			return err
		}
		s.ep.Progress()
	}
	return errors.New("send: EAGAIN for 10 s")
}

// send is trySend for the test's own goroutine.
func send(t *testing.T, s *side, f func() error) {
	t.Helper()
	if err := trySend(s, f); err != nil {
		t.Fatalf("send: %v", err)
	}
}
