package agent

import (
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/internal/procid"
	"golang.org/x/sys/unix"
)

// Frame memory outlives its endpoint when its client keeps the descriptors
// it was handed: the kernel keeps a UMEM registered, its pages pinned, as
// long as any AF_XDP socket sharing it is open, and the agent pins with
// CAP_IPC_LOCK. So a closed private endpoint's frame memory stays charged
// to its owner (lingers) until the kernel shows no socket of that UMEM any
// more (AF_XDP socket diagnostics, by UMEM id, CONFIG_XDP_SOCKETS_DIAG);
// on a kernel without them, until the owner process exits: an unprivileged
// agent cannot see into other processes' descriptors, and a client could
// otherwise close, keep the descriptors and open again, pinning memory
// without bound.

// lingerRec is frame memory charged to uid after its endpoint closed.
type lingerRec struct {
	uid    uint32
	umem   int64
	umemID uint32
}

// umemID returns the kernel's id of the UMEM p's sockets share (ok false
// when the kernel's socket diagnostics cannot say).
func umemID(p *ep.Prepared) (uint32, bool) {
	_, fds := p.Handover()
	var ino uint64
	for _, fd := range fds {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
			ino = st.Ino
			break
		}
	}
	if ino == 0 {
		return 0, false
	}
	socks, err := netlink.SocketDiagXDP()
	if err != nil {
		return 0, false
	}
	for _, s := range socks {
		if s.XDPDiagMsg != nil && uint64(s.XDPDiagMsg.Ino) == ino && s.XDPInfo != nil && s.XDPInfo.Umem != nil {
			return s.XDPInfo.Umem.ID, true
		}
	}
	return 0, false
}

// closedPrivate gives back a closed private endpoint's quota: the endpoint
// at once, its frame memory once no socket of its UMEM is left (or, where
// that cannot be known, once owner exits). Call it before the agent closes
// its own copies of the endpoint's sockets.
func (a *Agent) closedPrivate(uid uint32, e *clientEP, owner procid.ID) {
	if e.umem == 0 {
		a.releaseEP(uid, 0)
		return
	}
	id, ok := umemID(e.p)
	a.mu.Lock()
	u := a.usageOf(uid)
	u.endpoints--
	u.lingering += e.umem
	if ok {
		a.lingering = append(a.lingering, lingerRec{uid: uid, umem: e.umem, umemID: id})
	}
	a.mu.Unlock()
	if !ok {
		a.afterExit(owner, func() { a.releaseLingering(uid, e.umem) })
	}
}

// lingerDomain keeps a closed sharing domain's frame memory charged to the
// uid that paid for it until the kernel shows no socket of its UMEM, or,
// where the kernel cannot say, until every process its endpoints were
// opened for has exited: members may keep the sockets they were handed.
// The caller holds a.qmu.
func (a *Agent) lingerDomain(d *agentDomain) {
	a.mu.Lock()
	a.usageOf(d.uid).lingering += d.umem
	if d.idKnown {
		a.lingering = append(a.lingering, lingerRec{uid: d.uid, umem: d.umem, umemID: d.umemID})
	}
	a.mu.Unlock()
	if d.idKnown {
		return
	}
	left := new(atomic.Int32)
	left.Store(int32(len(d.owners)) + 1)
	done := func() {
		if left.Add(-1) == 0 {
			a.releaseLingering(d.uid, d.umem)
		}
	}
	for id := range d.owners {
		a.afterExit(id, done)
	}
	done()
}

// releaseLingering gives back a closed endpoint's frame memory.
func (a *Agent) releaseLingering(uid uint32, umem int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	u := a.usageOf(uid)
	u.umem -= umem
	u.lingering -= umem
	a.forgetIdle(uid)
}

// sweepLingering gives back the frame memory of closed endpoints whose
// UMEM the kernel no longer has a socket of.
func (a *Agent) sweepLingering() {
	a.mu.Lock()
	n := len(a.lingering)
	a.mu.Unlock()
	if n == 0 {
		return
	}
	socks, err := netlink.SocketDiagXDP()
	if err != nil {
		return // try again at the next sweep
	}
	alive := map[uint32]bool{}
	for _, s := range socks {
		if s.XDPInfo != nil && s.XDPInfo.Umem != nil {
			alive[s.XDPInfo.Umem.ID] = true
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	kept := a.lingering[:0]
	for _, r := range a.lingering {
		if alive[r.umemID] {
			kept = append(kept, r)
			continue
		}
		u := a.usageOf(r.uid)
		u.umem -= r.umem
		u.lingering -= r.umem
		a.forgetIdle(r.uid)
	}
	clear(a.lingering[len(kept):])
	a.lingering = kept
}
