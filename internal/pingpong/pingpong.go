// Package pingpong is `xdpfab pingpong`: a server and a client exchanging
// messages over xdpfab endpoints, reporting like libfabric's fi_pingpong so
// the two can be compared line by line.
//
// fi_pingpong counts a ping-pong as two transfers and reports usec/xfer =
// elapsed / (iterations * 2); so does this, and adds three columns
// fi_pingpong lacks: the p50, p99 and p99.9 of the per-iteration half round
// trips, so the tail shows beside the mean. The server learns the client
// from its first message: with FI_SOURCE_ERR the unknown sender arrives as
// an EADDRNOTAVAIL completion whose err_data is inserted into the AV.
package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
	"github.com/xdpfab/xdpfab/stack"
)

// Options of a run.
type Options struct {
	Iface    string
	Local    netip.AddrPort
	Peer     netip.AddrPort // client only
	Sizes    []int
	Iters    int
	Warmup   int
	BusyPoll time.Duration
	Mode     loader.Mode
	// PinRoot of a running agent's dataplane; empty or missing: a private
	// dataplane attached for the run.
	PinRoot string
	// Via says how to get the endpoint: ViaAgent through the agent's
	// control socket Socket (no privilege needed: the endpoint is in the
	// caller's sharing domain, so several servers share an interface),
	// ViaDirect in the process (root), ViaAuto through the agent when it
	// answers on Socket, else directly.
	Via    Via
	Socket string
}

// Via is how a run gets its endpoint (Options.Via).
type Via int

// Ways to get the endpoint.
const (
	ViaAuto Via = iota
	ViaAgent
	ViaDirect
)

// session is one side's objects.
type session struct {
	dp  *loader.Objects
	att *loader.Attachment
	*stack.Stack
	agent *agentSession // through the agent: Stack's AV, TxCQ, RxCQ and EP are set, the rest nil
}

// One goroutine makes every call on a session's endpoint and CQs (its
// reads progress the endpoint, which writes the completions): the
// endpoint and CQs take no locks (ep.Attr.Threading, cq.Attr.Single*).
var cqAttr = cq.Attr{Size: 1024, Format: cq.FormatMsg, SingleProducer: true, SingleConsumer: true}

func open(o Options, server bool) (*session, error) {
	switch o.Via {
	case ViaAgent:
		return openAgent(o, server)
	case ViaAuto:
		if s, err := openAgent(o, server); err == nil || !errors.Is(err, errNoAgent) {
			return s, err
		}
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("pingpong needs root (CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW) for its endpoint, or an agent (no agent answers on %s): %w", o.Socket, fi.EPERM)
	}
	s := &session{}
	cfg := loader.Config{}
	if o.PinRoot != "" {
		if ok, _ := loader.IsBPFFS(o.PinRoot); ok {
			if _, err := os.Stat(filepath.Join(o.PinRoot, "maps")); err == nil {
				cfg.PinRoot = o.PinRoot // share the agent's dataplane
			}
		}
	}
	var err error
	if s.dp, err = loader.Load(cfg); err != nil {
		return nil, err
	}
	// An agent's program is already attached: use it as it is.
	if !s.dp.AttachedPinned(o.Iface) {
		if s.att, err = s.dp.Attach(o.Iface, o.Mode); err != nil {
			s.close()
			return nil, err
		}
	}
	caps := fi.Msg | fi.Source
	if server {
		caps |= fi.SourceErr
	}
	s.Stack, err = stack.Open(s.dp, stack.Attr{
		AV:   &av.Attr{Type: av.TypeTable},
		TxCQ: cqAttr,
		RxCQ: cqAttr,
		EP:   ep.Attr{Ifname: o.Iface, Local: o.Local, Caps: caps, BusyPoll: o.BusyPoll, Threading: fi.ThreadDomain},
	})
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *session) close() {
	if s.agent != nil {
		s.agent.close(s)
		return
	}
	s.Stack.Close()
	if s.att != nil {
		s.att.Close()
	}
	if s.dp != nil {
		s.dp.Close()
	}
}

// Wait spins on q until a completion (manual progress: the read drives the
// endpoint) or ctx ends. An error completion comes back as *cq.ErrEntry.
func Wait(ctx context.Context, q *cq.CQ) (cq.Entry, fi.Addr, *cq.ErrEntry, error) {
	return WaitUntil(ctx, q, time.Time{})
}

// WaitUntil is Wait giving up at deadline (zero: never) with fi.ETIMEDOUT.
func WaitUntil(ctx context.Context, q *cq.CQ, deadline time.Time) (cq.Entry, fi.Addr, *cq.ErrEntry, error) {
	var e [1]cq.Entry
	var src [1]fi.Addr
	for i := 0; ; i++ {
		n, err := q.ReadFrom(e[:], src[:])
		if n == 1 {
			return e[0], src[0], nil, nil
		}
		// An empty CQ answers the bare fi.EAGAIN: one comparison per
		// empty poll, where two errors.Is walks were a quarter of the
		// loop's time in a profile of the client.
		if err != fi.EAGAIN {
			if errors.Is(err, fi.EAVAIL) {
				ee := &cq.ErrEntry{ErrData: make([]byte, 64)}
				if err := q.ReadErr(ee); err != nil {
					return cq.Entry{}, 0, nil, err
				}
				return cq.Entry{}, fi.AddrNotAvail, ee, nil
			}
			if !errors.Is(err, fi.EAGAIN) {
				return cq.Entry{}, 0, nil, err
			}
		}
		if i&4095 == 0 {
			if ctx.Err() != nil {
				return cq.Entry{}, 0, nil, ctx.Err()
			}
			if !deadline.IsZero() && time.Now().After(deadline) {
				return cq.Entry{}, 0, nil, fmt.Errorf("no reply within %v: %w", DefaultTimeout, fi.ETIMEDOUT)
			}
		}
	}
}

func send(ctx context.Context, s *session, buf []byte, to fi.Addr) error {
	for i := 0; ; i++ {
		err := s.EP.Inject(buf, to)
		if !errors.Is(err, fi.EAGAIN) {
			return err
		}
		if i&4095 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		s.EP.Progress()
	}
}

// Server echoes every message back to its sender until ctx ends. Each
// size of the client's run is a stream of Warmup+Iters messages.
func Server(ctx context.Context, w io.Writer, o Options) error {
	s, err := open(o, true)
	if err != nil {
		return err
	}
	defer s.close()
	fmt.Fprintf(w, "xdpfab pingpong server on %s (%s), waiting for a client\n", o.Local, o.Iface)
	buf := make([]byte, s.EP.MaxMsgSize())
	peers := map[string]fi.Addr{}
	for {
		if err := s.EP.Recv(buf, fi.AddrUnspec, nil); err != nil {
			return err
		}
		e, src, ee, err := Wait(ctx, s.RxCQ)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if ee != nil {
			if ee.Err != fi.EADDRNOTAVAIL {
				return fmt.Errorf("receive: %w", ee.Err)
			}
			// A new client: insert its address as the completion gave it.
			if to, ok := peers[string(ee.ErrData)]; ok {
				src = to
			} else {
				ap, err := fi.DecodeSockaddr(ee.ErrData)
				if err != nil {
					return err
				}
				to, err := s.insert(ap)
				if err != nil {
					return err
				}
				fmt.Fprintf(w, "client %s is fi_addr %d\n", ap, to)
				peers[string(ee.ErrData)], src = to, to
			}
			e.Len = ee.Len
		}
		if err := send(ctx, s, buf[:e.Len], src); err != nil {
			return err
		}
	}
}

// DefaultSizes are fi_pingpong's default message sizes (fabtests'
// FT_DEFAULT_SIZE set). Like fi_pingpong, a run without Sizes uses those
// that fit the endpoint's largest message: 64, 256 and 1k on an IPv4
// endpoint at MTU 1500 (1440-byte messages).
var DefaultSizes = []int{64, 256, 1 << 10, 4 << 10, 64 << 10, 1 << 20}

// MaxIters bounds Options.Iters and Options.Warmup: the client keeps the
// time of every timed iteration of a size (8 bytes each) for the
// percentiles, so 10^8 of them hold 800 MB at the end of a size.
const MaxIters = 100_000_000

// Client runs Warmup+Iters ping-pongs per size and prints one line per
// size in fi_pingpong's format. Options.Sizes nil runs the DefaultSizes
// that fit, saying which were left out; a given size that does not fit is
// reported as skipped. Iters is 1 to MaxIters, Warmup 0 to MaxIters, else
// EINVAL before anything is opened.
func Client(ctx context.Context, w io.Writer, o Options) error {
	if o.Iters < 1 || o.Iters > MaxIters || o.Warmup < 0 || o.Warmup > MaxIters {
		return fmt.Errorf("pingpong: %d iterations, %d warmup iterations: want at least 1 and 0, at most %d each "+
			"(the time of each timed iteration is kept for the percentiles): %w", o.Iters, o.Warmup, MaxIters, fi.EINVAL)
	}
	s, err := open(o, false)
	if err != nil {
		return err
	}
	defer s.close()
	peer, err := s.insert(o.Peer)
	if err != nil {
		return err
	}
	maxMsg := s.EP.MaxMsgSize()
	buf := make([]byte, maxMsg)
	sizes := o.Sizes
	if sizes == nil {
		var left []string
		for _, n := range DefaultSizes {
			if n <= maxMsg {
				sizes = append(sizes, n)
			} else {
				left = append(left, SizeStr(int64(n)))
			}
		}
		if len(left) > 0 {
			fmt.Fprintf(w, "# default sizes above the endpoint's %d-byte messages left out: %s\n", maxMsg, strings.Join(left, ", "))
		}
	}
	fmt.Fprint(w, Header())
	// Room for the samples grows with the run, not with what it asked for.
	// The room is written now: the timed loop's first write to each of its
	// pages would take a page fault (microseconds in a VM) and count it.
	halves := make([]time.Duration, min(o.Iters, 1<<16))
	clear(halves)
	for _, size := range sizes {
		if size > maxMsg {
			fmt.Fprintf(w, "%-8s(larger than the endpoint's %d-byte messages: skipped)\n", SizeStr(int64(size)), maxMsg)
			continue
		}
		msg := make([]byte, size)
		halves = halves[:0]
		var start time.Time
		for i := range o.Warmup + o.Iters {
			if i == o.Warmup {
				start = time.Now()
			}
			if err := s.EP.Recv(buf, fi.AddrUnspec, nil); err != nil {
				return err
			}
			t0 := time.Now()
			if err := send(ctx, s, msg, peer); err != nil {
				return err
			}
			if _, _, ee, err := WaitUntil(ctx, s.RxCQ, t0.Add(DefaultTimeout)); err != nil || ee != nil {
				if err == nil {
					err = ee.Err
				}
				return fmt.Errorf("message %d of %d bytes: %w", i, size, err)
			}
			if i >= o.Warmup {
				halves = append(halves, time.Since(t0)/2)
			}
		}
		fmt.Fprint(w, Line(size, o.Iters, time.Since(start), PercentilesOf(halves)))
	}
	return nil
}

// DefaultTimeout is how long the client waits for the server's reply to
// one message before it gives up (fi.ETIMEDOUT): a server that went away
// must not leave the client spinning.
const DefaultTimeout = 5 * time.Second

// Header is fi_pingpong's header line, then the percentile columns.
func Header() string {
	return fmt.Sprintf("%-8s%-8s%-8s%8s %10s%13s%13s%11s%11s%11s\n", "bytes", "iters", "total", "time", "MB/sec", "usec/xfer", "Mxfers/sec",
		"p50 usec", "p99 usec", "p99.9 usec")
}

// Percentiles are the p50, p99 and p99.9 of a run's per-iteration half
// round trips (one transfer, as usec/xfer counts it).
type Percentiles struct {
	P50, P99, P999 time.Duration
}

// PercentilesOf sorts halves, the half round trips of a run's timed
// iterations, and returns their percentiles: the nearest-rank sample, the
// smallest that at least that fraction of the samples do not exceed. No
// samples give zeros.
func PercentilesOf(halves []time.Duration) Percentiles {
	slices.Sort(halves)
	at := func(q float64) time.Duration {
		if len(halves) == 0 {
			return 0
		}
		i := int(math.Ceil(q*float64(len(halves)))) - 1
		return halves[max(0, min(i, len(halves)-1))]
	}
	return Percentiles{P50: at(0.5), P99: at(0.99), P999: at(0.999)}
}

// Line is fi_pingpong's line for iters ping-pongs of size bytes that took
// elapsed: two transfers per iteration; total counts the bytes of both;
// MB/sec is bytes per microsecond (10^6 bytes a second), usec/xfer is
// elapsed / (iters x 2), both from whole microseconds, as fabtests'
// show_perf reports them. The percentiles p follow in microseconds with
// two decimals.
func Line(size, iters int, elapsed time.Duration, p Percentiles) string {
	usec := elapsed.Microseconds()
	if usec < 1 {
		usec = 1
	}
	xfers := int64(iters) * 2
	total := int64(size) * xfers
	perXfer := float64(usec) / float64(xfers)
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	return fmt.Sprintf("%-8s%-8s%-8s%8.2fs%10.2f%11.2f%11.2f%11.2f%11.2f%11.2f\n", SizeStr(int64(size)), CountStr(int64(iters)), SizeStr(total),
		float64(usec)/1e6, float64(total)/float64(usec), perXfer, 1/perXfer, us(p.P50), us(p.P99), us(p.P999))
}

// SizeStr formats a byte count as fabtests' size_str does: binary units
// (k = 1024, m, g), one truncated decimal only below 10 of the unit and
// only when it is not 0: 64, 1k, 1.5k, 62k, 9.9m.
func SizeStr(v int64) string {
	base, unit := int64(1), ""
	switch {
	case v >= 1<<30:
		base, unit = 1<<30, "g"
	case v >= 1<<20:
		base, unit = 1<<20, "m"
	case v >= 1<<10:
		base, unit = 1<<10, "k"
	}
	whole := v / base
	if tenth := v % base * 10 / base; whole < 10 && tenth != 0 {
		return fmt.Sprintf("%d.%d%s", whole, tenth, unit)
	}
	return fmt.Sprintf("%d%s", whole, unit)
}

// CountStr formats an iteration count as fabtests' cnt_str does: decimal
// units (k = 1000, m, b) truncated to whole numbers: 500, 10k, 1m.
func CountStr(v int64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%db", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%dm", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%dk", v/1e3)
	}
	return fmt.Sprint(v)
}
