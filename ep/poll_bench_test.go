//go:build linux

package ep_test

import (
	"errors"
	"testing"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
)

// BenchmarkEmptyPoll is one turn of a polling receiver's loop when nothing
// arrived: a CQ read, which progresses the endpoint (completion ring,
// every RX ring, same-host channels) and finds nothing. A message that
// arrives waits, on average, half of it before the loop notices.
func BenchmarkEmptyPoll(b *testing.B) {
	r := newRig(b, rigOpts{})
	r.a.insert(b, r.b.local)
	var buf [1]cq.Entry
	for b.Loop() {
		if n, err := r.a.rx.Read(buf[:]); n != 0 || !errors.Is(err, fi.EAGAIN) {
			b.Fatalf("read: %d, %v", n, err)
		}
	}
}

// BenchmarkOneWay is one message's whole path on one goroutine: B posts a
// receive, A injects 64 bytes (its kick runs B's receive, XDP and the
// redirect, in A's system call: veth), B reads the completion. The
// threading models compare the endpoints' and CQs' locks (thread safe)
// with none (FI_THREAD_DOMAIN and single-producer, single-consumer CQs).
func BenchmarkOneWay(b *testing.B) {
	for _, c := range []struct {
		name string
		th   fi.Threading
	}{{"safe", fi.ThreadSafe}, {"domain", fi.ThreadDomain}} {
		b.Run(c.name, func(b *testing.B) {
			var rxs []*cq.CQ // A's, B's
			r := newRig(b, rigOpts{epAttr: func(a *ep.Attr) {
				a.Threading = c.th
				if c.th == fi.ThreadDomain {
					a.TxCQ, a.RxCQ = cqPair(b, cq.Attr{Size: 4096, Format: cq.FormatTagged, SingleProducer: true, SingleConsumer: true})
				}
				rxs = append(rxs, a.RxCQ)
			}})
			to := r.a.insert(b, r.b.local)
			msg, buf := make([]byte, 64), make([]byte, 2048)
			var ent [1]cq.Entry
			for b.Loop() {
				if err := r.b.ep.Recv(buf, fi.AddrUnspec, nil); err != nil {
					b.Fatal(err)
				}
				for {
					err := r.a.ep.Inject(msg, to)
					if err == nil {
						break
					}
					if !errors.Is(err, fi.EAGAIN) {
						b.Fatal(err)
					}
					r.a.ep.Progress()
				}
				for {
					n, err := rxs[1].Read(ent[:])
					if n == 1 {
						break
					}
					if !errors.Is(err, fi.EAGAIN) {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkSendMore is the send path alone, warm: 64-byte sends with
// FI_MORE (descriptor on the TX ring, no kick) to the same peer, as a
// ping-pong's sends are; every 32 sends the timer stops while a send
// without FI_MORE kicks the ring and a progress reclaims the frames.
func BenchmarkSendMore(b *testing.B) {
	r := newRig(b, rigOpts{})
	to := r.a.insert(b, r.b.local)
	msg := make([]byte, 64)
	var ent [64]cq.Entry
	i := 0
	for b.Loop() {
		if err := r.a.ep.SendMsg(msg, to, 0, nil, fi.More|fi.Inject); err != nil {
			b.Fatal(err)
		}
		if i++; i%32 == 0 {
			b.StopTimer()
			if err := r.a.ep.SendMsg(msg, to, 0, nil, fi.Inject); err != nil {
				b.Fatal(err)
			}
			for range 8 {
				r.a.ep.Progress()
				r.b.rx.Read(ent[:])
			}
			b.StartTimer()
		}
	}
}
