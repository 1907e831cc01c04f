//go:build linux

package ep_test

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wire"
)

// Kept (unexpected) messages go to posted receives in the order they
// arrived, before any message that arrives after them, also while another
// goroutine reads the CQ. Before, when a drain of the kept messages ran
// out of CQ room, progress went on to take new frames off the ring, and a
// CQ read on another goroutine could make room in between: a newer message
// then took a receive an older kept one was waiting for.
func TestParkedOrderWithConcurrentReader(t *testing.T) {
	r := newRig(t, rigOpts{})
	e, rx, l := smallCQEndpoint(t, r, 2, 7005)
	c := dialFrom(t, r.b, l)
	const n = 2000
	var posted, got atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // the sender: a little ahead of the receives
		for i := 0; i < n; i++ {
			for int64(i) > posted.Load()+8 {
				select {
				case <-stop:
					return
				default:
				}
				time.Sleep(10 * time.Microsecond)
			}
			if _, err := c.Write(datagram(wire.Hdr{Op: wire.OpTagged, Tag: 7}, strconv.Itoa(i))); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Go(func() { // progress
		for {
			select {
			case <-stop:
				return
			default:
			}
			e.Progress()
		}
	})
	var order []int
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 16)
	}
	wg.Go(func() { // the CQ reader
		var ent [1]cq.Entry
		for {
			select {
			case <-stop:
				return
			default:
			}
			if k, _ := rx.Read(ent[:]); k == 1 {
				k := ent[0].OpContext.(int)
				v, _ := strconv.Atoi(string(bufs[k%len(bufs)][:ent[0].Len]))
				order = append(order, v)
				got.Add(1)
			}
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < n && time.Now().Before(deadline); {
		if int64(i)-got.Load() >= 48 { // receives outstanding
			time.Sleep(5 * time.Microsecond)
			continue
		}
		if err := e.TRecv(bufs[i%len(bufs)], fi.AddrUnspec, 7, 0, i); err != nil {
			if fi.Code(err) == fi.EAGAIN {
				continue
			}
			t.Fatal(err)
		}
		i++
		posted.Store(int64(i))
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	bad := 0
	for i := 1; i < len(order); i++ {
		if order[i] <= order[i-1] {
			if bad < 5 {
				t.Errorf("completion %d carries message %d after message %d", i, order[i], order[i-1])
			}
			bad++
		}
	}
	t.Logf("%d completions, %d out of order, %d kept messages dropped", len(order), bad, e.RecvStats().ParkDropped)
}
