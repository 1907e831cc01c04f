package ep

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// Prepared is an endpoint a privileged process (the agent) made for an
// application in another process: its UMEM (a memfd), sockets and XDP
// registration exist, and its data path is the application's (Adopt).
type Prepared struct {
	e    *Endpoint
	once sync.Once
	err  error

	// A sharing domain's endpoint (Domain.Prepare): its slot, its share
	// of the receive pool, its transmit socket, and what Reclaim did.
	dom         *Domain
	slot        int
	quota       int
	tx          *dataplane.Socket
	reclaimOnce sync.Once
	reclaimed   int
	reclaimErr  error
}

// Prepare makes an endpoint's kernel objects for another process: a device
// of its own (a device queue belongs to one UMEM, so the interface's queues
// are the application's while it runs), the receive sockets, the XSKMAP
// slots and the endpoint-table entry. attr's CQs and Progress are ignored;
// its AV stays bound until Close. Call it from a thread in the interface's
// network namespace.
func Prepare(dp *loader.Objects, attr Attr) (_ *Prepared, err error) {
	if err := checkDataplane(dp); err != nil {
		return nil, err
	}
	attr.preparing()
	if err := attr.validateKernel(); err != nil {
		return nil, err
	}
	e, undo, err := setup(dp, attr, newPrivateDevice)
	if err != nil {
		return nil, err
	}
	if err := e.register(); err != nil {
		undo.run()
		return nil, err
	}
	e.registered = true
	return &Prepared{e: e}, nil
}

// HandoverInfo describes a prepared endpoint to the application, next to
// its file descriptors (see Prepared.Handover). Plain data, for the agent's
// protocol.
type HandoverInfo struct {
	ID         uint32                 `json:"id"`
	Ifindex    int                    `json:"ifindex"`
	FirstQueue int                    `json:"first_queue,omitempty"`
	Queues     int                    `json:"queues"`
	RxContexts int                    `json:"rx_contexts"`
	MaxMsg     int                    `json:"max_msg"`
	Frames     int                    `json:"frames"`
	AuthKey    uint32                 `json:"auth_key,omitempty"`
	Anchors    []dataplane.SocketInfo `json:"anchors"` // per queue; the first transmits
	Sockets    []dataplane.SocketInfo `json:"sockets"` // per context, per queue
	// Share is set for an endpoint of a sharing domain (Domain.Prepare).
	Share *ShareInfo `json:"share,omitempty"`
}

// Handover returns the description and the descriptors to send, in this
// order: the UMEM's memfd, the anchors, then the sockets, and for a
// sharing domain's endpoint the domain's ShareBlock and the endpoint's
// transmit socket. The descriptors
// stay the Prepared's (send them with SCM_RIGHTS, which duplicates them).
// A nil or zero Prepared (not from Prepare) has nothing to hand over: the
// zero HandoverInfo and no descriptors.
func (p *Prepared) Handover() (HandoverInfo, []int) {
	if p == nil || p.e == nil {
		return HandoverInfo{}, nil
	}
	e := p.e
	info := HandoverInfo{ID: e.id, Ifindex: e.dev.key.ifindex, FirstQueue: e.dev.first, Queues: e.queues, RxContexts: len(e.rx),
		MaxMsg: e.maxMsg, Frames: e.umem.NumFrames(), AuthKey: e.authKey}
	fds := []int{e.umem.Memfd()}
	for _, s := range e.dev.anchors {
		si := s.Info()
		si.Socket.Shared = p.dom != nil
		info.Anchors = append(info.Anchors, si)
		fds = append(fds, s.FD())
	}
	for _, c := range e.rx {
		for _, s := range c.socks {
			info.Sockets = append(info.Sockets, s.Info())
			fds = append(fds, s.FD())
		}
	}
	if p.dom != nil {
		info.Share = p.shareInfo()
		fds = append(fds, p.dom.share.FD(), p.tx.FD())
	}
	return info, fds
}

// ID is the endpoint's id in the XDP endpoint table (0 for a nil or zero
// Prepared).
func (p *Prepared) ID() uint32 {
	if p == nil || p.e == nil {
		return 0
	}
	return p.e.id
}

// Stats returns the sockets' kernel statistics (readable while the
// application runs the data path). A nil or zero Prepared is EINVAL.
func (p *Prepared) Stats() (dataplane.Stats, error) {
	if p == nil || p.e == nil {
		return dataplane.Stats{}, fmt.Errorf("ep stats: prepared endpoint is nil or not from Prepare (zero value): %w", fi.EINVAL)
	}
	return p.e.Stats()
}

// Close removes the endpoint from the XDP tables and closes the agent's
// descriptors; the application's copies keep the kernel sockets alive until
// it closes them, but no frame reaches them any more. A sharing domain's
// endpoint keeps its sockets and slot until Reclaim. Idempotent; closing
// a nil or zero Prepared returns nil (nothing to release).
func (p *Prepared) Close() error {
	if p == nil || p.e == nil {
		return nil
	}
	p.once.Do(func() {
		e := p.e
		e.closed.Store(true)
		p.err = e.deregister()
		e.claim.Close() // the address is free once XDP no longer redirects it
		if p.dom == nil {
			// A domain's endpoint keeps its sockets until Reclaim: their
			// rings may hold the domain's frames.
			e.closeSockets()
		}
		p.err = errors.Join(p.err, releaseDevice(e.dev))
		if e.attr.AuthKey != 0 {
			e.av.ReleaseAuthKey(e.attr.AuthKey)
		}
		e.av.UnbindEndpoint()
	})
	return p.err
}

// AdoptAttr is what an application gives Adopt besides the handover.
type AdoptAttr struct {
	// Attr as for Open: AV (a read-only view of the agent's named AV is
	// enough), CQs, Caps, Local, OpFlags, Progress, MaxPosted,
	// MinMultiRecv, Logger. Sizes, queues and bind mode come from the
	// handover.
	Attr
	// NeighUse triggers neighbour resolution for the application (which
	// may not send NTF_USE itself): the agent's.
	NeighUse func(ifindex int, ip netip.Addr) error
	// Release tells the agent the endpoint is closed.
	Release func() error
}

// Adopt runs the data path of an endpoint a privileged process prepared:
// it maps the UMEM (fds[0]), adopts the anchor and receive sockets (the
// rest of fds, in Handover's order), fills the fill rings and binds the
// CQs. It needs no capability. Adopt owns fds: the endpoint closes them,
// and so does a failed Adopt.
func Adopt(info HandoverInfo, fds []int, a AdoptAttr) (_ *Endpoint, err error) {
	// Descriptors a Socket or the UMEM took over close with them; a failure
	// closes the others, whatever the step that failed.
	owned := make([]bool, len(fds))
	defer func() {
		if err != nil {
			for i, fd := range fds {
				if !owned[i] {
					unix.Close(fd)
				}
			}
		}
	}()
	if err := a.Attr.validate(); err != nil {
		return nil, err
	}
	want := 1 + len(info.Anchors) + len(info.Sockets)
	if info.Share != nil {
		want += 2
	}
	if len(fds) != want || info.Queues != len(info.Anchors) ||
		len(info.Sockets) != info.Queues*info.RxContexts || info.Queues < 1 {
		return nil, fmt.Errorf("ep adopt: %d descriptors for %d anchors and %d sockets: %w", len(fds), len(info.Anchors), len(info.Sockets), fi.EINVAL)
	}
	attr := a.Attr
	attr.RxContexts, attr.Queues, attr.Frames = info.RxContexts, info.Queues, info.Frames
	attr.defaults()
	if len(attr.RxCQs) != info.RxContexts {
		return nil, fmt.Errorf("ep adopt: %d receive CQs for %d contexts: %w", len(attr.RxCQs), info.RxContexts, fi.EINVAL)
	}
	e := &Endpoint{av: attr.AV, attr: attr, queues: info.Queues, id: info.ID, authKey: info.AuthKey, release: a.Release}
	e.setMaxMsg(info.MaxMsg)
	e.parkLimit = attr.Frames / 4
	if info.Share != nil {
		e.parkLimit = info.Share.ParkLimit
	}
	var undo undoList
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	if err := e.av.BindEndpoint(); err != nil {
		return nil, fmt.Errorf("ep adopt: %w", err)
	}
	undo.add(e.av.UnbindEndpoint)
	if e.dev, err = adoptDevice(info, fds, owned); err != nil {
		return nil, fmt.Errorf("ep adopt: %w", err)
	}
	if attr.serialized() {
		e.dev.setUnlocked(attr.SerialGroup) // the endpoint's own device
	}
	e.umem = e.dev.umem
	if !e.dev.multiBuffer() {
		// Sockets that take one UMEM frame per packet (an agent on a
		// kernel without XDP_USE_SG) carry no more than one holds.
		if lim := maxMsgFor(1<<16, attr.Local.Addr(), false, e.umem.FrameSize()); lim < e.maxMsg {
			if a.Attr.MinMultiRecv == 0 {
				e.attr.MinMultiRecv = lim
			}
			e.maxMsg = lim
		}
	}
	undo.add(func() { releaseDevice(e.dev) })
	undo.add(e.uncountRx)
	undo.add(e.closeSockets) // before adopting: closes those adopted
	for c := range info.RxContexts {
		rc := e.newRxCtx()
		e.rx = append(e.rx, rc)
		for q := range e.queues {
			i := c*e.queues + q
			si := info.Sockets[i]
			s, err := dataplane.AdoptSocket(fds[1+len(info.Anchors)+i], si.Ifindex, si.Queue, e.umem, si.Socket)
			if err != nil {
				return nil, fmt.Errorf("ep adopt: socket for context %d queue %d: %w", c, q, err)
			}
			owned[1+len(info.Anchors)+i] = true
			rc.socks[q] = s
		}
	}
	if err := e.start(&undo, a.NeighUse); err != nil {
		return nil, err
	}
	return e, nil
}

// adoptDevice maps the UMEM and adopts the anchors, then fills the fill
// rings (the preparing process left them empty for the data path's owner).
func adoptDevice(info HandoverInfo, fds []int, owned []bool) (_ *device, err error) {
	if len(info.Anchors) == 0 {
		return nil, fmt.Errorf("no anchor sockets: %w", fi.EINVAL)
	}
	ucfg := info.Anchors[0].UMEM
	d := &device{key: devKey{info.Anchors[0].Socket.Netns, info.Ifindex, info.FirstQueue}, first: info.FirstQueue, queues: info.Queues, fillMu: make([]optMutex, info.Queues)}
	if d.umem, err = dataplane.AttachUMEM(fds[0], ucfg); err != nil {
		return nil, err
	}
	owned[0] = true
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	sh := info.Share
	for q, si := range info.Anchors {
		si.Socket.Shared = sh != nil
		s, err := dataplane.AdoptSocket(fds[1+q], si.Ifindex, si.Queue, d.umem, si.Socket)
		if err != nil {
			return nil, fmt.Errorf("anchor socket of queue %d: %w", q, err)
		}
		owned[1+q] = true
		d.anchors = append(d.anchors, s)
	}
	if sh == nil {
		d.prime(info.Frames)
		d.tx.init(d, info.Frames)
		d.parkBudget = info.Frames / 4
		return d, nil
	}
	// Its contexts together keep what the domain lets the endpoint keep.
	d.parkBudget = sh.ParkLimit
	// A sharing domain's endpoint: the receive pool is in the domain's
	// fill rings already; this endpoint allocates only its own transmit
	// frames.
	if sh.Config.FrameSize != ucfg.FrameSize || sh.Config.NumFrames() != ucfg.NumFrames || sh.Config.Queues != info.Queues ||
		sh.Config.FirstQueue != info.FirstQueue || sh.Slot < 0 || sh.Slot >= sh.Config.Slots || sh.ParkLimit < 0 {
		return nil, fmt.Errorf("sharing domain %+v slot %d does not match the UMEM %+v: %w", sh.Config, sh.Slot, ucfg, fi.EINVAL)
	}
	if sh.Lazy < 0 {
		return nil, fmt.Errorf("sharing domain slot %d: %d frames to keep back for the refill: %w", sh.Slot, sh.Lazy, fi.EINVAL)
	}
	i := len(fds) - 2
	if d.share, err = dataplane.AttachShareBlock(fds[i], sh.Config); err != nil {
		return nil, err
	}
	owned[i] = true
	d.slot = sh.Slot
	d.shareLazy = min(sh.Lazy, lazyRefill) // keeping fewer back than counted is safe
	first, n := d.share.TxRange(d.slot)
	if err := d.umem.SetFreeRange(first, n); err != nil {
		return nil, err
	}
	if d.txSock, err = dataplane.AdoptSocket(fds[i+1], sh.Tx.Ifindex, sh.Tx.Queue, d.umem, sh.Tx.Socket); err != nil {
		return nil, fmt.Errorf("transmit socket: %w", err)
	}
	owned[i+1] = true
	d.tx.init(d, ucfg.NumFrames)
	return d, nil
}
