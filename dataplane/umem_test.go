//go:build linux

package dataplane_test

import (
	"errors"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"golang.org/x/sys/unix"
)

func TestUMEMConfigValidation(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  dataplane.UMEMConfig
	}{
		{"frame not a power of two", dataplane.UMEMConfig{FrameSize: 3000}},
		{"frame below 2048", dataplane.UMEMConfig{FrameSize: 1024}},
		{"frame above page", dataplane.UMEMConfig{FrameSize: 2 * os.Getpagesize()}},
		{"negative frames", dataplane.UMEMConfig{NumFrames: -1}},
		{"fill ring not a power of two", dataplane.UMEMConfig{FillSize: 100}},
		{"headroom fills the frame", dataplane.UMEMConfig{Headroom: 4096 - 256}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := dataplane.NewUMEM(c.cfg); !errors.Is(err, fi.EINVAL) {
				t.Fatalf("NewUMEM(%+v) = %v, want EINVAL", c.cfg, err)
			}
		})
	}
	u, err := dataplane.NewUMEM(dataplane.UMEMConfig{NumFrames: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	cfg := u.Config()
	// Fill and completion rings default to the frame count rounded up:
	// a smaller fill ring starves copy-mode receive.
	if cfg.FrameSize != 4096 || cfg.FillSize != 128 || cfg.CompSize != 128 {
		t.Fatalf("defaults: %+v", cfg)
	}
}

func TestFrameAllocator(t *testing.T) {
	u, err := dataplane.NewUMEM(dataplane.UMEMConfig{FrameSize: 2048, NumFrames: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	addrs := make([]uint64, 10)
	if n := u.Alloc(addrs); n != 8 {
		t.Fatalf("Alloc = %d, want all 8", n)
	}
	got := slices.Clone(addrs[:8])
	slices.Sort(got)
	for i, a := range got {
		if a != uint64(i*2048) {
			t.Fatalf("frame addresses %v", got)
		}
	}
	if n := u.Alloc(addrs); n != 0 || u.FreeFrames() != 0 {
		t.Fatalf("Alloc from an empty UMEM = %d", n)
	}
	// Any address inside a frame frees the frame; a second free is ignored.
	u.Free(3*2048+256, 5*2048)
	u.Free(3 * 2048)
	if n := u.FreeFrames(); n != 2 {
		t.Fatalf("FreeFrames = %d, want 2", n)
	}
	if n := u.Alloc(addrs); n != 2 || !slices.Contains(addrs[:2], 3*2048) || !slices.Contains(addrs[:2], 5*2048) {
		t.Fatalf("Alloc = %d %v", n, addrs[:n])
	}
	if allocs := testing.AllocsPerRun(100, func() {
		u.Free(addrs[:2]...)
		u.Alloc(addrs[:2])
	}); allocs != 0 {
		t.Fatalf("Free+Alloc allocates %v times", allocs)
	}
}

func TestFrameAccessors(t *testing.T) {
	u, err := dataplane.NewUMEM(dataplane.UMEMConfig{FrameSize: 2048, NumFrames: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if f := u.Frame(2048 + 256); len(f) != 2048-256 {
		t.Fatalf("Frame: %d bytes", len(f))
	}
	copy(u.Frame(2048+256), "packet")
	copy(u.Meta(2048+256, 4), "meta")
	if p := u.Packet(dataplane.Desc{Addr: 2048 + 256, Len: 6}); string(p) != "packet" {
		t.Fatalf("Packet = %q", p)
	}
	if m := u.Frame(2048 + 252)[:4]; string(m) != "meta" {
		t.Fatalf("metadata not right before the packet: %q", m)
	}
	if u.Meta(2048+16, 32) != nil || u.Meta(2048, 1) != nil {
		t.Fatal("Meta reaching into the previous frame")
	}
	if len(u.Meta(2048+256, dataplane.PacketHeadroom)) != dataplane.PacketHeadroom {
		t.Fatal("the whole headroom can hold metadata")
	}
}

func TestSocketConfigValidation(t *testing.T) {
	u, err := dataplane.NewUMEM(dataplane.UMEMConfig{NumFrames: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	for _, cfg := range []dataplane.SocketConfig{
		{RxSize: 100},
		{RxSize: -1, TxSize: -1},
		{Mode: 7},
	} {
		if _, err := dataplane.Open(1, 0, u, cfg); !errors.Is(err, fi.EINVAL) {
			t.Errorf("Open(%+v) = %v, want EINVAL", cfg, err)
		}
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := dataplane.Open(1, 0, u, dataplane.SocketConfig{}); !errors.Is(err, fi.EINVAL) {
		t.Errorf("Open on a closed UMEM = %v", err)
	}
}

func TestZeroCopyRefusedOnVeth(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 16})
	err := bed.B.Do(func() error {
		s, err := dataplane.Open(bed.B.Ifindex, 0, u, dataplane.SocketConfig{Mode: dataplane.BindZeroCopy})
		if err == nil {
			s.Close()
		}
		return err
	})
	if !errors.Is(err, fi.EOPNOTSUPP) {
		t.Fatalf("forced zero-copy on veth: %v, want EOPNOTSUPP", err)
	}
	rec := &logRecorder{}
	s := openIn(t, bed.B, 0, u, dataplane.SocketConfig{Logger: slog.New(rec)})
	if s.ZeroCopy() {
		t.Fatal("auto mode chose zero-copy on veth")
	}
	if len(rec.find("zero-copy refused")) != 1 {
		t.Fatal("the fallback to copy mode was not logged")
	}
}

func TestBusyPollAndNoNeedWakeup(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	p := newRedirectProg(t)
	for _, cfg := range []dataplane.SocketConfig{
		{BusyPoll: 20e3, BusyPollBudget: 16},
		{DisableNeedWakeup: true, TxBudget: 64},
	} {
		u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 64})
		s := openIn(t, bed.B, 0, u, cfg)
		p.insert(t, s)
		s.FillFree()
		// Without need_wakeup the kernel still raises the TX flag (it
		// marks TX as needing a first wakeup at bind); Kick ignores it.
		fill, tx := s.NeedWakeup()
		t.Logf("need_wakeup off=%v: flags fill %v tx %v", cfg.DisableNeedWakeup, fill, tx)
		frame := udp4Frame(bed.A.MAC, bed.B.MAC, netip.AddrPortFrom(bed.A.IPv4, 1), netip.AddrPortFrom(bed.B.IPv4, 2), []byte("busy"))
		if err := p.inject(bed.B, frame, 5); err != nil {
			t.Fatal(err)
		}
		if n := s.Receive(make([]dataplane.Desc, 8)); n != 5 {
			t.Fatalf("%+v: received %d of 5", cfg, n)
		}
		// An empty ring with busy polling makes a recvfrom; it must not fail.
		if n := s.Receive(make([]dataplane.Desc, 8)); n != 0 {
			t.Fatalf("received %d from an empty ring", n)
		}
		if err := s.Kick(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUMEMOverMemlockLimit registers a UMEM larger than RLIMIT_MEMLOCK from
// a thread that dropped CAP_IPC_LOCK (capabilities are per thread).
func TestUMEMOverMemlockLimit(t *testing.T) {
	testutil.RequirePrivileged(t)
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur == unix.RLIM_INFINITY || lim.Cur > 64<<20 {
		// Lower the soft limit for this test only (nothing else in this
		// package runs meanwhile: no test here is parallel).
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
	}
	bed := testbed.New(t, testbed.Options{})
	frames := int(lim.Cur/4096) + 256
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: frames, FillSize: 64, CompSize: 64})
	s, err := openWithoutCap(t, bed.B, u, unix.CAP_IPC_LOCK)
	if err == nil {
		s.Close()
	}
	if !errors.Is(err, fi.ENOBUFS) || !strings.Contains(err.Error(), "RLIMIT_MEMLOCK") {
		t.Fatalf("UMEM of %d bytes over a %d-byte limit: %v", frames*4096, lim.Cur, err)
	}
	t.Log(err)
}

// TestOpenWithoutNetAdmin opens a socket from a thread without
// CAP_NET_ADMIN, where the socket's namespace cannot be asked for.
func TestOpenWithoutNetAdmin(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 64})
	s, err := openWithoutCap(t, bed.B, u, unix.CAP_NET_ADMIN)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A second socket on the same queue must find the first one's rings.
	s2, err := openWithoutCap(t, bed.B, u, unix.CAP_NET_ADMIN)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s.FillFree() != 64 || s2.FillFree() != 0 {
		t.Fatal("the two sockets do not share the queue's fill ring")
	}
}

// openWithoutCap opens a socket on h's veth0 from a thread inside h's
// namespace that dropped capability bit from its effective set
// (capabilities are per thread). The thread returns to the scheduler only
// if both its capabilities and its namespace were restored.
func openWithoutCap(t *testing.T, h *testbed.Host, u *dataplane.UMEM, capBit int) (*dataplane.Socket, error) {
	t.Helper()
	target, err := netns.GetFromPath(h.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	type result struct {
		s   *dataplane.Socket
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			done <- result{err: err}
			return
		}
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var caps, dropped [2]unix.CapUserData
		if err := unix.Capget(&hdr, &caps[0]); err != nil {
			done <- result{err: err}
			return
		}
		dropped = caps
		dropped[capBit/32].Effective &^= 1 << (capBit % 32)
		if err := unix.Capset(&hdr, &dropped[0]); err != nil {
			done <- result{err: err}
			return
		}
		s, openErr := dataplane.Open(h.Ifindex, 0, u, dataplane.SocketConfig{Logger: testLogger(t)})
		if unix.Capset(&hdr, &caps[0]) == nil && netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{s, openErr}
	}()
	r := <-done
	return r.s, r.err
}
