//go:build linux

package dataplane_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
)

// receiveN receives until want packets matching port arrived or the
// deadline passes, refilling the fill ring as it goes. It returns the
// payloads (copied) and checks each packet's metadata.
func receiveN(t *testing.T, s *dataplane.Socket, want int, port uint16, ifindex int, timeout time.Duration) [][]byte {
	t.Helper()
	u := s.UMEM()
	descs := make([]dataplane.Desc, 64)
	var got [][]byte
	deadline := time.Now().Add(timeout)
	for len(got) < want && time.Now().Before(deadline) {
		n := s.Receive(descs)
		if n == 0 {
			if _, err := s.Poll(10 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for _, d := range descs[:n] {
			if p := udp4Payload(u.Packet(d), port); p != nil {
				checkMeta(t, u, d, ifindex)
				got = append(got, bytes.Clone(p))
			}
			u.Free(d.Addr)
		}
		s.FillFree()
	}
	return got
}

func TestLiveFramesWithMetadata(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	p := newRedirectProg(t)
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 256})
	s := openIn(t, bed.B, 0, u, dataplane.SocketConfig{})
	p.insert(t, s)
	if s.ZeroCopy() {
		t.Fatal("veth bound in zero-copy mode")
	}
	if n := s.FillFree(); n != 256 {
		t.Fatalf("FillFree = %d, want 256", n)
	}
	src := netip.AddrPortFrom(bed.A.IPv4, 1234)
	dst := netip.AddrPortFrom(bed.B.IPv4, 4791)
	frame := udp4Frame(bed.A.MAC, bed.B.MAC, src, dst, []byte("live frame"))
	const repeat = 100
	if err := p.inject(bed.B, frame, repeat); err != nil {
		t.Fatalf("live frames: %v", err)
	}
	descs := make([]dataplane.Desc, 128)
	n := s.Receive(descs)
	if n != repeat {
		st, _ := s.Stats()
		t.Fatalf("received %d of %d live frames; stats %+v", n, repeat, st)
	}
	for _, d := range descs[:n] {
		if !bytes.Equal(u.Packet(d)[metaLen:], frame) {
			t.Fatalf("frame at %#x differs: % x", d.Addr, u.Packet(d))
		}
		checkMeta(t, u, d, bed.B.Ifindex)
	}
	off := descs[0].Addr - u.FrameAddr(descs[0].Addr)
	t.Logf("rx descriptor offset in frame: %d (PacketHeadroom %d)", off, dataplane.PacketHeadroom)
	if off != dataplane.PacketHeadroom {
		t.Errorf("packet at offset %d in its frame, want %d", off, dataplane.PacketHeadroom)
	}
	fill, tx := s.NeedWakeup()
	t.Logf("need_wakeup after receive: fill %v tx %v", fill, tx)
}

func TestEBUSYWhileQueueHeld(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	u1 := newUMEM(t, dataplane.UMEMConfig{NumFrames: 64})
	openIn(t, bed.B, 0, u1, dataplane.SocketConfig{})
	u2 := newUMEM(t, dataplane.UMEMConfig{NumFrames: 64})
	start := time.Now()
	err := bed.B.Do(func() error {
		s, err := dataplane.Open(bed.B.Ifindex, 0, u2, dataplane.SocketConfig{Logger: slog.New(&logRecorder{})})
		if err == nil {
			s.Close()
		}
		return err
	})
	if !errors.Is(err, fi.EBUSY) {
		t.Fatalf("second UMEM on a held queue: %v, want EBUSY", err)
	}
	t.Logf("gave up after %v: %v", time.Since(start).Round(time.Millisecond), err)
}

func TestVethReceive(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, mode := range []testbed.XDPMode{testbed.Native, testbed.Generic} {
		t.Run(mode.String(), func(t *testing.T) {
			bed := testbed.New(t, testbed.Options{StaticNeighbors: true, XDPMode: mode})
			p := newRedirectProg(t)
			u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 512})
			s := openIn(t, bed.B, 0, u, dataplane.SocketConfig{})
			p.insert(t, s)
			s.FillFree()
			testbed.AttachXDP(t, bed.B, p.prog)

			const port, n = 4791, 100
			waitForPath(t, bed, s, 4790)
			c, err := bed.A.Dial("udp4", netip.AddrPortFrom(bed.B.IPv4, port).String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := range n {
				if _, err := fmt.Fprintf(c, "datagram %03d", i); err != nil {
					t.Fatal(err)
				}
			}
			got := receiveN(t, s, n, port, bed.B.Ifindex, 5*time.Second)
			if len(got) != n {
				st, _ := s.Stats()
				t.Fatalf("received %d of %d datagrams; stats %+v", len(got), n, st)
			}
			for i, p := range got {
				if want := fmt.Sprintf("datagram %03d", i); string(p) != want {
					t.Fatalf("datagram %d = %q, want %q", i, p, want)
				}
			}
		})
	}
}

// waitForPath sends probe datagrams from A to B's probePort until one
// reaches s. Right after an XDP program is attached in generic mode, the
// sending veth drops the first packets (its TX dropped counter counts them,
// and no backlog or RX counter does) for some milliseconds, more under
// load; a burst sent at once can vanish whole.
func waitForPath(t *testing.T, bed *testbed.Bed, s *dataplane.Socket, probePort uint16) {
	t.Helper()
	c, err := bed.A.Dial("udp4", netip.AddrPortFrom(bed.B.IPv4, probePort).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	for probes := 1; ; probes++ {
		if _, err := c.Write([]byte("probe")); err != nil {
			t.Fatal(err)
		}
		if len(receiveN(t, s, 1, probePort, bed.B.Ifindex, 10*time.Millisecond)) == 1 {
			t.Logf("path up after %v, %d probes", time.Since(start).Round(time.Microsecond), probes)
			return
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("no probe datagram reached the socket in 5s")
		}
	}
}

func TestTransmitToKernelUDP(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	dst := netip.AddrPortFrom(bed.A.IPv4, 5000)
	src := netip.AddrPortFrom(bed.B.IPv4, 6000)
	pc, err := bed.A.ListenPacket("udp4", dst.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 256})
	s := openIn(t, bed.B, 0, u, dataplane.SocketConfig{})

	// More than the kernel's copy-mode batch (32) per sendto, so Kick
	// has to repeat itself.
	const n = 100
	addrs := make([]uint64, n)
	if got := u.Alloc(addrs); got != n {
		t.Fatalf("Alloc = %d", got)
	}
	descs := make([]dataplane.Desc, n)
	for i, a := range addrs {
		f := udp4Frame(bed.B.MAC, bed.A.MAC, src, dst, fmt.Appendf(nil, "xsk %03d", i))
		descs[i] = dataplane.Desc{Addr: a, Len: uint32(copy(u.Frame(a), f))}
	}
	_, txWake := s.NeedWakeup()
	t.Logf("tx need_wakeup before the first kick: %v", txWake)
	if got := s.Transmit(descs); got != n {
		t.Fatalf("Transmit = %d, want %d", got, n)
	}
	done := 0
	for deadline := time.Now().Add(5 * time.Second); done < n && time.Now().Before(deadline); {
		if err := s.Kick(); err != nil {
			t.Fatal(err)
		}
		done += s.CompleteFree()
	}
	if done != n {
		st, _ := s.Stats()
		t.Fatalf("%d of %d transmissions completed; stats %+v", done, n, st)
	}
	_, txWake = s.NeedWakeup()
	t.Logf("tx need_wakeup after completion: %v", txWake)
	if err := pc.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	for i := range n {
		m, from, err := pc.ReadFrom(buf)
		if err != nil {
			t.Fatalf("datagram %d: %v", i, err)
		}
		if want := fmt.Sprintf("xsk %03d", i); string(buf[:m]) != want {
			t.Fatalf("datagram %d = %q, want %q", i, buf[:m], want)
		}
		if from.String() != src.String() {
			t.Fatalf("source %s, want %s", from, src)
		}
	}
	if free := u.FreeFrames(); free != 256 {
		t.Fatalf("%d free frames after completion, want 256", free)
	}
}

func TestCloseReopen(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	p := newRedirectProg(t)
	frame := udp4Frame(bed.A.MAC, bed.B.MAC, netip.AddrPortFrom(bed.A.IPv4, 1), netip.AddrPortFrom(bed.B.IPv4, 2), []byte("again"))
	rec := &logRecorder{}
	cfg := dataplane.SocketConfig{Mode: dataplane.BindCopy, RxSize: 64, TxSize: 64, Logger: slog.New(rec)}
	cycle := func(i int) {
		u, err := dataplane.NewUMEM(dataplane.UMEMConfig{NumFrames: 64})
		if err != nil {
			t.Fatal(err)
		}
		var s *dataplane.Socket
		if err := bed.B.Do(func() (err error) {
			s, err = dataplane.Open(bed.B.Ifindex, 0, u, cfg)
			return err
		}); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if i%10 == 0 {
			// The rebound socket works.
			p.insert(t, s)
			s.FillFree()
			if err := p.inject(bed.B, frame, 4); err != nil {
				t.Fatal(err)
			}
			if got := s.Receive(make([]dataplane.Desc, 8)); got != 4 {
				t.Fatalf("cycle %d: received %d of 4", i, got)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if err := u.Close(); err != nil {
			t.Fatal(err)
		}
	}
	cycle(0) // warm up lazily created runtime state
	fds0, maps0 := counts(t)
	const cycles = 100
	start := time.Now()
	for i := 1; i <= cycles; i++ {
		cycle(i)
	}
	elapsed := time.Since(start)
	fds1, maps1 := counts(t)
	if fds1 != fds0 {
		t.Errorf("open fds %d -> %d after %d cycles", fds0, fds1, cycles)
	}
	// Each cycle maps five regions (UMEM and four rings); a leak would
	// show hundreds. The Go runtime may map a few of its own.
	if maps1 > maps0+10 {
		t.Errorf("mappings %d -> %d after %d cycles", maps0, maps1, cycles)
	}
	retried := rec.find("after EBUSY")
	var waits []time.Duration
	for _, r := range retried {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "waited" {
				waits = append(waits, a.Value.Duration())
			}
			return true
		})
	}
	t.Logf("%d cycles in %v; %d rebinds met EBUSY, waits %v; fds %d->%d, maps %d->%d",
		cycles, elapsed.Round(time.Millisecond), len(retried), waits, fds0, fds1, maps0, maps1)
}

func TestSharedUMEMSameQueue(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	p := newRedirectProg(t)
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 256})
	s1 := openIn(t, bed.B, 0, u, dataplane.SocketConfig{})
	s2 := openIn(t, bed.B, 0, u, dataplane.SocketConfig{})
	if s1.FD() == s2.FD() {
		t.Fatal("same fd")
	}
	if n := s1.FillFree(); n != 256 {
		t.Fatalf("FillFree = %d", n)
	}
	// One fill ring per queue: s2 sees it full.
	if n := s2.FillFree(); n != 0 {
		t.Fatalf("FillFree on the sharing socket = %d, want 0", n)
	}
	frame := udp4Frame(bed.A.MAC, bed.B.MAC, netip.AddrPortFrom(bed.A.IPv4, 1), netip.AddrPortFrom(bed.B.IPv4, 2), []byte("shared"))
	descs := make([]dataplane.Desc, 32)
	deliver := func(to, other *dataplane.Socket, name string) {
		t.Helper()
		p.insert(t, to)
		if err := p.inject(bed.B, frame, 10); err != nil {
			t.Fatal(err)
		}
		if n := other.Receive(descs); n != 0 {
			t.Fatalf("%s: the other socket received %d", name, n)
		}
		n := to.Receive(descs)
		if n != 10 {
			t.Fatalf("%s: received %d of 10", name, n)
		}
		for _, d := range descs[:n] {
			checkMeta(t, u, d, bed.B.Ifindex)
			u.Free(d.Addr)
		}
		// Refill through either socket: the ring is the same.
		if got := other.FillFree(); got != 10 {
			t.Fatalf("%s: refilled %d", name, got)
		}
	}
	deliver(s1, s2, "first")
	deliver(s2, s1, "second")
	// The UMEM's first socket may close before the others.
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.inject(bed.B, frame, 10); err != nil {
		t.Fatal(err)
	}
	if n := s2.Receive(descs); n != 10 {
		t.Fatalf("after the first socket closed: received %d of 10", n)
	}
}

func TestSharedUMEMTwoDevices(t *testing.T) {
	testutil.RequirePrivileged(t)
	// Both hosts' interfaces are "veth0", likely with the same ifindex, in
	// different namespaces: different device queues, so each socket gets a
	// fill and completion ring of its own.
	bed := testbed.New(t, testbed.Options{})
	pa, pb := newRedirectProg(t), newRedirectProg(t)
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 256, FillSize: 128, CompSize: 128})
	sa := openIn(t, bed.A, 0, u, dataplane.SocketConfig{})
	sb := openIn(t, bed.B, 0, u, dataplane.SocketConfig{})
	pa.insert(t, sa)
	pb.insert(t, sb)
	if a, b := sa.FillFree(), sb.FillFree(); a != 128 || b != 128 {
		t.Fatalf("FillFree = %d, %d; want a ring of 128 each", a, b)
	}
	descs := make([]dataplane.Desc, 32)
	for _, c := range []struct {
		h    *testbed.Host
		p    redirectProg
		s, o *dataplane.Socket
	}{{bed.A, pa, sa, sb}, {bed.B, pb, sb, sa}} {
		frame := udp4Frame(bed.A.MAC, bed.B.MAC, netip.AddrPortFrom(bed.A.IPv4, 1), netip.AddrPortFrom(bed.B.IPv4, 2), []byte(c.h.Name()))
		if err := c.p.inject(c.h, frame, 7); err != nil {
			t.Fatal(err)
		}
		if n := c.o.Receive(descs); n != 0 {
			t.Fatalf("%s: other socket received %d", c.h.Name(), n)
		}
		n := c.s.Receive(descs)
		if n != 7 {
			t.Fatalf("%s: received %d of 7", c.h.Name(), n)
		}
		for _, d := range descs[:n] {
			checkMeta(t, u, d, c.h.Ifindex)
			if udp4Payload(u.Packet(d), 2) == nil || string(udp4Payload(u.Packet(d), 2)) != c.h.Name() {
				t.Fatalf("%s: wrong packet % x", c.h.Name(), u.Packet(d))
			}
		}
	}
}

func TestStatsCountDrops(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	p := newRedirectProg(t)
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 64})
	s := openIn(t, bed.B, 0, u, dataplane.SocketConfig{RxSize: 16, TxSize: 16})
	p.insert(t, s)
	frame := udp4Frame(bed.A.MAC, bed.B.MAC, netip.AddrPortFrom(bed.A.IPv4, 1), netip.AddrPortFrom(bed.B.IPv4, 2), []byte("drop me"))
	stats := func() dataplane.Stats {
		t.Helper()
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	// Nothing in the fill ring: every frame is dropped for want of a buffer.
	if err := p.inject(bed.B, frame, 10); err != nil {
		t.Fatal(err)
	}
	st := stats()
	t.Logf("empty fill ring: %+v", st)
	if st.RxDropped != 10 || st.RxFillRingEmptyDescs == 0 {
		t.Errorf("after 10 frames with an empty fill ring: %+v", st)
	}

	// Buffers but nobody reading: the 16-entry RX ring overflows.
	s.FillFree()
	if err := p.inject(bed.B, frame, 40); err != nil {
		t.Fatal(err)
	}
	st = stats()
	t.Logf("full rx ring: %+v", st)
	if st.RxRingFull != 24 {
		t.Errorf("RxRingFull = %d, want 24", st.RxRingFull)
	}
	if n := s.Receive(make([]dataplane.Desc, 32)); n != 16 {
		t.Errorf("received %d, want a full ring of 16", n)
	}

	// A descriptor outside the UMEM is refused.
	s.Transmit([]dataplane.Desc{{Addr: 1 << 40, Len: 60}})
	if err := s.Kick(); err != nil {
		t.Fatal(err)
	}
	st = stats()
	t.Logf("invalid tx: %+v", st)
	if st.TxInvalidDescs != 1 {
		t.Errorf("TxInvalidDescs = %d, want 1", st.TxInvalidDescs)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stats(); !errors.Is(err, fi.EBADF) {
		t.Errorf("Stats after Close: %v", err)
	}
}

// TestConcurrentReceiveTransmit runs the receive side and the transmit side
// of one socket on two goroutines, sharing the UMEM's frame allocator, as
// the endpoint layer will (run it with -race).
func TestConcurrentReceiveTransmit(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	p := newRedirectProg(t)
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 1024, FillSize: 512, CompSize: 512})
	s := openIn(t, bed.B, 0, u, dataplane.SocketConfig{RxSize: 512, TxSize: 256})
	p.insert(t, s)
	dst := netip.AddrPortFrom(bed.A.IPv4, 5001)
	pc, err := bed.A.ListenPacket("udp4", dst.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	s.FillFree()

	const rxFrames, txFrames = 20000, 2000
	in := udp4Frame(bed.A.MAC, bed.B.MAC, netip.AddrPortFrom(bed.A.IPv4, 1), netip.AddrPortFrom(bed.B.IPv4, 2), []byte("in"))
	out := udp4Frame(bed.B.MAC, bed.A.MAC, netip.AddrPortFrom(bed.B.IPv4, 7), dst, []byte("out"))

	// The transmitter keeps at most a window of datagrams ahead of the
	// peer's reader, so the peer's socket buffer never overflows.
	var peerRead atomic.Int64
	peerGot := make(chan int, 1)
	go func() {
		buf := make([]byte, 64)
		for peerRead.Load() < txFrames {
			if err := pc.SetReadDeadline(time.Now().Add(2 * time.Second)); err != nil {
				break
			}
			if _, _, err := pc.ReadFrom(buf); err != nil {
				break
			}
			peerRead.Add(1)
		}
		peerGot <- int(peerRead.Load())
	}()
	injected := make(chan error, 1)
	go func() { injected <- p.inject(bed.B, in, rxFrames) }()
	txDone := make(chan error, 1)
	go func() {
		addrs := make([]uint64, 32)
		descs := make([]dataplane.Desc, 32)
		sent, done := 0, 0
		for deadline := time.Now().Add(10 * time.Second); done < txFrames; {
			if time.Now().After(deadline) {
				txDone <- fmt.Errorf("transmitted %d, completed %d of %d", sent, done, txFrames)
				return
			}
			window := 128 - (sent - int(peerRead.Load()))
			if window <= 0 {
				done += s.CompleteFree()
				time.Sleep(100 * time.Microsecond)
				continue
			}
			n := u.Alloc(addrs[:min(32, window, txFrames-sent)])
			for i, a := range addrs[:n] {
				descs[i] = dataplane.Desc{Addr: a, Len: uint32(copy(u.Frame(a), out))}
			}
			m := s.Transmit(descs[:n])
			u.Free(addrs[m:n]...)
			sent += m
			if err := s.Kick(); err != nil {
				txDone <- err
				return
			}
			done += s.CompleteFree()
		}
		txDone <- nil
	}()

	descs := make([]dataplane.Desc, 64)
	received, injecting := 0, true
	for deadline := time.Now().Add(10 * time.Second); injecting && time.Now().Before(deadline); {
		select {
		case err := <-injected:
			if err != nil {
				t.Fatal(err)
			}
			injecting = false
		default:
		}
		for n := s.Receive(descs); n > 0; n = s.Receive(descs) {
			received += n
			for _, d := range descs[:n] {
				u.Free(d.Addr)
			}
			s.FillFree()
		}
	}
	if err := <-txDone; err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stats()
	if lost := st.RxDropped + st.RxRingFull; received+int(lost) != rxFrames || received == 0 {
		t.Fatalf("received %d + dropped %d of %d; stats %+v", received, lost, rxFrames, st)
	}
	got := <-peerGot
	t.Logf("received %d of %d injected (stats %+v); peer got %d of %d transmitted", received, rxFrames, st, got, txFrames)
	if got != txFrames {
		t.Fatalf("peer received %d of %d datagrams", got, txFrames)
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	p := newRedirectProg(t)
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 2048})
	s := openIn(t, bed.B, 0, u, dataplane.SocketConfig{RxSize: 1024, TxSize: 1024})
	p.insert(t, s)
	s.FillFree()
	in := udp4Frame(bed.A.MAC, bed.B.MAC, netip.AddrPortFrom(bed.A.IPv4, 1), netip.AddrPortFrom(bed.B.IPv4, 2), []byte("in"))
	if err := p.inject(bed.B, in, 1000); err != nil {
		t.Fatal(err)
	}
	// Sent to a MAC nobody has: the peer's stack drops it quietly.
	nobody := []byte{0x02, 0, 0, 0, 0, 1}
	out := udp4Frame(bed.B.MAC, nobody, netip.AddrPortFrom(bed.B.IPv4, 1), netip.AddrPortFrom(bed.A.IPv4, 9), []byte("out"))
	descs := make([]dataplane.Desc, 16)
	addrs := make([]uint64, 16)
	received := 0
	allocs := testing.AllocsPerRun(50, func() {
		n := s.Receive(descs)
		received += n
		for i, d := range descs[:n] {
			addrs[i] = d.Addr
		}
		s.Fill(addrs[:n])
		if u.Alloc(addrs[:1]) == 1 {
			tx := [1]dataplane.Desc{{Addr: addrs[0], Len: uint32(copy(u.Frame(addrs[0]), out))}}
			s.Transmit(tx[:])
		}
		if err := s.Kick(); err != nil {
			t.Fatal(err)
		}
		s.Complete(addrs)
		s.CompleteFree()
		s.FillFree()
		if _, err := s.Poll(0); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per round of receive, fill, transmit, kick, complete, poll", allocs)
	}
	if received == 0 {
		t.Fatal("nothing received during the measurement")
	}
}

// TestXSKToXSK sends from the TX ring of a socket on host A to a socket on
// host B behind the redirect program (native XDP on B's veth).
func TestXSKToXSK(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	p := newRedirectProg(t)
	ua := newUMEM(t, dataplane.UMEMConfig{NumFrames: 256})
	ub := newUMEM(t, dataplane.UMEMConfig{NumFrames: 256})
	sa := openIn(t, bed.A, 0, ua, dataplane.SocketConfig{})
	sb := openIn(t, bed.B, 0, ub, dataplane.SocketConfig{})
	p.insert(t, sb)
	sb.FillFree()
	testbed.AttachXDP(t, bed.B, p.prog)

	const port, n = 4792, 64
	src := netip.AddrPortFrom(bed.A.IPv4, 3000)
	dst := netip.AddrPortFrom(bed.B.IPv4, port)
	addrs := make([]uint64, n)
	ua.Alloc(addrs)
	descs := make([]dataplane.Desc, n)
	for i, a := range addrs {
		f := udp4Frame(bed.A.MAC, bed.B.MAC, src, dst, fmt.Appendf(nil, "xsk-to-xsk %02d", i))
		descs[i] = dataplane.Desc{Addr: a, Len: uint32(copy(ua.Frame(a), f))}
	}
	if got := sa.Transmit(descs); got != n {
		t.Fatalf("Transmit = %d", got)
	}
	for deadline := time.Now().Add(5 * time.Second); sa.TxPending() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d descriptors still pending", sa.TxPending())
		}
		if err := sa.Kick(); err != nil {
			t.Fatal(err)
		}
		sa.CompleteFree()
	}
	got := receiveN(t, sb, n, port, bed.B.Ifindex, 5*time.Second)
	if len(got) != n {
		t.Fatalf("received %d of %d", len(got), n)
	}
	for i, g := range got {
		if want := fmt.Sprintf("xsk-to-xsk %02d", i); string(g) != want {
			t.Fatalf("packet %d = %q, want %q", i, g, want)
		}
	}
}
