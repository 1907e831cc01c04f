package testbed_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/testutil"
	"golang.org/x/sys/unix"
)

// threadNetns identifies the namespace of the calling thread.
func threadNetns(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// sendUDP sends one datagram from host `from` to host `to` with plain
// sockets and checks that it arrives intact from the right source.
func sendUDP(t *testing.T, from, to *testbed.Host, ipv6 bool) {
	t.Helper()
	network := "udp4"
	if ipv6 {
		network = "udp6"
	}
	dst := netip.AddrPortFrom(to.Addr(ipv6), 9000)
	pc, err := to.ListenPacket(network, dst.String())
	if err != nil {
		t.Fatalf("listen in %s: %v", to.Name(), err)
	}
	defer pc.Close()
	c, err := from.Dial(network, dst.String())
	if err != nil {
		t.Fatalf("dial from %s: %v", from.Name(), err)
	}
	defer c.Close()
	msg := []byte("hello from " + from.Name())
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := pc.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, src, err := pc.ReadFrom(buf)
	if err != nil {
		t.Fatalf("%s -> %s (%s): %v", from.Name(), to.Name(), network, err)
	}
	if !bytes.Equal(buf[:n], msg) {
		t.Fatalf("got %q, want %q", buf[:n], msg)
	}
	if got := src.(*net.UDPAddr).AddrPort().Addr().Unmap(); got != from.Addr(ipv6) {
		t.Fatalf("source %s, want %s", got, from.Addr(ipv6))
	}
}

func TestTwoHostsUDP(t *testing.T) {
	testutil.RequirePrivileged(t)
	for _, static := range []bool{false, true} {
		name := "resolved"
		if static {
			name = "static-neighbors"
		}
		t.Run(name, func(t *testing.T) {
			bed := testbed.New(t, testbed.Options{StaticNeighbors: static})
			for _, ipv6 := range []bool{false, true} {
				sendUDP(t, bed.A, bed.B, ipv6)
				sendUDP(t, bed.B, bed.A, ipv6)
			}
		})
	}
}

func TestAddressesAndLinks(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{RxQueues: 2, TxQueues: 2})
	net4 := netip.MustParsePrefix("198.18.0.0/15")
	net6 := netip.MustParsePrefix("2001:2::/48")
	for _, h := range bed.Hosts {
		if !net4.Contains(h.IPv4) || !net6.Contains(h.IPv6) {
			t.Errorf("%s: addresses %s, %s outside the test ranges", h.Name(), h.IPv4, h.IPv6)
		}
		if h.Ifindex <= 0 || len(h.MAC) != 6 {
			t.Errorf("%s: ifindex %d, MAC %s", h.Name(), h.Ifindex, h.MAC)
		}
		err := h.Do(func() error {
			ifc, err := net.InterfaceByName(h.Link)
			if err != nil {
				return err
			}
			if ifc.Index != h.Ifindex || ifc.Flags&net.FlagUp == 0 {
				t.Errorf("%s: %+v", h.Name(), ifc)
			}
			l, err := netlink.LinkByName(h.Link)
			if err != nil {
				return err
			}
			if q := l.Attrs().NumRxQueues; q != 2 {
				t.Errorf("%s: %d rx queues, want 2", h.Name(), q)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if bed.A.IPv4 == bed.B.IPv4 || bed.A.MAC.String() == bed.B.MAC.String() {
		t.Fatalf("hosts not distinct: %+v %+v", bed.A, bed.B)
	}
}

func TestBridgedHosts(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{Hosts: 3, StaticNeighbors: true})
	if bed.Bridge == nil || len(bed.Hosts) != 3 {
		t.Fatalf("bridge %v, %d hosts", bed.Bridge, len(bed.Hosts))
	}
	sendUDP(t, bed.Hosts[0], bed.Hosts[2], false)
	sendUDP(t, bed.Hosts[2], bed.Hosts[1], true)
}

func TestDoRestoresThread(t *testing.T) {
	testutil.RequirePrivileged(t)
	bed := testbed.New(t, testbed.Options{})
	outside := threadNetns(t)
	var inside uint64
	for range 50 {
		if err := bed.A.Do(func() error {
			inside = threadNetns(t)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if inside == outside {
			t.Fatal("Do ran in the caller's namespace")
		}
	}
	// Threads returned to the scheduler are back home: any goroutine sees
	// the original namespace.
	done := make(chan uint64)
	for range 20 {
		go func() { done <- threadNetns(t) }()
		if got := <-done; got != outside {
			t.Fatalf("a goroutine runs in netns %d, want %d", got, outside)
		}
	}
	want := errors.New("boom")
	if err := bed.B.Do(func() error { return want }); !errors.Is(err, want) {
		t.Fatalf("Do error = %v", err)
	}
}

func TestCleanupRemovesNamespaces(t *testing.T) {
	testutil.RequirePrivileged(t)
	var names []string
	t.Run("bed", func(t *testing.T) {
		bed := testbed.New(t, testbed.Options{Hosts: 3})
		for _, h := range bed.Hosts {
			names = append(names, h.Path())
		}
		names = append(names, bed.Bridge.Path())
		for _, p := range names {
			if _, err := os.Stat(p); err != nil {
				t.Fatal(err)
			}
		}
	})
	for _, p := range names {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists after cleanup (%v)", p, err)
		}
	}
}
