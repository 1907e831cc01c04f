//go:build linux

package ep_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
)

// Ping-pong between two namespaces; every receive completion names the
// sender by the fi_addr the XDP program computed.
func TestPingPong(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "ipv4", true: "ipv6"}[v6], func(t *testing.T) {
			n := 10000
			if testing.Short() {
				n = 1000
			}
			pingPong(t, rigOpts{v6: v6}, n, false)
		})
	}
}

// Without static neighbour entries: the first send finds no MAC for the
// peer, the kernel resolves it (ARP, NDP) and the sends go through.
func TestPingPongResolvesNeighbours(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "ipv4", true: "ipv6"}[v6], func(t *testing.T) {
			pingPong(t, rigOpts{v6: v6, dynamicNeigh: true}, 100, false)
		})
	}
}

// The same with user IDs: completions carry the ID set for the sender.
func TestPingPongUserID(t *testing.T) {
	n := 10000
	if testing.Short() {
		n = 1000
	}
	pingPong(t, rigOpts{avAttr: av.Attr{Flags: fi.AVUserID}}, n, true)
}

func pingPong(t *testing.T, o rigOpts, n int, userIDs bool) {
	r := newRig(t, o)
	// Distractors first, so the peer's index is not 0.
	r.a.av.Insert(peersN(3), nil, 0, nil)
	r.b.av.Insert(peersN(5), nil, 0, nil)
	bAtA := r.a.insert(t, r.b.local) // 3
	aAtB := r.b.insert(t, r.a.local) // 5
	wantAtA, wantAtB := bAtA, aAtB
	if userIDs {
		if err := r.a.av.SetUserID(bAtA, 0xb0b, 0); err != nil {
			t.Fatal(err)
		}
		if err := r.b.av.SetUserID(aAtB, 0xa1ce, 0); err != nil {
			t.Fatal(err)
		}
		wantAtA, wantAtB = 0xb0b, 0xa1ce
	}

	var wg sync.WaitGroup
	errs := make(chan error, 1)
	wg.Go(func() { // B echoes
		buf := make([]byte, 256)
		for i := range n {
			if err := r.b.ep.Recv(buf, fi.AddrUnspec, i); err != nil {
				errs <- err
				return
			}
			e, src, ee, err := tryRead(r.b.rx)
			if err != nil || ee != nil || src != wantAtB || e.OpContext != i {
				errs <- fmt.Errorf("B recv %d: %+v src %v err %+v %v", i, e, src, ee, err)
				return
			}
			if err := trySend(r.b, func() error { return r.b.ep.Send(buf[:e.Len], aAtB, nil) }); err != nil {
				errs <- err
				return
			}
			if _, _, ee, err := tryRead(r.b.tx); err != nil || ee != nil {
				errs <- fmt.Errorf("B send completion: %+v %v", ee, err)
				return
			}
		}
	})
	msg := make([]byte, 64)
	buf := make([]byte, 256)
	for i := range n {
		binary.LittleEndian.PutUint64(msg, uint64(i))
		if err := r.a.ep.Recv(buf, fi.AddrUnspec, "pong"); err != nil {
			t.Fatal(err)
		}
		send(t, r.a, func() error { return r.a.ep.Send(msg, bAtA, i) })
		e, _, ee := read(t, r.a.tx)
		if ee != nil || e.OpContext != i || e.Flags != fi.Send|fi.Msg {
			t.Fatalf("A send completion %d: %+v %+v", i, e, ee)
		}
		e, src, ee := read(t, r.a.rx)
		if ee != nil || src != wantAtA || e.Len != 64 || !bytes.Equal(buf[:64], msg) || e.Flags != fi.Recv|fi.Msg {
			t.Fatalf("A recv %d: %+v src %v (want %v) err %+v", i, e, src, wantAtA, ee)
		}
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	c, _ := r.dp.Counters()
	if c[1] < uint64(2*n) {
		t.Errorf("translated counter %d, want >= %d", c[1], 2*n)
	}
}
