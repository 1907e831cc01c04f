//go:build linux

package ep_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

// fi_getname / fi_setname: an endpoint's own raw address is what a peer
// inserts (InsertRaw) to reach it; an endpoint opened with Attr.Name binds
// to the address given as raw bytes.
func TestGetNameSetName(t *testing.T) {
	r := newRig(t, rigOpts{})
	name := make([]byte, 64)
	n, err := r.a.ep.GetName(name)
	if err != nil || !bytes.Equal(name[:n], fi.EncodeSockaddr(nil, r.a.local)) {
		t.Fatalf("GetName = %x, %v; want the sockaddr of %v", name[:n], err, r.a.local)
	}
	if need, err := r.a.ep.GetName(make([]byte, 4)); !errors.Is(err, fi.ETOOSMALL) || need != n {
		t.Errorf("GetName into 4 bytes: %d %v; want %d and ETOOSMALL", need, err, n)
	}
	// B reaches A by the name A gave it.
	ids := make([]fi.Addr, 1)
	if _, err := r.b.av.InsertRaw([][]byte{name[:n]}, ids, 0, nil); err != nil {
		t.Fatal(err)
	}
	if ap, _ := r.b.av.LookupAddr(ids[0]); ap != r.a.local {
		t.Fatalf("B's AV holds %v for A's name", ap)
	}
	if err := r.a.ep.SetName(name[:n]); err != nil {
		t.Errorf("SetName of its own name: %v", err)
	}
	other := fi.EncodeSockaddr(nil, netip.AddrPortFrom(r.a.local.Addr(), 7399))
	if err := r.a.ep.SetName(other); !errors.Is(err, fi.EOPBADSTATE) {
		t.Errorf("SetName of another address on an enabled endpoint: %v", err)
	}
	if err := r.a.ep.SetName([]byte{1, 2, 3}); !errors.Is(err, fi.EINVAL) {
		t.Errorf("SetName of garbage: %v", err)
	}

	// Open with a name: bound to it.
	open := func(attr ep.Attr) (*ep.Endpoint, error) {
		var e *ep.Endpoint
		err := r.a.h.Do(func() (err error) { e, err = ep.Open(r.dp, attr); return err })
		return e, err
	}
	base := ep.Attr{Ifname: testbed.LinkName, AV: r.a.av, TxCQ: r.a.tx, RxCQ: r.a.rx, BindMode: dataplane.BindCopy}
	attr := base
	attr.Name = other
	e, err := open(attr)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64)
	k, _ := e.GetName(got)
	if !bytes.Equal(got[:k], other) {
		t.Errorf("endpoint opened with a name reports %x", got[:k])
	}
	e.Close()
	attr.Local = netip.AddrPortFrom(r.a.local.Addr(), 7400)
	if _, err := open(attr); !errors.Is(err, fi.EINVAL) {
		t.Errorf("name and local that differ: %v", err)
	}
	bad := append([]byte(nil), other...)
	bad[9] = 1 // sin_zero
	attr = base
	attr.Name = bad
	if _, err := open(attr); !errors.Is(err, fi.EINVAL) {
		t.Errorf("a name with a non-zero sin_zero: %v", err)
	}
}
