package main

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

func affinity(t *testing.T) unix.CPUSet {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	return set
}

// pinned must leave the thread as it found it, after fn returns and after
// fn panics, so that NS.Do can hand the thread back to the scheduler.
func TestPinnedRestoresAffinity(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := affinity(t)
	cpu := runtime.NumCPU() - 1
	err := pinned(cpu, func() error {
		if got := affinity(t); got.Count() != 1 || !got.IsSet(cpu) {
			t.Errorf("inside: affinity has %d CPUs, want only %d", got.Count(), cpu)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if after := affinity(t); after != before {
		t.Fatalf("affinity after pinned: %v, want %v", after, before)
	}
	func() {
		defer func() { recover() }()
		pinned(cpu, func() error { panic("boom") })
	}()
	if after := affinity(t); after != before {
		t.Fatalf("affinity after a panic in pinned: %v, want %v", after, before)
	}
}

func TestOnThreadPanicIsError(t *testing.T) {
	if err := onThread(nil, 0, func() error { panic("boom") }); err == nil {
		t.Fatal("no error from a panicking fn")
	}
}
