package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The writers' lock is the directory lock under the pin root (LockPath),
// flock'ed by every process that changes the pinned maps. Only its owner
// (the user that loaded the dataplane first: the agent's) and root can
// open it, and a lock no one else can open is a lock no one else can
// hold: the applications the pins are shared with (ShareWithGroup) can
// neither stop the agent's changes nor keep it waiting. They read without
// it, as an application with the agent's descriptors (FromFDs) always has:
// whatever they read mid-change, the AV's generation tells them to read
// again (see package av), and each table slot has its own sequence count
// (internal/avtab).
//
// The pin root itself, and maps/, which members may open, are never
// locked.

// lockName is the writers' lock's name under the pin root.
const lockName = "lock"

// LockPath returns the writers' lock of the dataplane pinned under
// pinRoot: a directory only its owner and root may open (mode 0700).
func LockPath(pinRoot string) string { return filepath.Join(pinRoot, lockName) }

// openWriterLock opens the writers' lock under pinRoot for Load, making it
// if there is none. A lock that others could open (made by hand with
// another mode) is made its owner's alone first: otherwise anyone who can
// open it could take it and hold it.
func openWriterLock(pinRoot string) (*os.File, error) {
	p := LockPath(pinRoot)
	if err := unix.Mkdir(p, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("create the writers' lock %s: %w", p, err)
	}
	f, st, err := openLock(p)
	if err != nil {
		return nil, fmt.Errorf("open the writers' lock %s (the pins' owner and root may): %w", p, err)
	}
	if st.Mode&0o077 != 0 {
		if err := unix.Fchmod(int(f.Fd()), 0o700); err != nil {
			f.Close()
			return nil, fmt.Errorf("the writers' lock %s is mode %#o, open to others, and cannot be made 0700: %w", p, st.Mode&0o777, err)
		}
	}
	return f, nil
}

// openReaderLock opens the writers' lock under pinRoot for OpenPinned, if
// this process may (root, or the pins' owner): then a read-only dataplane
// reads under it too, and sees no change half made. Nil otherwise, as for
// everyone the pins are merely shared with, and for a lock others could
// open too (no process should wait for a lock they can hold).
func openReaderLock(pinRoot string) *os.File {
	f, st, err := openLock(LockPath(pinRoot))
	if err != nil {
		return nil
	}
	if st.Mode&0o077 != 0 {
		f.Close()
		return nil
	}
	return f
}

// openLock opens the directory at p, never through a symbolic link.
func openLock(p string) (*os.File, *unix.Stat_t, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	return os.NewFile(uintptr(fd), p), &st, nil
}

// Lock serialises changes to the shared maps: across goroutines always,
// and across processes (the writers' lock, LockPath) when this process
// loaded the pinned dataplane, or opened it (OpenPinned) with the right to
// take that lock. Callers hold it for a read-modify-write of AV state and
// release it with the returned func. The wait has no bound: only the
// agent's user and root can hold the lock, and LockProgress tells a
// watchdog when it does not change hands. A nil Objects has nothing to
// lock: its unlock does nothing.
//
// Uncontended, it costs one atomic add more than the mutex (no clock is
// read: every AV insert takes it).
func (d *Objects) Lock() (unlock func()) {
	if d == nil {
		return func() {}
	}
	if !d.mu.TryLock() {
		d.lockWaiters.Add(1)
		d.mu.Lock()
		d.lockWaiters.Add(-1)
	}
	if d.lockFile != nil {
		d.flockWaiters.Add(1)
		for {
			err := unix.Flock(int(d.lockFile.Fd()), unix.LOCK_EX)
			if err != unix.EINTR {
				break
			}
		}
		d.flockWaiters.Add(-1)
	}
	d.lockTaken.Add(1)
	if d.unlockFn == nil {
		d.unlockFn = d.unlock // one method value, not a closure per call
	}
	return d.unlockFn
}

func (d *Objects) unlock() {
	if d.lockFile != nil {
		_ = unix.Flock(int(d.lockFile.Fd()), unix.LOCK_UN)
	}
	d.mu.Unlock()
}

// LockProgress returns how many callers of Lock in this process wait for
// it now, among them whether one waits for the writers' lock itself (the
// cross-process flock, which another process holds), and how many times
// it has been taken. A watchdog that sees callers waiting at two samples
// with no take between them knows the lock did not change hands for that
// long: its holder hangs, in this process, or, when one waits for the
// writers' lock, in another process of the agent's user or root that
// stopped while holding it (which restarting this one would not mend).
func (d *Objects) LockProgress() (waiters int, other bool, taken uint64) {
	if d == nil {
		return 0, false, 0
	}
	f := d.flockWaiters.Load()
	return int(d.lockWaiters.Load() + f), f > 0, d.lockTaken.Load()
}

func (d *Objects) closeLock() {
	if d.lockFile != nil {
		d.lockFile.Close()
		d.lockFile = nil
	}
}
