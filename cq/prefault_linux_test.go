package cq

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRingPrefaulted: the producer's first pass over a fresh ring takes no
// page fault, also after the garbage collector has scanned the ring (its
// reads would have mapped the shared zero page, whose replacement on the
// first write interrupts every CPU running the process: see newRing).
func TestRingPrefaulted(t *testing.T) {
	const size = 1 << 15 // 3 MiB of slots: memory fresh from the kernel
	q := mustOpen(t, Attr{Size: size})
	p := mustBind(t, q, BindAttr{})
	runtime.GC()
	runtime.GC()

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	faults := func() int64 {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
			t.Fatal(err)
		}
		return ru.Minflt + ru.Majflt
	}
	c := &Completion{Entry: Entry{Len: 1}}
	out := make([]Entry, 64)
	before := faults()
	for done := 0; done < size; {
		n, err := p.Reserve(64)
		if err != nil || n == 0 {
			t.Fatalf("Reserve after %d: %d, %v", done, n, err)
		}
		for range n {
			if err := p.Write(c); err != nil {
				t.Fatal(err)
			}
		}
		p.Commit()
		done += n
	}
	after := faults()
	for read := 0; read < size; {
		n, err := q.Read(out)
		if err != nil {
			t.Fatalf("Read after %d: %v", read, err)
		}
		read += n
	}
	// A page of the ring holds about 43 slots: without the writes at Open
	// this pass faulted about 760 times.
	if d := after - before; d > 16 {
		t.Fatalf("writing the ring's %d slots once took %d page faults, want none", size, d)
	}
}
