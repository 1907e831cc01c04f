//go:build linux

package ep_test

import (
	"sync"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
)

// Automatic progress: a goroutine of the endpoint delivers completions
// while the application sleeps in SRead on an FD wait object.
func TestAutoProgress(t *testing.T) {
	r := newRig(t, rigOpts{})
	toA := r.b.insert(t, r.a.local)
	r.a.insert(t, r.b.local)
	r.a.ep.Close() // replace A's endpoint with an automatic one
	rx, err := cq.Open(cq.Attr{Size: 256, Format: cq.FormatMsg, WaitObj: cq.WaitFD})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	tx, _ := cq.Open(cq.Attr{Size: 256, Format: cq.FormatMsg, WaitObj: cq.WaitFD})
	t.Cleanup(func() { tx.Close() })
	a := openEP(t, r.a.h, r.dp, ep.Attr{Ifname: testbed.LinkName, Local: r.a.local, AV: r.a.av, TxCQ: tx, RxCQ: rx,
		Progress: ep.ProgressAuto, BindMode: dataplane.BindCopy})
	const n = 200
	for i := range n {
		if err := a.Recv(make([]byte, 32), fi.AddrUnspec, i); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for range n {
			if err := trySend(r.b, func() error { return r.b.ep.Send([]byte("auto"), toA, nil) }); err != nil {
				t.Error(err)
				return
			}
			if _, _, _, err := tryRead(r.b.tx); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var buf [8]cq.Entry
	got := 0
	for got < n {
		k, err := rx.SRead(buf[:], 10*time.Second)
		if err != nil {
			t.Fatalf("sread after %d: %v", got, err)
		}
		for _, e := range buf[:k] {
			if e.OpContext != got || e.Len != 4 {
				t.Fatalf("completion %d: %+v", got, e)
			}
			got++
		}
	}
	wg.Wait()
}
