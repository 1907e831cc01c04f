package av

import (
	"net/netip"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
)

// Source is what the XDP program's forward lookup finds for a datagram's
// source (struct av_val): the fi_addr, the user ID and whether completions
// report it, and the auth-key value the entry is bound to.
type Source struct {
	FiAddr     fi.Addr
	UserID     fi.Addr
	ReportUser bool   // the entry has FI_AV_USER_ID: report UserID in place of FiAddr
	AuthKey    uint32 // auth-key value the entry is bound to, 0 = none
}

// SourceOf is the forward lookup of src, for datagrams that do not pass
// through the XDP program (same-host peers, package ep): it answers what
// the program would find in the forward map for this AV, ok false for a
// source that is not in the AV. A hit is a read of the process's cache
// under the read lock, with no system call; a miss on a named AV asks the
// forward map itself, so that a peer another process just inserted is
// found. Like Resolve, a named AV's entry that another process changed or
// removed is seen from this process's next other AV call on. A nil, zero
// or closed AV finds nothing.
func (a *AV) SourceOf(src netip.AddrPort) (Source, bool) {
	if a == nil || a.dp == nil {
		return Source{}, false
	}
	k := bpf.MakeAddr(src)
	a.rw.RLock()
	if a.closed {
		a.rw.RUnlock()
		return Source{}, false
	}
	if idx, ok := a.byAddr[k]; ok && int(idx) < len(a.entries) && a.entries[idx].refcnt != 0 {
		e := &a.entries[idx]
		s := Source{FiAddr: fi.Addr(idx), UserID: fi.Addr(e.userID), ReportUser: e.flags&bpf.AVFUserID != 0}
		if e.authKey != 0 && int(e.authKey) <= len(a.keys) {
			s.AuthKey = a.keys[e.authKey-1].value
		}
		a.rw.RUnlock()
		return s, true
	}
	shared, id := a.shared, a.id
	a.rw.RUnlock()
	if !shared || a.dp.AV == nil {
		return Source{}, false
	}
	var v bpf.AVVal
	if err := a.dp.AV.Lookup(bpf.AVKey{AvId: id, Src: k}, &v); err != nil {
		return Source{}, false
	}
	return Source{FiAddr: fi.Addr(v.FiAddr), UserID: fi.Addr(v.UserId), ReportUser: v.Flags&bpf.AVFUserID != 0, AuthKey: v.AuthKey}, true
}
