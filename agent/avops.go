package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/avtab"
	"github.com/xdpfab/xdpfab/loader"
	"golang.org/x/sys/unix"
)

// namedAV returns the agent's handle on the named AV, opening it (it must
// exist).
func (a *Agent) namedAV(name string) (*av.AV, error) {
	// A name that cannot be an AV's is refused before it is looked for
	// (or quoted in an error: ValidName quotes only names of valid length).
	if err := av.ValidName(name); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if v := a.cachedAV(name); v != nil {
		return v, nil
	}
	// Exists in the pinned maps (made by an earlier agent or process)?
	ro, err := av.Open(a.dp, &av.Attr{Name: name, Flags: fi.Read})
	if err != nil {
		return nil, fmt.Errorf("AV %q: %w", name, err)
	}
	attr := ro.Attr()
	ro.Close()
	attr.Flags &^= fi.Read
	v, err := av.Open(a.dp, &attr)
	if err != nil {
		return nil, fmt.Errorf("AV %q: %w", name, err)
	}
	a.avs[name] = v
	return v, nil
}

// cachedAV returns the agent's open handle on the named AV, if it has one
// that still works; a.mu held. A handle whose AV was destroyed outside the
// agent (by a process with the library) is closed for good (its every
// call is EOPBADSTATE, av.AV's begin): it is dropped, so that the name is
// opened afresh, and an AV made again under it is found. Whether the AV is
// still there is read from its metadata slot, one map lookup: not through
// the handle, whose calls wait for the dataplane lock, which a.mu must not
// wait for (a long insert or rebuild would hold up every caller of a.mu).
func (a *Agent) cachedAV(name string) *av.AV {
	v := a.avs[name]
	if v == nil {
		return nil
	}
	var m bpf.AVMeta
	if err := a.dp.AVMeta.Lookup(v.ID(), &m); err != nil || m.InUse != 0 && m.NameString() == name {
		return v // there (or unknown: the handle's own calls will tell)
	}
	delete(a.avs, name)
	if err := v.Close(); err != nil {
		a.log.Warn("close the handle of a destroyed AV", "av", name, "err", err)
	}
	a.log.Info("AV destroyed outside the agent: its handle dropped", "av", name)
	return nil
}

// mayWriteAV refuses a caller that may not change the named AV: admins
// may change every AV; others the AVs they own (created) and those whose
// group they are in. The owner is recorded with the AV in its pinned
// meta, so it survives agent restarts; an AV made by a process outside the
// agent belongs to that process's uid. It is a first look, without the
// name's lock; what changes an AV checks again with writableAV.
func (a *Agent) mayWriteAV(who caller, what, name string) error {
	if err := av.ValidName(name); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if a.admin(who) {
		return nil
	}
	o, err := av.OwnerOf(a.dp, name)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return a.mayWrite(who, what, name, o)
}

// mayWrite refuses who a change of the named AV, owned by o, unless it is
// an admin, the owner or in the AV's group.
func (a *Agent) mayWrite(who caller, what, name string, o av.Owner) error {
	if a.admin(who) || o.UID == who.uid || o.Group != av.NoGroup && who.inGroup(o.Group) {
		return nil
	}
	return fmt.Errorf("%s %q: uid %d is neither its owner (uid %d) nor in its group: %w", what, name, who.uid, o.UID, fi.EACCES)
}

// avRef is a named AV a request changes: the agent's handle and the owner
// the caller's right was checked against.
type avRef struct {
	name  string
	v     *av.AV
	owner uint32
}

// avLocks serialise the agent's changes of AVs: per name, and per owner
// for the owner's quotas.
type avLocks struct {
	mu     sync.Mutex
	names  map[string]*usedLock
	owners map[uint32]*usedLock
	// users serialises the checks of inserts against the node's limit of
	// entries of uids other than root (Limits.Entries), which inserts
	// into the AVs of several owners pass at once: pending are those
	// checked and not done yet, whose entries may not all be in their
	// tables yet.
	users   sync.Mutex
	pending map[*pendingInsert]bool
}

// pendingInsert is an insert of up to n entries into AV id, whose table
// held live entries when the insert was checked. No other change of the
// AV runs meanwhile (the name's lock): what the table holds beyond live
// is the insert's.
type pendingInsert struct {
	id      uint32
	live, n int
}

// outstanding is what of p is not in AV p.id's table yet, which holds
// live entries now (-1: the table is gone, or could not be read).
func (p *pendingInsert) outstanding(live int) int {
	if live < 0 {
		return p.n
	}
	return p.n - min(max(live-p.live, 0), p.n)
}

// usedLock is a lock of a keyed set (avLocks) that lives while requests
// hold or wait for it.
type usedLock struct {
	sync.Mutex
	users int // requests holding or waiting for it
}

// lockUsed takes key's lock in *m (guarded by mu), making it if there is
// none, and returns its release, which drops it once unused.
func lockUsed[K comparable](mu *sync.Mutex, m *map[K]*usedLock, key K) (unlock func()) {
	mu.Lock()
	if *m == nil {
		*m = map[K]*usedLock{}
	}
	l := (*m)[key]
	if l == nil {
		l = &usedLock{}
		(*m)[key] = l
	}
	l.users++
	mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		mu.Lock()
		if l.users--; l.users == 0 {
			delete(*m, key)
		}
		mu.Unlock()
	}
}

// lockName takes the named AV's lock, which av create, av destroy and
// every change of the AV hold from the check of the caller's right to the
// end of the change: no other request of the agent destroys the AV, or
// makes another under its name, in between. (Checked first and changed
// after under the name alone, an owner's second destroy passed its check
// while its first ran, and destroyed the AV another uid made under the
// name in between.) The names are valid AV names; a lock lives as long as
// requests hold or wait for it.
func (a *Agent) lockName(name string) (unlock func()) {
	return lockUsed(&a.avl.mu, &a.avl.names, name)
}

// lockOwner takes uid's quota lock, which every insert into uid's AVs and
// every AV uid creates hold from their quota check to their end: the check
// and the change are one step, so that parallel requests of one owner
// from many connections cannot each pass against what the AVs held before
// any of them ran. It is taken under a name's lock, never the other way.
func (a *Agent) lockOwner(uid uint32) (unlock func()) {
	return lockUsed(&a.avl.mu, &a.avl.owners, uid)
}

// changeAV runs f on the named AV for who, under the name's lock, once
// who's right is checked on the AV f gets (the meta of the handle's slot):
// the AV checked is the AV changed.
func (a *Agent) changeAV(who caller, what, name string, f func(avRef) error) error {
	unlock := a.lockName(name)
	defer unlock()
	v, err := a.namedAV(name)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	var m bpf.AVMeta
	if err := a.dp.AVMeta.Lookup(v.ID(), &m); err != nil || m.InUse == 0 || m.NameString() != name {
		return fmt.Errorf("%s %q: no such AV: %w", what, name, fi.ENOENT)
	}
	if err := a.mayWrite(who, what, name, av.Owner{UID: m.OwnerUid, Group: m.GroupGid}); err != nil {
		return err
	}
	return f(avRef{name: name, v: v, owner: m.OwnerUid})
}

// mayReopen refuses av create of the named AV, which exists, to a caller
// that may not change it: creating a name another uid holds is EEXIST
// (naming the owner), not an opening of the other's AV, which the caller
// would bind endpoints to and its owner would control. Whoever may change
// it (its owner, its group, admins) opens it as fi_av_open does. Reading
// needs no create: every group member may read every AV (av lookup and
// list, client.OpenAV, fi_av_open with FI_READ).
func (a *Agent) mayReopen(who caller, name string) error {
	err := a.mayWriteAV(who, "av create", name)
	if !errors.Is(err, fi.EACCES) {
		return err
	}
	o, oerr := av.OwnerOf(a.dp, name)
	if oerr != nil {
		return fmt.Errorf("av create: %w", oerr)
	}
	group := "no group"
	if o.Group != av.NoGroup {
		group = fmt.Sprintf("group %d", o.Group)
	}
	return fmt.Errorf("av create %q: exists, owned by uid %d (%s); uid %d may read it (av lookup, av list, client.OpenAV) but not change it: choose another name: %w",
		name, o.UID, group, who.uid, fi.EEXIST)
}

// countAVs counts the named AVs uid owns, and those every uid but root
// owns together.
func (a *Agent) countAVs(uid uint32) (own, users int) {
	av.Slots(a.dp, func(_ uint32, m *bpf.AVMeta) {
		if m.NameString() == "" {
			return
		}
		if m.OwnerUid == uid {
			own++
		}
		if m.OwnerUid != 0 {
			users++
		}
	})
	return own, users
}

// tableHeader reads the header of AV id's table: its room (Cap), entries
// (Live) and high mark (High).
func (a *Agent) tableHeader(id uint32) (bpf.AVHdr, error) {
	return a.heads.header(a.dp, id)
}

// tableHeads keeps a read-only mapping of the first page of each AV table
// whose header the quota checks read, so that a check of every AV's
// entries (reserveEntries, on every insert) is loads, not three system
// calls per AV: with 150 AVs an insert through the agent took 1.6 ms,
// 0.9 ms before the node-wide entries limit, most of it opening tables. A
// mapping holds its table: it is unmapped when the table is retired
// (growth, destroy: seen at the next read), when the agent destroys the
// AV (drop), when its id is no longer in use (prune) and at close.
type tableHeads struct {
	mu sync.Mutex
	m  map[uint32][]byte
}

func (t *tableHeads) header(dp *loader.Objects, id uint32) (bpf.AVHdr, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var hdr bpf.AVHdr
	read := func(page []byte) (ok bool) {
		hdr, ok = liveHeader(page, id)
		return ok
	}
	if page := t.m[id]; page != nil {
		if read(page) {
			return hdr, nil
		}
		t.dropLocked(id)
	}
	// The pinned table as it is (readOnly: no repair of xdpfab_avtab,
	// which needs the dataplane lock), writable for the agent's root:
	// mapping needs a writable descriptor.
	m, writable, err := dp.OpenAVTableMap(id, true)
	if err != nil {
		return hdr, err
	}
	defer m.Close() // the mapping holds the table, not the descriptor
	page, err := []byte(nil), unix.EACCES
	if writable {
		page, err = unix.Mmap(m.FD(), 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	}
	if err != nil || !read(page) {
		if err == nil {
			unix.Munmap(page)
		}
		// Not mappable, or retired between the open and the read: one
		// read through the descriptor, and nothing kept.
		var buf [bpf.AVPage]byte
		if err := m.Lookup(uint32(0), &buf); err != nil {
			return hdr, fmt.Errorf("read AV table %d: %w", id, err)
		}
		_, err = binary.Decode(buf[:bpf.AVLine], binary.NativeEndian, &hdr)
		return hdr, err
	}
	if t.m == nil {
		t.m = map[uint32][]byte{}
	}
	t.m[id] = page
	return hdr, nil
}

// dropRetired unmaps AV id's page if its table was retired (an insert
// grew the AV: the mapping would keep the old table's memory).
func (t *tableHeads) dropRetired(id uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if page := t.m[id]; page != nil {
		if _, ok := liveHeader(page, id); !ok {
			t.dropLocked(id)
		}
	}
}

// liveHeader decodes the header at the start of AV id's table page, ok
// when it is that AV's table and not retired.
func liveHeader(page []byte, id uint32) (hdr bpf.AVHdr, ok bool) {
	_, err := binary.Decode(page[:bpf.AVLine], binary.NativeEndian, &hdr)
	return hdr, err == nil && hdr.Magic == bpf.AVMagic && hdr.AvId == id && hdr.Retired == 0
}

// drop unmaps AV id's page, if it is mapped.
func (t *tableHeads) drop(id uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropLocked(id)
}

func (t *tableHeads) dropLocked(id uint32) {
	if page := t.m[id]; page != nil {
		unix.Munmap(page)
		delete(t.m, id)
	}
}

// prune unmaps the pages of the ids inUse does not hold.
func (t *tableHeads) prune(inUse func(id uint32) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.m {
		if !inUse(id) {
			t.dropLocked(id)
		}
	}
}

// close unmaps every page.
func (t *tableHeads) close() { t.prune(func(uint32) bool { return false }) }

// holdings sums the entries and the table room of the named AVs uid owns,
// but AV skip's.
func (a *Agent) holdings(uid, skip uint32) (entries, room int) {
	av.Slots(a.dp, func(id uint32, m *bpf.AVMeta) {
		if id == skip || m.OwnerUid != uid || m.NameString() == "" {
			return
		}
		if h, err := a.tableHeader(id); err == nil {
			entries += int(h.Live)
			room += int(h.Cap)
		}
	})
	return entries, room
}

// roomAfter is the room of a table with header h once n more entries are
// in it: they take the indices free below its high mark first, then new
// ones past it, and the table doubles whenever an index is past its room
// (av's place). Entries the AV refuses (duplicates) take none: the
// estimate is an upper bound.
func roomAfter(h bpf.AVHdr, n int) int {
	room := max(int(h.Cap), minTableRoom)
	holes := max(0, int(h.High)-int(h.Live))
	for top := int(h.High) + n - holes; room < top; {
		room *= 2
	}
	return room
}

// reserveEntries refuses an insert of up to n addresses into the AV ref
// when the entries of all the AVs its owner owns would exceed the owner's
// quota (Limits.EntriesPerUID), or the room of their tables, which the
// insert may grow, the owner's room quota (Limits.AVRoomPerUID), or the
// entries of the named AVs of all uids but root the node's limit for them
// (Limits.Entries: EAGAIN); root's AVs are not counted. Otherwise it
// returns holding the owner's quota lock (lockOwner), and the insert
// counted as pending against the node's limit, which the caller releases
// once its insert is done. Entries and room count against the AV's owner
// whoever inserts them, as a file's blocks count against its owner.
func (a *Agent) reserveEntries(what string, ref avRef, n int) (release func(), err error) {
	if ref.owner == 0 {
		return func() {}, nil
	}
	unlock := a.lockOwner(ref.owner)
	// The tables are read and the insert recorded under the users' lock:
	// the entries of another owner's insert are then in the tables read,
	// or still outstanding in its record, not neither (nor both).
	a.avl.users.Lock()
	h, err := a.tableHeader(ref.v.ID())
	if err != nil {
		a.avl.users.Unlock()
		unlock()
		return nil, fmt.Errorf("%s %q: %w", what, ref.name, err)
	}
	entries, room, users := int(h.Live), 0, 0
	live := map[uint32]int{} // the entries of the named AVs of uids other than root
	av.Slots(a.dp, func(id uint32, m *bpf.AVMeta) {
		if m.OwnerUid == 0 || m.NameString() == "" {
			return
		}
		if id == ref.v.ID() {
			live[id] = int(h.Live)
			return
		}
		t, err := a.tableHeader(id)
		if err != nil {
			return
		}
		live[id] = int(t.Live)
		if m.OwnerUid == ref.owner {
			entries += int(t.Live)
			room += int(t.Cap)
		}
	})
	for _, e := range live {
		users += e
	}
	a.heads.prune(func(id uint32) bool { _, ok := live[id]; return ok })
	pending := 0
	for p := range a.avl.pending {
		l, ok := live[p.id]
		if !ok {
			l = -1
		}
		pending += p.outstanding(l)
	}
	grown := roomAfter(h, n)
	switch l := a.cfg.Limits; {
	case entries+n > l.EntriesPerUID:
		err = fmt.Errorf("%s %q: its owner (uid %d) holds %d AV entries, %d more exceed the quota of %d: %w",
			what, ref.name, ref.owner, entries, n, l.EntriesPerUID, fi.EDQUOT)
	case room+grown > l.AVRoomPerUID:
		err = fmt.Errorf("%s %q: the tables of its owner's (uid %d) AVs would have room for %d indices with %d more entries, "+
			"over the quota of %d (a table is kernel memory the size of its room, and doubles when it fills): %w",
			what, ref.name, ref.owner, room+grown, n, l.AVRoomPerUID, fi.EDQUOT)
	case users+pending+n > a.userEntries():
		err = fmt.Errorf("%s %q: the named AVs of uids other than root hold %d entries (and %d are being inserted), %d more exceed their limit of %d "+
			"(the rest of the node's %d AV entries is kept for root): %w",
			what, ref.name, users, pending, n, a.userEntries(), a.dp.Config().AVEntries, fi.EAGAIN)
	}
	if err != nil {
		a.avl.users.Unlock()
		unlock()
		return nil, err
	}
	p := &pendingInsert{id: ref.v.ID(), live: int(h.Live), n: n}
	if a.avl.pending == nil {
		a.avl.pending = map[*pendingInsert]bool{}
	}
	a.avl.pending[p] = true
	a.avl.users.Unlock()
	return func() {
		a.avl.users.Lock()
		delete(a.avl.pending, p)
		a.avl.users.Unlock()
		a.heads.dropRetired(ref.v.ID()) // the insert may have grown the AV
		unlock()
	}, nil
}

// avGroup resolves an AV's group for its creator: a group the creator is
// in (admins may name any).
func (a *Agent) avGroup(who caller, group string) (uint32, error) {
	if group == "" {
		return av.NoGroup, nil
	}
	if len(group) > ctl.MaxQuoted { // no group name is that long: not looked up
		return 0, fmt.Errorf("av create: group name of %d bytes: %w", len(group), fi.EINVAL)
	}
	gid, err := lookupGroup(group)
	if err != nil {
		return 0, fmt.Errorf("av create: group %s: no such group: %w", quote(group), fi.EINVAL)
	}
	if gid < 0 || uint32(gid) == av.NoGroup || !a.admin(who) && !who.inGroup(uint32(gid)) {
		return 0, fmt.Errorf("av create: group %s: uid %d is not a member: %w", quote(group), who.uid, fi.EACCES)
	}
	return uint32(gid), nil
}

func (a *Agent) avCreate(who caller, args ctl.AVCreateArgs, rec *auditRec) (ctl.AVInfo, error) {
	rec.add("av", clean(args.Name), "type", clean(cmpOr(args.Type, "any")), "user_id", args.UserID, "group", clean(args.Group), "count", args.Count)
	if err := av.ValidName(args.Name); err != nil {
		return ctl.AVInfo{}, fmt.Errorf("av create: %w", err)
	}
	if args.Count < 0 || args.Count > a.cfg.Limits.AVCount {
		return ctl.AVInfo{}, fmt.Errorf("av create: count %d, at most %d: %w", args.Count, a.cfg.Limits.AVCount, fi.EINVAL)
	}
	attr := av.Attr{Name: args.Name, Count: args.Count, RxCtxBits: args.RxCtxBits}
	switch args.Type {
	case "":
		attr.Type = av.TypeUnspec // any, for an existing AV; a new one is a table
	case "table":
		attr.Type = av.TypeTable
	case "map":
		attr.Type = av.TypeMap
	default:
		return ctl.AVInfo{}, fmt.Errorf("av create: AV type %s: want table or map: %w", quote(args.Type), fi.EINVAL)
	}
	if args.UserID {
		attr.Flags |= fi.AVUserID
	}
	unlock := a.lockName(args.Name)
	defer unlock()
	if av.Exists(a.dp, args.Name) {
		return a.avReopen(who, attr, rec)
	}
	gid, err := a.avGroup(who, args.Group)
	if err != nil {
		return ctl.AVInfo{}, err
	}
	attr.Owner = &av.Owner{UID: who.uid, Group: gid}
	if !who.root() {
		unlock := a.lockOwner(who.uid)
		defer unlock()
		if err := a.reserveTable(who.uid, &attr); err != nil {
			return ctl.AVInfo{}, err
		}
	}
	a.mu.Lock()
	if av.Exists(a.dp, args.Name) {
		// Made meanwhile by a process with the library: as if it had
		// been there.
		a.mu.Unlock()
		attr.Owner, attr.Count = nil, args.Count
		return a.avReopen(who, attr, rec)
	}
	// Creating one counts against the caller's quota, and the AVs of every
	// uid but root against the node's share for them (root and admins
	// keep the rest).
	if !who.root() {
		own, users := a.countAVs(who.uid)
		switch {
		case own >= a.cfg.Limits.AVsPerUID:
			a.mu.Unlock()
			return ctl.AVInfo{}, fmt.Errorf("av create %q: uid %d owns %d AVs, its quota: %w", args.Name, who.uid, own, fi.EDQUOT)
		case users >= a.userAVs() && !a.admin(who):
			a.mu.Unlock()
			return ctl.AVInfo{}, fmt.Errorf("av create %q: uids other than root own %d AVs, as many as the agent lets them (the other AV slots are kept for root and admins): %w",
				args.Name, users, fi.EAGAIN)
		}
	}
	a.cachedAV(args.Name) // drops the handle of an AV of the name destroyed outside the agent
	v, err := av.Open(a.dp, &attr)
	if err != nil {
		a.mu.Unlock()
		return ctl.AVInfo{}, fmt.Errorf("av create %q: %w", args.Name, err)
	}
	a.avs[args.Name] = v
	a.mu.Unlock()
	rec.add("created", true)
	return a.avInfo(args.Name)
}

// reserveTable refuses a new AV of uid's whose table, sized by its count
// hint, would take the tables of uid's AVs past its room quota
// (Limits.AVRoomPerUID): the table is kernel memory the size of the hint
// from the start (~56 B an index), entries or not. A hint past the entry
// quota (Limits.EntriesPerUID) is cut to it first: no more can ever be in
// the AV.
func (a *Agent) reserveTable(uid uint32, attr *av.Attr) error {
	l := a.cfg.Limits
	attr.Count = min(attr.Count, l.EntriesPerUID)
	hint := uint32(attr.Count)
	if n := a.dp.Config().AVEntries; n > 0 {
		hint = min(hint, n) // av caps it the same way
	}
	_, room, _ := avtab.Lines(hint)
	_, held := a.holdings(uid, 0)
	if held+int(room) > l.AVRoomPerUID {
		return fmt.Errorf("av create %q: count %d makes a table with room for %d indices; the tables of uid %d's AVs have room for %d, "+
			"its quota is %d (a table is kernel memory the size of its room: ask for a smaller count, the table grows as entries come): %w",
			attr.Name, attr.Count, room, uid, held, l.AVRoomPerUID, fi.EDQUOT)
	}
	return nil
}

// avReopen is av create of an AV that exists: opened, as fi_av_open opens
// a named AV, for a caller that may change it (mayReopen), which must ask
// for the shape it has (a type, if any, FI_AV_USER_ID, rx_ctx_bits), else
// EINVAL naming what it is. Opening changes nothing.
func (a *Agent) avReopen(who caller, attr av.Attr, rec *auditRec) (ctl.AVInfo, error) {
	if err := a.mayReopen(who, attr.Name); err != nil {
		return ctl.AVInfo{}, err
	}
	v, err := a.namedAV(attr.Name)
	if err != nil {
		return ctl.AVInfo{}, fmt.Errorf("av create: %w", err)
	}
	if err := sameShape(attr.Name, v.Attr(), attr); err != nil {
		return ctl.AVInfo{}, err
	}
	rec.add("created", false)
	return a.avInfo(attr.Name)
}

// sameShape refuses opening the named AV, which has the attributes have,
// with the attributes want: another type (unless want's is UNSPEC),
// another FI_AV_USER_ID or rx_ctx_bits. fi_av_open of a named AV fails
// the same way (EINVAL, docs/semantics.md#named-avs).
func sameShape(name string, have, want av.Attr) error {
	switch {
	case want.Type != av.TypeUnspec && want.Type != have.Type:
		return fmt.Errorf("av create %q: exists with type %s, asked for %s: %w", name, typeName(have.Type), typeName(want.Type), fi.EINVAL)
	case have.Flags&fi.AVUserID != want.Flags&fi.AVUserID:
		return fmt.Errorf("av create %q: exists with flags %v, asked for %v: %w", name, have.Flags&fi.AVUserID, want.Flags&fi.AVUserID, fi.EINVAL)
	case have.RxCtxBits != want.RxCtxBits:
		return fmt.Errorf("av create %q: exists with rx_ctx_bits %d, asked for %d: %w", name, have.RxCtxBits, want.RxCtxBits, fi.EINVAL)
	}
	return nil
}

// typeName is "table" for av.TypeTable, as the control protocol names it.
func typeName(t av.Type) string { return strings.ToLower(strings.TrimPrefix(t.String(), "FI_AV_")) }

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// MaxPerCall bounds the addresses of one insert request, so that its reply
// (an fi_addr and errno each) always fits one message. ctl.AVInsert
// splits larger inserts into FI_MORE batches.
const maxPerCall = 16384

// listPage bounds one page of av.list: an entry is about 130 bytes of JSON.
const listPage = 4096

func (a *Agent) avInsert(ref avRef, args ctl.AVInsertArgs, rec *auditRec) (ctl.InsertResult, error) {
	rec.add("addrs", len(args.Addrs), "user_ids", args.UserIDs != nil)
	v := ref.v
	if len(args.Addrs) > maxPerCall {
		return ctl.InsertResult{}, fmt.Errorf("av insert: %d addresses in one request, at most %d: %w", len(args.Addrs), maxPerCall, fi.EINVAL)
	}
	if args.UserIDs != nil && len(args.UserIDs) != len(args.Addrs) {
		return ctl.InsertResult{}, fmt.Errorf("av insert: %d user IDs for %d addresses: %w", len(args.UserIDs), len(args.Addrs), fi.EINVAL)
	}
	release, err := a.reserveEntries("av insert", ref, len(args.Addrs))
	if err != nil {
		return ctl.InsertResult{}, err
	}
	defer release()
	addrs := make([]string, len(args.Addrs))
	malformed := make([]bool, len(args.Addrs))
	for i, s := range args.Addrs {
		addrs[i], malformed[i] = toAddrStr(s)
	}
	r := ctl.InsertResult{FiAddrs: make([]fi.Addr, len(addrs)), Errnos: make([]fi.Errno, len(addrs))}
	flags := args.Flags | fi.SyncErr
	if args.UserIDs != nil {
		copy(r.FiAddrs, args.UserIDs)
		flags |= fi.AVUserID
	}
	n, err := v.InsertStr(addrs, r.FiAddrs, flags, r.Errnos)
	r.Inserted = n
	if err != nil && !partial(err) {
		return ctl.InsertResult{}, err
	}
	// An address that does not parse is a malformed argument (EINVAL),
	// not an address the AV cannot take (EADDRNOTAVAIL, the AV's answer).
	for i, bad := range malformed {
		if bad {
			r.Errnos[i] = fi.EINVAL
		}
	}
	insertOutcome(rec, r)
	return r, nil
}

// insertOutcome adds an insert's counts to its audit record.
func insertOutcome(rec *auditRec, r ctl.InsertResult) {
	failed := 0
	for _, en := range r.Errnos {
		if en != 0 {
			if rec.partial == 0 {
				rec.partial = en
			}
			failed++
		}
	}
	rec.add("inserted", r.Inserted, "failed", failed)
}

// partial reports whether err only says some elements failed (the
// per-element errnos tell which), as opposed to the call failing.
func partial(err error) bool {
	var ie *av.InsertError
	return errors.As(err, &ie)
}

// toAddrStr accepts "1.2.3.4:5", "[2001:2::1]:5" or FI_ADDR_STR, and
// reports whether s is neither.
func toAddrStr(s string) (string, bool) {
	if strings.Contains(s, "://") {
		_, err := fi.ParseAddrStr(s)
		return s, err != nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return fi.FormatAddrStr(ap), false
	}
	return s, true // InsertStr fails it; the errno becomes EINVAL
}

func (a *Agent) avRemove(ref avRef, args ctl.AVRemoveArgs, rec *auditRec) error {
	rec.add("fi_addrs", len(args.FiAddrs))
	return ref.v.Remove(args.FiAddrs, 0)
}

func (a *Agent) avLookup(args ctl.AVLookupArgs) (ctl.AVEntry, error) {
	v, err := a.namedAV(args.Name)
	if err != nil {
		return ctl.AVEntry{}, err
	}
	x, err := v.EntryAt(args.FiAddr)
	if err != nil {
		return ctl.AVEntry{}, err
	}
	return toEntry(x), nil
}

func toEntry(x av.Entry) ctl.AVEntry {
	return ctl.AVEntry{FiAddr: x.Addr, Addr: x.Peer, Str: fi.FormatAddrStr(x.Peer), UserID: x.UserID, Refs: x.Refs}
}

// avInfo describes a named AV without its entries.
func (a *Agent) avInfo(name string) (ctl.AVInfo, error) {
	v, err := a.namedAV(name)
	if err != nil {
		return ctl.AVInfo{}, err
	}
	return describe(name, v)
}

func describe(name string, v *av.AV) (ctl.AVInfo, error) {
	attr := v.Attr()
	info := ctl.AVInfo{Name: name, ID: v.ID(), Type: strings.ToLower(strings.TrimPrefix(attr.Type.String(), "FI_AV_")), Flags: attr.Flags}
	var err error
	info.Entries, err = v.Len()
	return info, err
}

// avList is one page of an AV's entries (ctl.AVList fetches them all).
func (a *Agent) avList(args ctl.AVListArgs) (ctl.AVInfo, error) {
	v, err := a.namedAV(args.Name)
	if err != nil {
		return ctl.AVInfo{}, err
	}
	info, err := describe(args.Name, v)
	if err != nil {
		return info, err
	}
	if args.Limit <= 0 || args.Limit > listPage {
		args.Limit = listPage
	}
	// The page alone: the entries of the other pages are not built (a
	// listing of N entries fetched page by page is O(N), not O(N^2)).
	list, total, err := v.EntriesPage(args.Offset, args.Limit)
	if err != nil {
		return info, fmt.Errorf("av list: %w", err)
	}
	info.Entries = total
	info.List = make([]ctl.AVEntry, 0, len(list))
	for _, x := range list {
		info.List = append(info.List, toEntry(x))
	}
	return info, nil
}

func (a *Agent) avStrAddr(args ctl.StrAddrArgs) (string, error) {
	v, err := a.namedAV(args.Name)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 128)
	n, err := v.StrAddr(args.Addr, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:min(n, len(buf))-1]), nil
}

func (a *Agent) avSetUserID(ref avRef, args ctl.AVSetUserIDArgs, _ *auditRec) error {
	return ref.v.SetUserID(args.FiAddr, args.UserID, 0)
}

// avDestroy closes the agent's handle and destroys the AV under a.mu, so
// no request reopens it (or binds an endpoint to it) in between; the
// caller holds the name's lock (changeAV).
func (a *Agent) avDestroy(ref avRef, rec *auditRec) error {
	name := ref.name
	a.mu.Lock()
	defer a.mu.Unlock()
	if v := a.avs[name]; v != nil {
		if err := v.Close(); err != nil {
			return fmt.Errorf("av destroy %q: %w", name, err)
		}
		delete(a.avs, name)
	}
	n, id := 0, uint32(0)
	if v, err := av.Open(a.dp, &av.Attr{Name: name, Flags: fi.Read}); err == nil {
		n, _ = v.Len()
		id = v.ID()
		v.Close()
	}
	if err := av.Destroy(a.dp, name); err != nil {
		return err
	}
	a.heads.drop(id) // its mapping would keep the table's memory
	rec.add("entries", n)
	return nil
}
