package ep

import (
	"errors"
	"fmt"
	_ "unsafe" // go:linkname

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/wire"
)

// Trace is where an endpoint being measured (SetTrace) notes when its
// last message went through each stage of the data path, in nanoseconds of
// CLOCK_MONOTONIC (TraceNow's clock, the XDP program's bpf_ktime_get_ns
// and clock_gettime's: comparable across processes and namespaces of one
// host). With the application's own stamps (TraceNow before the send call
// and after the CQ read that returns the completion) they break one
// message's latency down:
//
//	send call -> TxRing -> (peer's XDP) -> Kicked
//	peer: XDP -> RxRing -> completion read
//
// In copy mode the kick is the system call in which the kernel transmits,
// and on veth the receiving side's XDP program usually runs inside it,
// before Kicked.
//
// The endpoint writes the fields from its progress, the application reads
// them: do both from one goroutine (manual progress; the bench's
// ping-pong), or synchronise. A field is 0 until its stage happened.
type Trace struct {
	// The last send that put a frame on the TX ring.
	TxRing int64 // the frame was on the TX ring (built, copied, posted)
	Kicked int64 // the kick after it returned (0 while FI_MORE deferred it)
	// The last frame taken off a receive ring.
	XDP    int64 // the receiving XDP program redirected it (the frame's stamp)
	RxRing int64 // progress found it on the RX ring
}

// nanotime is the runtime's CLOCK_MONOTONIC reading (vDSO), the clock
// under time.Now's monotonic reading without its per-process offset: one
// read costs what time.Now's monotonic half does, and a stamp needs
// nothing else.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// TraceNow is the time on the clock of Trace's stamps: CLOCK_MONOTONIC in
// nanoseconds, read without a system call.
func TraceNow() int64 { return nanotime() }

// SetTrace makes the endpoint note its stages in t (nil stops it) and asks
// the XDP program to stamp every frame it redirects to the endpoint
// (bpf.EPFStamp; see wire.MetaStamp), for measurement. Frames already on
// the way keep what they had. Call it while no other goroutine uses the
// endpoint. An endpoint whose table entry another process wrote (adopted:
// the agent's) cannot change it: EOPNOTSUPP.
//
// Untraced endpoints pay a nil check per send and per batch of received
// frames; the XDP program tests a byte of the entry it reads anyway.
func (e *Endpoint) SetTrace(t *Trace) error {
	if err := e.usable("ep trace"); err != nil {
		return err
	}
	if e.closed.Load() {
		return fmt.Errorf("ep trace: endpoint closed: %w", fi.EOPBADSTATE)
	}
	if !e.registered {
		return fmt.Errorf("ep trace: the endpoint table entry is another process's: %w", fi.EOPNOTSUPP)
	}
	unlock := e.dp.Lock()
	defer unlock()
	var v bpf.EPVal
	if err := e.dp.EP.Lookup(e.key, &v); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("ep trace: endpoint table entry gone: %w", fi.ENOENT)
		}
		return fmt.Errorf("ep trace: endpoint table: %w", err)
	}
	if t != nil {
		v.Flags |= bpf.EPFStamp
	} else {
		v.Flags &^= bpf.EPFStamp
	}
	if err := e.dp.PutEndpoint(e.key, v, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("ep trace: endpoint table: %w", err)
	}
	e.trace = t
	return nil
}

// traceTx notes a frame on the TX ring; the kick is still to come.
func (e *Endpoint) traceTx() {
	e.trace.TxRing, e.trace.Kicked = nanotime(), 0
}

// traceKick notes that the kick returned.
func (e *Endpoint) traceKick() { e.trace.Kicked = nanotime() }

// traceRx notes that progress took d, the last of a batch, off an RX ring,
// and the XDP program's stamp in its frame.
func (e *Endpoint) traceRx(d dataplane.Desc) {
	now := nanotime()
	e.trace.RxRing, e.trace.XDP = now, 0
	if m, ok := wire.ParseMeta(e.umem.Meta(d.Addr, wire.MetaLen)); ok {
		if ns, ok := wire.Stamp(e.umem.Packet(d), m); ok {
			e.trace.XDP = ns
		}
	}
}
