package netlab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netnsDir is where iproute2 keeps named namespaces, so `ip netns list`
// shows the ones a test made (and a crashed test leaves behind).
const netnsDir = "/var/run/netns"

// NS is a named network namespace that a Bed created.
type NS struct {
	name   string
	handle netns.NsHandle
}

// Name is the namespace's name as `ip netns list` shows it.
func (ns *NS) Name() string { return ns.name }

// Path is the namespace's bind mount, usable with nsenter --net=PATH.
func (ns *NS) Path() string { return filepath.Join(netnsDir, ns.name) }

// Do runs fn on an OS thread that is inside the namespace for the whole
// call, and returns fn's error. Sockets (including AF_XDP sockets) and
// netlink handles created in fn belong to the namespace for their whole life
// and may be used from any goroutine afterwards; goroutines that fn starts do
// not inherit the namespace. A panic in fn is re-raised in the caller.
func (ns *NS) Do(fn func() error) error {
	return runIn(ns.handle, fn)
}

// ListenPacket opens a packet socket (as net.ListenPacket) inside the
// namespace.
func (ns *NS) ListenPacket(network, address string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := ns.Do(func() (err error) {
		pc, err = net.ListenPacket(network, address)
		return err
	})
	return pc, err
}

// Dial connects (as net.Dial) from inside the namespace.
func (ns *NS) Dial(network, address string) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(context.Background(), network, address)
		return err
	})
	return c, err
}

type panicked struct {
	v     any
	stack []byte
}

// runIn runs fn on a fresh, locked OS thread moved into target. The thread
// goes back to the scheduler only if it could be moved back to its original
// namespace; otherwise it stays locked and exits with the goroutine.
func runIn(target netns.NsHandle, fn func() error) error {
	type result struct {
		err error
		p   *panicked
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("testbed: current netns: %w", err)}
			return
		}
		// orig is closed before the result is sent: a caller that counts
		// its descriptors must not see it.
		if err := netns.Set(target); err != nil {
			// setns failed, so the thread is still where it was.
			orig.Close()
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("testbed: enter netns: %w", err)}
			return
		}
		var res result
		func() {
			defer func() {
				if v := recover(); v != nil {
					res.p = &panicked{v, debug.Stack()}
				}
			}()
			res.err = fn()
		}()
		err = netns.Set(orig)
		orig.Close()
		if err != nil {
			// Leave the thread locked: it dies with this goroutine.
			res.err = errors.Join(res.err, fmt.Errorf("testbed: restore netns: %w", err))
			done <- res
			return
		}
		runtime.UnlockOSThread()
		done <- res
	}()
	res := <-done
	if res.p != nil {
		panic(fmt.Sprintf("%v [in namespace; original stack:\n%s]", res.p.v, res.p.stack))
	}
	return res.err
}

// newNamedNS creates network namespace name, bind-mounted under netnsDir,
// without moving any thread of the caller into it.
func newNamedNS(name string) (*NS, error) {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return nil, err
	}
	if err := sharedNetnsDir(); err != nil {
		return nil, err
	}
	path := filepath.Join(netnsDir, name)
	type result struct {
		h   netns.NsHandle
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer orig.Close()
		// unshare moves this thread into the new namespace; the bind
		// mount keeps the namespace alive after the thread leaves.
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("unshare: %w", err)}
			return
		}
		res := func() result {
			f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
			if err != nil {
				return result{err: err}
			}
			f.Close()
			self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
			if err := unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
				os.Remove(path)
				return result{err: fmt.Errorf("bind mount %s: %w", path, err)}
			}
			h, err := netns.GetFromPath(path)
			if err != nil {
				unix.Unmount(path, unix.MNT_DETACH)
				os.Remove(path)
				return result{err: err}
			}
			return result{h: h}
		}()
		if err := netns.Set(orig); err != nil {
			// Stay locked: this thread must not run other goroutines.
			if res.err == nil {
				res.h.Close()
				unix.Unmount(path, unix.MNT_DETACH)
				os.Remove(path)
			}
			done <- result{err: fmt.Errorf("restore netns: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		done <- res
	}()
	res := <-done
	if res.err != nil {
		return nil, fmt.Errorf("testbed: create netns %s: %w", name, res.err)
	}
	return &NS{name: name, handle: res.h}, nil
}

var netnsDirOnce struct {
	sync.Once
	err error
}

// sharedNetnsDir makes netnsDir a shared mount of its own, as `ip netns
// add` does before its first namespace. Without it, a later `ip netns add`
// (by anyone) bind-mounts the directory onto itself and hides the
// namespaces mounted before, which can then be neither seen nor removed.
func sharedNetnsDir() error {
	netnsDirOnce.Do(func() {
		err := unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if errors.Is(err, unix.EINVAL) { // not a mount point yet
			if err = unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err == nil {
				err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
			}
		}
		if err != nil {
			netnsDirOnce.err = fmt.Errorf("make %s a shared mount: %w", netnsDir, err)
		}
	})
	return netnsDirOnce.err
}

// remove drops the bed's references to the namespace: its handle and its
// bind mount. The kernel destroys the namespace, and the interfaces in it,
// once nothing else (an open socket, a process) refers to it.
func (ns *NS) remove() error {
	if ns.handle.IsOpen() {
		ns.handle.Close()
	}
	path := ns.Path()
	var errs []error
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("unmount %s: %w", path, err))
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
