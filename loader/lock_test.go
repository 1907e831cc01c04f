//go:build linux

package loader_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// member is the attacker of these tests: uid and gid 65534 (nobody), the
// group the pins are shared with, without capabilities.
const member = 65534

// asMember runs fn on a thread with the member's credentials; the thread is
// discarded afterwards. Descriptors fn opens stay the process's.
func asMember(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			t.Errorf("setgroups: %v", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, member, member, member); e != 0 {
			t.Errorf("setresgid: %v", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, member, member, member); e != 0 {
			t.Errorf("setresuid: %v", e)
			return
		}
		fn()
	}()
	<-done
}

// A member of the group the pins are shared with holds every lock it can
// get: a read-only dataplane's (OpenPinned), stopped inside a read, then
// the pin root's and maps/'s. None is the writers' lock, which it cannot
// open: the writer takes that at once. Two writers still exclude each
// other.
func TestWritersLockOutOfMembersReach(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755) // the test's own 0700 directory: the member may pass
	root := filepath.Join(dir, "bpffs")
	dp := load(t, root)
	t.Cleanup(func() { loader.UnmountBPFFS(root) })
	dp2 := load(t, root) // another process with the library, as root
	if err := dp.ShareWithGroup(member); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(loader.LockPath(root), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Mode&0o777 != 0o700 {
		t.Errorf("writers' lock %s: mode %#o %v, want a directory 0700", loader.LockPath(root), st.Mode, err)
	}

	// The writer takes its lock at once, whatever the member holds;
	// release lets it go if not.
	writes := func(what string, release func()) {
		t.Helper()
		got := make(chan func(), 1)
		go func() { got <- dp.Lock() }()
		select {
		case u := <-got:
			u()
		case <-time.After(time.Second):
			release()
			(<-got)()
			t.Errorf("the writer waits for the lock %s", what)
		}
	}

	// A reader of the pins, stopped inside a read.
	var ro *loader.Objects
	asMember(t, func() {
		var err error
		if ro, err = loader.OpenPinned(root); err != nil {
			t.Errorf("the member opens the pins read-only: %v", err)
		}
	})
	if ro != nil {
		defer ro.Close()
		var once sync.Once
		u := ro.Lock()
		unlock := func() { once.Do(u) }
		writes("of a member's read-only dataplane", unlock)
		unlock()
	}

	// Every lock the member can open.
	var held []int
	release := func() {
		for _, fd := range held {
			unix.Close(fd)
		}
		held = nil
	}
	defer release()
	asMember(t, func() {
		for _, p := range []string{root, filepath.Join(root, "maps")} {
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Errorf("the member opens %s (shared with its group): %v", p, err)
				continue
			}
			held = append(held, fd)
			if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
				t.Errorf("the member locks %s: %v", p, err)
			}
		}
		if fd, err := unix.Open(loader.LockPath(root), unix.O_RDONLY|unix.O_CLOEXEC, 0); !errors.Is(err, unix.EACCES) {
			t.Errorf("the member opens the writers' lock: %v, want EACCES", err)
			if err == nil {
				held = append(held, fd)
				unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
			}
		}
		// An O_PATH descriptor needs no permission on the file, and cannot
		// be locked.
		if fd, err := unix.Open(loader.LockPath(root), unix.O_PATH|unix.O_CLOEXEC, 0); err == nil {
			held = append(held, fd)
			if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EBADF) {
				t.Errorf("the member locks the writers' lock through O_PATH: %v, want EBADF", err)
			}
		}
	})
	writes("of the pin root or maps/, which the member took", release)

	// A second writer waits for the first, and its stall shows.
	unlock := dp.Lock()
	got := make(chan func())
	go func() { got <- dp2.Lock() }()
	select {
	case u := <-got:
		u()
		t.Fatal("two writers held the writers' lock at once")
	case <-time.After(200 * time.Millisecond):
	}
	w1, o1, t1 := dp2.LockProgress()
	time.Sleep(50 * time.Millisecond)
	if w2, o2, t2 := dp2.LockProgress(); w1 != 1 || w2 != 1 || !o1 || !o2 || t1 != t2 {
		t.Errorf("the waiting writer: waiters %d then %d (for another's writers' lock: %v, %v), taken %d then %d; want 1 waiting for another's and no take between",
			w1, w2, o1, o2, t1, t2)
	}
	unlock()
	select {
	case u := <-got:
		u()
	case <-time.After(time.Second):
		t.Fatal("the second writer did not get the lock once the first let go")
	}
	if w, _, _ := dp2.LockProgress(); w != 0 {
		t.Errorf("%d waiting with nobody waiting", w)
	}
}

// A writers' lock others could open (made by hand with another mode) is
// made 0700 by the next Load; a read-only dataplane does not wait for one
// that is open to others.
func TestWritersLockModeTakenBack(t *testing.T) {
	root := filepath.Join(t.TempDir(), "bpffs")
	load(t, root)
	t.Cleanup(func() { loader.UnmountBPFFS(root) })
	if err := os.Chmod(loader.LockPath(root), 0o755); err != nil {
		t.Fatal(err)
	}
	load(t, root)
	if fi, err := os.Stat(loader.LockPath(root)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("after Load: %v %v, want 0700", fi.Mode(), err)
	}
}

// An AV's table made after the pins were shared is shared as they are: a
// member of the group opens it read-only (it was root's alone, 0640
// root:root: SetAVTable's group change never ran).
func TestAVTablePinShared(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	root := filepath.Join(dir, "bpffs")
	dp := load(t, root)
	t.Cleanup(func() { loader.UnmountBPFFS(root) })
	if err := dp.ShareWithGroup(member); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: bpf.AVPage, MaxEntries: 1,
		Flags: unix.BPF_F_MMAPABLE | unix.BPF_F_INNER_MAP})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := dp.SetAVTable(3, m); err != nil {
		t.Fatal(err)
	}
	asMember(t, func() {
		r, _, err := dp.OpenAVTableMap(3, true)
		if err != nil {
			t.Errorf("a member opens the AV table's pin: %v", err)
			return
		}
		r.Close()
	})
}
