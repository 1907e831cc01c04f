//go:build linux

package ep_test

import (
	"bytes"
	"testing"

	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// TraceNow reads CLOCK_MONOTONIC, the clock of clock_gettime and of the
// XDP program's stamps.
func TestTraceNowIsMonotonic(t *testing.T) {
	var ts unix.Timespec
	for range 100 {
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		before := ts.Nano()
		now := ep.TraceNow()
		unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		if after := ts.Nano(); now < before || now > after {
			t.Fatalf("TraceNow %d outside [%d, %d]", now, before, after)
		}
	}
}

// A traced message, both XDP modes: its stages come in order (the
// receiver's XDP stamp between the sender's TX ring and the receiver's RX
// ring), the payload arrives intact behind the stamp, and untracing stops
// the stamps.
func TestTrace(t *testing.T) {
	for _, mode := range []loader.Mode{testbed.Native, testbed.Generic} {
		t.Run(mode.String(), func(t *testing.T) {
			r := newRig(t, rigOpts{mode: mode})
			bAtA := r.a.insert(t, r.b.local)
			r.b.insert(t, r.a.local)
			var ta, tb ep.Trace
			if err := r.a.ep.SetTrace(&ta); err != nil {
				t.Fatal(err)
			}
			if err := r.b.ep.SetTrace(&tb); err != nil {
				t.Fatal(err)
			}
			msg := bytes.Repeat([]byte("stamp"), 50)
			buf := make([]byte, 1024)
			for i := range 3 {
				if err := r.b.ep.Recv(buf, fi.AddrUnspec, nil); err != nil {
					t.Fatal(err)
				}
				t0 := ep.TraceNow()
				send(t, r.a, func() error { return r.a.ep.Send(msg, bAtA, nil) })
				e, _, ee := read(t, r.b.rx)
				t5 := ep.TraceNow()
				if ee != nil || !bytes.Equal(buf[:e.Len], msg) {
					t.Fatalf("message %d: %+v %+v %q", i, e, ee, buf[:e.Len])
				}
				read(t, r.a.tx)
				// The kick may return before or after the receiver saw
				// the frame; everything else is in order.
				for _, s := range [][2]int64{{t0, ta.TxRing}, {ta.TxRing, tb.XDP}, {tb.XDP, tb.RxRing}, {tb.RxRing, t5},
					{ta.TxRing, ta.Kicked}} {
					if s[0] == 0 || s[1] == 0 || s[0] > s[1] {
						t.Fatalf("message %d: stages out of order: sender %+v, receiver %+v, send call %d, read %d", i, ta, tb, t0, t5)
					}
				}
			}
			if err := r.b.ep.SetTrace(nil); err != nil {
				t.Fatal(err)
			}
			tb = ep.Trace{}
			if err := r.b.ep.Recv(buf, fi.AddrUnspec, nil); err != nil {
				t.Fatal(err)
			}
			send(t, r.a, func() error { return r.a.ep.Send(msg, bAtA, nil) })
			if e, _, ee := read(t, r.b.rx); ee != nil || !bytes.Equal(buf[:e.Len], msg) {
				t.Fatalf("untraced: %+v %+v", e, ee)
			}
			if tb != (ep.Trace{}) {
				t.Errorf("untraced endpoint noted %+v", tb)
			}
		})
	}
}
