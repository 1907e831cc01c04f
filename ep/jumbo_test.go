//go:build linux

package ep_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
)

// Jumbo frames: at MTU 9000, in native XDP (which veth allows the
// multi-buffer program only) and generic mode, over IPv4 and IPv6,
// endpoints carry messages up to the MTU less the IP, UDP and xdpfab
// headers, as chains of UMEM frames (AF_XDP multi-buffer), both ways,
// intact and attributed to the right fi_addr; one byte more is EMSGSIZE.
func TestJumbo(t *testing.T) {
	for _, mode := range []loader.Mode{loader.Native, loader.Generic} {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/v6=%v", mode, v6), func(t *testing.T) { testJumbo(t, mode, v6) })
		}
	}
}

func testJumbo(t *testing.T, mode loader.Mode, v6 bool) {
	r := newRig(t, rigOpts{v6: v6, mode: mode, bedOpts: testbed.Options{MTU: 9000}})
	ipHdr := 20
	if v6 {
		ipHdr = 40
	}
	want := 9000 - ipHdr - 8 - 32
	for _, s := range []*side{r.a, r.b} {
		if got := s.ep.MaxMsgSize(); got != want {
			t.Fatalf("MaxMsgSize %d at MTU 9000, want %d", got, want)
		}
	}
	toB := r.a.insert(t, r.b.local)
	toA := r.b.insert(t, r.a.local)
	if toA == toB {
		toA = r.b.insert(t, r.a.local) // distinct values catch a swapped attribution
	}
	buf := make([]byte, want+1)
	for _, n := range []int{64, 1024, 4096, 8192, want} {
		for _, dir := range []struct {
			from, to *side
			dest     fi.Addr // in from's AV
			src      fi.Addr // from, in to's AV
		}{{r.a, r.b, toB, toA}, {r.b, r.a, toA, toB}} {
			msg := make([]byte, n)
			for i := range msg {
				msg[i] = byte(i*7 + n)
			}
			if err := dir.to.ep.Recv(buf, fi.AddrUnspec, n); err != nil {
				t.Fatal(err)
			}
			send(t, dir.from, func() error { return dir.from.ep.Send(msg, dir.dest, n) })
			if e, _, ee := read(t, dir.from.tx); ee != nil || e.OpContext != n {
				t.Fatalf("%d bytes: send completion %+v, error %+v", n, e, ee)
			}
			e, src, ee := read(t, dir.to.rx)
			if ee != nil {
				t.Fatalf("%d bytes: receive error %+v", n, ee)
			}
			if e.OpContext != n || e.Len != n || !bytes.Equal(buf[:n], msg) {
				t.Fatalf("%d bytes: got %d bytes (context %v), intact %v", n, e.Len, e.OpContext, bytes.Equal(buf[:e.Len], msg))
			}
			if src != dir.src {
				t.Fatalf("%d bytes: source %v, want %v", n, src, dir.src)
			}
		}
	}
	if err := r.a.ep.Send(buf[:want+1], toB, nil); !errors.Is(err, fi.EMSGSIZE) {
		t.Fatalf("%d bytes: %v, want EMSGSIZE", want+1, err)
	}
	// A message longer than the posted buffer is truncated, reported.
	if err := r.b.ep.Recv(buf[:100], fi.AddrUnspec, "short"); err != nil {
		t.Fatal(err)
	}
	send(t, r.a, func() error { return r.a.ep.Send(buf[:8192], toB, nil) })
	read(t, r.a.tx)
	if _, _, ee := read(t, r.b.rx); ee == nil || ee.Err != fi.ETRUNC || ee.OLen != 8192-100 {
		t.Fatalf("8192 bytes into 100: error entry %+v, want ETRUNC with 8092 left over", ee)
	}
}
