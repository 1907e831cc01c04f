package loader

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"golang.org/x/sys/unix"
)

// AV change stamps.
//
// An application with the agent's read-only descriptors (FromFDs) cannot
// map an AV's table (Linux maps a BPF map only through a descriptor opened
// for writing), so it reads a copy (internal/avtab), and a copy does not
// change when the AV does. So that it need not ask the kernel at every
// lookup whether the AV changed, the agent publishes a change stamp per AV
// in a page its clients map read-only: a number that moves whenever the
// AV's metadata (its generation: inserts, removes, user IDs, growth;
// creation, destruction) may have changed, and never comes back to a
// value it had (word 0 counts the stamps handed out). A client reads the
// stamp before it copies a table and answers from the copy only while the
// stamp has not moved: one load per lookup.
//
// The agent moves an AV's stamp when it changes the AV itself (PublishAV,
// called by package av after each change it commits), and SyncStamps,
// which the agent runs a few times a second, moves the stamps of AVs
// another process changed (a root process with the library).

// stampsName names the page's memfd (in /proc/*/fd).
const stampsName = "xdpfab-avstamps"

// StampPage is the agent's page of AV change stamps, a sealed memfd its
// clients receive with the map descriptors (ReadOnlyFDs' caller appends
// FD) and map read-only: the seals keep them from writing it or changing
// its size, whatever descriptor they hold.
type StampPage struct {
	fd    int
	words []uint64 // 0: stamps handed out; id: AV id's stamp
	// life is a pidfd of the agent's process: clients get it (LifeFD)
	// and see it readable once the process has ended, however it ended.
	life int

	mu    sync.Mutex
	seen  []bpf.AVMeta // what SyncStamps last saw, per AV id
	metas []bpf.AVMeta // SyncStamps' buffers, kept between calls
	keys  []uint32
}

// FD is the page's descriptor, to hand to clients with the map
// descriptors (FromFDs recognises it among them). The page keeps it. -1
// for a nil, zero or closed page.
func (p *StampPage) FD() int {
	if p == nil || p.words == nil {
		return -1
	}
	return p.fd
}

// bump moves AV id's stamp to a value it never had; nothing once the page
// is dead (Close).
func (p *StampPage) bump(id uint32) {
	if id == 0 || int(id) >= len(p.words) {
		return
	}
	for {
		c := atomic.LoadUint64(&p.words[0])
		if c == deadStamps {
			return
		}
		if atomic.CompareAndSwapUint64(&p.words[0], c, c+1) {
			atomic.StoreUint64(&p.words[id], c+1)
			return
		}
	}
}

// SetStampPage makes d publish its AV changes in p (the agent's dataplane:
// PublishAV) and moves every AV's stamp once (what clients copied before
// this agent ran is stale).
func (d *Objects) SetStampPage(p *StampPage) {
	if d == nil || p == nil {
		return
	}
	d.stampPage = p
	for id := 1; id < len(p.words); id++ {
		p.bump(uint32(id))
	}
}

// StampFD is the descriptor of the page d publishes AV change stamps in
// (SetStampPage), -1 when none.
func (d *Objects) StampFD() int {
	if d == nil {
		return -1
	}
	return d.stampPage.FD()
}

// StampFDs are the descriptors to hand to a client after the map
// descriptors (FromFDs recognises them among the tables): the stamp page,
// then its life line (StampPage.LifeFD); none when d publishes no stamps.
func (d *Objects) StampFDs() []int {
	if d == nil || d.stampPage.FD() < 0 {
		return nil
	}
	fds := []int{d.stampPage.FD()}
	if fd := d.stampPage.LifeFD(); fd >= 0 {
		fds = append(fds, fd)
	}
	return fds
}

// LifeFD is the page's life line, a pidfd of the agent's process: a
// client that holds it sees it readable once the process has ended,
// crashed or killed, and then stops trusting the page (watchLife). The
// page keeps it; -1 for a nil, zero or closed page.
func (p *StampPage) LifeFD() int {
	if p.FD() < 0 {
		return -1
	}
	return p.life
}

// PublishAV moves AV id's change stamp, if d publishes them (SetStampPage):
// package av calls it after each change of a named AV it commits.
func (d *Objects) PublishAV(id uint32) {
	if d != nil && d.stampPage != nil {
		d.stampPage.bump(id)
	}
}

// SyncStamps moves the stamps of the AVs whose metadata changed since the
// last call (a change another process made): the agent calls it a few
// times a second.
func (d *Objects) SyncStamps() error {
	if err := d.loaded("AV stamps"); err != nil {
		return err
	}
	if d.stampPage == nil {
		return nil
	}
	p := d.stampPage
	p.mu.Lock()
	defer p.mu.Unlock()
	n := min(int(d.AVMeta.MaxEntries()), len(p.words))
	if len(p.seen) != n {
		p.seen, p.metas, p.keys = make([]bpf.AVMeta, n), make([]bpf.AVMeta, n), make([]uint32, n)
	}
	metas, keys := p.metas, p.keys
	var cursor ebpf.MapBatchCursor
	got := 0
	for got < n {
		k, err := d.AVMeta.BatchLookup(&cursor, keys[got:], metas[got:], nil)
		got += k
		if err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				break
			}
			return fmt.Errorf("AV stamps: read AV metadata: %w", err)
		}
	}
	for i := range got {
		id := keys[i]
		if id == 0 || int(id) >= n {
			continue
		}
		if metas[i] != p.seen[id] {
			p.seen[id] = metas[i]
			p.bump(id)
		}
	}
	return nil
}

// deadStamps in word 0 marks the page of an agent that stopped: nobody
// moves its stamps any more, so a client must not trust a copy because of
// them (AVStamp answers nil for it, and its stamps have all moved).
const deadStamps = ^uint64(0)

// Close marks the page dead (deadStamps: its clients' copies take the way
// that asks the kernel, until they get the next agent's page) and
// releases its descriptors; its mapping stays (lock-free readers in this
// process may still hold pointers into it). An agent that dies without
// Close ends all the same, which its clients see on the life line, and
// each then replaces its view of the page by a dead one (watchLife).
func (p *StampPage) Close() error {
	if p == nil || p.fd < 0 || p.words == nil {
		return nil // nil, zero (not from NewStampPage) or closed
	}
	atomic.StoreUint64(&p.words[0], deadStamps)
	for id := 1; id < len(p.words); id++ {
		atomic.StoreUint64(&p.words[id], deadStamps)
	}
	err := unix.Close(p.fd)
	p.fd = -1
	unix.Close(p.life)
	p.life = -1
	return err
}

// AVStamp is where AV id's change stamp is published in this process's
// view (the agent's page, mapped read-only from FromFDs' descriptors, or
// the agent's own), nil when there is none (OpenPinned, Load without a
// page, an id beyond the page).
func (d *Objects) AVStamp(id uint32) *uint64 {
	if d == nil {
		return nil
	}
	var words []uint64
	if d.stampPage != nil {
		words = d.stampPage.words
	} else if p := d.stamps.Load(); p != nil {
		words = *p
	}
	if id == 0 || int(id) >= len(words) || atomic.LoadUint64(&words[0]) == deadStamps {
		return nil
	}
	return &words[id]
}

// takeStamps files fd as d's view of the agent's stamp page if it is one
// (FromFDs, and again with every batch of descriptors a client fetches:
// an agent that restarted hands out a page of its own), reporting whether
// it was (then fd is closed). A page that is not sealed as the agent seals
// it is not used: copies are then checked with the kernel at every lookup.
//
// A life line (a pidfd) that follows a page is watched on that page's
// behalf (watchLife); one that follows none is closed.
func (d *Objects) takeStamps(fd int) bool {
	if isLifeLine(fd) {
		if p := d.stamps.Load(); p != nil {
			watchLife(fd, *p)
		} else {
			unix.Close(fd)
		}
		return true
	}
	w, ok, err := mapStamps(fd)
	if ok && err == nil {
		d.stamps.Store(&w)
	}
	return ok
}
