//go:build linux

package neigh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
)

// Every test builds its own namespaces with testbed, without static
// neighbours, so ARP and NDP really run; addresses come from the bed's
// subnets or from elsewhere in 198.18.0.0/15 and 2001:2::/48, and nothing is
// sent outside the bed. Resolvers are created inside host A's namespace and
// then used from the test goroutine, which is not: that is how the endpoint
// layer uses them.

func newBed(tb testing.TB, hosts int) *testbed.Bed {
	tb.Helper()
	testutil.RequirePrivileged(tb)
	return testbed.New(tb, testbed.Options{Hosts: hosts})
}

func newResolver(tb testing.TB, h *testbed.Host, opts Options) *Resolver {
	tb.Helper()
	if opts.Timeout == 0 {
		// A bed's interfaces drop frames until the kernel's link watch
		// activates them (up to a second after creation): the first ARP
		// or NDP probe can be lost and the kernel retries after 1 s.
		opts.Timeout = 3 * time.Second
	}
	var r *Resolver
	if err := h.Do(func() (err error) { r, err = New(opts); return err }); err != nil {
		tb.Fatalf("New(%+v) in %s: %v", opts, h.Name(), err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

func mac(hw net.HardwareAddr) (m [6]byte) {
	copy(m[:], hw)
	return m
}

// hostAddr returns address number n of prefix p (n < 256).
func hostAddr(p netip.Prefix, n byte) netip.Addr {
	if p.Addr().Is4() {
		b := p.Addr().As4()
		b[3] = n
		return netip.AddrFrom4(b)
	}
	b := p.Addr().As16()
	b[15] = n
	return netip.AddrFrom16(b)
}

// otherNet4 returns a /24 in 198.18.0.0/15 that is not the bed's.
func otherNet4(bed *testbed.Bed, flip byte) netip.Prefix {
	b := bed.Net4.Addr().As4()
	b[2] ^= flip
	return netip.PrefixFrom(netip.AddrFrom4(b), 24)
}

// otherNet6 returns a /64 in 2001:2::/48 that is not the bed's (the bed's
// fourth group is below 0x200).
func otherNet6(group byte) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 0, 0, 0xff, group}), 64)
}

func famName(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// setNeighSysctl sets /proc/sys/net/{ipv4,ipv6}/neigh/veth0/<knob> inside h.
func setNeighSysctl(t *testing.T, h *testbed.Host, knob, val string) {
	t.Helper()
	err := h.Do(func() error {
		for _, fam := range []string{"ipv4", "ipv6"} {
			p := fmt.Sprintf("/proc/sys/net/%s/neigh/%s/%s", fam, h.Link, knob)
			if err := os.WriteFile(p, []byte(val), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func linkLocal(t *testing.T, h *testbed.Host) netip.Addr {
	t.Helper()
	var ll netip.Addr
	for range 100 {
		err := h.Do(func() error {
			l, err := netlink.LinkByIndex(h.Ifindex)
			if err != nil {
				return err
			}
			addrs, err := netlink.AddrList(l, netlink.FAMILY_V6)
			if err != nil {
				return err
			}
			for _, a := range addrs {
				if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.IsLinkLocalUnicast() {
					ll = ip
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if ll.IsValid() {
			return ll
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s has no IPv6 link-local address", h.Name())
	return ll
}

func wantErrno(t *testing.T, err error, want ...fi.Errno) {
	t.Helper()
	for _, w := range want {
		if !errors.Is(err, w) {
			t.Fatalf("error %v, want %s", err, w.Name())
		}
	}
}

func TestOnLinkNeighbourIsResolvedByTheKernel(t *testing.T) {
	bed := newBed(t, 2)
	r := newResolver(t, bed.A, Options{Timeout: 3 * time.Second})
	for _, v6 := range []bool{false, true} {
		t.Run(famName(v6), func(t *testing.T) {
			dst := bed.B.Addr(v6)
			start := time.Now()
			_, err := r.Lookup(dst)
			wantErrno(t, err, fi.EAGAIN)
			hop, err := r.Resolve(context.Background(), dst)
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			t.Logf("resolved %s over veth in %v", dst, time.Since(start))
			want := Hop{
				Ifindex: bed.A.Ifindex,
				SrcIP:   bed.A.Addr(v6),
				SrcMAC:  mac(bed.A.MAC),
				DstMAC:  mac(bed.B.MAC),
				MTU:     1500,
			}
			if hop != want {
				t.Fatalf("hop %+v, want %+v", hop, want)
			}
			misses := r.misses.Load()
			hop, err = r.Lookup(dst)
			if err != nil || hop != want {
				t.Fatalf("second Lookup: %+v, %v", hop, err)
			}
			if allocs := testing.AllocsPerRun(100, func() { hop, err = r.Lookup(dst) }); allocs != 0 {
				t.Errorf("cache hit allocates %v times", allocs)
			}
			if got := r.misses.Load(); got != misses {
				t.Errorf("cache hits asked the kernel %d times", got-misses)
			}
		})
	}
}

func TestKernelGivesUpOnSilentHost(t *testing.T) {
	bed := newBed(t, 2)
	// One probe, 100 ms apart: the kernel declares FAILED within ~100 ms
	// instead of 3 s.
	setNeighSysctl(t, bed.A, "mcast_solicit", "1")
	setNeighSysctl(t, bed.A, "retrans_time_ms", "100")
	timeout := 3 * time.Second
	r := newResolver(t, bed.A, Options{Timeout: timeout})
	for _, v6 := range []bool{false, true} {
		t.Run(famName(v6), func(t *testing.T) {
			dst := hostAddr(bed.Net4, 77)
			if v6 {
				dst = hostAddr(bed.Net6, 77)
			}
			start := time.Now()
			_, err := r.Resolve(context.Background(), dst)
			wantErrno(t, err, fi.EHOSTUNREACH)
			if errors.Is(err, fi.ETIMEDOUT) {
				t.Fatalf("error %v: the kernel's FAILED verdict should end Resolve before its timeout", err)
			}
			if d := time.Since(start); d > timeout+2*time.Second {
				t.Fatalf("Resolve took %v", d)
			}
			// The failure is remembered: retries do not make the kernel
			// probe again until the TTL has passed.
			misses := r.misses.Load()
			_, err = r.Lookup(dst)
			wantErrno(t, err, fi.EHOSTUNREACH)
			if r.misses.Load() != misses {
				t.Errorf("negative answer was not cached")
			}
		})
	}
}

func TestResolveTimesOut(t *testing.T) {
	bed := newBed(t, 2)
	timeout := 300 * time.Millisecond
	r := newResolver(t, bed.A, Options{Timeout: timeout})
	long := newResolver(t, bed.A, Options{Timeout: time.Hour})
	for _, v6 := range []bool{false, true} {
		net := bed.Net4
		if v6 {
			net = bed.Net6
		}
		t.Run(famName(v6)+"/Options.Timeout", func(t *testing.T) {
			if testing.Short() {
				t.Skip("waits for the timeout")
			}
			start := time.Now()
			_, err := r.Resolve(context.Background(), hostAddr(net, 78))
			// The kernel is still INCOMPLETE (it gives up after ~3 s).
			wantErrno(t, err, fi.EHOSTUNREACH, fi.ETIMEDOUT)
			if d := time.Since(start); d < timeout || d > timeout+2*time.Second {
				t.Fatalf("Resolve returned after %v, timeout %v", d, timeout)
			}
		})
		t.Run(famName(v6)+"/ctx deadline", func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := long.Resolve(ctx, hostAddr(net, 79))
			wantErrno(t, err, fi.ETIMEDOUT)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v does not wrap the context's", err)
			}
		})
		t.Run(famName(v6)+"/ctx cancelled", func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(20*time.Millisecond, cancel)
			_, err := long.Resolve(ctx, hostAddr(net, 80))
			wantErrno(t, err, fi.ECANCELED)
		})
	}
}

func TestErrorsMirrorTheKernel(t *testing.T) {
	bed := newBed(t, 2)
	noRoute4 := hostAddr(otherNet4(bed, 0x20), 77)
	noRoute6 := hostAddr(otherNet6(0x20), 0x77)
	llB := linkLocal(t, bed.B)
	plain := newResolver(t, bed.A, Options{})
	bound4 := newResolver(t, bed.A, Options{SrcIP: bed.A.IPv4})
	onLo := newResolver(t, bed.A, Options{Ifindex: 1})
	onVeth := newResolver(t, bed.A, Options{Ifindex: bed.A.Ifindex})
	for _, tc := range []struct {
		name string
		r    *Resolver
		dst  netip.Addr
		want fi.Errno
	}{
		{"no route IPv4", plain, noRoute4, fi.ENETUNREACH},
		{"no route IPv6", plain, noRoute6, fi.ENETUNREACH},
		// IPv4 with an output interface "assumes on-link" when nothing
		// routes there; the resolver does not.
		{"no route IPv4 bound to interface", onVeth, noRoute4, fi.ENETUNREACH},
		{"no route IPv6 bound to interface", onVeth, noRoute6, fi.ENETUNREACH},
		{"own address IPv4", plain, bed.A.IPv4, fi.EADDRNOTAVAIL},
		{"own address IPv6", plain, bed.A.IPv6, fi.EADDRNOTAVAIL},
		{"link-local without zone", plain, llB, fi.EINVAL},
		{"family differs from bound source", bound4, bed.B.IPv6, fi.EINVAL},
		{"route leaves through another interface IPv4", onLo, bed.B.IPv4, fi.EHOSTUNREACH},
		{"route leaves through another interface IPv6", onLo, bed.B.IPv6, fi.EHOSTUNREACH},
		{"zone is not the bound interface", onLo, llB.WithZone(testbed.LinkName), fi.EINVAL},
		{"unknown zone", plain, llB.WithZone("nosuchif0"), fi.ENODEV},
		{"invalid address", plain, netip.Addr{}, fi.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.r.Lookup(tc.dst)
			wantErrno(t, err, tc.want)
			_, err = tc.r.Resolve(context.Background(), tc.dst)
			wantErrno(t, err, tc.want)
		})
	}
	t.Run("errors are cached", func(t *testing.T) {
		misses := plain.misses.Load()
		_, err := plain.Lookup(noRoute4)
		wantErrno(t, err, fi.ENETUNREACH)
		if plain.misses.Load() != misses {
			t.Fatal("ENETUNREACH was not cached")
		}
	})
}

func TestNew(t *testing.T) {
	bed := newBed(t, 2)
	for _, tc := range []struct {
		name string
		opts Options
		want fi.Errno
	}{
		{"no such interface", Options{Ifindex: 999}, fi.ENODEV},
		{"source not local", Options{SrcIP: hostAddr(bed.Net4, 99)}, fi.EADDRNOTAVAIL},
		{"negative timeout", Options{Timeout: -1}, fi.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := bed.A.Do(func() error {
				r, err := New(tc.opts)
				if err == nil {
					r.Close()
				}
				return err
			})
			wantErrno(t, err, tc.want)
		})
	}
}

func TestBoundInterface(t *testing.T) {
	bed := newBed(t, 2)
	llA, llB := linkLocal(t, bed.A), linkLocal(t, bed.B)
	onVeth := newResolver(t, bed.A, Options{Ifindex: bed.A.Ifindex})
	plain := newResolver(t, bed.A, Options{})
	for _, tc := range []struct {
		name    string
		r       *Resolver
		dst     netip.Addr
		wantSrc netip.Addr
	}{
		{"IPv4", onVeth, bed.B.IPv4, bed.A.IPv4},
		{"IPv6", onVeth, bed.B.IPv6, bed.A.IPv6},
		{"link-local without zone", onVeth, llB, llA},
		{"zone by name", plain, llB.WithZone(testbed.LinkName), llA},
		{"zone by index", plain, llB.WithZone(fmt.Sprint(bed.A.Ifindex)), llA},
		{"IPv4-mapped destination", plain, netip.AddrFrom16(bed.B.IPv4.As16()), bed.A.IPv4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hop, err := tc.r.Resolve(context.Background(), tc.dst)
			if err != nil {
				t.Fatal(err)
			}
			if hop.SrcIP != tc.wantSrc || hop.DstMAC != mac(bed.B.MAC) || hop.Ifindex != bed.A.Ifindex {
				t.Fatalf("hop %+v, want source %s, destination MAC %s", hop, tc.wantSrc, bed.B.MAC)
			}
		})
	}
}

func TestBoundSource(t *testing.T) {
	bed := newBed(t, 2)
	// Second addresses on A's interface, to bind to.
	src4, src6 := hostAddr(bed.Net4, 101), hostAddr(bed.Net6, 101)
	err := bed.A.Do(func() error {
		l, err := netlink.LinkByIndex(bed.A.Ifindex)
		if err != nil {
			return err
		}
		for _, p := range []netip.Prefix{netip.PrefixFrom(src4, 24), netip.PrefixFrom(src6, 64)} {
			ipn := &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
			if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipn, Flags: unix.IFA_F_NODAD}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The kernel would pick the primary IPv4 address; IPv6 source
	// selection may pick either. The bound address wins in both cases.
	for _, src := range []netip.Addr{src4, src6, bed.A.IPv4, bed.A.IPv6} {
		t.Run(src.String(), func(t *testing.T) {
			r := newResolver(t, bed.A, Options{SrcIP: src})
			hop, err := r.Resolve(context.Background(), bed.B.Addr(src.Is6()))
			if err != nil {
				t.Fatal(err)
			}
			if hop.SrcIP != src || hop.DstMAC != mac(bed.B.MAC) {
				t.Fatalf("hop %+v, want source %s", hop, src)
			}
		})
	}
}

func TestGatewayNextHop(t *testing.T) {
	bed := newBed(t, 3)
	c := bed.Hosts[2]
	llC := linkLocal(t, c)
	via4 := otherNet4(bed, 0x80)    // via C's IPv4 address
	via6 := otherNet6(0x80)         // via C's link-local address
	via4in6 := otherNet4(bed, 0x40) // IPv4 via C's link-local (RFC 5549)
	ipnet := func(p netip.Prefix) *net.IPNet {
		return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
	}
	routes := []*netlink.Route{
		{LinkIndex: bed.A.Ifindex, Dst: ipnet(via4), Gw: c.IPv4.AsSlice()},
		{LinkIndex: bed.A.Ifindex, Dst: ipnet(via6), Gw: llC.AsSlice()},
		{LinkIndex: bed.A.Ifindex, Dst: ipnet(via4in6), Via: &netlink.Via{AddrFamily: unix.AF_INET6, Addr: llC.AsSlice()}},
	}
	err := bed.A.Do(func() error {
		for _, rt := range routes {
			if err := netlink.RouteAdd(rt); err != nil {
				return fmt.Errorf("add %s: %w", rt, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := newResolver(t, bed.A, Options{TTL: time.Hour})
	for _, tc := range []struct {
		name    string
		dst     netip.Addr
		gw      netip.Addr
		wantSrc netip.Addr
	}{
		{"IPv4 via IPv4", hostAddr(via4, 9), c.IPv4, bed.A.IPv4},
		{"IPv6 via link-local", hostAddr(via6, 9), llC, bed.A.IPv6},
		{"IPv4 via IPv6 link-local", hostAddr(via4in6, 9), llC, bed.A.IPv4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := r.Lookup(tc.dst); tc.name != "IPv4 via IPv6 link-local" { // shares the IPv6 row's next hop
				wantErrno(t, err, fi.EAGAIN)
			}
			hop, err := r.Resolve(context.Background(), tc.dst)
			if err != nil {
				t.Fatal(err)
			}
			want := Hop{Ifindex: bed.A.Ifindex, SrcIP: tc.wantSrc, SrcMAC: mac(bed.A.MAC), DstMAC: mac(c.MAC), Gateway: tc.gw, MTU: 1500}
			if hop != want {
				t.Fatalf("hop %+v, want %+v", hop, want)
			}
		})
	}
	t.Run("route removal flushes the cache", func(t *testing.T) {
		dst := hostAddr(via4, 9)
		if _, err := r.Lookup(dst); err != nil {
			t.Fatal(err)
		}
		if err := bed.A.Do(func() error { return netlink.RouteDel(routes[0]) }); err != nil {
			t.Fatal(err)
		}
		// The notification arrives asynchronously; TTL is an hour, so
		// only the notification can change the answer.
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, err := r.Lookup(dst)
			if errors.Is(err, fi.ENETUNREACH) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Lookup still answers %v after the route was deleted", err)
			}
			time.Sleep(time.Millisecond)
		}
	})
}

func TestNeighbourChangesReachTheCache(t *testing.T) {
	bed := newBed(t, 2)
	r := newResolver(t, bed.A, Options{TTL: time.Hour})
	for _, v6 := range []bool{false, true} {
		t.Run(famName(v6), func(t *testing.T) {
			dst := bed.B.Addr(v6)
			if _, err := r.Resolve(context.Background(), dst); err != nil {
				t.Fatal(err)
			}
			var c Cache
			if hop, err := c.Lookup(r, dst); err != nil || hop.DstMAC != mac(bed.B.MAC) {
				t.Fatalf("cache: %+v, %v", hop, err)
			}
			misses := r.misses.Load()
			// The peer "moves": its entry gets another MAC, as after a
			// gratuitous ARP or unsolicited NA.
			moved := [6]byte{0x02, 0, 0x5e, 0, 0, 0x42}
			n := &netlink.Neigh{LinkIndex: bed.A.Ifindex, Family: int(family(dst)), IP: dst.AsSlice(),
				HardwareAddr: moved[:], State: netlink.NUD_REACHABLE}
			if err := bed.A.Do(func() error { return netlink.NeighSet(n) }); err != nil {
				t.Fatal(err)
			}
			// With a TTL of an hour only the notification can bring the
			// new MAC (an in-place update, or a flush if an unrelated
			// route or address event came first). A sender's Cache,
			// filled before, follows too.
			waitFor(t, func() bool { hop, err := r.Lookup(dst); return err == nil && hop.DstMAC == moved })
			if hop, err := c.Lookup(r, dst); err != nil || hop.DstMAC != moved {
				t.Fatalf("cache after the move: %+v, %v", hop, err)
			}
			if r.misses.Load() != misses {
				t.Logf("a flush raced with the neighbour update")
			}
			// The entry disappears: the next lookup resolves again.
			if err := bed.A.Do(func() error { return netlink.NeighDel(n) }); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { _, err := r.Lookup(dst); return errors.Is(err, fi.EAGAIN) })
			// The cache never serves the deleted entry (the lookup above
			// may have had the kernel resolve the peer again already).
			if hop, err := c.Lookup(r, dst); err == nil && hop.DstMAC == moved || err != nil && !errors.Is(err, fi.EAGAIN) {
				t.Fatalf("cache after the deletion: %+v, %v", hop, err)
			}
			hop, err := r.Resolve(context.Background(), dst)
			if err != nil || hop.DstMAC != mac(bed.B.MAC) {
				t.Fatalf("after deletion: %+v, %v", hop, err)
			}
		})
	}
}

func TestStaticNeighbourIsNotDisturbed(t *testing.T) {
	bed := newBed(t, 2)
	r := newResolver(t, bed.A, Options{TTL: time.Millisecond})
	dst := hostAddr(bed.Net4, 66)
	static := [6]byte{0x02, 0, 0x5e, 0, 0, 0x66}
	n := &netlink.Neigh{LinkIndex: bed.A.Ifindex, Family: unix.AF_INET, IP: dst.AsSlice(),
		HardwareAddr: static[:], State: netlink.NUD_PERMANENT}
	if err := bed.A.Do(func() error { return netlink.NeighSet(n) }); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		hop, err := r.Lookup(dst)
		if err != nil || hop.DstMAC != static {
			t.Fatalf("Lookup: %+v, %v", hop, err)
		}
		time.Sleep(2 * time.Millisecond) // let the TTL pass: refresh again
	}
	err := bed.A.Do(func() error {
		ns, err := netlink.NeighList(bed.A.Ifindex, unix.AF_INET)
		if err != nil {
			return err
		}
		for _, x := range ns {
			if x.IP.Equal(dst.AsSlice()) && x.State != netlink.NUD_PERMANENT {
				return fmt.Errorf("static entry is now in state %#x", x.State)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTTLExpiryAsksTheKernelAgain(t *testing.T) {
	bed := newBed(t, 2)
	ttl := 200 * time.Millisecond
	r := newResolver(t, bed.A, Options{TTL: ttl})
	want, err := r.Resolve(context.Background(), bed.B.IPv4)
	if err != nil {
		t.Fatal(err)
	}
	misses := r.misses.Load()
	time.Sleep(2 * ttl)
	refreshed := time.Now()
	hop, err := r.Lookup(bed.B.IPv4)
	if err != nil || hop != want {
		t.Fatalf("after TTL: %+v, %v; want %+v", hop, err, want)
	}
	if got := r.misses.Load(); got != misses+1 {
		t.Fatalf("after TTL the kernel was asked %d times, want 1", got-misses)
	}
	_, err = r.Lookup(bed.B.IPv4)
	// A machine busy with other tests may stall this goroutine past the
	// TTL between the two lookups: the entry has then expired again, as it
	// should.
	if err != nil || r.misses.Load() != misses+1 && time.Since(refreshed) < ttl {
		t.Fatalf("refreshed entry is not cached: %v", err)
	}
}

func TestBroadcastAndMulticast(t *testing.T) {
	bed := newBed(t, 2)
	r := newResolver(t, bed.A, Options{Ifindex: bed.A.Ifindex})
	for _, tc := range []struct {
		dst  netip.Addr
		want [6]byte
	}{
		{hostAddr(bed.Net4, 255), [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{netip.MustParseAddr("224.0.0.251"), [6]byte{0x01, 0x00, 0x5e, 0x00, 0x00, 0xfb}},
		{netip.MustParseAddr("ff02::1"), [6]byte{0x33, 0x33, 0, 0, 0, 1}},
	} {
		t.Run(tc.dst.String(), func(t *testing.T) {
			hop, err := r.Lookup(tc.dst)
			if err != nil {
				t.Fatal(err)
			}
			if hop.DstMAC != tc.want || hop.Ifindex != bed.A.Ifindex || hop.Gateway.IsValid() {
				t.Fatalf("hop %+v, want DstMAC % x", hop, tc.want)
			}
		})
	}
}

func TestClose(t *testing.T) {
	bed := newBed(t, 2)
	r := newResolver(t, bed.A, Options{Timeout: time.Hour})
	if _, err := r.Resolve(context.Background(), bed.B.IPv4); err != nil {
		t.Fatal(err)
	}
	var c Cache
	if _, err := c.Lookup(r, bed.B.IPv4); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() {
		_, err := r.Resolve(context.Background(), hostAddr(bed.Net4, 77))
		blocked <- err
	}()
	time.Sleep(20 * time.Millisecond)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	wantErrno(t, <-blocked, fi.EBADF)
	_, err := r.Lookup(bed.B.IPv4)
	wantErrno(t, err, fi.EBADF)
	_, err = c.Lookup(r, bed.B.IPv4) // what it held is not served after Close
	wantErrno(t, err, fi.EBADF)
	_, err = r.Resolve(context.Background(), bed.B.IPv4)
	wantErrno(t, err, fi.EBADF)
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestConcurrentUse runs lookups from many goroutines while routes come and
// go (each change flushes the cache); run it with -race.
func TestConcurrentUse(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test")
	}
	bed := newBed(t, 2)
	r := newResolver(t, bed.A, Options{TTL: time.Millisecond, Timeout: 200 * time.Millisecond})
	dsts := []netip.Addr{bed.B.IPv4, bed.B.IPv6, hostAddr(bed.Net4, 77), hostAddr(otherNet4(bed, 0x20), 1)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				dst := dsts[(g+i)%len(dsts)]
				var hop Hop
				var err error
				if i%16 == 0 {
					hop, err = r.Resolve(context.Background(), dst)
				} else {
					hop, err = r.Lookup(dst)
				}
				switch {
				case err == nil:
					if dst != bed.B.IPv4 && dst != bed.B.IPv6 || hop.DstMAC != mac(bed.B.MAC) {
						errs <- fmt.Errorf("%s: unexpected %+v", dst, hop)
						return
					}
				case errors.Is(err, fi.EAGAIN), errors.Is(err, fi.EHOSTUNREACH), errors.Is(err, fi.ENETUNREACH):
				default:
					errs <- fmt.Errorf("%s: %w", dst, err)
					return
				}
			}
		})
	}
	flap := otherNet4(bed, 0x10)
	rt := &netlink.Route{LinkIndex: bed.A.Ifindex, Dst: &net.IPNet{IP: flap.Addr().AsSlice(), Mask: net.CIDRMask(24, 32)}}
	for i := range 20 {
		err := bed.A.Do(func() error {
			if i%2 == 0 {
				return netlink.RouteAdd(rt)
			}
			return netlink.RouteDel(rt)
		})
		if err != nil {
			t.Error(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

func BenchmarkLookup(b *testing.B) {
	bed := newBed(b, 2)
	r := newResolver(b, bed.A, Options{TTL: time.Hour})
	dst := bed.B.IPv4
	if _, err := r.Resolve(context.Background(), dst); err != nil {
		b.Fatal(err)
	}
	b.Run("hit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.Lookup(dst); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hit-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := r.Lookup(dst); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("miss", func(b *testing.B) {
		// Route and neighbour read from the kernel, neighbour resolved.
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.lookupSlow(dst); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A kernel that sees no traffic through a neighbour leaves it STALE forever;
// AF_XDP traffic is invisible to it. A refresh therefore "uses" a STALE
// entry so the kernel re-verifies it (DELAY, then a unicast probe).
func TestStaleNeighbourIsReverified(t *testing.T) {
	bed := newBed(t, 2)
	ttl := 20 * time.Millisecond
	r := newResolver(t, bed.A, Options{TTL: ttl})
	dst := bed.B.IPv4
	if _, err := r.Resolve(context.Background(), dst); err != nil {
		t.Fatal(err)
	}
	stale := &netlink.Neigh{LinkIndex: bed.A.Ifindex, Family: unix.AF_INET, IP: dst.AsSlice(),
		HardwareAddr: bed.B.MAC, State: netlink.NUD_STALE}
	if err := bed.A.Do(func() error { return netlink.NeighSet(stale) }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl)
	hop, err := r.Lookup(dst) // refresh: the STALE entry is usable
	if err != nil || hop.DstMAC != mac(bed.B.MAC) {
		t.Fatalf("Lookup of a STALE neighbour: %+v, %v", hop, err)
	}
	var state int
	err = bed.A.Do(func() error {
		ns, err := netlink.NeighList(bed.A.Ifindex, unix.AF_INET)
		for _, n := range ns {
			if n.IP.Equal(dst.AsSlice()) {
				state = n.State
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if state&(netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_REACHABLE) == 0 {
		t.Fatalf("neighbour state %#x after refresh, want DELAY (re-verification started)", state)
	}
}

// Options.Use replaces the resolver's own NTF_USE: an unprivileged
// application has the agent make the kernel resolve.
func TestUseHook(t *testing.T) {
	bed := newBed(t, 2)
	var calls atomic.Int32
	var h *netlink.Handle
	if err := bed.A.Do(func() (err error) { h, err = netlink.NewHandle(); return err }); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	use := func(ifindex int, ip netip.Addr) error {
		calls.Add(1)
		return h.NeighSet(&netlink.Neigh{LinkIndex: ifindex, Family: int(family(ip)), IP: net.IP(ip.AsSlice()), Flags: netlink.NTF_USE})
	}
	r := newResolver(t, bed.A, Options{Use: use})
	hop, err := r.Resolve(context.Background(), bed.B.IPv4)
	if err != nil || hop.DstMAC != mac(bed.B.MAC) {
		t.Fatalf("Resolve with a Use hook: %+v %v", hop, err)
	}
	if calls.Load() == 0 {
		t.Error("the hook was not called")
	}
	failing := newResolver(t, bed.A, Options{Use: func(int, netip.Addr) error { return fi.EPERM }})
	if _, err := failing.Lookup(bed.B.IPv6); !errors.Is(err, fi.EIO) {
		t.Errorf("failing hook: %v", err)
	}
	// The agent's refusals keep their errno: EAGAIN is "retry the send".
	busy := newResolver(t, bed.A, Options{Use: func(int, netip.Addr) error { return fmt.Errorf("agent: too fast: %w", fi.EAGAIN) }})
	if _, err := busy.Lookup(bed.B.IPv6); fi.Code(err) != fi.EAGAIN {
		t.Errorf("hook refusing with EAGAIN: %v", err)
	}
}
