package main

// Measuring threads: a function run on an OS thread of its own, inside a
// testbed namespace or not, pinned to one CPU or not. testbed's NS.Do
// provides the namespace part; pinned adds the CPU and undoes it again.

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/xdpfab/xdpfab/internal/testbed"
	"golang.org/x/sys/unix"
)

// onThread runs fn on a locked OS thread, inside ns (nil: the current
// namespace) and pinned to cpu (cpu < 0: not pinned), and returns fn's
// error; a panic in fn comes back as an error.
func onThread(ns *testbed.NS, cpu int, fn func() error) error {
	run := func() (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = fmt.Errorf("panic: %v", v)
			}
		}()
		return pinned(cpu, fn)
	}
	if ns != nil {
		return ns.Do(run)
	}
	done := make(chan error, 1)
	go func() { done <- run() }()
	return <-done
}

// goOnThread is onThread without waiting: the returned channel yields fn's
// error.
func goOnThread(ns *testbed.NS, cpu int, fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- onThread(ns, cpu, fn) }()
	return ch
}

// pinned runs fn with the calling goroutine locked to its thread and the
// thread pinned to cpu (modulo the number of CPUs; cpu < 0: not pinned).
// The thread's previous affinity is restored before pinned returns, also
// when fn panics, so the thread may go back to the Go scheduler (NS.Do hands
// it back). If the restore fails, the thread stays locked: it then exits
// with its goroutine instead of running other goroutines on one CPU.
func pinned(cpu int, fn func() error) (err error) {
	runtime.LockOSThread()
	if cpu < 0 {
		defer runtime.UnlockOSThread()
		return fn()
	}
	var prev, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &prev); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("thread affinity: %w", err)
	}
	set.Set(cpu % runtime.NumCPU())
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		// A failed sched_setaffinity changes nothing.
		runtime.UnlockOSThread()
		return fmt.Errorf("pin thread to cpu %d: %w", cpu, err)
	}
	defer func() {
		if rerr := unix.SchedSetaffinity(0, &prev); rerr != nil {
			err = errors.Join(err, fmt.Errorf("restore thread affinity: %w", rerr))
			return
		}
		runtime.UnlockOSThread()
	}()
	return fn()
}

// samples returns an empty slice with room for n values whose memory is
// already written. A fresh allocation of that size comes from pages the
// process has never touched, and the timed loop's appends would take a
// page fault every 512 samples (several microseconds in a VM) that the
// result would charge to the code under test. (bench/xskfloor does the
// same for its own array.)
func samples[T any](n int) []T {
	s := make([]T, n)
	clear(s)
	return s[:0]
}
