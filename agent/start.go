package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// LockDir holds the agents' lock files: one per pin root, so that two
// agents never serve one node's maps (whatever their sockets).
var LockDir = "/run/xdpfab/locks"

// instanceLock is the flock an agent holds for its lifetime.
type instanceLock struct{ files []*os.File }

// lockInstance takes the agent's locks: one on the socket path, one on the
// pin root. A second agent gets EBUSY naming the holder's pid, and has
// changed nothing.
func lockInstance(socket, pinRoot string) (*instanceLock, error) {
	l := &instanceLock{}
	for _, p := range []struct{ path, what string }{
		{socket + ".lock", "socket " + socket},
		{filepath.Join(LockDir, "pin"+strings.ReplaceAll(filepath.Clean(pinRoot), "/", "%")+".lock"), "pin root " + pinRoot},
	} {
		if err := os.MkdirAll(filepath.Dir(p.path), 0o755); err != nil {
			l.release()
			return nil, fmt.Errorf("agent: lock directory: %w", err)
		}
		f, err := os.OpenFile(p.path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o644)
		if err != nil {
			l.release()
			return nil, fmt.Errorf("agent: lock %s: %w", p.path, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			b := make([]byte, 32)
			n, _ := f.ReadAt(b, 0)
			f.Close()
			l.release()
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

// release drops the locks (the files stay: removing them would race a
// starting agent).
func (l *instanceLock) release() {
	if l == nil {
		return
	}
	for _, f := range l.files {
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
	if !s.pinRootBPFFS {
		if ok, _ := loader.IsBPFFS(pinRoot); ok {
			loader.UnmountBPFFS(pinRoot)
		}
	}
	if !s.pinRootExisted {
		os.Remove(pinRoot)
	}
}
