package av

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/avtab"
)

// source is one address to insert, or why it cannot be.
type source struct {
	ap  netip.AddrPort
	err error
}

// sources is what one insert call inserts: Insert's addresses as the
// caller gave them (no copy), or the other forms' decoded sources.
type sources struct {
	addrs []netip.AddrPort
	srcs  []source
}

func (s *sources) len() int {
	if s.srcs != nil {
		return len(s.srcs)
	}
	return len(s.addrs)
}

func (s *sources) at(i int) source {
	if s.srcs != nil {
		return s.srcs[i]
	}
	return source{ap: s.addrs[i]}
}

const insertFlags = fi.More | fi.SyncErr | fi.AVUserID | fi.AuthKey

// Insert inserts addrs (fi_av_insert) and returns how many were inserted.
//
// fiAddr, when not nil, must hold len(addrs) elements: each receives the
// address's index, or fi.AddrNotAvail when it failed. With fi.AVUserID
// (AVs opened without it) or fi.AuthKey, fiAddr is also input: the user ID,
// or the auth-key handle from InsertAuthKey, of each address.
//
// flags: fi.More is accepted (the table is written without system calls,
// so there is nothing to defer: docs/semantics.md#fi_more); fi.SyncErr makes ctx a []fi.Errno of
// len(addrs) receiving 0 or each element's errno. On an AV opened with
// fi.Event the result goes to the bound EventQueue, with ctx as context,
// and Insert returns 0.
//
// Like io.Writer, a count below len(addrs) comes with an error naming the
// first failed element; call-level errors insert nothing.
func (a *AV) Insert(addrs []netip.AddrPort, fiAddr []fi.Addr, flags fi.Flags, ctx any) (int, error) {
	if err := a.usable("av insert"); err != nil {
		return 0, err
	}
	return a.insert("av insert", sources{addrs: addrs}, fiAddr, flags, ctx)
}

// InsertRaw inserts addresses in libfabric's raw form, struct sockaddr_in
// or sockaddr_in6 (as in FI_SOURCE_ERR completions' err_data).
func (a *AV) InsertRaw(addrs [][]byte, fiAddr []fi.Addr, flags fi.Flags, ctx any) (int, error) {
	if err := a.usable("av insert"); err != nil {
		return 0, err
	}
	srcs := make([]source, len(addrs))
	for i, raw := range addrs {
		srcs[i].ap, srcs[i].err = fi.DecodeSockaddr(raw)
		// A sockaddr_in whose sin_zero is not zero is not a valid
		// destination to any libfabric provider: the element fails.
		if srcs[i].err == nil && srcs[i].ap.Addr().Is4() && len(raw) >= fi.SockaddrInLen && !allZero(raw[8:16]) {
			srcs[i].err = fmt.Errorf("sockaddr_in with a non-zero sin_zero: %w", fi.EADDRNOTAVAIL)
		}
	}
	return a.insert("av insert", sources{srcs: srcs}, fiAddr, flags, ctx)
}

// InsertStr inserts FI_ADDR_STR addresses ("fi_sockaddr_in://1.2.3.4:5000").
func (a *AV) InsertStr(addrs []string, fiAddr []fi.Addr, flags fi.Flags, ctx any) (int, error) {
	if err := a.usable("av insert"); err != nil {
		return 0, err
	}
	srcs := make([]source, len(addrs))
	for i, s := range addrs {
		srcs[i].ap, srcs[i].err = fi.ParseAddrStr(s)
	}
	return a.insert("av insert", sources{srcs: srcs}, fiAddr, flags, ctx)
}

func (a *AV) insert(op string, srcs sources, fiAddr []fi.Addr, flags fi.Flags, ctx any) (int, error) {
	unlock := a.lock()
	defer unlock()
	n := srcs.len()
	status, err := a.checkInsert(n, fiAddr, flags, ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if err := a.begin(true); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	// Per-address results: on the stack for a few, else in scratch space
	// the AV keeps between calls (the lock is held; report copies them).
	var small [8]fi.Errno
	var errnos []fi.Errno
	if n <= len(small) {
		errnos = small[:n]
	} else {
		if cap(a.insErrnos) < n {
			a.insErrnos = make([]fi.Errno, n)
		}
		errnos = a.insErrnos[:n]
	}
	changed := false
	record := func(i int, idx uint32, errno fi.Errno) {
		errnos[i] = errno
		changed = changed || errno == 0
		if fiAddr != nil {
			fiAddr[i] = fi.AddrNotAvail
			if errno == 0 {
				fiAddr[i] = fi.Addr(idx)
			}
		}
	}
	input := func(i int) fi.Addr {
		if fiAddr != nil {
			return fiAddr[i]
		}
		return 0
	}
	if n == 1 {
		var p prepared
		a.prepare(srcs.at(0), &p)
		idx, errno := a.insertOne(&p, input(0), flags)
		record(0, idx, errno)
	} else {
		// The sources ahead (ring[j%touchAhead] for source j) are
		// checked and hashed, and their buckets loaded, while earlier
		// ones go in: their cache misses overlap, and each source is
		// looked at once.
		var ring [touchAhead]prepared
		for j := range min(touchAhead, n) {
			a.prepare(srcs.at(j), &ring[j])
			a.touch(&ring[j])
		}
		for i := range n {
			cur := &ring[i%touchAhead]
			idx, errno := a.insertOne(cur, input(i), flags)
			record(i, idx, errno)
			if j := i + touchAhead; j < n {
				a.prepare(srcs.at(j), cur)
				a.touch(cur)
			}
		}
	}
	if changed {
		if err := a.commit(); err != nil {
			return a.report(op, errnos, status, ctx, fmt.Errorf("inserted, but publishing the change failed: %w", err))
		}
	}
	return a.report(op, errnos, status, ctx, nil)
}

// touchAhead is how far ahead of the address it inserts a batch insert
// touches the table (avtab.Table.Touch).
const touchAhead = 8

// checkInsert validates the call as a whole; it changes nothing.
func (a *AV) checkInsert(n int, fiAddr []fi.Addr, flags fi.Flags, ctx any) ([]fi.Errno, error) {
	if bad := flags &^ insertFlags; bad != 0 {
		return nil, fmt.Errorf("flags %v not supported: %w", bad, fi.EBADFLAGS)
	}
	if fiAddr != nil && len(fiAddr) < n {
		return nil, fmt.Errorf("fi_addr holds %d of %d addresses: %w", len(fiAddr), n, fi.EINVAL)
	}
	if flags&fi.AVUserID != 0 {
		switch {
		case fiAddr == nil:
			return nil, fmt.Errorf("FI_AV_USER_ID needs fi_addr as input: %w", fi.EINVAL)
		case flags&fi.AuthKey != 0:
			return nil, fmt.Errorf("FI_AV_USER_ID with FI_AUTH_KEY: %w", fi.EINVAL)
		case a.attr.Flags&(fi.AVUserID|fi.Symmetric) != 0:
			return nil, fmt.Errorf("per-insert FI_AV_USER_ID on an AV opened with FI_AV_USER_ID or FI_SYMMETRIC "+
				"(use SetUserID): %w", fi.EINVAL)
		}
	}
	if flags&fi.AuthKey != 0 && fiAddr == nil {
		return nil, fmt.Errorf("FI_AUTH_KEY needs the auth-key fi_addr as input: %w", fi.EINVAL)
	}
	var status []fi.Errno
	if flags&fi.SyncErr != 0 {
		if a.attr.Flags&fi.Event != 0 {
			return nil, fmt.Errorf("FI_SYNC_ERR on an FI_EVENT (asynchronous) AV: %w", fi.EBADFLAGS)
		}
		s, ok := ctx.([]fi.Errno)
		if !ok || len(s) < n {
			return nil, fmt.Errorf("FI_SYNC_ERR needs a []fi.Errno context of %d elements: %w", n, fi.EINVAL)
		}
		status = s
	}
	if a.attr.Flags&fi.Event != 0 && a.eq == nil {
		return nil, fmt.Errorf("FI_EVENT AV has no event queue bound: %w", fi.ENOEQ)
	}
	return status, nil
}

// prepared is one address of an insert call made ready: its table
// probe, or why it cannot go in.
type prepared struct {
	probe avtab.Probe
	errno fi.Errno
}

// prepare checks s and makes its probe in p.
func (a *AV) prepare(s source, p *prepared) {
	ap := s.ap
	ip := ap.Addr().Unmap()
	if s.err != nil || !ap.IsValid() || ap.Port() == 0 || ip.IsUnspecified() || ip.Zone() != "" || !a.attr.familyOK(ap) {
		p.errno = fi.EADDRNOTAVAIL
		return
	}
	p.errno = 0
	p.probe.ResetAddrPort(ap)
}

// touch computes p's buckets and starts loading them (avtab.Table.Touch).
func (a *AV) touch(p *prepared) {
	if p.errno == 0 {
		a.tab.Touch(&p.probe)
	}
}

// insertOne inserts one prepared address into the table. XDP translates
// it from the slot write on (Place), which comes after the index's entry.
func (a *AV) insertOne(pr *prepared, in fi.Addr, flags fi.Flags) (uint32, fi.Errno) {
	if pr.errno != 0 {
		return 0, pr.errno
	}
	var keyVal uint32
	if flags&fi.AuthKey != 0 {
		h, ok := a.keyHandle(in)
		if !ok {
			return 0, fi.EINVAL
		}
		keyVal = a.keys[h].value
	}
	p := &pr.probe
	userID := uint64(fi.AddrNotAvail)
	var eflags uint8
	if a.attr.Flags&fi.AVUserID != 0 {
		eflags |= bpf.AVFUserID
	}
	if flags&fi.AVUserID != 0 {
		eflags |= bpf.AVFUserID
		userID = uint64(in)
	}

	pos, ok := a.tab.LocateProbe(p)
	if ok {
		slot := a.tab.Slot(pos)
		idx := slot.FiAddr
		uid, _, refcnt := a.tab.Aux(idx)
		if slot.AuthKey != keyVal {
			return 0, fi.EINVAL // the address is in the AV under another auth key
		}
		if refcnt == ^uint32(0) {
			return 0, fi.EOVERFLOW
		}
		a.tab.SetRefcnt(idx, refcnt+1)
		if flags&fi.AVUserID != 0 && (uid != userID || slot.Flags&bpf.AVFUserID == 0) {
			a.tab.Update(pos, userID, slot.Flags|bpf.AVFUserID)
		}
		return idx, 0
	}

	if err := a.dp.ReserveAVEntries(1); err != nil {
		return 0, fi.Code(err)
	}
	high := a.tab.High()
	idx, fromFree := a.free.pop()
	if !fromFree {
		idx = high
	}
	if !fromFree && high > MaxIndex {
		a.dp.ReleaseAVEntries(1)
		return 0, fi.ENOSPC
	}
	if err := a.place(p, idx, userID, eflags, keyVal); err != nil {
		if fromFree {
			a.free.push(idx)
		}
		a.dp.ReleaseAVEntries(1)
		return 0, fi.Code(err)
	}
	if idx >= high {
		a.tab.SetHigh(idx + 1)
	}
	return idx, 0
}

// place writes a new entry, first growing the table when idx is beyond
// its capacity, or rebuilding it when no slot could be freed for the
// source (a new seed; from the second time on, twice the size).
func (a *AV) place(probe *avtab.Probe, idx uint32, userID uint64, flags uint8, keyVal uint32) error {
	for attempt := 0; ; attempt++ {
		t := a.tab
		if idx < t.Cap() {
			_, err := t.PlaceAt(probe, idx, userID, flags, keyVal)
			if !errors.Is(err, avtab.ErrTableFull) {
				return err
			}
		}
		capa := t.Cap()
		reseed := idx < capa
		switch {
		case attempt >= 4:
			return fmt.Errorf("no slot for %v after %d table rebuilds: %w", probe.Addr().AddrPort(), attempt, fi.ENOSPC)
		case idx >= capa:
			capa = max(2*capa, idx+1)
		case attempt > 0:
			capa *= 2
		}
		if reseed && a.shared && attempt == 0 {
			if wait := a.reseedCost*reseedShare - time.Since(a.reseedAt); wait > 0 {
				return fmt.Errorf("no slot for %v without rebuilding the table, rebuilt %v ago for the same reason: retry in %v: %w",
					probe.Addr().AddrPort(), time.Since(a.reseedAt).Round(time.Millisecond), wait.Round(time.Millisecond), fi.EAGAIN)
			}
		}
		t0 := time.Now()
		if err := a.rebuild(capa); err != nil {
			return err
		}
		if reseed {
			a.reseedAt = time.Now()
			a.reseedCost = a.reseedAt.Sub(t0)
		}
		// The new table has another seed: the source's buckets moved.
		src := probe.Addr()
		*probe, _, _ = a.tab.Locate(&src)
	}
}

// reseedShare bounds how much of the time a named AV's writers may spend
// rebuilding its table for want of a slot (a new seed): after a rebuild
// that took d, an insert that needs another within reseedShare*d fails
// with EAGAIN (once it started, its further rebuilds, twice the size each,
// go on). Random
// sources need such a rebuild about never; sources chosen to collide
// (the seed is in the table, which every reader of a named AV can read)
// need one per few inserts, each one a copy of the whole table under the
// node's dataplane lock, which every AV change and endpoint of the node
// waits on: 35 ms per five inserts at 60,000 entries, measured.
const reseedShare = 10

// rebuildFault, when set (tests: export_test.go), makes rebuilds fail.
var rebuildFault func() error

// rebuild replaces the table by one with room for capa indices and a new
// seed, holding every entry at the same index: XDP reads the old table
// until the swap (one update of xdpfab_avtab) and the new one after it, so
// no frame goes untranslated or is translated to another index. The old
// table is released once no XDP run can still read it.
func (a *AV) rebuild(capa uint32) error {
	if rebuildFault != nil {
		if err := rebuildFault(); err != nil {
			return err
		}
	}
	for try := 0; ; try++ {
		nt, err := avtab.New(a.dp, a.id, capa)
		if err != nil {
			return err
		}
		if err := nt.CopyFrom(a.tab); err != nil {
			nt.Close()
			if errors.Is(err, avtab.ErrTableFull) && try < 3 {
				continue
			}
			return err
		}
		// Retired first: should this process die between the install and
		// the retirement, other processes would keep writing a table XDP
		// no longer reads. Retired early, they re-open (and find the old
		// one, still right, until the install).
		a.tab.MarkRetired(true)
		if err := avtab.Install(a.dp, a.id, nt); err != nil {
			a.tab.MarkRetired(false)
			nt.Close()
			return err
		}
		old := a.tab
		a.setTab(nt)
		a.grown++
		return old.Retire()
	}
}

// report turns per-element results into the call's result: status array,
// events (FI_EVENT), count and error.
func (a *AV) report(op string, errnos []fi.Errno, status []fi.Errno, ctx any, cause error) (int, error) {
	n, first := 0, -1
	for i, e := range errnos {
		if status != nil {
			status[i] = e
		}
		if e == 0 {
			n++
		} else if first < 0 {
			first = i
		}
	}
	if a.attr.Flags&fi.Event != 0 {
		a.eq.postInsert(ctx, errnos, n)
		if cause != nil {
			return 0, fmt.Errorf("%s: %w", op, cause)
		}
		return 0, nil
	}
	switch {
	case cause != nil:
		return 0, fmt.Errorf("%s: %w", op, cause)
	case first >= 0:
		return n, &InsertError{Op: op, Inserted: n, Total: len(errnos), First: first, Errno: errnos[first]}
	}
	return n, nil
}

// InsertError is the error of an insert call in which some addresses
// failed while the call itself worked: Inserted of Total went in, and the
// per-address outcome is in fi_addr (fi.AddrNotAvail) and, with
// fi.SyncErr, the status array. errors.Is matches the first failure's
// errno.
type InsertError struct {
	Op              string
	Inserted, Total int
	First           int // index of the first failed address
	Errno           fi.Errno
}

func (e *InsertError) Error() string {
	if e == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%s: %d of %d inserted; element %d: %v", e.Op, e.Inserted, e.Total, e.First, e.Errno)
}

// Unwrap exposes the first failure's errno (nil for a nil *InsertError).
func (e *InsertError) Unwrap() error {
	if e == nil {
		return nil
	}
	return e.Errno
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
