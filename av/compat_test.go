//go:build linux

package av_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/fi"
)

// A sockaddr_in whose sin_zero is not zero is refused per element with
// FI_ADDR_NOTAVAIL, as every libfabric provider does (ofi_valid_dest_ipaddr);
// the other elements are inserted.
func TestInsertRawSinZero(t *testing.T) {
	dp := newDP(t, 64)
	a := openAV(t, dp, av.Attr{})
	good := fi.EncodeSockaddr(nil, netip.MustParseAddrPort("198.18.3.1:7000"))
	bad := fi.EncodeSockaddr(nil, netip.MustParseAddrPort("198.18.3.2:7000"))
	bad[12] = 1 // inside sin_zero
	out := []fi.Addr{7, 7}
	errs := make([]fi.Errno, 2)
	n, err := a.InsertRaw([][]byte{good, bad}, out, fi.SyncErr, errs)
	if n != 1 || !errors.Is(err, fi.EADDRNOTAVAIL) {
		t.Fatalf("InsertRaw = %d, %v", n, err)
	}
	if out[0] == fi.AddrNotAvail || out[1] != fi.AddrNotAvail || errs[0] != 0 || errs[1] != fi.EADDRNOTAVAIL {
		t.Errorf("fi_addr %v, errors %v", out, errs)
	}
}

// fi_eq_sread on the AV's event queue: blocks until an insert's events
// arrive or the timeout expires; errors come first (EAVAIL, then
// ReadErr); closing the queue ends a wait with EBADF.
func TestEventQueueSRead(t *testing.T) {
	dp := newDP(t, 64)
	a := openAV(t, dp, av.Attr{Flags: fi.Event})
	eq := av.NewEventQueue()
	if err := a.Bind(eq, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := eq.SRead(0); !errors.Is(err, fi.EAGAIN) {
		t.Fatalf("poll of an empty queue: %v", err)
	}
	start := time.Now()
	if _, err := eq.SRead(30 * time.Millisecond); !errors.Is(err, fi.EAGAIN) || time.Since(start) < 25*time.Millisecond {
		t.Fatalf("timed wait on an empty queue: %v after %v", err, time.Since(start))
	}
	got := make(chan av.Event, 1)
	go func() {
		ev, err := eq.SRead(-1)
		if err != nil {
			t.Error(err)
		}
		got <- ev
	}()
	time.Sleep(10 * time.Millisecond)
	if _, err := a.Insert(peers(0, 2), nil, 0, "ctx"); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-got:
		if ev.Data != 2 || ev.Err != 0 || ev.Context != "ctx" {
			t.Errorf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SRead did not wake for the insert's completion")
	}
	// An insert with a bad element: the error event comes first.
	a.InsertStr([]string{"bogus"}, nil, 0, "bad")
	if _, err := eq.SRead(time.Second); !errors.Is(err, fi.EAVAIL) {
		t.Fatalf("next event is an error: %v", err)
	}
	if ev, err := eq.ReadErr(); err != nil || ev.Err != fi.EADDRNOTAVAIL {
		t.Fatalf("ReadErr: %+v %v", ev, err)
	}
	if ev, err := eq.SRead(time.Second); err != nil || ev.Data != 0 {
		t.Fatalf("completion after the error: %+v %v", ev, err)
	}
	// Closed while a reader waits: EBADF.
	a.Close()
	done := make(chan error, 1)
	go func() { _, err := eq.SRead(-1); done <- err }()
	time.Sleep(10 * time.Millisecond)
	if err := eq.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, fi.EBADF) {
			t.Errorf("SRead across Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the wait")
	}
	if err := openAV(t, dp, av.Attr{Flags: fi.Event}).Bind(eq, 0); !errors.Is(err, fi.EBADF) {
		t.Errorf("bind a closed queue: %v", err)
	}
}
