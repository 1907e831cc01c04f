//go:build linux

package dataplane_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"golang.org/x/sys/unix"
)

// dup returns a new descriptor of fd, as SCM_RIGHTS would give the
// receiving process, closed at the end of the test unless closed before.
func dup(t *testing.T, fd int) int {
	t.Helper()
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// fdOpen reports whether fd is an open descriptor.
func fdOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

// TestSharedUMEMMemfd checks the memfd behind a shared UMEM and a second
// mapping of it with AttachUMEM; no privilege needed.
func TestSharedUMEMMemfd(t *testing.T) {
	rings0, memfds0 := xskMappings(t)

	anon := newUMEM(t, dataplane.UMEMConfig{NumFrames: 4})
	if fd := anon.Memfd(); fd != -1 {
		t.Fatalf("anonymous UMEM: Memfd = %d, want -1", fd)
	}
	u, err := dataplane.NewUMEM(dataplane.UMEMConfig{NumFrames: 16, FrameSize: 2048, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	mfd := u.Memfd()
	if mfd < 0 {
		t.Fatal("shared UMEM without a memfd")
	}
	if fl, err := unix.FcntlInt(uintptr(mfd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
		t.Errorf("memfd flags %#x, %v: want close-on-exec", fl, err)
	}
	seals, err := unix.FcntlInt(uintptr(mfd), unix.F_GET_SEALS, 0)
	if want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL; err != nil || seals != want {
		t.Errorf("seals %#x, %v; want %#x", seals, err, want)
	}
	if err := unix.Ftruncate(mfd, 0); !errors.Is(err, unix.EPERM) {
		t.Errorf("shrinking the sealed memfd: %v, want EPERM", err)
	}

	// Another mapping sees the same frames, both ways.
	cfg := u.Config()
	cfg.Shared = false // AttachUMEM ignores it
	a, err := dataplane.AttachUMEM(dup(t, mfd), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !a.Config().Shared || a.Memfd() < 0 || a.Memfd() == mfd || a.NumFrames() != 16 || a.FreeFrames() != 16 {
		t.Fatalf("attached UMEM: config %+v memfd %d free %d", a.Config(), a.Memfd(), a.FreeFrames())
	}
	copy(u.Frame(5*2048+256), "from the creator")
	copy(a.Frame(9*2048), "from the adopter")
	if got := a.Frame(5*2048 + 256)[:16]; string(got) != "from the creator" {
		t.Errorf("attached mapping reads %q", got)
	}
	if got := u.Frame(9 * 2048)[:16]; string(got) != "from the adopter" {
		t.Errorf("creator's mapping reads %q", got)
	}

	// Wrong geometry or not a memfd: refused, the descriptor stays ours.
	for _, c := range []struct {
		name string
		fd   func() int
		cfg  dataplane.UMEMConfig
	}{
		{"more frames than the memfd holds", func() int { return dup(t, mfd) }, dataplane.UMEMConfig{NumFrames: 32, FrameSize: 2048}},
		{"other frame size", func() int { return dup(t, mfd) }, dataplane.UMEMConfig{NumFrames: 16, FrameSize: 4096}},
		{"a pipe", func() int {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			unix.Close(p[1])
			return p[0]
		}, dataplane.UMEMConfig{NumFrames: 16, FrameSize: 2048}},
	} {
		fd := c.fd()
		if _, err := dataplane.AttachUMEM(fd, c.cfg); !errors.Is(err, fi.EINVAL) {
			t.Errorf("%s: %v, want EINVAL", c.name, err)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
		if !fdOpen(fd) {
			t.Errorf("%s: failed AttachUMEM closed the descriptor", c.name)
		}
		unix.Close(fd)
	}

	// An attached UMEM is never registered: Open has no socket to share.
	if _, err := dataplane.Open(1, 0, a, dataplane.SocketConfig{}); !errors.Is(err, fi.EINVAL) {
		t.Errorf("Open on an attached UMEM without sockets: %v, want EINVAL", err)
	}

	for _, x := range []*dataplane.UMEM{a, u, anon} {
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if a.Memfd() != -1 || u.Memfd() != -1 {
		t.Error("Memfd after Close")
	}
	rings1, memfds1 := xskMappings(t)
	if fds := xskFDs(t); len(fds) > 0 || rings1 != rings0 || memfds1 != memfds0 {
		t.Errorf("memfd descriptors %q, ring mappings %d -> %d, memfd mappings %d -> %d", fds, rings0, rings1, memfds0, memfds1)
	}
}

func TestSocketInfoJSON(t *testing.T) {
	in := dataplane.SocketInfo{
		Ifindex: 7, Queue: 3, ZeroCopy: true,
		UMEM:   dataplane.UMEMConfig{FrameSize: 2048, NumFrames: 1024, FillSize: 1024, CompSize: 512, Headroom: 64, Shared: true},
		Socket: dataplane.AdoptConfig{RxSize: 2048, TxSize: 0, NeedWakeup: true, Netns: 4026531840},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", b)
	var out dataplane.SocketInfo
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
}

// receiveLive injects n distinct live frames to port through p and receives
// them on s, checking payload and metadata; it frees their frames.
func receiveLive(t *testing.T, bed *testbed.Bed, p redirectProg, s *dataplane.Socket, n int, tag string) {
	t.Helper()
	u := s.UMEM()
	for i := range n {
		f := udp4Frame(bed.A.MAC, bed.B.MAC, netip.AddrPortFrom(bed.A.IPv4, 1234), netip.AddrPortFrom(bed.B.IPv4, 4791), fmt.Appendf(nil, "%s %02d", tag, i))
		if err := p.inject(bed.B, f, 1); err != nil {
			t.Fatal(err)
		}
	}
	descs := make([]dataplane.Desc, 2*n)
	got := s.Receive(descs)
	if got != n {
		st, _ := s.Stats()
		t.Fatalf("%s: received %d of %d; stats %+v", tag, got, n, st)
	}
	for i, d := range descs[:got] {
		checkMeta(t, u, d, bed.B.Ifindex)
		if p, want := udp4Payload(u.Packet(d), 4791), fmt.Sprintf("%s %02d", tag, i); string(p) != want {
			t.Fatalf("%s: packet %d = %q, want %q", tag, i, p, want)
		}
		u.Free(d.Addr)
	}
}

// transmitUDP sends n frames from B to dst through s and waits for their
// completion and for the peer to read them.
func transmitUDP(t *testing.T, bed *testbed.Bed, s *dataplane.Socket, dst netip.AddrPort, n int, tag string) {
	t.Helper()
	pc, err := bed.A.ListenPacket("udp4", dst.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	frames := make([][]byte, n)
	for i := range frames {
		frames[i] = udp4Frame(bed.B.MAC, bed.A.MAC, netip.AddrPortFrom(bed.B.IPv4, 6000), dst, fmt.Appendf(nil, "%s %02d", tag, i))
	}
	sendFrames(t, s, frames)
	if err := pc.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	for i := range n {
		m, _, err := pc.ReadFrom(buf)
		if want := fmt.Sprintf("%s %02d", tag, i); err != nil || string(buf[:m]) != want {
			t.Fatalf("%s: datagram %d = %q, %v; want %q", tag, i, buf[:m], err, want)
		}
	}
}

// sendFrames transmits frames through s and waits until the kernel has
// completed them all.
func sendFrames(t *testing.T, s *dataplane.Socket, frames [][]byte) {
	t.Helper()
	u := s.UMEM()
	addrs := make([]uint64, len(frames))
	if got := u.Alloc(addrs); got != len(frames) {
		t.Fatalf("Alloc = %d of %d", got, len(frames))
	}
	descs := make([]dataplane.Desc, len(frames))
	for i, a := range addrs {
		descs[i] = dataplane.Desc{Addr: a, Len: uint32(copy(u.Frame(a), frames[i]))}
	}
	if got := s.Transmit(descs); got != len(descs) {
		t.Fatalf("Transmit = %d of %d", got, len(descs))
	}
	for done, deadline := 0, time.Now().Add(5*time.Second); done < len(descs); {
		if time.Now().After(deadline) {
			st, _ := s.Stats()
			t.Fatalf("%d of %d transmissions completed; stats %+v", done, len(descs), st)
		}
		if err := s.Kick(); err != nil {
			t.Fatal(err)
		}
		done += s.CompleteFree()
	}
}

// TestAdoptAfterCreatorCloses adopts a socket in the creating process
// itself, through a second mapping of its memfd, then closes the creator's
// socket and UMEM: the adopted side keeps working on the kernel's pinned
// pages, and closing it releases the device queue.
func TestAdoptAfterCreatorCloses(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	p := newRedirectProg(t)
	rings0, memfds0 := xskMappings(t)

	u, err := dataplane.NewUMEM(dataplane.UMEMConfig{NumFrames: 128, FillSize: 64, CompSize: 64, Shared: true})
	if err != nil {
		t.Fatal(err)
	}
	var s *dataplane.Socket
	if err := bed.B.Do(func() (err error) {
		s, err = dataplane.Open(bed.B.Ifindex, 0, u, dataplane.SocketConfig{RxSize: 64, TxSize: 64, Logger: testLogger(t)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	p.insert(t, s)
	ino := inode(t, s.FD())
	info := s.Info()
	t.Logf("info %+v", info)

	a, err := dataplane.AttachUMEM(dup(t, u.Memfd()), info.UMEM)
	if err != nil {
		t.Fatal(err)
	}
	as, err := dataplane.AdoptSocket(dup(t, s.FD()), info.Ifindex, info.Queue, a, info.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if as.ZeroCopy() != s.ZeroCopy() || as.FD() == s.FD() || as.Info() != info {
		t.Fatalf("adopted: zero-copy %v fd %d info %+v", as.ZeroCopy(), as.FD(), as.Info())
	}
	// One kernel socket appears once per UMEM.
	for _, x := range []*dataplane.UMEM{a, u} {
		fd := dup(t, s.FD())
		if _, err := dataplane.AdoptSocket(fd, info.Ifindex, info.Queue, x, info.Socket); !errors.Is(err, fi.EEXIST) {
			t.Errorf("adopting a socket twice: %v, want EEXIST", err)
		}
		unix.Close(fd)
	}

	// The creator lets go of everything.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if rings, memfds := xskMappings(t); rings != rings0+4 || memfds != memfds0+1 {
		t.Fatalf("after the creator closed: %d ring and %d memfd mappings, want the adopter's 4 and 1", rings-rings0, memfds-memfds0)
	}
	if n := as.FillFree(); n != 64 {
		t.Fatalf("FillFree = %d", n)
	}
	receiveLive(t, bed, p, as, 10, "after close")
	as.FillFree()
	transmitUDP(t, bed, as, netip.AddrPortFrom(bed.A.IPv4, 5002), 10, "adopted tx")
	if st, err := as.Stats(); err != nil || st.RxDropped != 0 {
		t.Fatalf("stats %+v, %v", st, err)
	}

	if err := p.xsks.Delete(uint32(0)); err != nil {
		t.Fatal(err)
	}
	if err := as.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	rings1, memfds1 := xskMappings(t)
	if fds := xskFDs(t, ino); len(fds) > 0 || rings1 != rings0 || memfds1 != memfds0 {
		t.Errorf("descriptors %q, ring mappings %d -> %d, memfd mappings %d -> %d", fds, rings0, rings1, memfds0, memfds1)
	}
	// The kernel released the socket, the UMEM and the queue.
	requireQueueFree(t, bed.B)
}

// requireQueueFree opens and closes a socket on h's queue 0 with a UMEM of
// its own: it binds only once every earlier socket of the queue is gone
// from the kernel.
func requireQueueFree(t *testing.T, h *testbed.Host) {
	t.Helper()
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 16})
	if err := h.Do(func() error {
		s, err := dataplane.Open(h.Ifindex, 0, u, dataplane.SocketConfig{RxSize: 16, TxSize: 16, Logger: testLogger(t)})
		if err != nil {
			return err
		}
		return s.Close()
	}); err != nil {
		t.Fatalf("queue still held: %v", err)
	}
}

func TestAdoptErrors(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 64, Shared: true})
	// An RX ring of 512 spans three pages; one of 256 two.
	s := openIn(t, bed.B, 0, u, dataplane.SocketConfig{RxSize: 512, TxSize: 64})
	info := s.Info()
	a, err := dataplane.AttachUMEM(dup(t, u.Memfd()), info.UMEM)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	with := func(f func(*dataplane.AdoptConfig)) dataplane.AdoptConfig {
		c := info.Socket
		f(&c)
		return c
	}
	unbound, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(unbound)
	if err := unix.SetsockoptInt(unbound, unix.SOL_XDP, unix.XDP_RX_RING, 64); err != nil {
		t.Fatal(err)
	}
	udp, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(udp)
	closedUMEM, err := dataplane.AttachUMEM(dup(t, u.Memfd()), info.UMEM)
	if err != nil {
		t.Fatal(err)
	}
	closedUMEM.Close()

	rings0, _ := xskMappings(t)
	for _, c := range []struct {
		name string
		fd   int
		u    *dataplane.UMEM
		cfg  dataplane.AdoptConfig
		want error
	}{
		{"rx ring larger than the socket's", -1, a, with(func(c *dataplane.AdoptConfig) { c.RxSize = 1024 }), fi.EINVAL},
		{"rx ring smaller than the socket's", -1, a, with(func(c *dataplane.AdoptConfig) { c.RxSize = 256 }), fi.EINVAL},
		{"tx ring described as none", -1, a, with(func(c *dataplane.AdoptConfig) { c.TxSize = 0 }), fi.EINVAL},
		{"ring size not a power of two", -1, a, with(func(c *dataplane.AdoptConfig) { c.TxSize = 100 }), fi.EINVAL},
		{"no rings", -1, a, dataplane.AdoptConfig{}, fi.EINVAL},
		{"other network namespace", -1, a, with(func(c *dataplane.AdoptConfig) { c.Netns++ }), fi.EINVAL},
		{"closed UMEM", -1, closedUMEM, info.Socket, fi.EINVAL},
		{"unbound socket", unbound, a, dataplane.AdoptConfig{RxSize: 64}, fi.ENOTCONN},
		{"UDP socket", udp, a, info.Socket, fi.EINVAL},
	} {
		fd := c.fd
		if fd < 0 {
			fd = dup(t, s.FD())
		}
		_, err := dataplane.AdoptSocket(fd, info.Ifindex, info.Queue, c.u, c.cfg)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
		if !fdOpen(fd) {
			t.Errorf("%s: failed AdoptSocket closed the descriptor", c.name)
		}
		if c.fd < 0 {
			unix.Close(fd)
		}
	}
	if rings, _ := xskMappings(t); rings != rings0 {
		t.Errorf("failed adoptions left %d ring mappings", rings-rings0)
	}
	// The right description works.
	as, err := dataplane.AdoptSocket(dup(t, s.FD()), info.Ifindex, info.Queue, a, info.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer as.Close()

	// Rings that carried frames before the handover are refused: a fill
	// ring the creator filled (on another device queue, with rings of its
	// own), and a TX ring it transmitted on (a second socket of the queue
	// adopted above, whose fill ring is already the adopter's).
	filled := openIn(t, bed.A, 0, u, dataplane.SocketConfig{RxSize: 64, TxSize: 64})
	filled.FillFree()
	sent := openIn(t, bed.B, 0, u, dataplane.SocketConfig{RxSize: 64, TxSize: 64})
	addr := make([]uint64, 1)
	u.Alloc(addr)
	sent.Transmit([]dataplane.Desc{{Addr: addr[0], Len: 60}})
	for _, used := range []*dataplane.Socket{filled, sent} {
		fd := dup(t, used.FD())
		i := used.Info()
		if _, err := dataplane.AdoptSocket(fd, i.Ifindex, i.Queue, a, i.Socket); !errors.Is(err, fi.EBUSY) {
			t.Errorf("adopting used rings: %v, want EBUSY", err)
		} else {
			t.Log(err)
		}
		unix.Close(fd)
	}
}

// TestAdoptedUMEMStaysChargedToCreator shows where RLIMIT_MEMLOCK is
// charged: to the user whose thread registered the UMEM (lacking
// CAP_IPC_LOCK), for as long as the kernel's UMEM lives, which is until the
// adopter's socket closes too, not when the creator closes.
func TestAdoptedUMEMStaysChargedToCreator(t *testing.T) {
	testutil.RequirePrivileged(t)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max < 8<<20 {
		testutil.Skip(t, fmt.Sprintf("hard RLIMIT_MEMLOCK %d below 8 MiB", lim.Max))
	}
	saved := lim
	lim.Cur = 8 << 20
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &saved); err != nil {
			t.Error(err)
		}
	})
	bed := testbed.New(t, testbed.Options{})
	// 5 MiB each: one fits under the 8 MiB limit, two do not.
	cfg := dataplane.UMEMConfig{NumFrames: 1280, FillSize: 64, CompSize: 64, Shared: true}
	u1, err := dataplane.NewUMEM(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := openWithoutCap(t, bed.B, u1, unix.CAP_IPC_LOCK)
	if err != nil {
		t.Fatal(err)
	}
	info := s1.Info()
	a, err := dataplane.AttachUMEM(dup(t, u1.Memfd()), info.UMEM)
	if err != nil {
		t.Fatal(err)
	}
	as, err := dataplane.AdoptSocket(dup(t, s1.FD()), info.Ifindex, info.Queue, a, info.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := u1.Close(); err != nil {
		t.Fatal(err)
	}

	cfg.Shared = false
	u2 := newUMEM(t, cfg)
	if s2, err := openWithoutCap(t, bed.A, u2, unix.CAP_IPC_LOCK); !errors.Is(err, fi.ENOBUFS) {
		if err == nil {
			s2.Close()
		}
		t.Fatalf("second 5 MiB UMEM while the adopter holds the first: %v, want ENOBUFS", err)
	}
	if err := as.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// The kernel unpins and uncharges the UMEM from a work queue.
	start := time.Now()
	for {
		s2, err := openWithoutCap(t, bed.A, u2, unix.CAP_IPC_LOCK)
		if err == nil {
			t.Logf("charge released %v after the adopter closed", time.Since(start).Round(time.Microsecond))
			if err := s2.Close(); err != nil {
				t.Fatal(err)
			}
			return
		}
		if !errors.Is(err, fi.ENOBUFS) || time.Since(start) > 2*time.Second {
			t.Fatalf("after the adopter closed: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestOpenOnAttachedUMEM: an adopter that may create AF_XDP sockets
// (CAP_NET_RAW) adds sockets to an attached UMEM with Open; they bind with
// XDP_SHARED_UMEM to the adopted socket instead of registering the UMEM
// again, and share the adopted queue's fill ring.
func TestOpenOnAttachedUMEM(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	p := newRedirectProg(t)
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 256, FillSize: 64, CompSize: 64, Shared: true})
	s := openIn(t, bed.B, 0, u, dataplane.SocketConfig{RxSize: 64, TxSize: 64})
	info := s.Info()
	a, err := dataplane.AttachUMEM(dup(t, u.Memfd()), info.UMEM)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	as, err := dataplane.AdoptSocket(dup(t, s.FD()), info.Ifindex, info.Queue, a, info.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { as.Close() })

	same := openIn(t, bed.B, 0, a, dataplane.SocketConfig{RxSize: 64, TxSize: 64})
	other := openIn(t, bed.A, 0, a, dataplane.SocketConfig{RxSize: 64, TxSize: 64})
	if f1, f2, f3 := as.FillFree(), same.FillFree(), other.FillFree(); f1 != 64 || f2 != 0 || f3 != 64 {
		t.Fatalf("FillFree adopted %d, same queue %d, other device %d; want 64, 0 (shared ring), 64", f1, f2, f3)
	}
	p.insert(t, same)
	receiveLive(t, bed, p, same, 10, "opened on attached")
}
