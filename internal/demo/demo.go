// Package demo is `xdpfab demo`: a self-contained run of the whole
// dataplane between two network namespaces it creates and removes. Host B
// runs an echo server, host A a ping-pong client; both see every message's
// sender as the fi_addr (A) or user ID (B) the XDP program computed.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/netlab"
	"github.com/xdpfab/xdpfab/internal/pingpong"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/stack"
)

// Options shape a run.
type Options struct {
	Messages int  // ping-pongs (default 10000)
	Size     int  // payload bytes (default 64)
	IPv6     bool // over IPv6 instead of IPv4
	Generic  bool // generic XDP instead of native
}

const port = 7000

// Run runs the demo, writing its report to w.
func Run(ctx context.Context, w io.Writer, o Options) error {
	if o.Messages <= 0 {
		o.Messages = 10000
	}
	if o.Size <= 0 {
		o.Size = 64
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root: it creates network namespaces and loads XDP programs " +
			"(CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_BPF); run it as root, e.g. sudo make demo")
	}
	dp, err := loader.Load(loader.Config{AVEntries: 4096, MaxAVs: 8})
	if err != nil {
		return fmt.Errorf("this machine cannot load the XDP program: %w", err)
	}
	defer dp.Close()
	bed, down, err := netlab.Up(netlab.Options{}) // neighbours resolve by ARP/NDP, as in production
	if err != nil {
		return fmt.Errorf("create the network namespaces: %w", err)
	}
	defer func() {
		down()
		fmt.Fprintf(w, "\nremoved namespaces %s-a and %s-b\n", bed.Name, bed.Name)
	}()
	mode := loader.Native
	if o.Generic {
		mode = loader.Generic
	}
	fmt.Fprintf(w, "xdpfab demo: namespaces %s-a (%s) and %s-b (%s) joined by veth, XDP in %s mode\n",
		bed.Name, bed.A.Addr(o.IPv6), bed.Name, bed.B.Addr(o.IPv6), mode)

	a, b := &host{h: bed.A}, &host{h: bed.B}
	for _, x := range []*host{a, b} {
		x.local = netip.AddrPortFrom(x.h.Addr(o.IPv6), port)
		defer x.close() // also what a failed open left
		if err := x.open(dp, mode, x == b); err != nil {
			return err
		}
	}
	// Some other peers first, so the indices are not all 0.
	a.AV.Insert([]netip.AddrPort{netip.MustParseAddrPort("198.19.0.1:7000"), netip.MustParseAddrPort("198.19.0.2:7000")}, nil, 0, nil)
	bAtA := insert(a.AV, b.local)
	aAtB := insert(b.AV, a.local)
	if err := b.AV.SetUserID(aAtB, 0xa11ce, 0); err != nil {
		return err
	}
	fmt.Fprintf(w, "A's AV: %v -> fi_addr %d      B's AV (FI_AV_USER_ID): %v -> fi_addr %d, user ID %#x\n\n",
		b.local, bAtA, a.local, aAtB, 0xa11ce)

	// B echoes every message back to its sender.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var seenB []row
	var wg sync.WaitGroup
	srvErr := make(chan error, 1)
	wg.Go(func() {
		srvErr <- b.echo(ctx, aAtB, o.Messages, &seenB)
	})
	rtts, seenA, err := a.ping(ctx, bAtA, o.Messages, o.Size)
	cancel()
	wg.Wait()
	if err != nil {
		return err
	}
	if err := <-srvErr; err != nil {
		return err
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "host\tmsg\tfrom\tbytes\tsource as reported\t")
	for _, r := range append(seenB, seenA...) {
		fmt.Fprintf(tw, "%s\t%d\t%v\t%d\t%s\t\n", r.host, r.seq, r.from, r.len, r.src)
	}
	tw.Flush()
	slices.Sort(rtts)
	half := func(q float64) time.Duration { return rtts[int(q*float64(len(rtts)-1))] / 2 }
	fmt.Fprintf(w, "\n%d ping-pongs of %d B: latency per transfer (round trip / 2) p50 %v, p99 %v, max %v\n",
		o.Messages, o.Size, half(0.50), half(0.99), half(1))
	c, _ := dp.Counters()
	fmt.Fprintf(w, "XDP counters: rx %d, translated %d, unknown source %d, passed to the kernel %d, malformed %d\n",
		c[bpf.CounterRX], c[bpf.CounterTranslated], c[bpf.CounterUnknown], c[bpf.CounterPass], c[bpf.CounterMalformed])
	return nil
}

type row struct {
	host string
	seq  int
	from netip.AddrPort
	len  int
	src  string
}

type host struct {
	h     *netlab.Host
	local netip.AddrPort
	*stack.Stack
	att *loader.Attachment
}

func (x *host) open(dp *loader.Objects, mode loader.Mode, userIDs bool) error {
	attr := av.Attr{}
	if userIDs {
		attr.Flags = fi.AVUserID
	}
	err := x.h.Do(func() (err error) {
		if x.att, err = dp.Attach(netlab.LinkName, mode); err != nil {
			return fmt.Errorf("attach XDP on %s: %w", x.h.Name(), err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	x.Stack, err = stack.Open(dp, stack.Attr{
		AV:   &attr,
		TxCQ: cq.Attr{Size: 1024, Format: cq.FormatMsg},
		RxCQ: cq.Attr{Size: 1024, Format: cq.FormatMsg},
		EP:   ep.Attr{Ifname: netlab.LinkName, Local: x.local, Caps: fi.Msg | fi.Source, BindMode: dataplane.BindCopy},
		Do:   x.h.Do,
	})
	return err
}

func (x *host) close() {
	x.Stack.Close()
	if x.att != nil {
		x.att.Close()
	}
}

func insert(a *av.AV, p netip.AddrPort) fi.Addr {
	out := []fi.Addr{fi.AddrNotAvail}
	a.Insert([]netip.AddrPort{p}, out, 0, nil)
	return out[0]
}

// wait is pingpong.Wait with an error completion as an error.
func wait(ctx context.Context, q *cq.CQ) (cq.Entry, fi.Addr, error) {
	e, src, ee, err := pingpong.Wait(ctx, q)
	if err == nil && ee != nil {
		err = fmt.Errorf("error completion: %w", ee.Err)
	}
	return e, src, err
}

func sendRetry(ctx context.Context, e *ep.Endpoint, buf []byte, to fi.Addr) error {
	for {
		err := e.Send(buf, to, nil)
		if !errors.Is(err, fi.EAGAIN) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		e.Progress()
	}
}

func (x *host) ping(ctx context.Context, to fi.Addr, n, size int) ([]time.Duration, []row, error) {
	msg, buf := make([]byte, size), make([]byte, 65536)
	rtts := make([]time.Duration, 0, n)
	var seen []row
	for i := range n {
		if err := x.EP.Recv(buf, fi.AddrUnspec, nil); err != nil {
			return nil, nil, err
		}
		t0 := time.Now()
		if err := sendRetry(ctx, x.EP, msg, to); err != nil {
			return nil, nil, err
		}
		e, src, err := wait(ctx, x.RxCQ)
		if err != nil {
			return nil, nil, fmt.Errorf("host A, message %d: %w", i, err)
		}
		rtts = append(rtts, time.Since(t0))
		if _, _, err := wait(ctx, x.TxCQ); err != nil {
			return nil, nil, err
		}
		if len(seen) < 3 {
			peer, _ := x.AV.LookupAddr(src)
			seen = append(seen, row{"A", i, peer, e.Len, fmt.Sprintf("fi_addr %d", src)})
		}
	}
	return rtts, seen, nil
}

func (x *host) echo(ctx context.Context, to fi.Addr, n int, seen *[]row) error {
	buf := make([]byte, 65536)
	for i := range n {
		if err := x.EP.Recv(buf, fi.AddrUnspec, nil); err != nil {
			return err
		}
		e, src, err := wait(ctx, x.RxCQ)
		if err != nil {
			return fmt.Errorf("host B, message %d: %w", i, err)
		}
		if len(*seen) < 3 {
			peer, _ := x.AV.LookupAddr(to)
			*seen = append(*seen, row{"B", i, peer, e.Len, fmt.Sprintf("user ID %#x", uint64(src))})
		}
		if err := sendRetry(ctx, x.EP, buf[:e.Len], to); err != nil {
			return err
		}
		if _, _, err := wait(ctx, x.TxCQ); err != nil {
			return err
		}
	}
	return nil
}
