package av

import (
	"fmt"
	"net/netip"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
)

// source is one address to insert, or why it cannot be.
type source struct {
	ap  netip.AddrPort
	err error
}

const insertFlags = fi.More | fi.SyncErr | fi.AVUserID | fi.AuthKey

// Insert inserts addrs (fi_av_insert) and returns how many were inserted.
//
// fiAddr, when not nil, must hold len(addrs) elements: each receives the
// address's index, or fi.AddrNotAvail when it failed. With fi.AVUserID
// (AVs opened without it) or fi.AuthKey, fiAddr is also input: the user ID,
// or the auth-key handle from InsertAuthKey, of each address.
//
// flags: fi.More defers the map writes until a call without it (private
// AVs; a named AV writes every call); fi.SyncErr makes ctx a []fi.Errno of
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
	srcs := make([]source, len(addrs))
	for i, ap := range addrs {
		srcs[i].ap = ap
	}
	return a.insert("av insert", srcs, fiAddr, flags, ctx)
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
	return a.insert("av insert", srcs, fiAddr, flags, ctx)
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
	return a.insert("av insert", srcs, fiAddr, flags, ctx)
}

func (a *AV) insert(op string, srcs []source, fiAddr []fi.Addr, flags fi.Flags, ctx any) (int, error) {
	unlock := a.lock()
	defer unlock()
	status, err := a.checkInsert(srcs, fiAddr, flags, ctx)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	if err := a.begin(true); err != nil {
		return 0, fmt.Errorf("%s: %w", op, err)
	}
	m := a.pending.mark()
	errnos := make([]fi.Errno, len(srcs))
	for i, s := range srcs {
		var in fi.Addr
		if fiAddr != nil {
			in = fiAddr[i]
		}
		idx, errno := a.insertOne(s, in, flags)
		errnos[i] = errno
		if fiAddr != nil {
			fiAddr[i] = fi.AddrNotAvail
			if errno == 0 {
				fiAddr[i] = fi.Addr(idx)
			}
		}
	}

	deferred := flags&fi.More != 0 && !a.shared && len(a.pending.revK) < maxPending
	if !deferred {
		if err := a.flushLocked(m); err != nil {
			// Everything this call staged was undone.
			for i := range errnos {
				if errnos[i] == 0 {
					errnos[i] = fi.Code(err)
				}
				if fiAddr != nil {
					fiAddr[i] = fi.AddrNotAvail
				}
			}
			return a.report(op, errnos, status, ctx, err)
		}
	}
	return a.report(op, errnos, status, ctx, nil)
}

// checkInsert validates the call as a whole; it changes nothing.
func (a *AV) checkInsert(srcs []source, fiAddr []fi.Addr, flags fi.Flags, ctx any) ([]fi.Errno, error) {
	if bad := flags &^ insertFlags; bad != 0 {
		return nil, fmt.Errorf("flags %v not supported: %w", bad, fi.EBADFLAGS)
	}
	if fiAddr != nil && len(fiAddr) < len(srcs) {
		return nil, fmt.Errorf("fi_addr holds %d of %d addresses: %w", len(fiAddr), len(srcs), fi.EINVAL)
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
		if !ok || len(s) < len(srcs) {
			return nil, fmt.Errorf("FI_SYNC_ERR needs a []fi.Errno context of %d elements: %w", len(srcs), fi.EINVAL)
		}
		status = s
	}
	if a.attr.Flags&fi.Event != 0 && a.eq == nil {
		return nil, fmt.Errorf("FI_EVENT AV has no event queue bound: %w", fi.ENOEQ)
	}
	return status, nil
}

// insertOne inserts one address into the cache and stages its map writes.
func (a *AV) insertOne(s source, in fi.Addr, flags fi.Flags) (uint32, fi.Errno) {
	if s.err != nil {
		return 0, fi.EADDRNOTAVAIL
	}
	ap := s.ap
	ip := ap.Addr().Unmap()
	if !ap.IsValid() || ap.Port() == 0 || ip.IsUnspecified() || ip.Zone() != "" || !a.attr.familyOK(ap) {
		return 0, fi.EADDRNOTAVAIL
	}
	var keyRef uint32
	if flags&fi.AuthKey != 0 {
		h, ok := a.keyHandle(in)
		if !ok {
			return 0, fi.EINVAL
		}
		keyRef = h + 1
	}
	addr := bpf.MakeAddr(ap)
	userID := uint64(fi.AddrNotAvail)
	var eflags uint32
	if a.attr.Flags&fi.AVUserID != 0 {
		eflags |= bpf.AVFUserID
	}
	if flags&fi.AVUserID != 0 {
		eflags |= bpf.AVFUserID
		userID = uint64(in)
	}

	if idx, ok := a.byAddr[addr]; ok {
		e := &a.entries[idx]
		if e.authKey != keyRef {
			return 0, fi.EINVAL // the address is in the AV under another auth key
		}
		if e.refcnt == ^uint32(0) {
			return 0, fi.EOVERFLOW
		}
		a.pending.prior = append(a.pending.prior, priorEntry{idx, *e})
		e.refcnt++
		fwd := false
		if flags&fi.AVUserID != 0 && (e.userID != userID || e.flags&bpf.AVFUserID == 0) {
			e.userID, e.flags = userID, e.flags|bpf.AVFUserID
			fwd = true
		}
		a.stage(idx, fwd)
		return idx, 0
	}

	if err := a.dp.ReserveAVEntries(1); err != nil {
		return 0, fi.Code(err)
	}
	var idx uint32
	if len(a.free) > 0 {
		idx = a.free.pop()
	} else {
		if len(a.entries) > MaxIndex {
			a.dp.ReleaseAVEntries(1)
			return 0, fi.ENOSPC
		}
		idx = uint32(len(a.entries))
		a.entries = append(a.entries, entry{})
	}
	a.entries[idx] = entry{addr: addr, userID: userID, refcnt: 1, authKey: keyRef, flags: eflags}
	a.byAddr[addr] = idx
	a.pending.fresh = append(a.pending.fresh, idx)
	a.stage(idx, true)
	return idx, 0
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
