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
	"golang.org/x/sys/unix"
)

// adoptInProcess adopts a prepared endpoint in this process, as an
// application would after receiving its descriptors (duplicated: the
// Prepared keeps its own).
func adoptInProcess(t *testing.T, p *ep.Prepared, a ep.Attr) *ep.Endpoint {
	t.Helper()
	info, fds := p.Handover()
	dups := make([]int, len(fds))
	for i, fd := range fds {
		d, err := unix.Dup(fd)
		if err != nil {
			t.Fatal(err)
		}
		dups[i] = d
	}
	e, err := ep.Adopt(info, dups, ep.AdoptAttr{Attr: a, Release: func() error {
		p.Close()
		return p.Reclaim()
	}})
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	return e
}

// Endpoints of one sharing domain receive on the same queue of one
// interface, each its own traffic with the sender's fi_addr, and send with
// their own frames; when one closes, its frames go back to the pool and
// the other goes on.
func TestDomainEndpointsShareQueue(t *testing.T) {
	r := newRig(t, rigOpts{})
	// Side A's rig endpoint holds queue 0 with a UMEM of its own: close it
	// so the domain can have the queue.
	r.a.ep.Close()
	var dom *ep.Domain
	err := r.a.h.Do(func() (err error) {
		dom, err = ep.NewDomain(ep.DomainConfig{Ifname: testbed.LinkName, Slots: 4, RxFrames: 1024, TxFrames: 64})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dom.Close() })
	type user struct {
		p      *ep.Prepared
		e      *ep.Endpoint
		tx, rx *cq.CQ
		local  netip.AddrPort
		toB    fi.Addr
		atB    fi.Addr
	}
	var users []*user
	for i := range 3 {
		u := &user{local: netip.AddrPortFrom(r.a.local.Addr(), uint16(7100+i))}
		u.tx, _ = cq.Open(cq.Attr{Size: 256, Format: cq.FormatMsg})
		u.rx, _ = cq.Open(cq.Attr{Size: 256, Format: cq.FormatMsg})
		t.Cleanup(func() { u.tx.Close(); u.rx.Close() })
		err := r.a.h.Do(func() (err error) {
			u.p, err = dom.Prepare(r.dp, ep.Attr{Ifname: testbed.LinkName, Local: u.local, AV: r.a.av, RingSize: 64, Caps: fi.Msg | fi.Source})
			return err
		})
		if err != nil {
			t.Fatalf("prepare %d: %v", i, err)
		}
		r.a.h.Do(func() error {
			u.e = adoptInProcess(t, u.p, ep.Attr{Ifname: testbed.LinkName, AV: r.a.av, TxCQ: u.tx, RxCQ: u.rx, Local: u.local, Caps: fi.Msg | fi.Source})
			return nil
		})
		t.Cleanup(func() { u.e.Close() })
		if i == 0 {
			u.toB = r.a.insert(t, r.b.local)
		} else {
			u.toB = users[0].toB
		}
		u.atB = r.b.insert(t, u.local)
		users = append(users, u)
	}
	bAtA := users[0].toB
	buf := make([]byte, 64)
	for round := range 200 {
		for i, u := range users {
			if u == nil {
				continue
			}
			if err := u.e.Recv(buf, fi.AddrUnspec, round); err != nil {
				t.Fatal(err)
			}
			msg := fmt.Sprintf("to %d round %d", i, round)
			send(t, r.b, func() error { return r.b.ep.Send([]byte(msg), u.atB, nil) })
			e, src, _ := read(t, u.rx)
			if e.OpContext != round || string(buf[:e.Len]) != msg || src != bAtA {
				t.Fatalf("user %d round %d: %+v from %v: %q", i, round, e, src, buf[:e.Len])
			}
			// And back: a send with the user's own frames.
			r.b.ep.Recv(buf, fi.AddrUnspec, nil)
			send(t, &side{ep: u.e, tx: u.tx}, func() error { return u.e.Send([]byte("back"), u.toB, round) })
			if e, _, _ := read(t, u.tx); e.OpContext != round {
				t.Fatalf("user %d send completion: %+v", i, e)
			}
			if e, src, _ := read(t, r.b.rx); src != users[i].atB {
				t.Fatalf("user %d reply at B: %+v from %v", i, e, src)
			}
		}
		if round == 100 {
			// One user leaves: its slot and frames come back, the others
			// go on.
			if err := users[1].e.Close(); err != nil {
				t.Fatal(err)
			}
			if dom.Users() != 2 {
				t.Fatalf("%d users after one closed", dom.Users())
			}
			users[1] = nil
		}
	}
	_ = av.Attr{}
	_ = dataplane.BindCopy
}
