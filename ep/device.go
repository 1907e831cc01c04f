package ep

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
)

// A device queue belongs to one UMEM at a time, so every endpoint of the
// process on one interface shares a device: its UMEM, one anchor socket per
// rx queue that keeps the queue's fill and completion rings alive for as
// long as any endpoint uses the interface (the kernel frees a queue's rings
// with its last socket, and with them every frame they hold), and the
// transmit path. Endpoints add their own receive sockets with
// XDP_SHARED_UMEM.
type device struct {
	key     devKey
	first   int // first rx queue
	umem    *dataplane.UMEM
	refs    int // endpoints, guarded by devices.mu
	queues  int
	anchors []*dataplane.Socket // per queue; anchors[0] transmits
	fillMu  []optMutex          // per queue: the fill ring has one producer
	tx      txState
	shared  bool // in devices: other endpoints of the process join it
	// unlocked: the device's endpoints were opened with fi.ThreadDomain
	// and manual progress, so the application serializes every call on
	// them and the device leaves its locks out (setUnlocked); serial is
	// their domain (nil: the first endpoint alone).
	unlocked bool
	serial   *SerialGroup

	// A sharing domain's device in the agent (Domain): the domain owns
	// it; endpoints leave it as they found it.
	domain *Domain
	// The data path of a sharing domain's endpoint (adopted with a
	// ShareBlock): the fill and completion rings are the domain's,
	// reached through share as user slot; txSock is the endpoint's own
	// transmit socket.
	share  *dataplane.ShareBlock
	slot   int
	txSock *dataplane.Socket
	// shareLazy is ShareInfo.Lazy: the frames per queue each receive
	// context may keep back before it refills.
	shareLazy int

	// Frames its endpoints' receive contexts keep for receives not yet
	// posted (rxCtx.park), how many they may keep together (a quarter of
	// its frames, half what its fill rings get; 0: no bound but each
	// context's own), and how many contexts share that budget.
	parked     atomic.Int64
	parkBudget int
	rxCtxs     atomic.Int32
	// fillShare is how many frames each queue's fill ring was given
	// (prime): its receive contexts keep at most an eighth of it back,
	// together (heldBack, per queue: rxCtx.mayKeep).
	fillShare int
	heldBack  []atomic.Int32
	// parkedQ counts, per queue, the frames its receive contexts park
	// (rxCtx.park keeps it within half the queue's fill share).
	parkedQ []atomic.Int32
}

// deviceMaker makes or finds the device of an endpoint listening on
// queues rx queues of ifindex from a.FirstQueue (setup).
type deviceMaker func(ifindex, queues int, a *Attr) (*device, error)

// boundMode is how the device's sockets are bound: copy or zero-copy.
func (d *device) boundMode() dataplane.BindMode {
	if d.anchors[0].ZeroCopy() {
		return dataplane.BindZeroCopy
	}
	return dataplane.BindCopy
}

// devKey names a device: endpoints of a process on different queue
// ranges of one interface (Attr.FirstQueue) have devices of their own.
type devKey struct {
	netns   uint64
	ifindex int
	first   int
}

var devices = struct {
	sync.Mutex
	m map[devKey]*device
}{m: map[devKey]*device{}}

// acquireDevice returns the calling thread's namespace's device for
// ifindex, creating it with the endpoint's sizes if it is the first.
func acquireDevice(ifindex, queues int, a *Attr) (*device, error) {
	ns, err := dataplane.ThreadNetns()
	if err != nil {
		return nil, err
	}
	key := devKey{ns, ifindex, a.FirstQueue}
	devices.Lock()
	defer devices.Unlock()
	if d := devices.m[key]; d != nil {
		if queues > d.queues {
			return nil, fmt.Errorf("interface has queues %d..%d open, endpoint wants %d..%d: %w",
				d.first, d.first+d.queues-1, a.FirstQueue, a.FirstQueue+queues-1, fi.EINVAL)
		}
		// Its endpoints run without locks, for the calls of their
		// domain only.
		if d.unlocked && (!a.serialized() || a.SerialGroup == nil || a.SerialGroup != d.serial) {
			group := "of no serial group"
			if a.SerialGroup != nil {
				group = "of another serial group"
			}
			return nil, fmt.Errorf("the interface's endpoints in this process run without locks for the calls of their domain (%v, with their serial group); this one is %v, progress %d, %s: %w",
				fi.ThreadDomain, a.Threading, a.Progress, group, fi.EBUSY)
		}
		// The endpoint's sockets share the device's UMEM, so they are
		// bound the way its first socket was.
		if m := d.boundMode(); a.BindMode != dataplane.BindAuto && a.BindMode != m {
			return nil, fmt.Errorf("interface's sockets are bound in %s mode, endpoint wants %s: %w", m, a.BindMode, fi.EINVAL)
		}
		d.refs++
		return d, nil
	}
	d, err := newDevice(key, queues, a, false)
	if err != nil {
		return nil, err
	}
	d.prime(a.Frames)
	if a.serialized() {
		d.setUnlocked(a.SerialGroup)
	}
	d.refs, d.shared = 1, true
	devices.m[key] = d
	return d, nil
}

// newPrivateDevice makes a device for one endpoint that another process
// will run (Prepare): its UMEM is a memfd the application maps, and its
// fill rings stay empty for the application to fill.
func newPrivateDevice(ifindex, queues int, a *Attr) (*device, error) {
	ns, err := dataplane.ThreadNetns()
	if err != nil {
		return nil, err
	}
	return newDevice(devKey{ns, ifindex, a.FirstQueue}, queues, a, true)
}

func newDevice(key devKey, queues int, a *Attr, memfd bool) (_ *device, err error) {
	d := &device{key: key, first: a.FirstQueue, queues: queues, fillMu: make([]optMutex, queues)}
	if a.Frames/2/queues < 16 {
		return nil, fmt.Errorf("%d frames too few for %d queues: %w", a.Frames, queues, fi.EINVAL)
	}
	if d.umem, err = dataplane.NewUMEM(dataplane.UMEMConfig{NumFrames: a.Frames, Shared: memfd, TxMetadata: true}); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	for q := range queues {
		cfg := dataplane.SocketConfig{RxSize: -1, TxSize: 64, Mode: a.BindMode, BusyPoll: a.BusyPoll, Logger: a.Logger, MultiBuffer: true}
		if q == 0 {
			cfg.TxSize = a.RingSize
		}
		s, err := dataplane.Open(key.ifindex, d.first+q, d.umem, cfg)
		if err != nil {
			// The device reports more queues than it has in use (a veth
			// made with numrxqueues > real ones): listen on those it has.
			if a.Queues == 0 && q > 0 && errors.Is(err, fi.EINVAL) {
				break
			}
			if errors.Is(err, fi.EBUSY) {
				return nil, fmt.Errorf("socket for queue %d: the queue belongs to another frame memory (another process's endpoints, or an agent's sharing domain: open the endpoint through the agent to share the queue, or use free queues with Attr.FirstQueue): %w", d.first+q, err)
			}
			return nil, fmt.Errorf("socket for queue %d: %w", d.first+q, err)
		}
		d.anchors = append(d.anchors, s)
	}
	d.queues = len(d.anchors)
	d.fillMu = d.fillMu[:d.queues]
	d.tx.init(d, a.Frames)
	d.parkBudget = a.Frames / 4
	return d, nil
}

// prime gives each queue's fill ring half the frames, split evenly; the
// other half is for transmitting.
func (d *device) prime(frames int) {
	d.fillShare = frames / 2 / d.queues
	d.heldBack = make([]atomic.Int32, d.queues)
	d.parkedQ = make([]atomic.Int32, d.queues)
	addrs := make([]uint64, d.fillShare)
	for _, s := range d.anchors {
		n := d.umem.Alloc(addrs)
		if got := s.Fill(addrs[:n]); got != n {
			d.umem.Free(addrs[got:n]...)
		}
	}
}

// setUnlocked makes the device leave its locks out: its endpoints'
// application serializes every call (Attr.serialized). Call it before the
// device's first endpoint is returned.
func (d *device) setUnlocked(g *SerialGroup) {
	d.unlocked, d.serial = true, g
	d.tx.mu.off = true
	for i := range d.fillMu {
		d.fillMu[i].off = true
	}
}

// releaseDevice drops an endpoint's reference; the last one closes it.
func releaseDevice(d *device) error {
	if d.domain != nil {
		return nil
	}
	if !d.shared {
		return d.close()
	}
	devices.Lock()
	defer devices.Unlock()
	if d.refs--; d.refs > 0 {
		return nil
	}
	delete(devices.m, d.key)
	return d.close()
}

func (d *device) close() error {
	var first error
	if d.txSock != nil {
		first = d.txSock.Close()
	}
	for _, s := range d.anchors {
		if err := s.Close(); err != nil && first == nil {
			first = err
		}
	}
	if err := d.umem.Close(); err != nil && first == nil {
		first = err
	}
	if err := d.share.Close(); err != nil && first == nil {
		first = err
	}
	return first
}

// refill returns received frames to queue q's fill ring.
func (d *device) refill(q int, addrs []uint64) {
	if d.share != nil {
		// The domain's fill ring has room for its whole receive pool; a
		// frame it did not take stays marked as this endpoint's, and the
		// agent gives it back when the endpoint goes (never to the free
		// list: that holds the endpoint's transmit frames only).
		d.share.Fill(d.slot, d.anchors[q], addrs)
		return
	}
	d.fillMu[q].Lock()
	n := d.anchors[q].Fill(addrs)
	d.fillMu[q].Unlock()
	if n < len(addrs) {
		d.umem.Free(addrs[n:]...) // the ring holds every frame it can: keep the rest
	}
}

// multiBuffer reports that the device's sockets take frames longer than a
// UMEM frame (XDP_USE_SG, which the receive sockets inherit from the
// anchors through the shared UMEM).
func (d *device) multiBuffer() bool { return len(d.anchors) > 0 && d.anchors[0].MultiBuffer() }

// sockConfig is the configuration of an endpoint's receive sockets.
func (d *device) sockConfig(a *Attr, log *slog.Logger) dataplane.SocketConfig {
	// Bound with XDP_SHARED_UMEM: the mode is the anchors' (boundMode).
	return dataplane.SocketConfig{RxSize: a.RingSize, TxSize: -1, BusyPoll: a.BusyPoll, Logger: log}
}
