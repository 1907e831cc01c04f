package netlab

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// XDPMode selects how (*Host).AttachXDP attaches a program: the loader's
// modes, native (the default; veth supports it) or generic.
type XDPMode = loader.Mode

// The modes, for tests that range over them.
const (
	Native  = loader.Native
	Generic = loader.Generic
)

func xdpFlags(m XDPMode) link.XDPAttachFlags {
	if m == Generic {
		return link.XDPGenericMode
	}
	return link.XDPDriverMode
}

// Options shape a Bed. The zero value gives two hosts on one veth pair.
type Options struct {
	// Hosts is the number of hosts, at least 2 (the default). With more than
	// two, hosts are joined through a bridge in an extra namespace.
	Hosts int
	// StaticNeighbors installs permanent ARP and NDP entries between every
	// pair of hosts, so traffic flows without neighbour discovery (which an
	// XDP program that redirects everything would swallow).
	StaticNeighbors bool
	// RxQueues and TxQueues set the number of queues of each host's veth
	// (default 1, so every frame arrives on queue 0).
	RxQueues, TxQueues int
	// MTU of the hosts' interfaces; 0 keeps the kernel default (1500).
	MTU int
	// XDPMode is the mode (*Host).AttachXDP uses.
	XDPMode XDPMode
}

// LinkName is the name of every host's interface inside its namespace.
const LinkName = "veth0"

// Bed is a set of hosts built by New.
type Bed struct {
	// Name is the common prefix of the bed's namespaces ("xdpfab-<random>").
	Name string
	// Hosts lists every host; A and B are Hosts[0] and Hosts[1].
	Hosts []*Host
	A, B  *Host
	// Bridge is the namespace holding the bridge when Hosts > 2, else nil.
	Bridge *NS
	// Net4 and Net6 are the subnets all hosts are in.
	Net4, Net6 netip.Prefix

	opts Options
	injectState
}

// Host is one namespace with one interface (LinkName) on the bed's segment.
type Host struct {
	*NS
	// Index is the host's position in Bed.Hosts.
	Index int
	// Link is the interface name, Ifindex its index inside the namespace.
	Link    string
	Ifindex int
	MAC     net.HardwareAddr
	// IPv4 and IPv6 are the host's addresses, in Bed.Net4 and Bed.Net6.
	IPv4, IPv6 netip.Addr

	bed *Bed
}

// build makes the bed; cleanup registers teardown work (LIFO), and is
// called before anything that may need undoing is made.
func build(opts Options, cleanup func(func())) (*Bed, error) {
	if opts.Hosts == 0 {
		opts.Hosts = 2
	}
	if opts.Hosts < 2 || opts.Hosts > 250 {
		return nil, fmt.Errorf("%d hosts out of range [2, 250]", opts.Hosts)
	}
	if opts.RxQueues == 0 {
		opts.RxQueues = 1
	}
	if opts.TxQueues == 0 {
		opts.TxQueues = 1
	}
	sweepOrphans()
	// A random subnet per bed keeps logs of parallel tests apart; the
	// namespaces already keep their traffic apart.
	x := rand.IntN(512)
	bed := &Bed{
		Name: fmt.Sprintf("xdpfab-%d-%06x", os.Getpid(), rand.Uint32()>>8),
		Net4: netip.PrefixFrom(netip.AddrFrom4([4]byte{198, byte(18 + x/256), byte(x % 256), 0}), 24),
		Net6: netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, 0, byte(x >> 8), byte(x)}), 64),
		opts: opts,
	}
	bed.cleanup = cleanup
	var spaces []*NS
	cleanup(func() {
		for i := len(spaces) - 1; i >= 0; i-- {
			if err := spaces[i].remove(); err != nil {
				fmt.Fprintf(os.Stderr, "testbed: remove %s: %v\n", spaces[i].name, err)
			}
		}
	})
	for i := range opts.Hosts {
		ns, err := newNamedNS(fmt.Sprintf("%s-%c", bed.Name, 'a'+i))
		if err != nil {
			return nil, err
		}
		spaces = append(spaces, ns)
		v4 := bed.Net4.Addr().As4()
		v4[3] = byte(i + 1)
		v6 := bed.Net6.Addr().As16()
		v6[15] = byte(i + 1)
		bed.Hosts = append(bed.Hosts, &Host{
			NS: ns, Index: i, Link: LinkName, bed: bed,
			IPv4: netip.AddrFrom4(v4), IPv6: netip.AddrFrom16(v6),
		})
	}
	bed.A, bed.B = bed.Hosts[0], bed.Hosts[1]
	if opts.Hosts > 2 {
		ns, err := newNamedNS(bed.Name + "-br")
		if err != nil {
			return nil, err
		}
		spaces = append(spaces, ns)
		bed.Bridge = ns
	}
	// Deleting the veths explicitly, before the namespaces go, frees the
	// interfaces at once even if a leaked socket keeps a namespace alive.
	cleanup(func() {
		for _, h := range bed.Hosts {
			_ = h.Do(func() error {
				if l, err := netlink.LinkByName(h.Link); err == nil {
					return netlink.LinkDel(l)
				}
				return nil
			})
		}
	})
	if err := bed.wire(); err != nil {
		return nil, err
	}
	for _, h := range bed.Hosts {
		if err := h.configure(); err != nil {
			return nil, fmt.Errorf("configure %s: %w", h.Name(), err)
		}
	}
	if opts.StaticNeighbors {
		for _, h := range bed.Hosts {
			if err := h.addNeighbors(); err != nil {
				return nil, fmt.Errorf("neighbours of %s: %w", h.Name(), err)
			}
		}
	}
	active := []*NS{}
	for _, h := range bed.Hosts {
		active = append(active, h.NS)
	}
	if bed.Bridge != nil {
		active = append(active, bed.Bridge)
	}
	for _, ns := range active {
		if err := ns.waitActive(); err != nil {
			return nil, err
		}
	}
	return bed, nil
}

// wire creates the veths: one pair A<->B, or one pair per host into the
// bridge namespace.
func (bed *Bed) wire() error {
	attrs := func(name string) netlink.LinkAttrs {
		a := netlink.NewLinkAttrs()
		a.Name = name
		a.NumRxQueues = bed.opts.RxQueues
		a.NumTxQueues = bed.opts.TxQueues
		a.MTU = bed.opts.MTU
		return a
	}
	if bed.Bridge == nil {
		return bed.A.Do(func() error {
			v := &netlink.Veth{
				LinkAttrs:       attrs(LinkName),
				PeerName:        LinkName,
				PeerNamespace:   netlink.NsFd(int(bed.B.handle)),
				PeerNumRxQueues: uint32(bed.opts.RxQueues),
				PeerNumTxQueues: uint32(bed.opts.TxQueues),
				PeerMTU:         uint32(bed.opts.MTU),
			}
			if err := netlink.LinkAdd(v); err != nil {
				return fmt.Errorf("add veth %s <-> %s: %w", bed.A.Name(), bed.B.Name(), err)
			}
			return nil
		})
	}
	return bed.Bridge.Do(func() error {
		br := &netlink.Bridge{LinkAttrs: attrs("br0")}
		br.NumRxQueues, br.NumTxQueues = 0, 0
		if err := netlink.LinkAdd(br); err != nil {
			return fmt.Errorf("add bridge: %w", err)
		}
		// LinkAdd does not fill in the new index.
		brl, err := netlink.LinkByName("br0")
		if err != nil {
			return err
		}
		for _, h := range bed.Hosts {
			port := fmt.Sprintf("p%c", 'a'+h.Index)
			v := &netlink.Veth{
				LinkAttrs:       attrs(port),
				PeerName:        LinkName,
				PeerNamespace:   netlink.NsFd(int(h.handle)),
				PeerNumRxQueues: uint32(bed.opts.RxQueues),
				PeerNumTxQueues: uint32(bed.opts.TxQueues),
				PeerMTU:         uint32(bed.opts.MTU),
			}
			if err := netlink.LinkAdd(v); err != nil {
				return fmt.Errorf("add veth to %s: %w", h.Name(), err)
			}
			l, err := netlink.LinkByName(port)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetMasterByIndex(l, brl.Attrs().Index); err != nil {
				return fmt.Errorf("enslave %s: %w", port, err)
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
		}
		if err := netlink.LinkSetUp(brl); err != nil {
			return fmt.Errorf("bridge up: %w", err)
		}
		return nil
	})
}

// configure brings the host's interfaces up and addresses it. IPv6
// duplicate address detection is off so the addresses work at once.
func (h *Host) configure() error {
	return h.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		l, err := netlink.LinkByName(h.Link)
		if err != nil {
			return err
		}
		// Per-interface knob inside this thread's namespace: the path does
		// not exist elsewhere, so it can never touch another host's setting.
		dad := fmt.Sprintf("/proc/sys/net/ipv6/conf/%s/accept_dad", h.Link)
		if err := os.WriteFile(dad, []byte("0"), 0o644); err != nil {
			return err
		}
		for _, a := range []netip.Prefix{
			netip.PrefixFrom(h.IPv4, h.bed.Net4.Bits()),
			netip.PrefixFrom(h.IPv6, h.bed.Net6.Bits()),
		} {
			addr := &netlink.Addr{IPNet: prefixNet(a), Flags: unix.IFA_F_NODAD}
			if err := netlink.AddrAdd(l, addr); err != nil {
				return fmt.Errorf("add %s: %w", a, err)
			}
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		l, err = netlink.LinkByName(h.Link)
		if err != nil {
			return err
		}
		h.Ifindex = l.Attrs().Index
		h.MAC = l.Attrs().HardwareAddr
		return nil
	})
}

// waitActive waits until the kernel's link watch has activated every link
// of the namespace but loopback: until then a link keeps the noop qdisc,
// which drops every frame it should send (under load that lasts beyond a
// second), so a test's first datagrams would vanish. A bridge's ports
// count as much as the hosts' links.
func (ns *NS) waitActive() error {
	return ns.Do(func() error {
		deadline := time.Now().Add(10 * time.Second)
		for {
			pending, err := inactiveLinks()
			if err != nil {
				return err
			}
			if pending == "" {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s in %s not active after 10 s", pending, ns.Name())
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// inactiveLinks names a link of the thread's namespace that is not up or
// still has the noop qdisc, or returns "".
func inactiveLinks() (string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return "", err
	}
	for _, l := range links {
		if l.Attrs().Flags&net.FlagLoopback != 0 {
			continue
		}
		qs, err := netlink.QdiscList(l)
		if err != nil {
			return "", err
		}
		for _, q := range qs {
			if q.Type() == "noop" {
				return l.Attrs().Name + " (noop qdisc)", nil
			}
		}
		if st := l.Attrs().OperState; st != netlink.OperUp && st != netlink.OperUnknown {
			return fmt.Sprintf("%s (%s)", l.Attrs().Name, st), nil
		}
	}
	return "", nil
}

func (h *Host) addNeighbors() error {
	return h.Do(func() error {
		for _, p := range h.bed.Hosts {
			if p == h {
				continue
			}
			for _, ip := range []netip.Addr{p.IPv4, p.IPv6} {
				n := &netlink.Neigh{
					LinkIndex:    h.Ifindex,
					IP:           net.IP(ip.AsSlice()),
					HardwareAddr: p.MAC,
					State:        netlink.NUD_PERMANENT,
				}
				if ip.Is4() {
					n.Family = unix.AF_INET
				} else {
					n.Family = unix.AF_INET6
				}
				if err := netlink.NeighSet(n); err != nil {
					return fmt.Errorf("neighbour %s: %w", ip, err)
				}
			}
		}
		return nil
	})
}

// AttachXDP attaches prog to the host's interface in the bed's XDPMode.
// Closing the link detaches it.
func (h *Host) AttachXDP(prog *ebpf.Program) (link.Link, error) {
	var l link.Link
	err := h.Do(func() (err error) {
		// XDP links resolve the ifindex in the caller's namespace.
		l, err = link.AttachXDP(link.XDPOptions{
			Program:   prog,
			Interface: h.Ifindex,
			Flags:     xdpFlags(h.bed.opts.XDPMode),
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("attach XDP (%s) to %s in %s: %w", h.bed.opts.XDPMode, h.Link, h.Name(), err)
	}
	return l, nil
}

// XDPMode is the mode AttachXDP uses (Options.XDPMode).
func (h *Host) XDPMode() XDPMode { return h.bed.opts.XDPMode }

// Addr returns the host's IPv4 or IPv6 address.
func (h *Host) Addr(ipv6 bool) netip.Addr {
	if ipv6 {
		return h.IPv6
	}
	return h.IPv4
}

func prefixNet(p netip.Prefix) *net.IPNet {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)}
}

// Up builds a bed. down removes everything it made, in reverse order;
// when Up fails half way it has already undone what it made.
func Up(opts Options) (bed *Bed, down func(), err error) {
	var undo []func()
	down = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		undo = nil
	}
	bed, err = build(opts, func(f func()) { undo = append(undo, f) })
	if err != nil {
		down()
		return nil, func() {}, err
	}
	return bed, down, nil
}

// sweepOrphans removes the namespaces of beds whose process is gone (a test
// binary killed before its cleanup ran). A bed's namespace names carry its
// creator's pid, so beds of live processes, this one's included, are
// never touched.
func sweepOrphans() {
	ents, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		var pid int
		var tag string
		if n, _ := fmt.Sscanf(e.Name(), "xdpfab-%d-%s", &pid, &tag); n != 2 || pid <= 0 {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue
		}
		(&NS{name: e.Name(), handle: netns.None()}).remove()
	}
}
