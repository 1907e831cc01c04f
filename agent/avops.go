package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
)

// namedAV returns the agent's handle on the named AV, opening it (it must
// exist unless create).
func (a *Agent) namedAV(name string) (*av.AV, error) {
	// A name that cannot be an AV's is refused before it is looked for
	// (or quoted in an error: ValidName quotes only names of valid length).
	if err := av.ValidName(name); err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if v := a.avs[name]; v != nil {
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

// mayWriteAV refuses a caller that may not change the named AV: admins
// may change every AV; others the AVs they own (created) and those whose
// group they are in. The owner is recorded with the AV in its pinned
// meta, so it survives agent restarts; an AV made by a process outside the
// agent belongs to that process's uid.
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
	if o.UID == who.uid || o.Group != av.NoGroup && who.inGroup(o.Group) {
		return nil
	}
	return fmt.Errorf("%s %q: uid %d is neither its owner (uid %d) nor in its group: %w", what, name, who.uid, o.UID, fi.EACCES)
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

// ownedNames lists the named AVs uid owns, from their pinned meta.
func (a *Agent) ownedNames(uid uint32) []string {
	var names []string
	av.Slots(a.dp, func(_ uint32, m *bpf.AVMeta) {
		if name := m.NameString(); name != "" && m.OwnerUid == uid {
			names = append(names, name)
		}
	})
	return names
}

// ownedBy counts the named AVs uid owns.
func (a *Agent) ownedBy(uid uint32) int { return len(a.ownedNames(uid)) }

// reserveEntries refuses an insert of up to n addresses into the named AV
// when the entries of all the AVs its owner owns would exceed the owner's
// quota (Limits.EntriesPerUID; root's AVs are not counted). Otherwise it
// returns holding the owner's insert lock, which the caller releases
// (the release it returns) once its insert is done: the check and the
// insert are one step, so that parallel inserts of one owner from many
// connections cannot each pass against what the AVs held before any of
// them ran. Entries count against the AV's owner whoever inserts them, as
// a file's blocks count against its owner.
func (a *Agent) reserveEntries(what, name string, n int) (release func(), err error) {
	o, err := av.OwnerOf(a.dp, name)
	if err != nil || o.UID == 0 {
		return func() {}, nil // the insert itself reports a missing AV
	}
	a.entryMu.Lock()
	if a.entryLocks == nil {
		a.entryLocks = map[uint32]*sync.Mutex{}
	}
	l := a.entryLocks[o.UID]
	if l == nil {
		l = new(sync.Mutex)
		a.entryLocks[o.UID] = l
	}
	a.entryMu.Unlock()
	l.Lock()
	used := 0
	for _, owned := range a.ownedNames(o.UID) {
		if v, err := a.namedAV(owned); err == nil {
			k, _ := v.Len()
			used += k
		}
	}
	if q := a.cfg.Limits.EntriesPerUID; used+n > q {
		l.Unlock()
		return nil, fmt.Errorf("%s %q: its owner (uid %d) holds %d AV entries, %d more exceed the quota of %d: %w",
			what, name, o.UID, used, n, q, fi.EDQUOT)
	}
	return l.Unlock, nil
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
	a.mu.Lock()
	exists := a.avs[args.Name] != nil || av.Exists(a.dp, args.Name)
	a.mu.Unlock()
	if exists {
		return a.avReopen(who, attr, rec)
	}
	gid, err := a.avGroup(who, args.Group)
	if err != nil {
		return ctl.AVInfo{}, err
	}
	attr.Owner = &av.Owner{UID: who.uid, Group: gid}
	if q := a.cfg.Limits.EntriesPerUID; !who.root() && attr.Count > q {
		// The count is a hint (the table grows past it), and the table is
		// locked kernel memory the size of the hint from the start (~56 B
		// per index): an owner that may hold q entries in all its AVs gets
		// an AV sized for at most q to start with.
		attr.Count = q
	}
	a.mu.Lock()
	if a.avs[args.Name] != nil || av.Exists(a.dp, args.Name) {
		// Made meanwhile by another request: as if it had been there.
		a.mu.Unlock()
		attr.Owner, attr.Count = nil, args.Count
		return a.avReopen(who, attr, rec)
	}
	// Creating one counts against the caller's quota.
	if !who.root() && a.ownedBy(who.uid) >= a.cfg.Limits.AVsPerUID {
		a.mu.Unlock()
		return ctl.AVInfo{}, fmt.Errorf("av create %q: uid %d owns %d AVs, its quota: %w", args.Name, who.uid, a.ownedBy(who.uid), fi.EDQUOT)
	}
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

func (a *Agent) avInsert(args ctl.AVInsertArgs, rec *auditRec) (ctl.InsertResult, error) {
	rec.add("addrs", len(args.Addrs), "user_ids", args.UserIDs != nil)
	v, err := a.namedAV(args.Name)
	if err != nil {
		return ctl.InsertResult{}, err
	}
	if len(args.Addrs) > maxPerCall {
		return ctl.InsertResult{}, fmt.Errorf("av insert: %d addresses in one request, at most %d: %w", len(args.Addrs), maxPerCall, fi.EINVAL)
	}
	if args.UserIDs != nil && len(args.UserIDs) != len(args.Addrs) {
		return ctl.InsertResult{}, fmt.Errorf("av insert: %d user IDs for %d addresses: %w", len(args.UserIDs), len(args.Addrs), fi.EINVAL)
	}
	release, err := a.reserveEntries("av insert", args.Name, len(args.Addrs))
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

func (a *Agent) avInsertSym(args ctl.AVInsertSymArgs, rec *auditRec) (ctl.InsertResult, error) {
	rec.add("nodes", args.NodeCnt, "services", args.SvcCnt)
	v, err := a.namedAV(args.Name)
	if err != nil {
		return ctl.InsertResult{}, err
	}
	if args.NodeCnt < 0 || args.SvcCnt < 0 {
		return ctl.InsertResult{}, fmt.Errorf("av insertsym: node count %d, service count %d: %w", args.NodeCnt, args.SvcCnt, fi.EINVAL)
	}
	nodes, svcs := args.NodeCnt, args.SvcCnt // 0 inserts nothing, as fi_av_insertsym
	if nodes > maxPerCall || svcs > maxPerCall || nodes*svcs > maxPerCall {
		return ctl.InsertResult{}, fmt.Errorf("av insertsym: %d x %d addresses in one request, at most %d (split the range): %w",
			nodes, svcs, maxPerCall, fi.EINVAL)
	}
	release, err := a.reserveEntries("av insertsym", args.Name, nodes*svcs)
	if err != nil {
		return ctl.InsertResult{}, err
	}
	defer release()
	r := ctl.InsertResult{FiAddrs: make([]fi.Addr, nodes*svcs), Errnos: make([]fi.Errno, nodes*svcs)}
	n, err := v.InsertSym(args.Node, nodes, args.Service, svcs, r.FiAddrs, args.Flags|fi.SyncErr, r.Errnos)
	r.Inserted = n
	if err != nil && !partial(err) {
		return ctl.InsertResult{}, err
	}
	insertOutcome(rec, r)
	return r, nil
}

func (a *Agent) avRemove(args ctl.AVRemoveArgs, rec *auditRec) error {
	rec.add("fi_addrs", len(args.FiAddrs))
	v, err := a.namedAV(args.Name)
	if err != nil {
		return err
	}
	return v.Remove(args.FiAddrs, 0)
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
	list, err := v.Entries()
	if err != nil {
		return info, err
	}
	if args.Offset < 0 || args.Offset > len(list) {
		return info, fmt.Errorf("av list: offset %d of %d entries: %w", args.Offset, len(list), fi.EINVAL)
	}
	for _, x := range list[args.Offset:min(len(list), args.Offset+args.Limit)] {
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

func (a *Agent) avSetUserID(args ctl.AVSetUserIDArgs, _ *auditRec) error {
	v, err := a.namedAV(args.Name)
	if err != nil {
		return err
	}
	return v.SetUserID(args.FiAddr, args.UserID, 0)
}

// avDestroy closes the agent's handle and destroys the AV under a.mu, so
// no request reopens it (or binds an endpoint to it) in between.
func (a *Agent) avDestroy(name string, rec *auditRec) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v := a.avs[name]; v != nil {
		if err := v.Close(); err != nil {
			return fmt.Errorf("av destroy %q: %w", name, err)
		}
		delete(a.avs, name)
	}
	n := 0
	if v, err := av.Open(a.dp, &av.Attr{Name: name, Flags: fi.Read}); err == nil {
		n, _ = v.Len()
		v.Close()
	}
	if err := av.Destroy(a.dp, name); err != nil {
		return err
	}
	rec.add("entries", n)
	return nil
}
