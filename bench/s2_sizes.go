package main

// Section 2, by message size: receive capacity at 64 B, 1 KiB, 4 KiB and
// 8 KiB over a veth pair with MTU 9000, xdpfab in native XDP (its
// multi-buffer program and sockets: a jumbo message is a chain of UMEM
// frames) against a Go UDP socket, under the user-space sender (live-frame
// test runs take no frame longer than a page, so the injector cannot offer
// jumbo frames).

import (
	"fmt"
	"net/netip"

	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/wire"
)

// rxSizes are the payload sizes of the by-size rows.
var rxSizes = []int{64, 1024, 4096, 8192}

// rxSizeKey is the load name the by-size rows are stored under
// (rx/<load>/<receiver>).
func rxSizeKey(size int) string { return fmt.Sprintf("mtu9000-%d", size) }

func runRxSizes(r *results, cfg *config, measure func(rxCase, string, rxLoop, genLoop, *testbed.NS, *testbed.NS) error) error {
	if !cfg.want("xdpfab-multi") && !cfg.want("udp-mmsg") {
		return nil
	}
	bd, down, err := testbed.Up(testbed.Options{StaticNeighbors: true, MTU: 9000})
	if err != nil {
		return err
	}
	defer down()
	dp, err := loader.Load(loader.Config{AVEntries: 1024, MaxAVs: 8})
	if err != nil {
		return err
	}
	defer dp.Close()
	from := netip.AddrPortFrom(bd.A.IPv4, senderPort)
	local := netip.AddrPortFrom(bd.B.IPv4, rxPort)
	peers := []netip.AddrPort{from}
	for _, size := range rxSizes {
		send, closeSend, err := udpSender(bd.A, from, local, wirePayload(wire.Hdr{Op: wire.OpMsg}, make([]byte, size)))
		if err != nil {
			return err
		}
		g := rxSizeKey(size)
		// Go UDP first, with no XDP program on the interface.
		loop, closeRx, err := udpReceiver(bd.B, local, peers, true)
		if err == nil {
			err = measure(rxCases[2], g, loop, send, nil, nil)
			closeRx()
		}
		if err != nil {
			closeSend()
			return err
		}
		var att *loader.Attachment
		if err := bd.B.Do(func() (err error) { att, err = dp.Attach(testbed.LinkName, loader.Native); return err }); err != nil {
			closeSend()
			return err
		}
		x, err := openXdpfabRx(dp, bd.B, local, peers, nil)
		if err == nil {
			err = measure(rxCases[1], g, x.loop(true, nil), send, nil, nil)
			if st, serr := x.EP.Stats(); serr == nil {
				r.note("rx", "%s, %d B at MTU 9000: endpoint socket statistics after the runs: rx_dropped %d, rx_ring_full %d, fill_ring_empty %d",
					rxCases[1].key, size, st.RxDropped, st.RxRingFull, st.RxFillRingEmptyDescs)
			}
			x.Close()
		}
		att.Close()
		closeSend()
		if err != nil {
			return err
		}
	}
	return nil
}
