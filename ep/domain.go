package ep

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

// A Domain lets endpoints of several processes share device queues.
//
// A device queue belongs to one UMEM, so processes that receive on the
// same queue share one UMEM, and the queue's fill and completion rings. A
// Domain is that UMEM (a memfd), one anchor socket per queue that holds the
// rings, and the dataplane.ShareBlock through which its users take turns
// on them and account for every frame. The process that makes it (the
// agent) never touches a frame on the data path: it prepares each user's
// endpoint (Prepare: its receive sockets, a transmit socket, a slot of the
// block with frames of its own for transmitting) and hands it over (Adopt
// in the application), and when a user is gone it takes back what it held
// (Prepared.Reclaim).
//
// Every process of a domain can read and write every frame of it: only
// processes that trust each other may share one (the agent's sharing
// domains are per uid, or per operator-declared group).
type Domain struct {
	cfg   DomainConfig
	dev   *device
	share *dataplane.ShareBlock

	mu     sync.Mutex
	users  []*Prepared // by slot; nil: free
	held   int         // receive frames the users may hold, summed
	closed bool
}

// DomainConfig sizes a Domain. Zero fields take the defaults.
type DomainConfig struct {
	// Ifname is the interface, in the calling thread's network namespace.
	Ifname string
	// FirstQueue and Queues are the rx queues the domain's endpoints
	// listen on (default: from FirstQueue to the interface's last).
	FirstQueue, Queues int
	// Slots bounds the endpoints (default 32, at most
	// dataplane.MaxShareSlots).
	Slots int
	// RxFrames is the receive pool, shared by all endpoints (default
	// 8192); TxFrames the frames each endpoint transmits with (default
	// 256).
	RxFrames, TxFrames int
	// BindMode and BusyPoll of the sockets.
	BindMode dataplane.BindMode
	BusyPoll time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Domain defaults.
const (
	DefaultDomainSlots    = 32
	DefaultDomainRxFrames = 8192
	DefaultDomainTxFrames = 256
	// DefaultDomainRing is the receive ring size of a domain's endpoints
	// when Attr.RingSize is 0: small, as every endpoint's rings count
	// against the shared receive pool.
	DefaultDomainRing = 256
)

// NewDomain makes a sharing domain's UMEM, anchors and block, and gives
// the receive pool to the fill rings. Call it from a thread in the
// interface's network namespace.
func NewDomain(cfg DomainConfig) (_ *Domain, err error) {
	if cfg.Slots == 0 {
		cfg.Slots = DefaultDomainSlots
	}
	if cfg.RxFrames == 0 {
		cfg.RxFrames = DefaultDomainRxFrames
	}
	if cfg.TxFrames == 0 {
		cfg.TxFrames = DefaultDomainTxFrames
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.FirstQueue < 0 || cfg.Queues < 0 || cfg.FirstQueue+cfg.Queues > MaxQueues:
		return nil, fmt.Errorf("domain: queues %d+%d: %w", cfg.FirstQueue, cfg.Queues, fi.EINVAL)
	case cfg.Slots < 1 || cfg.Slots > dataplane.MaxShareSlots:
		return nil, fmt.Errorf("domain: %d slots, 1 to %d: %w", cfg.Slots, dataplane.MaxShareSlots, fi.EINVAL)
	case cfg.RxFrames < 64 || cfg.TxFrames < 16 || cfg.RxFrames+cfg.Slots*cfg.TxFrames > MaxFrames:
		return nil, fmt.Errorf("domain: %d receive frames and %d x %d transmit frames (at least 64 and 16, at most %d in all): %w",
			cfg.RxFrames, cfg.Slots, cfg.TxFrames, MaxFrames, fi.EINVAL)
	}
	iface, err := net.InterfaceByName(cfg.Ifname)
	if err != nil {
		return nil, fmt.Errorf("domain: interface %q: %w", cfg.Ifname, fi.ENODEV)
	}
	have := 1
	if l, err := netlink.LinkByIndex(iface.Index); err == nil && l.Attrs().NumRxQueues > 0 {
		have = l.Attrs().NumRxQueues
	}
	all := cfg.Queues == 0
	if all {
		cfg.Queues = max(have-cfg.FirstQueue, 1)
	}
	if cfg.FirstQueue+cfg.Queues > have {
		return nil, fmt.Errorf("domain: queues %d..%d, interface %s has %d: %w", cfg.FirstQueue, cfg.FirstQueue+cfg.Queues-1, cfg.Ifname, have, fi.EINVAL)
	}
	ns, err := dataplane.ThreadNetns()
	if err != nil {
		return nil, err
	}
	d := &Domain{cfg: cfg, users: make([]*Prepared, cfg.Slots)}
	numFrames := cfg.RxFrames + cfg.Slots*cfg.TxFrames
	dev := &device{key: devKey{ns, iface.Index, cfg.FirstQueue}, first: cfg.FirstQueue, queues: cfg.Queues, domain: d}
	defer func() {
		if err != nil {
			dev.close()
		}
	}()
	if dev.umem, err = dataplane.NewUMEM(dataplane.UMEMConfig{NumFrames: numFrames, Shared: true, TxMetadata: true}); err != nil {
		return nil, fmt.Errorf("domain: %w", err)
	}
	for q := range cfg.Queues {
		s, err := dataplane.Open(iface.Index, cfg.FirstQueue+q, dev.umem,
			dataplane.SocketConfig{RxSize: -1, TxSize: 64, Mode: cfg.BindMode, BusyPoll: cfg.BusyPoll, Logger: cfg.Logger, MultiBuffer: true})
		if err != nil {
			// The device reports more queues than it has in use (a veth
			// made with numrxqueues > real ones): take those it has.
			if all && q > 0 && errors.Is(err, fi.EINVAL) {
				break
			}
			return nil, fmt.Errorf("domain: socket for queue %d: %w", cfg.FirstQueue+q, err)
		}
		dev.anchors = append(dev.anchors, s)
	}
	cfg.Queues = len(dev.anchors)
	dev.queues = cfg.Queues
	d.cfg = cfg
	scfg := dataplane.ShareConfig{FirstQueue: cfg.FirstQueue, Queues: cfg.Queues, Slots: cfg.Slots,
		TxFrames: cfg.TxFrames, RxFrames: cfg.RxFrames, FrameSize: dataplane.DefaultFrameSize}
	if dev.share, err = dataplane.NewShareBlock(scfg); err != nil {
		return nil, fmt.Errorf("domain: %w", err)
	}
	if err := dev.share.Prime(dev.anchors); err != nil {
		return nil, fmt.Errorf("domain: %w", err)
	}
	d.dev, d.share = dev, dev.share
	return d, nil
}

// Config returns the domain's configuration, defaults filled in (the zero
// DomainConfig for a nil Domain).
func (d *Domain) Config() DomainConfig {
	if d == nil {
		return DomainConfig{}
	}
	return d.cfg
}

// Users is the number of slots in use: endpoints prepared and not yet
// reclaimed (0 for a nil or zero Domain).
func (d *Domain) Users() int {
	if d == nil {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, p := range d.users {
		if p != nil {
			n++
		}
	}
	return n
}

// quotaOf is what an endpoint of the domain may hold of the receive pool:
// its receive rings full, the frames each context keeps back before it
// refills (lazyOf per queue), and as many parked frames as one ring holds.
func quotaOf(a *Attr, queues int) (quota, park int) {
	return (a.RingSize+lazyOf(a))*max(a.RxContexts, 1)*queues + a.RingSize, a.RingSize
}

// lazyOf is how many received frames per queue each receive context of a
// domain's endpoint keeps back before it refills (rxCtx.holdLimit): lazyRefill,
// or a quarter of a smaller ring.
func lazyOf(a *Attr) int { return min(lazyRefill, max(a.RingSize/4, 1)) }

// Prepare makes an endpoint of the domain for another process, as the
// package's Prepare does for a device of the endpoint's own: attr's queues
// are the domain's (a conflicting FirstQueue or Queues is EINVAL), its
// Frames are the domain's (ignored), and its RingSize defaults to
// DefaultDomainRing. The endpoint takes a slot of the domain (EAGAIN when
// all are in use) and a share of the receive pool: its rings, the frames
// its contexts keep back for a batched refill (L per context and queue: 16,
// or a quarter of a smaller ring) and its parked frames may hold at most
// (RingSize+L)*RxContexts*Queues+RingSize frames, and the shares of all
// endpoints leave an eighth of the pool free (EDQUOT when one more would
// not), so no endpoint can starve the others. Call it from a thread in the
// interface's network namespace.
func (d *Domain) Prepare(dp *loader.Objects, attr Attr) (_ *Prepared, err error) {
	if d == nil || d.dev == nil {
		return nil, fmt.Errorf("ep open: sharing domain is nil or not from NewDomain: %w", fi.EINVAL)
	}
	if err := checkDataplane(dp); err != nil {
		return nil, err
	}
	attr.preparing()
	if err := attr.validateKernel(); err != nil {
		return nil, err
	}
	if attr.Queues != 0 && attr.Queues != d.cfg.Queues || attr.FirstQueue != 0 && attr.FirstQueue != d.cfg.FirstQueue {
		return nil, fmt.Errorf("ep open: queues %d+%d, the sharing domain's are %d+%d: %w",
			attr.FirstQueue, attr.Queues, d.cfg.FirstQueue, d.cfg.Queues, fi.EINVAL)
	}
	attr.FirstQueue, attr.Queues, attr.Frames = d.cfg.FirstQueue, d.cfg.Queues, 0
	if attr.RingSize == 0 {
		attr.RingSize = DefaultDomainRing
	}
	attr.BindMode = dataplane.BindAuto // the domain's sockets decide
	quota, _ := quotaOf(&attr, d.cfg.Queues)
	d.mu.Lock()
	slot := -1
	for i, p := range d.users {
		if p == nil && d.share.SlotFree(i) {
			slot = i
			break
		}
	}
	switch {
	case d.closed:
		err = fmt.Errorf("ep open: sharing domain closed: %w", fi.EINVAL)
	case slot < 0:
		err = fmt.Errorf("ep open: the sharing domain's %d endpoints are all in use: %w", d.cfg.Slots, fi.EAGAIN)
	case d.held+quota > d.cfg.RxFrames-d.cfg.RxFrames/8:
		err = fmt.Errorf("ep open: the endpoint's rings (%d frames) do not fit in the sharing domain's receive pool (%d of %d frames promised): %w",
			quota, d.held, d.cfg.RxFrames, fi.EDQUOT)
	}
	if err != nil {
		d.mu.Unlock()
		return nil, err
	}
	p := &Prepared{dom: d, slot: slot, quota: quota}
	d.users[slot] = p
	d.held += quota
	d.mu.Unlock()
	defer func() {
		if err != nil {
			d.free(p)
		}
	}()

	e, undo, err := setup(dp, attr, func(int, int, *Attr) (*device, error) { return d.dev, nil })
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	p.tx, err = dataplane.Open(d.dev.key.ifindex, d.cfg.FirstQueue, d.dev.umem,
		dataplane.SocketConfig{RxSize: -1, TxSize: attr.RingSize, BusyPoll: attr.BusyPoll, Logger: attr.Logger})
	if err != nil {
		return nil, fmt.Errorf("ep open: transmit socket: %w", err)
	}
	undo.add(func() { p.tx.Close() })
	if err := d.share.Activate(slot); err != nil {
		return nil, fmt.Errorf("ep open: %w", err)
	}
	undo.add(func() { d.share.Retire(slot); d.share.Reclaim(slot, d.dev.anchors, nil) })
	if err := e.register(); err != nil {
		return nil, err
	}
	e.registered = true
	p.e = e
	return p, nil
}

func (d *Domain) free(p *Prepared) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.users[p.slot] == p {
		d.users[p.slot] = nil
		d.held -= p.quota
	}
}

// Close releases the domain once no endpoint uses it: EBUSY while one
// does (Prepared.Reclaim frees them). Idempotent.
func (d *Domain) Close() error {
	if d == nil || d.dev == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	for _, p := range d.users {
		if p != nil {
			return fmt.Errorf("domain close: endpoints still use it: %w", fi.EBUSY)
		}
	}
	d.closed = true
	return d.dev.close()
}

// shareInfo describes the slot to the application (Handover).
func (p *Prepared) shareInfo() *ShareInfo {
	_, park := quotaOf(&p.e.attr, p.dom.cfg.Queues)
	return &ShareInfo{Config: p.dom.share.Config(), Slot: p.slot, ParkLimit: park, Lazy: lazyOf(&p.e.attr), Tx: p.tx.Info()}
}

// ShareInfo is what the application of a sharing domain's endpoint needs
// besides the sockets (HandoverInfo.Share).
type ShareInfo struct {
	Config    dataplane.ShareConfig `json:"config"`
	Slot      int                   `json:"slot"`
	ParkLimit int                   `json:"park_limit"` // frames the endpoint may keep for unmatched messages
	// Lazy is how many received frames per queue each receive context may
	// keep back before it refills, counted in its share of the pool (0:
	// none, an agent before this field; at most 16).
	Lazy int                  `json:"lazy,omitempty"`
	Tx   dataplane.SocketInfo `json:"tx"`
}

// Reclaim takes back what a sharing domain's endpoint held, once Close has
// run and its application is gone or has closed the endpoint (the caller
// must know: the application's data path must not run any more): the
// frames on its receive rings, those it marked as held, a fill it died in
// the middle of, and its slot. It closes the endpoint's sockets. For an
// endpoint with a device of its own it does nothing (Close released
// everything). Idempotent.
func (p *Prepared) Reclaim() error {
	if p == nil || p.dom == nil || p.e == nil {
		return nil
	}
	p.reclaimOnce.Do(func() {
		d := p.dom
		// Close removed the endpoint from the XDP tables: let frames the
		// program was redirecting meanwhile land (a NAPI poll's worth)
		// before the last look at the rings.
		time.Sleep(2 * time.Millisecond)
		var extra []uint64
		for _, rc := range p.e.rx {
			for _, s := range rc.socks {
				extra = append(extra, s.DrainRx()...)
			}
		}
		d.share.Retire(p.slot)
		n, err := d.share.Reclaim(p.slot, d.dev.anchors, extra)
		p.reclaimed = n
		p.e.closeSockets()
		p.reclaimErr = errors.Join(err, p.tx.Close())
		d.free(p)
	})
	return p.reclaimErr
}

// Reclaimed is how many receive frames Reclaim gave back to the domain.
func (p *Prepared) Reclaimed() int {
	if p == nil {
		return 0
	}
	return p.reclaimed
}

// Domain is the sharing domain the endpoint was prepared in, or nil.
func (p *Prepared) Domain() *Domain {
	if p == nil {
		return nil
	}
	return p.dom
}
