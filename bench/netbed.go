package main

// Network namespaces for the benchmarks: two hosts joined by a veth pair,
// addressed from 198.18.0.0/15 and 2001:2::/48, with static neighbours.
// This is a small copy of internal/testbed, which a separate module cannot
// import; it adds CPU pinning to the per-thread namespace entry.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const (
	netnsDir = "/var/run/netns"
	linkName = "veth0"
)

// nsHandle is a named network namespace this process created.
type nsHandle struct {
	name string
	h    netns.NsHandle
}

// onThread runs fn on a fresh OS thread, inside ns when ns is not nil and
// pinned to cpu when cpu >= 0. The thread is never handed back to the Go
// scheduler: it exits with the goroutine, taking its namespace and affinity
// with it.
func onThread(ns *nsHandle, cpu int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread dies with this goroutine.
		if ns != nil {
			if err := netns.Set(ns.h); err != nil {
				done <- fmt.Errorf("enter netns %s: %w", ns.name, err)
				return
			}
		}
		if err := pin(cpu); err != nil {
			done <- err
			return
		}
		defer func() {
			if v := recover(); v != nil {
				done <- fmt.Errorf("panic: %v", v)
			}
		}()
		done <- fn()
	}()
	return <-done
}

// goOnThread is onThread without waiting: the returned channel yields fn's
// error.
func goOnThread(ns *nsHandle, cpu int, fn func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- onThread(ns, cpu, fn) }()
	return ch
}

// pin restricts the calling (locked) thread to cpu; cpu < 0 does nothing.
func pin(cpu int) error {
	if cpu < 0 {
		return nil
	}
	var set unix.CPUSet
	set.Set(cpu % runtime.NumCPU())
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("pin thread to cpu %d: %w", cpu, err)
	}
	return nil
}

// newNS creates network namespace name, bind-mounted under netnsDir so that
// `ip netns exec` finds it.
func newNS(name string) (*nsHandle, error) {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(netnsDir, name)
	var h netns.NsHandle
	err := onThread(nil, -1, func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
		if err != nil {
			return err
		}
		f.Close()
		self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err := unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
			os.Remove(path)
			return fmt.Errorf("bind mount %s: %w", path, err)
		}
		h, err = netns.GetFromPath(path)
		if err != nil {
			unix.Unmount(path, unix.MNT_DETACH)
			os.Remove(path)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create netns %s: %w", name, err)
	}
	return &nsHandle{name: name, h: h}, nil
}

func (ns *nsHandle) remove() error {
	if ns.h.IsOpen() {
		ns.h.Close()
	}
	path := filepath.Join(netnsDir, ns.name)
	var errs []error
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("unmount %s: %w", path, err))
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// host is one end of a bed.
type host struct {
	ns      *nsHandle
	ifindex int
	mac     net.HardwareAddr
	v4, v6  netip.Addr
}

func (h *host) name() string { return h.ns.name }

func (h *host) addr(v6 bool) netip.Addr {
	if v6 {
		return h.v6
	}
	return h.v4
}

// do runs fn on a thread inside the host's namespace, pinned to cpu (-1:
// not pinned).
func (h *host) do(cpu int, fn func() error) error { return onThread(h.ns, cpu, fn) }

// bed is two namespaces joined by a veth pair.
type bed struct {
	name string
	a, b *host
}

// bedOpts shape a bed.
type bedOpts struct {
	MTU    int // 0: 1500
	Queues int // rx and tx queues per veth end; 0: 1
}

// bedSeq numbers the beds of one run, for unique names.
var bedSeq int

// newBed creates namespaces <prefix>-<n>-a and -b, a veth pair between
// them, addresses and static neighbours. The subnet is 198.18.<n>.0/24 and
// 2001:2:0:<n>::/64. down removes everything, also after a failure half way.
func newBed(prefix string, o bedOpts) (b *bed, down func(), err error) {
	bedSeq++
	n := bedSeq
	if o.Queues == 0 {
		o.Queues = 1
	}
	b = &bed{name: fmt.Sprintf("%s-%d", prefix, n)}
	var spaces []*nsHandle
	down = func() {
		for _, h := range []*host{b.a, b.b} {
			if h == nil {
				continue
			}
			_ = h.do(-1, func() error {
				if l, err := netlink.LinkByName(linkName); err == nil {
					return netlink.LinkDel(l)
				}
				return nil
			})
		}
		for i := len(spaces) - 1; i >= 0; i-- {
			if err := spaces[i].remove(); err != nil {
				fmt.Fprintf(os.Stderr, "bench: remove netns %s: %v\n", spaces[i].name, err)
			}
		}
		spaces = nil
	}
	defer func() {
		if err != nil {
			down()
		}
	}()
	for i, side := range []string{"a", "b"} {
		ns, err := newNS(b.name + "-" + side)
		if err != nil {
			return nil, down, err
		}
		spaces = append(spaces, ns)
		h := &host{ns: ns,
			v4: netip.AddrFrom4([4]byte{198, 18, byte(n), byte(i + 1)}),
			v6: netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, 0, 0, byte(n), 14: 0, 15: byte(i + 1)}),
		}
		if i == 0 {
			b.a = h
		} else {
			b.b = h
		}
	}
	err = b.a.do(-1, func() error {
		la := netlink.NewLinkAttrs()
		la.Name, la.MTU = linkName, o.MTU
		la.NumRxQueues, la.NumTxQueues = o.Queues, o.Queues
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: linkName,
			PeerNamespace: netlink.NsFd(int(b.b.ns.h)), PeerMTU: uint32(o.MTU),
			PeerNumRxQueues: uint32(o.Queues), PeerNumTxQueues: uint32(o.Queues)})
	})
	if err != nil {
		return nil, down, fmt.Errorf("add veth: %w", err)
	}
	for _, h := range []*host{b.a, b.b} {
		if err := h.configure(); err != nil {
			return nil, down, fmt.Errorf("configure %s: %w", h.name(), err)
		}
	}
	for _, p := range [][2]*host{{b.a, b.b}, {b.b, b.a}} {
		if err := p[0].neighbour(p[1]); err != nil {
			return nil, down, err
		}
	}
	return b, down, nil
}

func (h *host) configure() error {
	return h.do(-1, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		l, err := netlink.LinkByName(linkName)
		if err != nil {
			return err
		}
		// This path exists only inside this thread's namespace.
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+linkName+"/accept_dad", []byte("0"), 0o644); err != nil {
			return err
		}
		for _, p := range []netip.Prefix{netip.PrefixFrom(h.v4, 24), netip.PrefixFrom(h.v6, 64)} {
			bits := 32
			if p.Addr().Is6() {
				bits = 128
			}
			ipn := &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)}
			if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipn, Flags: unix.IFA_F_NODAD}); err != nil {
				return fmt.Errorf("add %s: %w", p, err)
			}
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		if l, err = netlink.LinkByName(linkName); err != nil {
			return err
		}
		h.ifindex, h.mac = l.Attrs().Index, l.Attrs().HardwareAddr
		return nil
	})
}

// neighbour installs permanent ARP and NDP entries for peer.
func (h *host) neighbour(peer *host) error {
	return h.do(-1, func() error {
		for _, ip := range []netip.Addr{peer.v4, peer.v6} {
			fam := unix.AF_INET
			if ip.Is6() {
				fam = unix.AF_INET6
			}
			n := &netlink.Neigh{LinkIndex: h.ifindex, IP: net.IP(ip.AsSlice()), HardwareAddr: peer.mac,
				State: netlink.NUD_PERMANENT, Family: fam}
			if err := netlink.NeighSet(n); err != nil {
				return fmt.Errorf("neighbour %s on %s: %w", ip, h.name(), err)
			}
		}
		return nil
	})
}
