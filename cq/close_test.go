package cq

import (
	"runtime"
	"testing"
	"weak"
)

// Close drops the CQ's references to the contexts and buffers of the
// entries it discards, so an application that keeps a closed CQ around does
// not keep them alive.
func TestCloseDropsQueuedContexts(t *testing.T) {
	q := mustOpen(t, Attr{Format: FormatMsg})
	p := mustBind(t, q, BindAttr{})
	// Contexts big enough to stay out of the tiny allocator, whose shared
	// blocks outlive their objects.
	type bigCtx struct {
		ctx
		_ [64]byte
	}
	wc, wb := func() (weak.Pointer[bigCtx], weak.Pointer[byte]) {
		c, b := &bigCtx{ctx: ctx{7}}, make([]byte, 64)
		mustPush(t, p, Completion{Entry: Entry{OpContext: c, Buf: b}})
		return weak.Make(c), weak.Make(&b[0])
	}()
	if err := p.Unbind(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	if wc.Value() != nil {
		t.Error("a closed CQ still holds a discarded entry's context")
	}
	if wb.Value() != nil {
		t.Error("a closed CQ still holds a discarded entry's buffer")
	}
	runtime.KeepAlive(q)
}
