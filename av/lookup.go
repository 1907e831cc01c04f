package av

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/avtab"
)

// Lookup copies the address at fiAddr into buf (fi_av_lookup) and returns
// the address's full size, which may exceed len(buf): truncation is not an
// error. The format is the AV's: a raw sockaddr_in/sockaddr_in6, or for
// FI_ADDR_STR a NUL-terminated string. An unused, removed or out-of-range
// fi_addr fails with EINVAL.
//
// A sockaddr is read straight from the table into buf, without a lock, a
// locked instruction, a system call or an allocation (see LookupAddr).
func (a *AV) Lookup(fiAddr fi.Addr, buf []byte) (int, error) {
	if a != nil && a.attr.AddrFormat != fi.FormatStr {
		if r := a.fast.Load(); r != nil && fiAddr <= fi.Addr(^uint32(0)) && !r.Retired() {
			if n, ok := r.Sockaddr(uint32(fiAddr), buf); ok {
				return n, nil
			}
		}
	}
	ap, err := a.LookupAddr(fiAddr)
	if err != nil {
		return 0, err
	}
	var tmp [64]byte
	raw := a.encode(tmp[:0], ap)
	copy(buf, raw)
	return len(raw), nil
}

// LookupAddr returns the address at fiAddr.
//
// It reads the AV's table without a lock (avtab.Reader: a sequence-number
// read of the index's slot), with no system call and no allocation,
// unless the table was replaced by another process (growth) or this
// process holds a copy of it (a reader that could open it read-only
// only), or the index is not in use: then it takes the AV's lock and
// re-reads first.
func (a *AV) LookupAddr(fiAddr fi.Addr) (netip.AddrPort, error) {
	if err := a.usable("av lookup"); err != nil {
		return netip.AddrPort{}, err
	}
	if r := a.fast.Load(); r != nil && fiAddr <= fi.Addr(^uint32(0)) && !r.Retired() {
		if addr, ok := r.Addr(uint32(fiAddr)); ok {
			return addr.AddrPort(), nil
		}
	}
	unlock := a.lock()
	defer unlock()
	if err := a.begin(false); err != nil {
		return netip.AddrPort{}, fmt.Errorf("av lookup: %w", err)
	}
	idx, ok := a.index(fiAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("av lookup: fi_addr %v is not in the AV: %w", fiAddr, fi.EINVAL)
	}
	addr, ok := a.tab.Addr(idx)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("av lookup: fi_addr %v is being changed by another process: %w", fiAddr, fi.EAGAIN)
	}
	return addr.AddrPort(), nil
}

func (a *AV) encode(dst []byte, ap netip.AddrPort) []byte {
	if a.attr.AddrFormat == fi.FormatStr {
		return append(append(dst, fi.FormatAddrStr(ap)...), 0)
	}
	return fi.EncodeSockaddr(dst, ap)
}

// StrAddr writes addr (in the AV's format; it need not be in the AV) into
// buf as a NUL-terminated string (fi_av_straddr), truncating to len(buf),
// and returns the length needed including the NUL.
func (a *AV) StrAddr(addr []byte, buf []byte) (int, error) {
	if err := a.usable("av straddr"); err != nil {
		return 0, err
	}
	var ap netip.AddrPort
	var err error
	if a.attr.AddrFormat == fi.FormatStr {
		str, _, _ := strings.Cut(string(addr), "\x00")
		ap, err = fi.ParseAddrStr(str)
	} else {
		ap, err = fi.DecodeSockaddr(addr)
	}
	if err != nil {
		return 0, fmt.Errorf("av straddr: %w", err)
	}
	s := fi.FormatAddrStr(ap)
	if len(buf) > 0 {
		n := copy(buf[:len(buf)-1], s)
		buf[n] = 0
	}
	return len(s) + 1, nil
}

// Len returns the number of addresses in the AV.
func (a *AV) Len() (int, error) {
	if err := a.usable("av len"); err != nil {
		return 0, err
	}
	unlock := a.lock()
	defer unlock()
	if err := a.begin(false); err != nil {
		return 0, fmt.Errorf("av len: %w", err)
	}
	return int(a.tab.Live()), nil
}

// Entry describes one address of the AV (for listings).
type Entry struct {
	Addr    fi.Addr
	Peer    netip.AddrPort
	UserID  fi.Addr
	Refs    uint32
	AuthKey fi.Addr // fi.AddrNotAvail when not bound to a key
}

// EntryAt describes the address at fiAddr.
func (a *AV) EntryAt(fiAddr fi.Addr) (Entry, error) {
	if err := a.usable("av entry"); err != nil {
		return Entry{}, err
	}
	unlock := a.lock()
	defer unlock()
	if err := a.begin(false); err != nil {
		return Entry{}, fmt.Errorf("av entry: %w", err)
	}
	idx, ok := a.index(fiAddr)
	if !ok {
		return Entry{}, fmt.Errorf("av entry: fi_addr %v is not in the AV: %w", fiAddr, fi.EINVAL)
	}
	return a.entry(idx), nil
}

func (a *AV) entry(idx uint32) Entry {
	uid, pos, refcnt := a.tab.Aux(idx)
	s, _ := a.tab.ReadSlot(pos)
	ak := fi.AddrNotAvail
	if h, ok := a.keyOf(s.AuthKey); ok {
		ak = keyAddr(h)
	}
	return Entry{Addr: fi.Addr(idx), Peer: avtab.SlotAddr(&s).AddrPort(), UserID: fi.Addr(uid), Refs: refcnt, AuthKey: ak}
}

// Entries returns every address of the AV in index order.
func (a *AV) Entries() ([]Entry, error) {
	if err := a.usable("av entries"); err != nil {
		return nil, err
	}
	unlock := a.lock()
	defer unlock()
	if err := a.begin(false); err != nil {
		return nil, fmt.Errorf("av entries: %w", err)
	}
	out := make([]Entry, 0, a.tab.Live())
	for idx := range a.tab.High() {
		if _, _, refcnt := a.tab.Aux(idx); refcnt > 0 {
			out = append(out, a.entry(idx))
		}
	}
	return out, nil
}

// EntriesPage is Entries' page of at most limit entries from the
// offset-th (in index order), and how many entries the AV holds: what a
// listing fetched page by page needs, without building the entries of
// every other page (it reads only their use counts). offset beyond the
// entries is EINVAL; limit 0 or less is an empty page.
func (a *AV) EntriesPage(offset, limit int) (_ []Entry, total int, err error) {
	if err := a.usable("av entries"); err != nil {
		return nil, 0, err
	}
	unlock := a.lock()
	defer unlock()
	if err := a.begin(false); err != nil {
		return nil, 0, fmt.Errorf("av entries: %w", err)
	}
	total = int(a.tab.Live())
	if offset < 0 || offset > total {
		return nil, total, fmt.Errorf("av entries: offset %d of %d entries: %w", offset, total, fi.EINVAL)
	}
	limit = min(max(limit, 0), total-offset)
	out := make([]Entry, 0, limit)
	seen := 0
	for idx := range a.tab.High() {
		if len(out) == limit {
			break
		}
		if _, _, refcnt := a.tab.Aux(idx); refcnt > 0 {
			if seen >= offset {
				out = append(out, a.entry(idx))
			}
			seen++
		}
	}
	return out, total, nil
}

// SetUserID sets the user ID reported in completions for fiAddr
// (fi_av_set_user_id); the AV must have been opened with fi.AVUserID.
// With fi.AuthKey, fiAddr is an auth-key handle and the ID is the one
// reported for unknown sources of that key.
func (a *AV) SetUserID(fiAddr fi.Addr, userID fi.Addr, flags fi.Flags) error {
	if err := a.usable("av set_user_id"); err != nil {
		return err
	}
	unlock := a.lock()
	defer unlock()
	if a.attr.Flags&fi.AVUserID == 0 {
		return fmt.Errorf("av set_user_id: AV opened without FI_AV_USER_ID: %w", fi.EINVAL)
	}
	if bad := flags &^ fi.AuthKey; bad != 0 {
		return fmt.Errorf("av set_user_id: flags %v not supported: %w", bad, fi.EINVAL)
	}
	if err := a.begin(true); err != nil {
		return fmt.Errorf("av set_user_id: %w", err)
	}
	if flags&fi.AuthKey != 0 {
		h, ok := a.keyHandle(fiAddr)
		if !ok {
			return fmt.Errorf("av set_user_id: %v is not an auth key of the AV: %w", fiAddr, fi.EINVAL)
		}
		k := a.keys[h]
		k.userID = uint64(userID)
		if err := a.putKey(h, &k); err != nil {
			return fmt.Errorf("av set_user_id: %w", err)
		}
		a.keys[h] = k
		return a.commit()
	}
	idx, ok := a.index(fiAddr)
	if !ok {
		return fmt.Errorf("av set_user_id: fi_addr %v is not in the AV: %w", fiAddr, fi.EINVAL)
	}
	_, pos, _ := a.tab.Aux(idx)
	slot, _ := a.tab.ReadSlot(pos)
	a.tab.Update(pos, uint64(userID), slot.Flags)
	return a.commit()
}
