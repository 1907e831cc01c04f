package main

// Section 2: receive capacity of one receiver thread, 64-byte payloads,
// under an in-kernel injector (live-frame test runs) and a user-space
// sender: an xdpfab endpoint vs Go UDP sockets with a map vs asavie/xdp's
// receive loop vs XDP_DROP.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/asavie/xdp"
	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/testbed"
	"github.com/xdpfab/xdpfab/internal/xdptest"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/stack"
	"github.com/xdpfab/xdpfab/wire"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

const (
	rxPort     = 7000
	senderPort = 9000
	payloadLen = 64
)

// rxLoop receives until stop, adding what it delivered to got. bad counts
// deliveries whose source was not the one expected.
type rxLoop func(stop *atomic.Bool, got, bad *atomic.Uint64) error

// genLoop offers load until stop, adding what it offered to sent.
type genLoop func(stop *atomic.Bool, sent *atomic.Uint64) error

type rateOpts struct {
	warm, window time.Duration
	rxNS, genNS  *testbed.NS
}

func (c *config) rateOpts() rateOpts {
	if c.quick {
		return rateOpts{warm: 50 * time.Millisecond, window: 200 * time.Millisecond}
	}
	return rateOpts{warm: 200 * time.Millisecond, window: time.Second}
}

type rate struct {
	mpps, offered float64
	bad           uint64
}

// measureRate runs rx on the measuring CPU and gen on the load CPU and
// returns the receiver's rate over the window after the warm-up.
func measureRate(cfg *config, o rateOpts, rx rxLoop, gen genLoop) (rate, error) {
	var stop, rxStop atomic.Bool
	var got, bad, sent atomic.Uint64
	rxDone := goOnThread(o.rxNS, cfg.cpuMeasure, func() error { return rx(&rxStop, &got, &bad) })
	time.Sleep(10 * time.Millisecond)
	genDone := goOnThread(o.genNS, cfg.cpuLoad, func() error { return gen(&stop, &sent) })
	time.Sleep(o.warm)
	c0, s0, t0 := got.Load(), sent.Load(), time.Now()
	time.Sleep(o.window)
	c1, s1, t1 := got.Load(), sent.Load(), time.Now()
	stop.Store(true)
	var errs []error
	select {
	case err := <-genDone:
		errs = append(errs, err)
	case <-time.After(5 * time.Second):
		errs = append(errs, errors.New("load generator did not stop"))
	}
	rxStop.Store(true)
	select {
	case err := <-rxDone:
		errs = append(errs, err)
	case <-time.After(5 * time.Second):
		errs = append(errs, errors.New("receiver did not stop"))
	}
	dt := t1.Sub(t0).Seconds()
	return rate{mpps: float64(c1-c0) / dt / 1e6, offered: float64(s1-s0) / dt / 1e6, bad: bad.Load()}, errors.Join(errs...)
}

// injector returns a generator that runs prog in live-frame mode on the
// host's interface: frames really go where prog sends them.
func injector(h *testbed.Host, prog *ebpf.Program, frame []byte, queues int) genLoop {
	return func(stop *atomic.Bool, sent *atomic.Uint64) error {
		const chunk = 1 << 14
		for q := 0; !stop.Load(); q++ {
			if _, _, err := testRun(prog, frame, chunk, true, h.Ifindex, q%queues); err != nil {
				return fmt.Errorf("inject: %w", err)
			}
			sent.Add(chunk)
		}
		return nil
	}
}

// udpSender returns a generator sending payload from a socket bound to
// from to dst, 64 datagrams per sendmmsg (golang.org/x/net WriteBatch).
func udpSender(h *testbed.Host, from, dst netip.AddrPort, payload []byte) (genLoop, func(), error) {
	var c *net.UDPConn
	err := h.Do(func() (err error) {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(from))
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	pc := ipv4.NewPacketConn(c)
	if dst.Addr().Is6() {
		return nil, nil, errors.New("udpSender: IPv4 only")
	}
	msgs := make([]ipv4.Message, 64)
	to := net.UDPAddrFromAddrPort(dst)
	for i := range msgs {
		msgs[i] = ipv4.Message{Buffers: [][]byte{payload}, Addr: to}
	}
	gen := func(stop *atomic.Bool, sent *atomic.Uint64) error {
		for !stop.Load() {
			n, err := pc.WriteBatch(msgs, 0)
			if err != nil && !errors.Is(err, unix.ECONNREFUSED) && !errors.Is(err, unix.ENOBUFS) {
				return fmt.Errorf("sendmmsg: %w", err)
			}
			sent.Add(uint64(max(n, 0)))
		}
		return nil
	}
	return gen, func() { c.Close() }, nil
}

// xdpfabRx is an endpoint on a host of the bed with its AV and CQs (a
// stack.Stack) and the peers in its AV; loop receives on it.
type xdpfabRx struct {
	*stack.Stack
	want     fi.Addr // the first peer's fi_addr
	contexts int     // receive contexts
}

// openXdpfabRx opens a stack on h at local (copy mode, one queue, FI_SOURCE,
// a single-consumer receive CQ; adjust may change the attributes)
// and inserts peers into its AV, 65536 per call. Close it with Close.
func openXdpfabRx(dp *loader.Objects, h *testbed.Host, local netip.AddrPort, peers []netip.AddrPort, adjust func(*stack.Attr)) (*xdpfabRx, error) {
	attr := stack.Attr{
		AV:   &av.Attr{Count: len(peers), RxCtxBits: 2},
		TxCQ: cq.Attr{Size: 1024, Format: cq.FormatMsg},
		RxCQ: cq.Attr{Size: 4096, Format: cq.FormatMsg, SingleConsumer: true},
		EP: ep.Attr{Ifname: testbed.LinkName, Local: local,
			Caps: fi.Msg | fi.Source, BindMode: dataplane.BindCopy, Queues: 1},
		Do: h.Do,
	}
	if adjust != nil {
		adjust(&attr)
	}
	s, err := stack.Open(dp, attr)
	if err != nil {
		return nil, err
	}
	ids := make([]fi.Addr, len(peers))
	for off := 0; off < len(peers); off += 1 << 16 {
		end := min(len(peers), off+1<<16)
		if _, err := s.AV.Insert(peers[off:end], ids[off:end], 0, nil); err != nil {
			s.Close()
			return nil, err
		}
	}
	return &xdpfabRx{Stack: s, want: ids[0], contexts: max(1, attr.EP.RxContexts)}, nil
}

// loop is the application's receive loop with manual progress: read up to
// 64 completions with their sources, check each source, repost.
// check, when not nil, validates a source (several senders); otherwise
// every source must be x.want.
func (x *xdpfabRx) loop(multi bool, check func(fi.Addr) bool) rxLoop {
	return func(stop *atomic.Bool, got, bad *atomic.Uint64) error {
		const posted = 1024
		type slot struct {
			buf []byte
			ctx int
		}
		var slots []*slot
		for c := range x.contexts {
			n, size := posted/x.contexts, 256
			if multi {
				n, size = 2, 1<<20
			}
			for range n {
				slots = append(slots, &slot{buf: make([]byte, size), ctx: c})
			}
		}
		post := func(s *slot) error {
			for {
				var err error
				if multi {
					err = x.EP.Rx(s.ctx).RecvMsg(s.buf, fi.AddrUnspec, s, fi.MultiRecv)
				} else {
					err = x.EP.Rx(s.ctx).Recv(s.buf, fi.AddrUnspec, s)
				}
				if !errors.Is(err, fi.EAGAIN) {
					return err
				}
				x.EP.Progress()
			}
		}
		for _, s := range slots {
			if err := post(s); err != nil {
				return err
			}
		}
		defer func() {
			for _, s := range slots {
				x.EP.Rx(s.ctx).Cancel(s)
			}
			drainCQ(x.RxCQ)
		}()
		ents := make([]cq.Entry, 64)
		srcs := make([]fi.Addr, 64)
		for !stop.Load() {
			n, err := x.RxCQ.ReadFrom(ents, srcs)
			if err != nil && !errors.Is(err, fi.EAGAIN) {
				if errors.Is(err, fi.EAVAIL) {
					var e cq.ErrEntry
					x.RxCQ.ReadErr(&e)
					return fmt.Errorf("error completion: %v", e.Err)
				}
				return err
			}
			var b uint64
			for i := range n {
				if check != nil {
					if !check(srcs[i]) {
						b++
					}
				} else if srcs[i] != x.want {
					b++
				}
				if !multi || ents[i].Flags&fi.MultiRecv != 0 {
					if err := post(ents[i].OpContext.(*slot)); err != nil {
						return err
					}
				}
			}
			if n > 0 {
				got.Add(uint64(n))
				if b > 0 {
					bad.Add(b)
				}
			}
		}
		return nil
	}
}

func drainCQ(q *cq.CQ) {
	ents := make([]cq.Entry, 64)
	for range 1 << 20 {
		n, err := q.Read(ents)
		if errors.Is(err, fi.EAVAIL) {
			var e cq.ErrEntry
			q.ReadErr(&e)
			continue
		}
		if n == 0 {
			return
		}
	}
}

// udpReceiver is the Go peer: a UDP socket and a map from source address
// to an index. batch uses recvmmsg (golang.org/x/net ReadBatch, 64 per
// call); otherwise one ReadFromUDPAddrPort per datagram.
func udpReceiver(h *testbed.Host, local netip.AddrPort, peers []netip.AddrPort, batch bool) (rxLoop, func(), error) {
	var c *net.UDPConn
	err := h.Do(func() (err error) {
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(local))
		if err == nil {
			err = c.SetReadBuffer(4 << 20)
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	index := make(map[netip.AddrPort]uint32, len(peers))
	for i, p := range peers {
		index[p] = uint32(i)
	}
	want := peers[0]
	loop := func(stop *atomic.Bool, got, bad *atomic.Uint64) error {
		done := make(chan struct{})
		defer close(done)
		go func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(20 * time.Millisecond):
					if stop.Load() {
						c.SetReadDeadline(time.Now())
						return
					}
				}
			}
		}()
		defer c.SetReadDeadline(time.Time{})
		if batch {
			pc := ipv4.NewPacketConn(c)
			msgs := make([]ipv4.Message, 64)
			for i := range msgs {
				msgs[i].Buffers = [][]byte{make([]byte, 9000)}
			}
			for !stop.Load() {
				n, err := pc.ReadBatch(msgs, 0)
				if err != nil {
					if errors.Is(err, os.ErrDeadlineExceeded) {
						return nil
					}
					return err
				}
				var b uint64
				for _, m := range msgs[:n] {
					src := m.Addr.(*net.UDPAddr).AddrPort()
					src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
					if idx, ok := index[src]; !ok || (len(peers) == 1 && src != want) {
						b++
					} else {
						_ = idx
					}
				}
				got.Add(uint64(n))
				if b > 0 {
					bad.Add(b)
				}
			}
			return nil
		}
		buf := make([]byte, 9000) // a jumbo datagram whole (rxSizes)
		for !stop.Load() {
			_, src, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return nil
				}
				return err
			}
			src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
			if _, ok := index[src]; !ok {
				bad.Add(1)
			}
			got.Add(1)
		}
		return nil
	}
	return loop, func() { c.Close() }, nil
}

// asavieRx is github.com/asavie/xdp v0.3.3's receive loop (as in its
// dumpframes example: fill, poll, receive) behind the xdpfab XDP program,
// reading the fi_addr from the metadata xdpfab writes before each frame.
type asavieRx struct {
	xsk  *xdp.Socket
	want uint64
}

func openAsavie(dp *loader.Objects, h *testbed.Host, local netip.AddrPort, peer netip.AddrPort, slot uint32) (*asavieRx, *av.AV, error) {
	a, err := av.Open(dp, &av.Attr{Count: 1})
	if err != nil {
		return nil, nil, err
	}
	ids := []fi.Addr{0}
	if _, err := a.Insert([]netip.AddrPort{peer}, ids, 0, nil); err != nil {
		a.Close()
		return nil, nil, err
	}
	x := &asavieRx{want: uint64(ids[0])}
	opts := &xdp.SocketOptions{NumFrames: 4096, FrameSize: 4096, FillRingNumDescs: 2048,
		CompletionRingNumDescs: 64, RxRingNumDescs: 1024, TxRingNumDescs: 64}
	err = h.Do(func() (err error) {
		x.xsk, err = xdp.NewSocket(h.Ifindex, 0, opts)
		return err
	})
	if err != nil {
		a.Close()
		return nil, nil, fmt.Errorf("asavie socket: %w", err)
	}
	if err := dp.XSKs.Put(slot, uint32(x.xsk.FD())); err != nil {
		return nil, a, err
	}
	key := bpf.EPKey{Local: bpf.MakeAddr(local)}
	if err := xdptest.PutEndpoint(dp, key, bpf.EPVal{EpId: 0xfff0, AvId: a.ID(), XskBase: slot, RxCtxs: 1, Queues: 1}); err != nil {
		return nil, a, err
	}
	return x, a, nil
}

func (x *asavieRx) loop(stop *atomic.Bool, got, bad *atomic.Uint64) error {
	for !stop.Load() {
		if n := x.xsk.NumFreeFillSlots(); n > 0 {
			x.xsk.Fill(x.xsk.GetDescs(n))
		}
		numRx, _, err := x.xsk.Poll(20)
		if err != nil {
			return err
		}
		descs := x.xsk.Receive(numRx)
		var b uint64
		for _, d := range descs {
			meta := x.xsk.GetFrame(xdp.Desc{Addr: d.Addr, Len: wire.MetaLen}) // the descriptor's first bytes
			if binary.NativeEndian.Uint64(meta) != x.want {
				b++
			}
		}
		got.Add(uint64(len(descs)))
		if b > 0 {
			bad.Add(b)
		}
	}
	return nil
}

// dropRx counts what the drop-counting XDP program saw (its rate is the
// XDP_DROP ceiling of the interface under the user-space sender).
func dropRx(d *dropCounter) rxLoop {
	return func(stop *atomic.Bool, got, bad *atomic.Uint64) error {
		base := d.total()
		for !stop.Load() {
			time.Sleep(2 * time.Millisecond)
			got.Store(d.total() - base)
		}
		return nil
	}
}

// idleRx is the receiver of the injector's own ceiling: the injector's
// offered rate is the result.
func countSent(stop *atomic.Bool, got, bad *atomic.Uint64) error { return nil }

type rxCase struct {
	key, title string
}

var rxCases = []rxCase{
	{"xdpfab", "xdpfab endpoint, fi_recv per message"},
	{"xdpfab-multi", "xdpfab endpoint, FI_MULTI_RECV buffers"},
	{"udp-mmsg", "Go UDP socket, recvmmsg(64) + map"},
	{"udp", "Go UDP socket, one read per datagram + map"},
	{"asavie", "asavie/xdp v0.3.3 receive loop, xdpfab XDP program"},
	{"xdp-drop", "XDP_DROP (ceiling)"},
}

func runRxCapacity(r *results, cfg *config) error {
	bd, down, err := testbed.Up(testbed.Options{StaticNeighbors: true})
	if err != nil {
		return err
	}
	defer down()
	o := cfg.rateOpts()
	r.Setup["rx_window"], r.Setup["rx_warm"] = o.window.String(), o.warm.String()
	dp, err := loader.Load(loader.Config{AVEntries: 1 << 16, MaxAVs: 8})
	if err != nil {
		return err
	}
	defer dp.Close()
	from := netip.AddrPortFrom(bd.A.IPv4, senderPort)
	local := netip.AddrPortFrom(bd.B.IPv4, rxPort)
	payload := wirePayload(wire.Hdr{Op: wire.OpMsg}, make([]byte, payloadLen))
	frame := wire.Build(wire.Frame{SrcMAC: [6]byte(bd.A.MAC), DstMAC: [6]byte(bd.B.MAC), Src: from, Dst: local,
		Hdr: wire.Hdr{Op: wire.OpMsg}, Payload: make([]byte, payloadLen)})
	pass, err := retProgram(xdpPass)
	if err != nil {
		return err
	}
	defer pass.Close()
	drop, err := retProgram(xdpDrop)
	if err != nil {
		return err
	}
	defer drop.Close()
	send, closeSend, err := udpSender(bd.A, from, local, payload)
	if err != nil {
		return err
	}
	defer closeSend()
	peers := []netip.AddrPort{from}

	record := func(c rxCase, g string, vals []rate) {
		v := make([]float64, len(vals))
		off := make([]float64, len(vals))
		var bad uint64
		for i, x := range vals {
			v[i], off[i] = x.mpps, x.offered
			bad += x.bad
		}
		m := r.add("rx", "rx/"+g+"/"+c.key, "Mpps", v, map[string]string{"receiver": c.title, "load": g})
		om, _, _ := summarize(off)
		m.Extra = map[string]float64{"offered_mpps_median": om, "wrong_source": float64(bad)}
		fmt.Printf("  %-8s %-14s %6.3f Mpps (offered %.3f, min %.3f max %.3f, wrong source %d)\n", g, c.key, m.Median, om, m.Min, m.Max, bad)
	}
	measure := func(c rxCase, g string, rx rxLoop, gen genLoop, rxNS, genNS *testbed.NS) error {
		if !cfg.want(c.key) || g == "inject" && !liveFrames() {
			return nil
		}
		var vals []rate
		for range cfg.reps {
			ro := o
			ro.rxNS, ro.genNS = rxNS, genNS
			v, err := measureRate(cfg, ro, rx, gen)
			if err != nil {
				return fmt.Errorf("%s/%s: %w", g, c.key, err)
			}
			vals = append(vals, v)
		}
		record(c, g, vals)
		return nil
	}

	// Go UDP peers first, with no XDP program on the receiving interface
	// (what a Go user without xdpfab has).
	for _, c := range rxCases[2:4] {
		loop, closeRx, err := udpReceiver(bd.B, local, peers, c.key == "udp-mmsg")
		if err != nil {
			return err
		}
		err = measure(c, "inject", loop, injector(bd.B, pass, frame, 1), nil, bd.B.NS)
		if err == nil {
			err = measure(c, "sender", loop, send, nil, nil)
		}
		closeRx()
		if err != nil {
			return err
		}
	}

	// xdpfab: the program attached (it serves the sender's frames; the
	// injector runs it directly).
	var att *loader.Attachment
	if err := bd.B.Do(func() (err error) { att, err = dp.Attach(testbed.LinkName, loader.Native); return err }); err != nil {
		return err
	}
	for _, c := range rxCases[0:2] {
		x, err := openXdpfabRx(dp, bd.B, local, peers, nil)
		if err != nil {
			att.Close()
			return err
		}
		loop := x.loop(c.key == "xdpfab-multi", nil)
		err = measure(c, "inject", loop, injector(bd.B, dp.Program, frame, 1), nil, bd.B.NS)
		if err == nil {
			err = measure(c, "sender", loop, send, nil, nil)
		}
		if st, serr := x.EP.Stats(); serr == nil {
			r.note("rx", "%s endpoint socket statistics after the runs: rx_dropped %d, rx_ring_full %d, fill_ring_empty %d",
				c.key, st.RxDropped, st.RxRingFull, st.RxFillRingEmptyDescs)
		}
		x.Close()
		if err != nil {
			att.Close()
			return err
		}
	}
	att.Close()

	// XDP_DROP: the injector alone (its offered rate), and a counting drop
	// program attached under the sender.
	dc, err := newDropCounter()
	if err != nil {
		return err
	}
	defer dc.Close()
	var vals []rate
	for range cfg.reps {
		if !liveFrames() {
			break
		}
		ro := o
		ro.genNS = bd.B.NS
		v, err := measureRate(cfg, ro, countSent, injector(bd.B, drop, frame, 1))
		if err != nil {
			return err
		}
		v.mpps = v.offered
		vals = append(vals, v)
	}
	if len(vals) > 0 {
		record(rxCases[5], "inject", vals)
	} else {
		r.note("rx", "this kernel refuses live-frame test runs (EPERM): no in-kernel injector, the user-space sender only "+
			"(docs/platform.md#kernels-without-live-frames)")
	}
	var l interface{ Close() error }
	if err := bd.B.Do(func() (err error) { l, err = attachXDP(dc.prog, bd.B.Ifindex); return err }); err != nil {
		return err
	}
	err = measure(rxCases[5], "sender", dropRx(dc), send, nil, nil)
	l.Close()
	if err != nil {
		return err
	}

	// By message size at MTU 9000 (s2_sizes.go), on a bed of its own.
	if err := runRxSizes(r, cfg, measure); err != nil {
		return err
	}

	// asavie/xdp last, on a bed of its own: its Close leaves the rings
	// mapped, so its device queue stays bound for the life of the process.
	return runAsavie(r, cfg, measure)
}

func runAsavie(r *results, cfg *config, measure func(rxCase, string, rxLoop, genLoop, *testbed.NS, *testbed.NS) error) error {
	bd, down, err := testbed.Up(testbed.Options{StaticNeighbors: true})
	if err != nil {
		return err
	}
	defer down()
	dp, err := loader.Load(loader.Config{AVEntries: 1 << 12, MaxAVs: 4})
	if err != nil {
		return err
	}
	defer dp.Close()
	from := netip.AddrPortFrom(bd.A.IPv4, senderPort)
	local := netip.AddrPortFrom(bd.B.IPv4, rxPort)
	frame := wire.Build(wire.Frame{SrcMAC: [6]byte(bd.A.MAC), DstMAC: [6]byte(bd.B.MAC), Src: from, Dst: local,
		Hdr: wire.Hdr{Op: wire.OpMsg}, Payload: make([]byte, payloadLen)})
	send, closeSend, err := udpSender(bd.A, from, local, wirePayload(wire.Hdr{Op: wire.OpMsg}, make([]byte, payloadLen)))
	if err != nil {
		return err
	}
	defer closeSend()
	var att *loader.Attachment
	if err := bd.B.Do(func() (err error) { att, err = dp.Attach(testbed.LinkName, loader.Native); return err }); err != nil {
		return err
	}
	defer att.Close()
	x, a, err := openAsavie(dp, bd.B, local, from, 100)
	if a != nil {
		defer a.Close()
	}
	if err != nil {
		return err
	}
	defer func() {
		xdptest.DeleteEndpoint(dp, bpf.EPKey{Local: bpf.MakeAddr(local)})
		dp.XSKs.Delete(uint32(100))
		x.xsk.Close()
	}()
	c := rxCases[4]
	if err := measure(c, "inject", x.loop, injector(bd.B, dp.Program, frame, 1), nil, bd.B.NS); err != nil {
		return err
	}
	return measure(c, "sender", x.loop, send, nil, nil)
}
