package cq

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/xdpfab/xdpfab/fi"
)

// encodeSockaddr builds the raw FI_SOURCE_ERR address format.
func encodeSockaddr(ap netip.AddrPort) []byte { return fi.EncodeSockaddr(nil, ap) }

func mustOpen(t testing.TB, attr Attr) *CQ {
	t.Helper()
	q, err := Open(attr)
	if err != nil {
		t.Fatalf("Open(%+v): %v", attr, err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func mustBind(t testing.TB, q *CQ, attr BindAttr) *Producer {
	t.Helper()
	p, err := q.Bind(attr)
	if err != nil {
		t.Fatalf("Bind: %v", err)
	}
	t.Cleanup(func() { p.Unbind() })
	return p
}

func mustPush(t testing.TB, p *Producer, c Completion) {
	t.Helper()
	if err := p.Push(&c); err != nil {
		t.Fatalf("Push(%+v): %v", c, err)
	}
}

// wantErr fails unless err wraps want (or is nil when want is 0).
func wantErr(t testing.TB, what string, err error, want fi.Errno) {
	t.Helper()
	switch {
	case want == 0 && err != nil:
		t.Fatalf("%s: unexpected error %v", what, err)
	case want != 0 && !errors.Is(err, want):
		t.Fatalf("%s: got error %v, want %s", what, err, want.Name())
	}
}

// ctx is an operation context: a pointer, so storing it in an interface
// does not allocate.
type ctx struct{ id int }

func ctxID(v any) int {
	if c, ok := v.(*ctx); ok {
		return c.id
	}
	return -1
}
