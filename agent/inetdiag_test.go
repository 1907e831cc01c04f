//go:build linux

package agent

import (
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/internal/testutil"
	"golang.org/x/sys/unix"
)

// inetDiag finds the uid that owns the other end of a connection from this
// node: the metrics endpoint's source of a local connection.
func TestInetDiagUID(t *testing.T) {
	testutil.RequirePrivileged(t)
	d, err := newInetDiag()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, network := range []string{"tcp4", "tcp6"} {
		host := map[string]string{"tcp4": "127.0.0.1", "tcp6": "::1"}[network]
		ln, err := net.Listen(network, net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		for _, uid := range []int{0, 65534} {
			// A socket belongs to the fsuid of the thread that made it.
			done := make(chan net.Conn)
			go func() {
				runtime.LockOSThread() // the thread ends with the goroutine: its fsuid with it
				unix.Setfsuid(uid)
				c, err := net.Dial(network, ln.Addr().String())
				if err != nil {
					t.Error(err)
				}
				done <- c
			}()
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			c := <-done
			self := netip.MustParseAddrPort(s.LocalAddr().String())
			peer := netip.MustParseAddrPort(s.RemoteAddr().String())
			got, err := d.uid(peer, self)
			if err != nil || got != uint32(uid) {
				t.Errorf("%s: the peer's socket belongs to %d, %v; want %d", network, got, err, uid)
			}
			if _, err := d.uid(netip.MustParseAddrPort(net.JoinHostPort(host, "1")), self); err == nil {
				t.Errorf("%s: a socket that does not exist has an owner", network)
			}
			// The peer closes its socket: it has no owner any more,
			// whatever uid the kernel answers for what is left of it.
			if c != nil {
				c.Close()
			}
			time.Sleep(10 * time.Millisecond)
			if got, err := d.uid(peer, self); err == nil {
				t.Errorf("%s: a socket its process closed belongs to uid %d", network, got)
			}
			s.Close()
		}
	}
}
