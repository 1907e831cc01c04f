package netlab

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/bpf"
	"golang.org/x/sys/unix"
)

// Inject makes prog see frame repeat times as a frame received on h's
// interface, queue 0, with its redirects reaching bound AF_XDP sockets.
//
// Where the kernel allows it, that is a live-frame test run
// (BPF_F_TEST_XDP_LIVE_FRAMES) inside h's namespace. Some kernels refuse
// live-frame runs (EPERM even to root: seen on a hardened 6.18): then prog
// is attached to h's interface (in the bed's XDP mode, until the bed is
// removed or another program is injected there) and another host of the
// bed sends frame repeat times through a packet socket, so that it arrives
// as any frame does. Either way the frames have reached the program when
// Inject returns: veth runs the receiver's XDP in the sender's system
// call.
func (h *Host) Inject(prog *ebpf.Program, frame []byte, repeat int) error {
	if repeat <= 0 {
		return nil
	}
	if !h.bed.noLive.Load() {
		err := h.Do(func() error {
			_, err := prog.Run(&ebpf.RunOptions{
				Data:    frame,
				Repeat:  uint32(repeat),
				Flags:   unix.BPF_F_TEST_XDP_LIVE_FRAMES,
				Context: bpf.XDPMD{DataEnd: uint32(len(frame)), IngressIfindex: uint32(h.Ifindex)},
			})
			return err
		})
		if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EOPNOTSUPP) {
			return err
		}
		h.bed.noLive.Store(true)
	}
	if err := h.injectAttach(prog); err != nil {
		return err
	}
	return h.peer().send(frame, repeat)
}

// injected is the program Inject runs on one host's interface, and the
// link it attached it with (nil: the caller attached it).
type injected struct {
	prog *ebpf.Program
	link link.Link
}

func (in *injected) close() error {
	if in.link == nil {
		return nil
	}
	return in.link.Close()
}

// injectAttach attaches prog to h's interface for Inject, replacing a
// program an earlier Inject attached there.
func (h *Host) injectAttach(prog *ebpf.Program) error {
	b := h.bed
	b.injectMu.Lock()
	defer b.injectMu.Unlock()
	if b.injected == nil {
		b.injected = map[*Host]*injected{}
		b.cleanup(func() {
			b.injectMu.Lock()
			defer b.injectMu.Unlock()
			for _, in := range b.injected {
				in.close()
			}
			b.injected = nil
		})
	}
	if in := b.injected[h]; in != nil {
		if in.prog == prog {
			return nil
		}
		if err := in.close(); err != nil {
			return fmt.Errorf("inject: detach the earlier program from %s: %w", h.Name(), err)
		}
		delete(b.injected, h)
	}
	if h.runs(prog) {
		b.injected[h] = &injected{prog: prog} // the caller attached it
		return nil
	}
	l, err := h.AttachXDP(prog)
	if err != nil {
		return fmt.Errorf("inject (live-frame test runs refused): %w", err)
	}
	b.injected[h] = &injected{prog: prog, link: l}
	return nil
}

// runs reports whether prog is the XDP program attached to h's interface.
func (h *Host) runs(prog *ebpf.Program) bool {
	info, err := prog.Info()
	if err != nil {
		return false
	}
	id, ok := info.ID()
	if !ok {
		return false
	}
	var attached uint32
	h.Do(func() error {
		l, err := netlink.LinkByIndex(h.Ifindex)
		if err == nil && l.Attrs().Xdp != nil {
			attached = l.Attrs().Xdp.ProgId
		}
		return err
	})
	return attached == uint32(id)
}

// peer is the host whose frames arrive on h's interface: its veth peer on a
// bed of two, else another host across the bridge.
func (h *Host) peer() *Host {
	if h.Index == 0 {
		return h.bed.Hosts[1]
	}
	return h.bed.Hosts[0]
}

// send transmits frame (a whole Ethernet frame) repeat times on h's
// interface through a raw packet socket.
func (h *Host) send(frame []byte, repeat int) error {
	return h.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("inject: packet socket in %s: %w", h.Name(), err)
		}
		defer unix.Close(fd)
		to := &unix.SockaddrLinklayer{Ifindex: h.Ifindex, Halen: 6}
		copy(to.Addr[:], frame)
		for i := 0; i < repeat; i++ {
			for {
				err = unix.Sendto(fd, frame, 0, to)
				if !errors.Is(err, unix.ENOBUFS) && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
					break
				}
			}
			if err != nil {
				return fmt.Errorf("inject: send frame %d of %d from %s: %w", i+1, repeat, h.Name(), err)
			}
		}
		return nil
	})
}

// injectState is Bed's part of Inject.
type injectState struct {
	noLive   atomic.Bool
	injectMu sync.Mutex
	injected map[*Host]*injected
	cleanup  func(func())
}
