//go:build linux

package dataplane_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"golang.org/x/sys/unix"
)

var shareCfg = dataplane.ShareConfig{Queues: 1, Slots: 4, TxFrames: 16, RxFrames: 64, FrameSize: 4096}

func newBlock(t *testing.T, cfg dataplane.ShareConfig) *dataplane.ShareBlock {
	t.Helper()
	b, err := dataplane.NewShareBlock(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestShareLockChild is a process of TestShareLockAcrossProcesses.
func TestShareLockChild(t *testing.T) {
	if os.Getenv("XDPFAB_SHARE_LOCK") == "" {
		t.Skip("helper process for TestShareLockAcrossProcesses")
	}
	slot, _ := strconv.Atoi(os.Getenv("XDPFAB_SHARE_LOCK"))
	b, err := dataplane.AttachShareBlock(3, shareCfg)
	if err != nil {
		t.Fatal(err)
	}
	x := b.ScratchForTest()
	for range 100000 {
		b.LockForTest(0, slot)
		x.Store(x.Load() + 1) // not atomic as a whole: only the lock makes it exact
		b.UnlockForTest(0, slot)
	}
}

// The lock excludes across processes: two processes and a goroutine of
// this one each add 100000 to a word in the block under it, in read and
// write steps, and no addition is lost.
func TestShareLockAcrossProcesses(t *testing.T) {
	b := newBlock(t, shareCfg)
	var cmds []*exec.Cmd
	for slot := range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestShareLockChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "XDPFAB_SHARE_LOCK="+strconv.Itoa(slot))
		// A duplicate: an os.File closes its descriptor when collected,
		// and the block's is the block's.
		dup, err := unix.Dup(b.FD())
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(dup), "share")
		cmd.ExtraFiles = []*os.File{f}
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		err = cmd.Start()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	x := b.ScratchForTest()
	for range 100000 {
		b.LockForTest(0, 2)
		x.Store(x.Load() + 1)
		b.UnlockForTest(0, 2)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if got := x.Load(); got != 300000 {
		t.Errorf("counted %d under the lock, want 300000", got)
	}
}

// A lock whose holder's slot was retired passes to the next waiter, which
// learns whose it was; so does one whose holder names no slot (the block
// was scribbled on). A live holder keeps it.
func TestShareLockTakeover(t *testing.T) {
	b := newBlock(t, shareCfg)
	if got := b.LockForTest(0, 0); got != 0 {
		t.Fatalf("free lock taken over from %d", got)
	}
	var wg sync.WaitGroup
	var stolen uint32
	wg.Go(func() { stolen = b.LockForTest(0, 1) })
	time.Sleep(20 * time.Millisecond)
	b.Retire(0) // its process is gone
	wg.Wait()
	if stolen != 1 {
		t.Errorf("taken over from %d, want slot 0 (id 1)", stolen)
	}
	b.UnlockForTest(0, 1)

	// A member scribbles a lock to name no slot, or no holder at all (as a
	// process killed between taking a lock and naming itself would have
	// left a lock of two words), or the creator: a member waiting for it
	// takes it over (the creator's id after the longest the creator holds
	// a lock), and so does the creator, at once when it holds no lock.
	for _, c := range []struct {
		id     uint32
		waiter int // slot, -1: the creator
	}{{0xdead, 2}, {0, 2}, {dataplane.AgentHolderForTest, 2}, {dataplane.AgentHolderForTest, -1}, {0, -1}} {
		b.ScribbleLockForTest(0, c.id)
		done := make(chan uint32)
		start := time.Now()
		go func() { done <- b.LockForTest(0, c.waiter) }()
		select {
		case got := <-done:
			if got != c.id {
				t.Errorf("lock scribbled to name %#x taken over by %d from %#x", c.id, c.waiter, got)
			}
			t.Logf("lock scribbled to name %#x: taken over by %d after %v", c.id, c.waiter, time.Since(start))
		case <-time.After(5 * time.Second):
			t.Fatalf("a lock scribbled to name %#x was never taken over by %d", c.id, c.waiter)
		}
		b.UnlockForTest(0, c.waiter)
	}

	// The creator's own hold is not taken from it by the creator's next
	// call, which waits (within its bound) instead.
	b.LockForTest(0, -1)
	if _, ok := b.LockWithinForTest(0, -1, 50*time.Millisecond); ok {
		t.Errorf("the creator took over a lock it holds")
	}
	b.UnlockForTest(0, -1)
	if got, ok := b.LockWithinForTest(0, -1, time.Second); !ok || got != 0 {
		t.Errorf("free lock: %v, taken over from %#x", ok, got)
	}
	b.UnlockForTest(0, -1)
}

// A member of the domain writes into another's return ring whatever it
// likes: frames of other slots, receive frames, addresses past the UMEM,
// producer indices far ahead. Complete hands back only the slot's own
// transmit frames (an address outside the UMEM used to panic the
// receiver's transmit path).
func TestShareReturnRingScribbled(t *testing.T) {
	b := newBlock(t, shareCfg)
	for slot := range 2 {
		if err := b.Activate(slot); err != nil {
			t.Fatal(err)
		}
	}
	f0, _ := b.TxRange(0)
	f1, _ := b.TxRange(1)
	own := uint64(f0) * 4096
	b.ReturnRingForTest(0, []uint64{1 << 40, ^uint64(0), uint64(f1) * 4096, 0, own, uint64(shareCfg.NumFrames()) * 4096})
	out := make([]uint64, 16)
	if n := b.Complete(0, nil, out); n != 1 || out[0] != own {
		t.Errorf("complete took %v, want only the slot's own frame %#x", out[:n], own)
	}
	// A producer index a ring's worth and more ahead: at most a ring's
	// worth is read, none of it taken.
	b.ReturnRingForTest(0, make([]uint64, 3*shareCfg.TxFrames+7))
	for range 4 {
		if n := b.Complete(0, nil, out); n != 0 {
			t.Errorf("complete took %v from a ring of zeros", out[:n])
		}
	}
}

// queueBed is a UMEM of cfg's frames with one socket on host A's queue 0.
func queueBed(t *testing.T, cfg dataplane.ShareConfig) *dataplane.Socket {
	t.Helper()
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: cfg.NumFrames(), Shared: true})
	return openIn(t, bed.A, 0, u, dataplane.SocketConfig{RxSize: -1, TxSize: 64, Mode: dataplane.BindCopy})
}

func addrs(from, to int) []uint64 {
	var a []uint64
	for f := from; f < to; f++ {
		a = append(a, uint64(f)*4096)
	}
	return a
}

// checkPool fails unless the fill ring holds every receive frame exactly
// once (no traffic runs: the kernel takes none).
func checkPool(t *testing.T, s *dataplane.Socket, rxFrames int) {
	t.Helper()
	ring := s.FillRingForTest()
	slices.Sort(ring)
	if !slices.Equal(ring, addrs(0, rxFrames)) {
		t.Errorf("fill ring holds %d frames %v..., want each of the %d receive frames once", len(ring), ring[:min(len(ring), 8)], rxFrames)
	}
}

// Reclaim gives back what a dead slot held, exactly once each: frames it
// marked, frames drained from its rings (some also marked), and a fill it
// died inside, whether it had published the frames or not.
func TestShareReclaim(t *testing.T) {
	for _, publish := range []bool{false, true} {
		t.Run(fmt.Sprintf("published=%v", publish), func(t *testing.T) {
			s := queueBed(t, shareCfg)
			b := newBlock(t, shareCfg)
			// Slot 1 returned frames 20..63; slot 0 holds 0..19: 0..9 marked
			// as taken, 10..14 on its RX ring (passed as drained, 10 and 11
			// marked too: taken but not yet past the consumer index), and
			// 15..19 in a fill it was killed inside.
			if got := b.Fill(1, s, addrs(20, 64)); got != 44 {
				t.Fatalf("fill took %d", got)
			}
			if err := b.Activate(0); err != nil {
				t.Fatal(err)
			}
			var descs []dataplane.Desc
			for _, a := range addrs(0, 12) {
				descs = append(descs, dataplane.Desc{Addr: a})
			}
			for _, a := range addrs(15, 20) {
				descs = append(descs, dataplane.Desc{Addr: a})
			}
			b.Mark(0, descs)
			if b.Held(0) != 17 {
				t.Fatalf("slot 0 holds %d frames, want 17", b.Held(0))
			}
			b.DieInFillForTest(0, s, addrs(15, 20), publish)
			b.Retire(0)
			n, err := b.Reclaim(0, []*dataplane.Socket{s}, addrs(10, 15))
			if err != nil {
				t.Fatal(err)
			}
			want := 20
			if publish {
				want = 15 // 15..19 reached the ring before it died
			}
			if n != want {
				t.Errorf("reclaimed %d frames, want %d", n, want)
			}
			checkPool(t, s, shareCfg.RxFrames)
			if b.Held(0) != 0 || !b.SlotFree(0) {
				t.Errorf("after reclaim: slot 0 holds %d, free %v", b.Held(0), b.SlotFree(0))
			}
			// The lock the dead slot held is free again.
			b.LockForTest(0, 2)
			b.UnlockForTest(0, 2)
		})
	}
}

// A live member of the domain that holds a lock for ever cannot hang the
// block's creator: Reclaim gives up with EBUSY and the slot stays retired.
func TestShareReclaimStuckLock(t *testing.T) {
	s := queueBed(t, shareCfg)
	b := newBlock(t, shareCfg)
	b.Activate(0)
	b.Activate(1)
	b.LockForTest(0, 1) // slot 1 lives and never lets go
	b.Retire(0)
	start := time.Now()
	_, err := b.Reclaim(0, []*dataplane.Socket{s}, nil)
	if !errors.Is(err, fi.EBUSY) || time.Since(start) > 5*time.Second {
		t.Errorf("reclaim with a lock stuck: %v after %v, want EBUSY after about a second", err, time.Since(start))
	}
	if b.SlotFree(0) {
		t.Errorf("slot reused though its frames were not taken back")
	}
}

// Completions: each slot gets its own finished frames, whoever drains the
// completion ring.
func TestShareBlockTxRanges(t *testing.T) {
	b := newBlock(t, shareCfg)
	for slot := range shareCfg.Slots {
		first, n := b.TxRange(slot)
		if first != shareCfg.RxFrames+slot*shareCfg.TxFrames || n != shareCfg.TxFrames {
			t.Errorf("slot %d transmits with frames %d+%d", slot, first, n)
		}
	}
	if first, n := b.TxRange(shareCfg.Slots); first != 0 || n != 0 {
		t.Errorf("a slot out of range has frames %d+%d", first, n)
	}
	if _, err := dataplane.AttachShareBlock(b.FD(), dataplane.ShareConfig{Queues: 1, Slots: 5, TxFrames: 16, RxFrames: 64, FrameSize: 4096}); !errors.Is(err, fi.EINVAL) {
		t.Errorf("attach with another configuration: %v", err)
	}
}

// Processes of a domain drain one completion ring, each with the indices
// it cached: one whose cached producer index fell behind the consumer
// index (others drained past it) must read only what the kernel wrote,
// and every sent frame comes back to its slot exactly once.
func TestShareCompleteAcrossProcesses(t *testing.T) {
	s := queueBed(t, shareCfg)
	b := newBlock(t, shareCfg)
	for slot := range 2 {
		if err := b.Activate(slot); err != nil {
			t.Fatal(err)
		}
	}
	views := []*dataplane.Socket{s, s.OtherProcessForTest()} // slot 0's process, slot 1's
	f0, _ := b.TxRange(0)
	f1, _ := b.TxRange(1)
	got := map[int][]uint64{}
	sent := 0
	send := func(frame int) {
		t.Helper()
		if s.Transmit([]dataplane.Desc{{Addr: uint64(frame) * 4096, Len: 64}}) != 1 {
			t.Fatal("TX ring full")
		}
		if err := s.Kick(); err != nil {
			t.Fatal(err)
		}
		sent++
		// Copy mode completes inside the kick; allow for a late one.
		for deadline := time.Now().Add(time.Second); ; {
			if p, _ := s.CompIndicesForTest(); int(p) >= sent || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	complete := func(slot, max int) {
		t.Helper()
		out := make([]uint64, max)
		n := b.Complete(slot, views[slot], out)
		got[slot] = append(got[slot], out[:n]...)
		if p, c := s.CompIndicesForTest(); int32(p-c) < 0 {
			t.Fatalf("slot %d's drain moved the consumer index to %d, past the producer's %d", slot, c, p)
		}
	}
	send(f0)
	send(f0 + 1)
	complete(0, 1) // slot 0's process caches producer 2, consumes 1
	send(f1)
	complete(1, 8) // slot 1's drains to 3: f0+1 goes to slot 0's return ring
	send(f1 + 1)
	complete(0, 16) // cached producer 2 < consumer 3: must see only f1+1
	complete(1, 16)
	complete(0, 16)
	want := map[int][]uint64{
		0: {uint64(f0) * 4096, uint64(f0+1) * 4096},
		1: {uint64(f1) * 4096, uint64(f1+1) * 4096},
	}
	for slot := range 2 {
		slices.Sort(got[slot])
		if !slices.Equal(got[slot], want[slot]) {
			t.Errorf("slot %d got back frames %v, want %v once each", slot, got[slot], want[slot])
		}
	}
}
