package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// LockDir holds the agents' instance locks: a file per socket and one per
// pin root, so that two agents never serve one socket or one node's maps.
// The directory is the agent's user's alone (0700) and so are the files
// (0600), checked at every start: a lock file nobody else can open is a
// lock nobody else can hold, while an agent runs or when it exits, to keep
// the next one from starting (it would exit with EBUSY, which the unit does
// not retry).
var LockDir = "/run/xdpfab/agent-locks"

// instanceLock is the flocks an agent holds for its lifetime.
type instanceLock struct {
	// dir is LockDir, flock'ed while lock files are made, checked or
	// removed in it: no agent ever finds a file another is replacing.
	dir   *os.File
	owner int // the uid LockDir and its files belong to
	files []*os.File
}

// lockInstance takes the agent's locks: one on the socket path, one on the
// pin root. A second agent gets EBUSY naming the holder's pid, and has
// changed nothing.
func lockInstance(socket, pinRoot string) (_ *instanceLock, err error) {
	l, err := openLockDir(LockDir)
	if err != nil {
		return nil, err
	}
	l.flockDir()
	defer func() {
		if err != nil {
			l.releaseLocked()
		}
		l.unflockDir()
		if err != nil {
			l.dir.Close()
		}
	}()
	for _, p := range []struct{ name, what string }{
		{"sock" + lockKey(socket) + ".lock", "socket " + socket},
		{"pin" + lockKey(pinRoot) + ".lock", "pin root " + pinRoot},
	} {
		f, err := l.open(p.name)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			b := make([]byte, 32)
			n, _ := f.ReadAt(b, 0)
			f.Close()
			holder := strings.TrimSpace(string(b[:n]))
			return nil, fmt.Errorf("agent: another xdpfab agent (pid %s) serves the %s; stop it first, or give this one its own --socket and --pin-root: %w",
				holder, p.what, fi.EBUSY)
		}
		f.Truncate(0)
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		l.files = append(l.files, f)
	}
	return l, nil
}

// lockKey names path in a lock file's name: absolute, its directory's
// symbolic links resolved where it exists (two spellings of one socket
// are one lock), with / as %.
func lockKey(path string) string {
	p, err := filepath.Abs(path)
	if err != nil {
		p = filepath.Clean(path)
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(p)); err == nil {
		p = filepath.Join(dir, filepath.Base(p))
	}
	return strings.ReplaceAll(p, "/", "%")
}

// openLockDir opens the directory of the instance locks, making it (0700)
// if need be. It must belong to this process's user, or, for root, to
// whoever owns its parent (who could replace it anyway: the agent's user
// owns /run/xdpfab under systemd); a mode that lets others in is taken
// back.
func openLockDir(path string) (*instanceLock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("agent: lock directory: %w", err)
	}
	if err := unix.Mkdir(path, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("agent: lock directory %s: %w", path, err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent: lock directory %s (a directory of this agent's user): %w", path, err)
	}
	dir := os.NewFile(uintptr(fd), path)
	var st, parent unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		dir.Close()
		return nil, fmt.Errorf("agent: lock directory %s: %w", path, err)
	}
	euid := os.Geteuid()
	trusted := int(st.Uid) == euid
	if !trusted && euid == 0 {
		trusted = unix.Lstat(filepath.Dir(path), &parent) == nil && parent.Uid == st.Uid
	}
	if !trusted {
		dir.Close()
		return nil, fmt.Errorf("agent: lock directory %s belongs to uid %d, not to this agent's user (uid %d); remove it: %w",
			path, st.Uid, euid, fi.EACCES)
	}
	if st.Mode&0o077 != 0 {
		if err := unix.Fchmod(fd, 0o700); err != nil {
			dir.Close()
			return nil, fmt.Errorf("agent: lock directory %s is mode %#o, open to others: %w", path, st.Mode&0o777, err)
		}
	}
	return &instanceLock{dir: dir, owner: int(st.Uid)}, nil
}

// open opens (or makes) the lock file name in the lock directory, whose
// flock the caller holds. A lock file is a regular file of the
// directory's owner, mode 0600, with no other link: anything else there
// (a file made by hand, a link) is replaced by one, never opened through,
// so no file others could ever have opened becomes the lock. No agent
// holds such a file: each makes its own as above.
func (l *instanceLock) open(name string) (*os.File, error) {
	dirfd := int(l.dir.Fd())
	path := filepath.Join(l.dir.Name(), name)
	for replaced := false; ; replaced = true {
		fd, err := unix.Openat(dirfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
		switch {
		case err == nil:
			if err = l.check(fd); err == nil {
				return os.NewFile(uintptr(fd), path), nil
			}
			unix.Close(fd)
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EACCES):
			// A symbolic link, or a file this user may not open.
		default:
			return nil, fmt.Errorf("agent: lock %s: %w", path, err)
		}
		if replaced {
			return nil, fmt.Errorf("agent: lock %s: %w", path, err)
		}
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("agent: replace lock %s: %w", path, err)
		}
	}
}

// check refuses an open file that is not a lock file of the directory's
// owner (see open). Root's, as root's agent makes them in its user's
// directory, becomes the owner's.
func (l *instanceLock) check(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || st.Mode&0o077 != 0 || (int(st.Uid) != l.owner && st.Uid != 0) {
		return fmt.Errorf("not a lock file of uid %d (mode %#o, owner %d, %d links): %w", l.owner, st.Mode, st.Uid, st.Nlink, fi.EEXIST)
	}
	if int(st.Uid) != l.owner {
		return unix.Fchown(fd, l.owner, -1)
	}
	return nil
}

// flockDir and unflockDir take and drop the lock directory's own lock.
// The wait is short: only agents (the directory's owner, root) can open
// the directory, and they hold it only to make, check or remove files.
func (l *instanceLock) flockDir() {
	for unix.Flock(int(l.dir.Fd()), unix.LOCK_EX) == unix.EINTR {
	}
}

func (l *instanceLock) unflockDir() { _ = unix.Flock(int(l.dir.Fd()), unix.LOCK_UN) }

// release drops the locks and removes their files, under the directory's
// lock: an agent starting meanwhile waits for it, then makes a file of its
// own.
func (l *instanceLock) release() {
	if l == nil || l.dir == nil {
		return
	}
	l.flockDir()
	l.releaseLocked()
	l.unflockDir()
	l.dir.Close()
	l.dir = nil
}

// releaseLocked removes and closes the lock files; the caller holds the
// directory's lock. A file is removed only while its name still is it.
func (l *instanceLock) releaseLocked() {
	dirfd := int(l.dir.Fd())
	for _, f := range l.files {
		var held, named unix.Stat_t
		name := filepath.Base(f.Name())
		if unix.Fstat(int(f.Fd()), &held) == nil &&
			unix.Fstatat(dirfd, name, &named, unix.AT_SYMLINK_NOFOLLOW) == nil &&
			held.Dev == named.Dev && held.Ino == named.Ino {
			unix.Unlinkat(dirfd, name, 0)
		}
		f.Close()
	}
	l.files = nil
}

// claimSocketPath makes path free for the agent's socket without ever
// removing what is not a stale socket: a regular file, a directory or a
// socket someone listens on is refused. Called with the instance lock
// held, so no agent of ours is starting or serving there.
func claimSocketPath(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent: socket path %s: %w", path, err)
	}
	if st.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("agent: socket path %s exists and is not a socket (%s); refusing to replace it: %w",
			path, st.Mode().Type(), fi.EEXIST)
	}
	if c, err := net.Dial("unixpacket", path); err == nil {
		c.Close()
		return fmt.Errorf("agent: something listens on %s already; refusing to replace it: %w", path, fi.EADDRINUSE)
	}
	// A socket nobody listens on: a previous agent's, left by a crash.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("agent: remove stale socket %s: %w", path, err)
	}
	return nil
}

// sameFile reports whether path is still the file st described.
func sameFile(path string, st os.FileInfo) bool {
	now, err := os.Lstat(path)
	return err == nil && os.SameFile(now, st)
}

// checkMountNamespace refuses a pin root that would vanish with the
// agent: `ip netns exec` runs the agent in a mount namespace of its own
// with a fresh /sys, where /sys/fs/bpf is not the host's bpffs; a bpffs the
// agent mounted there, and its pins, are gone when the agent exits, and
// the program detaches.
func checkMountNamespace(pinRoot string) error {
	if !strings.HasPrefix(filepath.Clean(pinRoot)+"/", loader.SysFSBPF+"/") {
		return nil // the operator chose the pin root
	}
	if ok, err := loader.IsBPFFS(pinRoot); err == nil && ok {
		return nil // on a bpffs already (a systemd unit's BindPaths, say)
	}
	if ok, err := loader.IsBPFFS(loader.SysFSBPF); err == nil && ok {
		return nil // the pins go on the bpffs this namespace has
	}
	// The loader would mount a bpffs on /sys/fs/bpf: right on a fresh
	// host (as systemd would), wrong in a private mount namespace.
	if initMountNamespace() {
		return nil
	}
	return fmt.Errorf("agent: this process runs in a private mount namespace where %s is not the host's bpf file system "+
		"(as under `ip netns exec`, which remounts /sys): its pins would vanish when it exits and the program would detach. "+
		"Enter only the network namespace instead: nsenter --net=/run/netns/NAME xdpfab agent ...; "+
		"or pass a --pin-root on a bpffs this namespace shares with the host: %w", loader.SysFSBPF, fi.EINVAL)
}

// initMNTInode is the inode of the initial mount namespace on kernels that
// give it a fixed number (Linux 6.x: 0xEFFFFFF8, beside the other fixed
// initial-namespace inodes).
const initMNTInode = 0xEFFFFFF8

// initMountNamespace reports whether this process is in the host's
// initial mount namespace: the same as pid 1's where that can be read,
// else the fixed inode of the initial one.
func initMountNamespace() bool {
	var self, init unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &self); err != nil {
		return true // no way to tell: do not refuse
	}
	if err := unix.Stat("/proc/1/ns/mnt", &init); err == nil {
		return self.Ino == init.Ino && self.Dev == init.Dev
	}
	return self.Ino == initMNTInode
}

// startState is what a start made that a failed start must undo.
type startState struct {
	pinRootExisted bool // the pin root directory was there
	pinRootBPFFS   bool // ... and on bpffs
	mapsExisted    bool // maps were pinned (adopted, not created)
	lockExisted    bool // the writers' lock was there (loader.LockPath)
}

func observeStart(pinRoot string) startState {
	var s startState
	if _, err := os.Stat(pinRoot); err == nil {
		s.pinRootExisted = true
		s.pinRootBPFFS, _ = loader.IsBPFFS(pinRoot)
	}
	if _, err := os.Stat(filepath.Join(pinRoot, "maps")); err == nil {
		s.mapsExisted = true
	}
	if _, err := os.Lstat(loader.LockPath(pinRoot)); err == nil {
		s.lockExisted = true
	}
	return s
}

// undo removes what a failed start left under pinRoot once the objects
// are closed (their pins are removed before: see New): a bpffs it mounted
// and a directory it made. What existed before stays.
func (s startState) undo(pinRoot string) {
	if !s.mapsExisted {
		os.Remove(filepath.Join(pinRoot, "maps"))
		os.Remove(filepath.Join(pinRoot, "links"))
	}
	if !s.lockExisted {
		os.Remove(loader.LockPath(pinRoot))
	}
	if !s.pinRootBPFFS {
		if ok, _ := loader.IsBPFFS(pinRoot); ok {
			loader.UnmountBPFFS(pinRoot)
		}
	}
	if !s.pinRootExisted {
		os.Remove(pinRoot)
	}
}
