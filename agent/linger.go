package agent

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/internal/procid"
	"golang.org/x/sys/unix"
)

// Frame memory outlives its endpoint when its client keeps the descriptors
// it was handed: the kernel keeps a UMEM registered, its pages pinned, as
// long as any AF_XDP socket sharing it is open, and the agent pins with
// CAP_IPC_LOCK. So a closed private endpoint's frame memory (and a closed
// sharing domain's) stays charged to its owner (lingers) until the kernel
// shows none of the sockets the agent handed out for it any more (AF_XDP
// socket diagnostics, by inode: CONFIG_XDP_SOCKETS_DIAG). A client cannot
// make AF_XDP sockets of its own (CAP_NET_RAW), so those are all the
// sockets that can hold the UMEM. On a kernel without the diagnostics, the
// charge goes when the processes the endpoints were opened for have exited:
// an agent without CAP_SYS_PTRACE cannot see into other processes'
// descriptors, and a client that hands its sockets to another process
// (fork, SCM_RIGHTS) escapes it there; docs/SECURITY.md says so.

// lingerRec is frame memory charged to uid after its endpoint closed, and
// the sockets that may still pin it.
type lingerRec struct {
	uid    uint32
	umem   int64
	inodes []uint64
	seq    uint64 // order of recording (a.lingerSeq), for sweepLingering
}

// socketInodes returns the inodes of p's sockets (the agent's copies,
// which the client's descriptors share).
func socketInodes(p *ep.Prepared) []uint64 {
	_, fds := p.Handover()
	var inos []uint64
	for _, fd := range fds {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK {
			inos = append(inos, st.Ino)
		}
	}
	return inos
}

// xdpSockets returns the inodes of the AF_XDP sockets the kernel has (in
// the agent's network namespace), ok false without socket diagnostics.
func xdpSockets() (map[uint64]bool, bool) {
	socks, err := netlink.SocketDiagXDP()
	if err != nil {
		return nil, false
	}
	m := make(map[uint64]bool, len(socks))
	for _, s := range socks {
		if s.XDPDiagMsg != nil {
			m[uint64(s.XDPDiagMsg.Ino)] = true
		}
	}
	return m, true
}

// sockDiag reports whether the kernel has AF_XDP socket diagnostics: a
// kernel build option, probed once.
var sockDiag = sync.OnceValue(func() bool {
	_, err := netlink.SocketDiagXDP()
	return err == nil || errors.Is(err, netlink.ErrDumpInterrupted)
})

// linger records uid's umem bytes as pinned by the sockets inodes; the
// caller holds a.mu.
func (a *Agent) linger(uid uint32, umem int64, inodes []uint64) {
	a.lingerSeq++
	a.lingering = append(a.lingering, lingerRec{uid: uid, umem: umem, inodes: inodes, seq: a.lingerSeq})
}

// closedPrivate gives back a closed private endpoint's quota: the endpoint
// and its XSKMAP slots at once (its close clears them), its frame memory
// once none of its sockets is left (or, where that cannot be known, once
// owner exits). Call it before the agent closes its own copies of the
// endpoint's sockets.
func (a *Agent) closedPrivate(uid uint32, e *clientEP, owner procid.ID) {
	if e.umem == 0 {
		a.releaseEP(uid, 0, e.slots)
		return
	}
	inodes, diag := socketInodes(e.p), sockDiag()
	a.mu.Lock()
	u := a.usageOf(uid)
	u.endpoints--
	u.slots -= e.slots // the endpoint's close clears them at once
	u.lingering += e.umem
	if diag {
		a.linger(uid, e.umem, inodes)
	}
	a.mu.Unlock()
	if !diag {
		a.afterExit(owner, func() { a.releaseLingering(uid, e.umem) })
	}
}

// lingerDomain keeps a closed sharing domain's frame memory charged to the
// uid that paid for it until the kernel shows none of the sockets its
// endpoints were handed, or, where the kernel cannot say, until every
// process its endpoints were opened for has exited. The caller holds
// a.qmu.
func (a *Agent) lingerDomain(d *agentDomain) {
	diag := sockDiag()
	a.mu.Lock()
	a.usageOf(d.uid).lingering += d.umem
	if diag {
		inodes := make([]uint64, 0, len(d.inodes))
		for ino := range d.inodes {
			inodes = append(inodes, ino)
		}
		a.linger(d.uid, d.umem, inodes)
	}
	a.mu.Unlock()
	if diag {
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

// sweepLingering gives back the frame memory of closed endpoints none of
// whose sockets the kernel has any more. Only records made before its
// look at the kernel's sockets are judged by it: a record made during the
// look may name sockets the look did not see yet.
func (a *Agent) sweepLingering() {
	a.mu.Lock()
	n, upTo := len(a.lingering), a.lingerSeq
	a.mu.Unlock()
	if n == 0 {
		return
	}
	open, ok := xdpSockets()
	if !ok {
		return // try again at the next sweep
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	kept := a.lingering[:0]
	for _, r := range a.lingering {
		held := r.seq > upTo
		for _, ino := range r.inodes {
			held = held || open[ino]
		}
		if held {
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
