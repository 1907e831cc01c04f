//go:build linux

package dataplane_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"golang.org/x/sys/unix"
)

// A frame longer than a UMEM frame's room, at MTU 9000 in native mode
// (a multi-buffer program): a socket bound with MultiBuffer receives it as
// a chain of descriptors, PktContd on all but the last, the metadata in
// front of the first, the bytes intact; one bound without it never sees
// it, and the kernel counts the drop in its RxDropped (nothing is lost
// silently). (Sending chains is ep's TestJumbo.)
func TestMultiBuffer(t *testing.T) {
	for _, sg := range []bool{true, false} {
		t.Run(map[bool]string{true: "sg", false: "nosg"}[sg], func(t *testing.T) { testMultiBuffer(t, sg) })
	}
}

func testMultiBuffer(t *testing.T, sg bool) {
	bed := testbed.New(t, testbed.Options{MTU: 9000, XDPMode: testbed.Native, StaticNeighbors: true})
	p := newRedirectProgFlags(t, unix.BPF_F_XDP_HAS_FRAGS)
	testbed.AttachXDP(t, bed.A, p.prog)
	u := newUMEM(t, dataplane.UMEMConfig{NumFrames: 64})
	s := openIn(t, bed.A, 0, u, dataplane.SocketConfig{Mode: dataplane.BindCopy, MultiBuffer: sg})
	if s.MultiBuffer() != sg {
		t.Fatalf("MultiBuffer %v, bound asking %v", s.MultiBuffer(), sg)
	}
	p.insert(t, s)
	s.FillFree()

	frame := udp4Frame(bed.B.MAC, bed.A.MAC, netip.AddrPortFrom(bed.B.IPv4, 5000), netip.AddrPortFrom(bed.A.IPv4, 6000), bytes.Repeat([]byte("0123456789abcdef"), 500))
	var fd int
	if err := bed.B.Do(func() (err error) { fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0); return err }); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	to := &unix.SockaddrLinklayer{Ifindex: bed.B.Ifindex, Halen: 6}
	copy(to.Addr[:], bed.A.MAC)
	if err := unix.Sendto(fd, frame, 0, to); err != nil {
		t.Fatal(err)
	}
	descs := make([]dataplane.Desc, 8)
	var chain []dataplane.Desc
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && (len(chain) == 0 || chain[len(chain)-1].Options&dataplane.PktContd != 0) {
		n := s.Receive(descs)
		chain = append(chain, descs[:n]...)
		if !sg {
			if st, _ := s.Stats(); st.RxDropped > 0 {
				break
			}
		}
		time.Sleep(time.Millisecond)
	}
	if !sg {
		st, err := s.Stats()
		if err != nil || st.RxDropped != 1 || len(chain) != 0 {
			t.Fatalf("without multi-buffer: %d descriptors, stats %+v (%v); want none and RxDropped 1", len(chain), st, err)
		}
		return
	}
	room := u.FrameSize() - dataplane.PacketHeadroom
	if want := (metaLen + len(frame) + room - 1) / room; len(chain) != want {
		t.Fatalf("%d-byte frame and its metadata in %d descriptors, want %d of %d bytes", len(frame), len(chain), want, room)
	}
	var got []byte
	for i, d := range chain {
		if last := i == len(chain)-1; (d.Options&dataplane.PktContd != 0) == last {
			t.Fatalf("descriptor %d of %d: options %#x", i, len(chain), d.Options)
		}
		got = append(got, u.Packet(d)...)
	}
	checkMeta(t, u, chain[0], bed.A.Ifindex)
	if !bytes.Equal(got[metaLen:], frame) {
		t.Fatalf("the chain's %d bytes differ from the %d-byte frame", len(got), len(frame))
	}
}
