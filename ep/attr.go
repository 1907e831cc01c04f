package ep

import (
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
)

// ProgressMode selects who drives the endpoint (fi_domain(3) progress).
type ProgressMode int

// Progress modes.
const (
	// ProgressManual: the application's CQ reads poll the sockets.
	ProgressManual ProgressMode = iota
	// ProgressAuto: a goroutine of the endpoint polls them.
	ProgressAuto
)

// Attr configures an endpoint.
type Attr struct {
	// Ifname is the interface, in the opening thread's network namespace.
	Ifname string
	// Local is the address and UDP port to receive on. An unspecified
	// address (0.0.0.0 or ::) receives on every address of its family.
	Local netip.AddrPort
	// Name, when set, is the address to bind to as a raw sockaddr_in or
	// sockaddr_in6 (what fi_setname takes, and what GetName of a peer's
	// endpoint returns), in place of Local; with both set they must agree.
	Name []byte
	// AV resolves destinations and names sources.
	AV *av.AV
	// TxCQ receives send completions; RxCQ receive completions (of every
	// receive context unless RxCQs gives one per context).
	TxCQ, RxCQ *cq.CQ
	RxCQs      []*cq.CQ
	// Caps: fi.Msg and fi.Tagged (default both), fi.Source, fi.SourceErr,
	// fi.DirectedRecv.
	Caps fi.Flags
	// DropUnknown makes the XDP program drop datagrams from sources not
	// in the AV (counted in the dataplane counters) instead of delivering
	// them with FI_ADDR_NOTAVAIL.
	DropUnknown bool
	// RxContexts is the number of receive contexts (default 1).
	RxContexts int
	// FirstQueue and Queues are the rx queues to listen on, FirstQueue ..
	// FirstQueue+Queues-1 (default: from FirstQueue to the interface's
	// last rx queue). Sends go out on FirstQueue.
	FirstQueue, Queues int
	// OpFlags: fi.InjectComplete reports sends once the data is copied
	// into the socket's memory; the default, fi.TransmitComplete, once
	// the kernel has sent the frame. fi.Completion makes the operations
	// without a flags argument (Send, Recv, ...) report success on a
	// selective-completion CQ.
	OpFlags fi.Flags
	// SelectiveCompletion binds the CQs with FI_SELECTIVE_COMPLETION
	// (fi_ep_bind): fi.Transmit for the transmit CQ, fi.Recv for the
	// receive CQs. An operation on such a CQ reports its success only with
	// fi.Completion (SendMsg, RecvMsg, ... flags; OpFlags for the others);
	// errors (truncation, cancellation, unknown sources with
	// FI_SOURCE_ERR) are always reported, and FI_INJECT sends never report.
	SelectiveCompletion fi.Flags
	// AuthKey, an auth-key handle of the AV, enables the endpoint with
	// that key: it only knows peers bound to it and sends it on the wire.
	AuthKey fi.Addr
	// Progress mode (default manual).
	Progress ProgressMode
	// Threading is the threading model the application keeps (default
	// fi.ThreadSafe). With fi.ThreadDomain and manual progress the
	// application promises to serialize every call on the endpoints of
	// one domain (fi_domain(3)'s scope): this endpoint, and with a
	// SerialGroup every endpoint opened with the same one, their CQs'
	// reads, and their opens and closes. The endpoint then takes no lock
	// on its data path. Endpoints of this process on one interface (the
	// same network namespace and FirstQueue) share a device, so one that
	// runs without locks takes the device for its domain: another
	// endpoint on it must be of the same SerialGroup, else it is refused
	// (EBUSY); an endpoint asking for fi.ThreadDomain on a device other
	// endpoints opened thread safe joins them, thread safe. Every other
	// model is served thread safe (a stricter model than asked for).
	// Endpoint.Threading reports the one provided. A CQ read progresses
	// every endpoint bound to it: bind the CQs of such an endpoint only to
	// endpoints of its serial group (nothing checks it).
	Threading fi.Threading
	// SerialGroup names the domain of a fi.ThreadDomain endpoint (nil:
	// the endpoint alone); EINVAL with another model.
	SerialGroup *SerialGroup
	// Frames in the UMEM (default 4096) and ring sizes (default 1024).
	Frames, RingSize int
	// MaxPosted bounds posted receives per context (default 1024).
	MaxPosted int
	// MinMultiRecv: a multi-receive buffer is released once less than
	// this many bytes remain (default: the largest message).
	MinMultiRecv int
	// BusyPoll enables socket busy polling (see dataplane.SocketConfig).
	BusyPoll time.Duration
	// BindMode of the sockets (default: zero-copy where the driver has it).
	BindMode dataplane.BindMode
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// OwnerPID and OwnerStart name the process the endpoint belongs to
	// (pid and start time, as field 22 of /proc/PID/stat), recorded in the
	// endpoint table so that the agent removes the entry once that process
	// is gone. Zero: the calling process. The agent sets them to its
	// client's for endpoints it prepares.
	OwnerPID   int
	OwnerStart uint64
	// Charged and ChargedUID record in the endpoint table that the agent
	// counted the endpoint against uid ChargedUID's quotas, so that an
	// agent that restarts while the endpoint lives charges it again
	// (bpf.EPFCharged). The agent sets them for endpoints it prepares;
	// Open refuses Charged (EINVAL).
	Charged    bool
	ChargedUID uint32
	// XSKBelow and XSKFrom place the endpoint's XSKMAP slots (one per
	// receive context and queue, a run of adjacent slots): below XSKBelow
	// when it is set (0: anywhere in the map), searched from XSKFrom up,
	// then from 0. The agent keeps the endpoints of uids other than root
	// below their share of the map and puts root's above it first, so
	// that holes they leave cannot keep root from a long run.
	XSKBelow, XSKFrom uint32
}

// Upper bounds of Attr's sizes, checked before anything is allocated.
const (
	// MaxQueues bounds Attr.Queues (and the interface's queue count must
	// hold them too).
	MaxQueues = 256
	// MaxFrames bounds Attr.Frames: 1<<20 frames of 4 KiB are 4 GiB of
	// UMEM.
	MaxFrames = 1 << 20
	// MaxRingSize bounds Attr.RingSize.
	MaxRingSize = 1 << 16
	// MaxPostedLimit bounds Attr.MaxPosted.
	MaxPostedLimit = 1 << 20
)

const epCaps = fi.Msg | fi.Tagged | fi.Source | fi.SourceErr | fi.DirectedRecv | fi.Send | fi.Recv

// validate checks attributes for Open and Adopt, which run a data path.
func (a *Attr) validate() error {
	if a.TxCQ == nil || (a.RxCQ == nil && len(a.RxCQs) == 0) {
		return fmt.Errorf("ep open: transmit and receive completion queues are required: %w", fi.ENOCQ)
	}
	if len(a.RxCQs) > 0 && len(a.RxCQs) != max(a.RxContexts, 1) {
		return fmt.Errorf("ep open: %d receive CQs for %d contexts: %w", len(a.RxCQs), max(a.RxContexts, 1), fi.EINVAL)
	}
	return a.validateKernel()
}

// validateKernel checks what the kernel objects of an endpoint need
// (Prepare: no CQs there).
func (a *Attr) validateKernel() error {
	if a.Name != nil {
		ap, err := parseName(a.Name)
		switch {
		case err != nil:
			return fmt.Errorf("ep open: name: %w", err)
		case a.Local.IsValid() && a.Local != ap:
			return fmt.Errorf("ep open: name %v and local %v differ: %w", ap, a.Local, fi.EINVAL)
		}
		a.Local = ap
	}
	switch {
	case a.AV == nil:
		return fmt.Errorf("ep open: no address vector: %w", fi.ENOAV)
	case a.Ifname == "":
		return fmt.Errorf("ep open: no interface: %w", fi.EINVAL)
	case !a.Local.IsValid() || a.Local.Port() == 0:
		return fmt.Errorf("ep open: local address %v needs a port: %w", a.Local, fi.EINVAL)
	case a.Caps&^epCaps != 0:
		return fmt.Errorf("ep open: capabilities %v not supported: %w", a.Caps&^epCaps, fi.EINVAL)
	case a.Caps&fi.SourceErr != 0 && a.Caps&fi.Source == 0:
		return fmt.Errorf("ep open: FI_SOURCE_ERR requires FI_SOURCE: %w", fi.EINVAL)
	case a.Caps&fi.SourceErr != 0 && a.DropUnknown:
		return fmt.Errorf("ep open: FI_SOURCE_ERR and DropUnknown conflict: %w", fi.EINVAL)
	case a.OwnerPID < 0 || a.OwnerPID > 1<<22:
		return fmt.Errorf("ep open: owner pid %d: %w", a.OwnerPID, fi.EINVAL)
	case a.RxContexts < 0 || a.RxContexts > 256:
		return fmt.Errorf("ep open: %d receive contexts (1..256): %w", a.RxContexts, fi.EINVAL)
	case a.Queues < 0 || a.FirstQueue < 0 || a.Frames < 0 || a.RingSize < 0 || a.MaxPosted < 0 || a.MinMultiRecv < 0:
		return fmt.Errorf("ep open: negative size: %w", fi.EINVAL)
	case a.Queues > MaxQueues || a.FirstQueue >= MaxQueues:
		return fmt.Errorf("ep open: queues %d+%d, at most %d: %w", a.FirstQueue, a.Queues, MaxQueues, fi.EINVAL)
	case a.Frames > MaxFrames:
		return fmt.Errorf("ep open: %d frames, at most %d: %w", a.Frames, MaxFrames, fi.EINVAL)
	case a.RingSize > MaxRingSize:
		return fmt.Errorf("ep open: ring size %d, at most %d: %w", a.RingSize, MaxRingSize, fi.EINVAL)
	case a.MaxPosted > MaxPostedLimit:
		return fmt.Errorf("ep open: %d posted receives, at most %d: %w", a.MaxPosted, MaxPostedLimit, fi.EINVAL)
	case a.OpFlags&^(fi.InjectComplete|fi.TransmitComplete|fi.Completion) != 0:
		return fmt.Errorf("ep open: op flags %v: %w", a.OpFlags, fi.EINVAL)
	case a.SelectiveCompletion&^(fi.Transmit|fi.Recv) != 0:
		return fmt.Errorf("ep open: selective completion %v: want fi.Transmit and/or fi.Recv: %w", a.SelectiveCompletion, fi.EINVAL)
	case a.Progress != ProgressManual && a.Progress != ProgressAuto:
		return fmt.Errorf("ep open: progress mode %d: %w", a.Progress, fi.EINVAL)
	case a.Threading < fi.ThreadUnspec || a.Threading > fi.ThreadEndpoint:
		return fmt.Errorf("ep open: threading model %v: %w", a.Threading, fi.EINVAL)
	case a.SerialGroup != nil && a.Threading != fi.ThreadDomain:
		return fmt.Errorf("ep open: a serial group with threading model %v, not %v: %w", a.Threading, fi.ThreadDomain, fi.EINVAL)
	}
	if a.Local.Addr().Zone() != "" {
		return fmt.Errorf("ep open: zoned local address %v: %w", a.Local, fi.EINVAL)
	}
	if bits := a.AV.Attr().RxCtxBits; a.RxContexts > 1 && 1<<bits < a.RxContexts {
		return fmt.Errorf("ep open: %d receive contexts need rx_ctx_bits >= %d in the AV: %w", a.RxContexts, bitsFor(a.RxContexts), fi.EINVAL)
	}
	return nil
}

// A SerialGroup is a domain of fi.ThreadDomain endpoints
// (Attr.SerialGroup): the application serializes every call on all of
// them, so they may share a device that takes no locks.
type SerialGroup struct{ _ byte } // not zero-sized: each is a distinct pointer

// NewSerialGroup returns a new domain for fi.ThreadDomain endpoints.
func NewSerialGroup() *SerialGroup { return &SerialGroup{} }

// preparing clears what a prepared endpoint's preparing process does not
// run (Prepare, Domain.Prepare): its data path (CQs, progress, threading)
// is the adopting application's.
func (a *Attr) preparing() {
	a.TxCQ, a.RxCQ, a.RxCQs, a.Progress, a.Threading, a.SerialGroup = nil, nil, nil, ProgressManual, fi.ThreadSafe, nil
}

// serialized reports whether the application serializes every call on
// the endpoint and nothing of the endpoint's own runs beside it: its
// device may leave out its locks (optMutex).
func (a *Attr) serialized() bool {
	return a.Threading == fi.ThreadDomain && a.Progress == ProgressManual
}

func (a *Attr) defaults() {
	if a.Caps&(fi.Msg|fi.Tagged) == 0 {
		a.Caps |= fi.Msg | fi.Tagged
	}
	if a.RxContexts == 0 {
		a.RxContexts = 1
	}
	if a.Frames == 0 {
		a.Frames = 4096
	}
	if a.RingSize == 0 {
		a.RingSize = 1024
	}
	if a.MaxPosted == 0 {
		a.MaxPosted = 1024
	}
	if a.OpFlags&(fi.InjectComplete|fi.TransmitComplete) == 0 {
		a.OpFlags |= fi.TransmitComplete
	}
	if a.Logger == nil {
		a.Logger = slog.Default()
	}
	if len(a.RxCQs) == 0 {
		a.RxCQs = make([]*cq.CQ, a.RxContexts)
		for i := range a.RxCQs {
			a.RxCQs[i] = a.RxCQ
		}
	}
}

func bitsFor(n int) int {
	b := 0
	for 1<<b < n {
		b++
	}
	return b
}
