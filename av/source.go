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
// the program finds in the AV's table, ok false for a source that is not
// in the AV. A hit is a lock-free read of the table (avtab.Reader), with
// no system call; a miss in a named AV re-reads it under the lock if
// another process changed it in a way this process does not see yet
// (growth, or a copy of the table), as Resolve does. A nil, zero or closed
// AV finds nothing.
func (a *AV) SourceOf(src netip.AddrPort) (Source, bool) {
	if a == nil || a.dp == nil {
		return Source{}, false
	}
	k := bpf.MakeAddr(src)
	if r := a.fast.Load(); r != nil && !r.Retired() {
		s, userID, ok := r.Find(&k)
		if ok || !a.shared {
			return sourceOf(&s, userID), ok
		}
	}
	unlock := a.lock()
	defer unlock()
	if a.begin(false) != nil {
		return Source{}, false
	}
	return a.sourceLocked(&k)
}

func sourceOf(s *bpf.AVSlot, userID uint64) Source {
	return Source{FiAddr: fi.Addr(s.FiAddr), UserID: fi.Addr(userID), ReportUser: s.Flags&bpf.AVFUserID != 0, AuthKey: s.AuthKey}
}

func (a *AV) sourceLocked(k *bpf.Addr) (Source, bool) {
	if a.tab == nil {
		return Source{}, false
	}
	_, slot, ok := a.tab.Find(k)
	if !ok {
		return Source{}, false
	}
	userID, _, _ := a.tab.Aux(slot.FiAddr)
	return sourceOf(&slot, userID), true
}
