//go:build linux

package ep_test

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/wire"
	"golang.org/x/sys/unix"
)

// xdpfabDatagram is an xdpfab header and payload, as a kernel socket
// sends them.
func xdpfabDatagram(payload []byte) []byte {
	b := make([]byte, wire.HdrLen+len(payload))
	wire.PutHdr(b, wire.Hdr{Op: wire.OpMsg})
	copy(b[wire.HdrLen:], payload)
	return b
}

// A datagram from a plain kernel UDP socket reaches an endpoint, over
// IPv4 and IPv6, with XDP native and generic. Over veth the kernel sends
// it with CHECKSUM_PARTIAL: the UDP checksum field holds only the
// pseudo-header sum (docs/platform.md#udp-checksums-over-veth), which the
// program accepts; the datagram counts as translated, never csum_error.
func TestKernelSentDatagrams(t *testing.T) {
	for _, mode := range []loader.Mode{loader.Native, loader.Generic} {
		for _, v6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/%s", mode, map[bool]string{false: "ipv4", true: "ipv6"}[v6]), func(t *testing.T) {
				r := newRig(t, rigOpts{v6: v6, mode: mode})
				var c *net.UDPConn
				err := r.b.h.Do(func() (err error) {
					c, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(r.a.local))
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				from := r.a.insert(t, c.LocalAddr().(*net.UDPAddr).AddrPort())
				before, _ := r.dp.Counters()
				sizes := []int{0, 1, 63, 64, 471, 472, 1024, r.a.ep.MaxMsgSize()}
				buf := make([]byte, 4096)
				for _, n := range sizes {
					payload := bytes.Repeat([]byte{byte(n), 0x5a, 0xa5}, n/3+1)[:n]
					if err := r.a.ep.Recv(buf, fi.AddrUnspec, n); err != nil {
						t.Fatal(err)
					}
					if _, err := c.Write(xdpfabDatagram(payload)); err != nil {
						t.Fatal(err)
					}
					e, src, ee := read(t, r.a.rx)
					if ee != nil || e.OpContext != n || e.Len != n || !bytes.Equal(buf[:n], payload) || src != from {
						t.Fatalf("%d bytes: completion %+v from %v (error %+v)", n, e, src, ee)
					}
				}
				after, _ := r.dp.Counters()
				for c, want := range map[bpf.Counter]uint64{bpf.CounterTranslated: uint64(len(sizes)), bpf.CounterCsumError: 0, bpf.CounterMalformed: 0} {
					if got := after[c] - before[c]; got != want {
						t.Errorf("counter %v moved by %d, want %d", c, got, want)
					}
				}
			})
		}
	}
}

// A wildcard endpoint receives on the host's addresses, also one added
// after it opened (the local-address watch follows the kernel's), and not
// on a broadcast to its port: that the program leaves to the kernel,
// counted not_local.
func TestWildcardLocalOnly(t *testing.T) {
	r := newRig(t, rigOpts{})
	rx, err := cq.Open(cq.Attr{Size: 64, Format: cq.FormatTagged})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := cq.Open(cq.Attr{Size: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	wild := openEP(t, r.a.h, r.dp, ep.Attr{Ifname: "veth0", Local: netip.MustParseAddrPort("0.0.0.0:7300"), AV: r.a.av,
		TxCQ: tx, RxCQ: rx, Caps: fi.Msg, BindMode: dataplane.BindCopy})
	local, err := r.dp.LocalAddrs()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := local[r.a.h.IPv4]; !ok {
		t.Fatalf("local addresses %v lack A's %v", local, r.a.h.IPv4)
	}
	if _, ok := local[r.a.h.IPv6]; !ok {
		t.Fatalf("local addresses %v lack A's %v", local, r.a.h.IPv6)
	}

	// sendTo sends one datagram from B's kernel to dst:7300.
	sendTo := func(dst netip.Addr, broadcast bool) {
		t.Helper()
		err := r.b.h.Do(func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			if broadcast {
				if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BROADCAST, 1); err != nil {
					return err
				}
			}
			return unix.Sendto(fd, xdpfabDatagram([]byte(dst.String())), 0, &unix.SockaddrInet4{Port: 7300, Addr: dst.As4()})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	recv := func(want string) {
		t.Helper()
		buf := make([]byte, 64)
		if err := wild.Recv(buf, fi.AddrUnspec, want); err != nil {
			t.Fatal(err)
		}
		e, _, ee := read(t, rx)
		if ee != nil || e.OpContext != want || string(buf[:e.Len]) != want {
			t.Fatalf("received %q (%+v, error %+v), want %q", buf[:e.Len], e, ee, want)
		}
	}
	sendTo(r.a.h.IPv4, false)
	recv(r.a.h.IPv4.String())

	// A second address on A, after the endpoint opened.
	extra := r.bed.Net4.Addr().As4()
	extra[3] = 200
	added := netip.AddrFrom4(extra)
	ifaddr := &netlink.Addr{IPNet: &net.IPNet{IP: added.AsSlice(), Mask: net.CIDRMask(r.bed.Net4.Bits(), 32)}}
	linkDo := func(f func(netlink.Link, *netlink.Addr) error) {
		t.Helper()
		err := r.a.h.Do(func() error {
			l, err := netlink.LinkByName("veth0")
			if err != nil {
				return err
			}
			return f(l, ifaddr)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	waitLocal := func(present bool) {
		t.Helper()
		for range 1000 {
			local, _ := r.dp.LocalAddrs()
			if _, ok := local[added]; ok == present {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("%v in the local addresses: never %v", added, present)
	}
	linkDo(netlink.AddrAdd)
	waitLocal(true)
	sendTo(added, false)
	recv(added.String())
	linkDo(netlink.AddrDel)
	waitLocal(false)

	// A broadcast to the port is not the endpoint's.
	before, _ := r.dp.Counters()
	bcast := r.bed.Net4.Addr().As4()
	bcast[3] = 255
	sendTo(netip.AddrFrom4(bcast), true)
	waitCounter(t, r, bpf.CounterNotLocal, before[bpf.CounterNotLocal]+1)
	var e [1]cq.Entry
	wild.Progress()
	if n, _ := rx.Read(e[:]); n != 0 {
		t.Errorf("the wildcard endpoint received a broadcast: %+v", e[0])
	}
}

// An endpoint leaves its UDP checksums to the kernel (AF_XDP TX metadata,
// copy mode): the frame leaves with the pseudo-header sum in the checksum
// field as a CHECKSUM_PARTIAL packet, and a kernel UDP socket of the peer
// (which has the XDP program attached, natively or generic, and passes the
// datagram on) receives every size intact, over IPv4 and IPv6, at MTU 1500
// and at 9000 (the largest messages leave as chains of frames, the
// metadata on the first). A capture on
// the peer shows the field as the kernel's own sockets leave it.
func TestSentChecksumOffload(t *testing.T) {
	for _, mtu := range []int{1500, 9000} { // at 9000 the largest messages leave as chains of frames
		for _, mode := range []loader.Mode{loader.Native, loader.Generic} {
			for _, v6 := range []bool{false, true} {
				t.Run(fmt.Sprintf("mtu%d/%s/%s", mtu, mode, map[bool]string{false: "ipv4", true: "ipv6"}[v6]), func(t *testing.T) {
					testSentChecksumOffload(t, mtu, mode, v6)
				})
			}
		}
	}
}

func testSentChecksumOffload(t *testing.T, mtu int, mode loader.Mode, v6 bool) {
	r := newRig(t, rigOpts{v6: v6, mode: mode, bedOpts: testbed.Options{MTU: mtu}})
	svc := netip.AddrPortFrom(r.b.local.Addr(), 9999)
	conn, err := r.b.h.ListenPacket("udp", svc.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var capFD int
	err = r.b.h.Do(func() (err error) {
		capFD, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(capFD)
	unix.SetsockoptTimeval(capFD, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	to := r.a.insert(t, svc)
	for _, n := range []int{0, 1, 63, 64, 471, 1024, 4000, 8000, r.a.ep.MaxMsgSize()} {
		if n > r.a.ep.MaxMsgSize() {
			continue
		}
		payload := bytes.Repeat([]byte{byte(n), 0x5a, 0xa5}, n/3+1)[:n]
		send(t, r.a, func() error { return r.a.ep.Send(payload, to, n) })
		read(t, r.a.tx)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 9000)
		got, _, err := conn.ReadFrom(b)
		if err != nil || got != wire.HdrLen+n || !bytes.Equal(b[wire.HdrLen:got], payload) {
			t.Fatalf("%d bytes: kernel socket got %d bytes (%v)", n, got, err)
		}
		if !capturedPartial(t, capFD, svc, wire.UDPHeaderLen+wire.HdrLen+n) {
			t.Fatalf("%d bytes: the frame left with a full checksum, not the kernel's to complete", n)
		}
	}
}

// capturedPartial reads captured IP packets until the UDP datagram of
// udpLen bytes to dst and reports whether its checksum field held the
// folded pseudo-header sum (CHECKSUM_PARTIAL).
func capturedPartial(t *testing.T, fd int, dst netip.AddrPort, udpLen int) bool {
	t.Helper()
	b := make([]byte, 9100)
	for {
		n, _, err := unix.Recvfrom(fd, b, 0)
		if err != nil {
			t.Fatalf("capture: %v", err)
		}
		p := b[:n]
		var src, to netip.Addr
		var udp []byte
		switch {
		case n >= 28 && p[0]>>4 == 4 && p[9] == 17:
			ihl := int(p[0]&15) * 4
			src, to, udp = netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20])), p[ihl:]
		case n >= 48 && p[0]>>4 == 6 && p[6] == 17:
			src, to, udp = netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40])), p[40:]
		default:
			continue
		}
		if to != dst.Addr() || int(udp[2])<<8|int(udp[3]) != int(dst.Port()) || len(udp) != udpLen {
			continue
		}
		var acc uint32
		for _, a := range [][]byte{src.AsSlice(), to.AsSlice()} {
			for i := 0; i < len(a); i += 2 {
				acc += uint32(a[i])<<8 | uint32(a[i+1])
			}
		}
		acc += 17 + uint32(udpLen)
		for acc > 0xffff {
			acc = acc>>16 + acc&0xffff
		}
		return uint32(udp[6])<<8|uint32(udp[7]) == acc
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
