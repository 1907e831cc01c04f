package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/fi"
)

// namedAV returns the agent's handle on the named AV, opening it (it must
// exist unless create).
func (a *Agent) namedAV(name string) (*av.AV, error) {
	if name == "" {
		return nil, fmt.Errorf("no AV name: %w", fi.EINVAL)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if v := a.avs[name]; v != nil {
		return v, nil
	}
	// Exists in the pinned maps (made by an earlier agent or process)?
	ro, err := av.Open(a.dp, &av.Attr{Name: name, Flags: fi.READ})
	if err != nil {
		return nil, fmt.Errorf("AV %q: %w", name, err)
	}
	attr := ro.Attr()
	ro.Close()
	attr.Flags &^= fi.READ
	v, err := av.Open(a.dp, &attr)
	if err != nil {
		return nil, fmt.Errorf("AV %q: %w", name, err)
	}
	a.avs[name] = v
	return v, nil
}

func (a *Agent) avCreate(args client.AVCreateArgs) (client.AVInfo, error) {
	attr := av.Attr{Name: args.Name, Count: args.Count, RxCtxBits: args.RxCtxBits}
	switch args.Type {
	case "", "table":
		attr.Type = av.TypeTable
	case "map":
		attr.Type = av.TypeMap
	default:
		return client.AVInfo{}, fmt.Errorf("AV type %q: want table or map: %w", args.Type, fi.EINVAL)
	}
	if args.UserID {
		attr.Flags |= fi.AV_USER_ID
	}
	if args.Name == "" {
		return client.AVInfo{}, fmt.Errorf("av create: a name is required (the agent holds named AVs only): %w", fi.EINVAL)
	}
	a.mu.Lock()
	if a.avs[args.Name] == nil {
		v, err := av.Open(a.dp, &attr)
		if err != nil {
			a.mu.Unlock()
			return client.AVInfo{}, fmt.Errorf("av create %q: %w", args.Name, err)
		}
		a.avs[args.Name] = v
	}
	a.mu.Unlock()
	return a.avList(args.Name, false)
}

func (a *Agent) avInsert(args client.AVInsertArgs) (client.InsertResult, error) {
	v, err := a.namedAV(args.Name)
	if err != nil {
		return client.InsertResult{}, err
	}
	if args.UserIDs != nil && len(args.UserIDs) != len(args.Addrs) {
		return client.InsertResult{}, fmt.Errorf("av insert: %d user IDs for %d addresses: %w", len(args.UserIDs), len(args.Addrs), fi.EINVAL)
	}
	addrs := make([]string, len(args.Addrs))
	for i, s := range args.Addrs {
		addrs[i] = toAddrStr(s)
	}
	r := client.InsertResult{FiAddrs: make([]fi.Addr, len(addrs)), Errnos: make([]fi.Errno, len(addrs))}
	flags := args.Flags | fi.SYNC_ERR
	if args.UserIDs != nil {
		copy(r.FiAddrs, args.UserIDs)
		flags |= fi.AV_USER_ID
	}
	n, err := v.InsertStr(addrs, r.FiAddrs, flags, r.Errnos)
	r.Inserted = n
	if err != nil && !partial(err) {
		return client.InsertResult{}, err
	}
	return r, nil
}

// partial reports whether err only says some elements failed (the
// per-element errnos tell which), as opposed to the call failing.
func partial(err error) bool {
	var ie *av.InsertError
	return errors.As(err, &ie)
}

// toAddrStr accepts "1.2.3.4:5", "[2001:2::1]:5" or FI_ADDR_STR.
func toAddrStr(s string) string {
	if strings.Contains(s, "://") {
		return s
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return fi.FormatAddrStr(ap)
	}
	return s // fails as EADDRNOTAVAIL for that element
}

func (a *Agent) avInsertSym(args client.AVInsertSymArgs) (client.InsertResult, error) {
	v, err := a.namedAV(args.Name)
	if err != nil {
		return client.InsertResult{}, err
	}
	nodes, svcs := max(args.NodeCnt, 1), max(args.SvcCnt, 1)
	if nodes*svcs > 1<<20 {
		return client.InsertResult{}, fmt.Errorf("av insertsym: %d addresses: %w", nodes*svcs, fi.EINVAL)
	}
	r := client.InsertResult{FiAddrs: make([]fi.Addr, nodes*svcs), Errnos: make([]fi.Errno, nodes*svcs)}
	n, err := v.InsertSym(args.Node, nodes, args.Service, svcs, r.FiAddrs, args.Flags|fi.SYNC_ERR, r.Errnos)
	r.Inserted = n
	if err != nil && !partial(err) {
		return client.InsertResult{}, err
	}
	return r, nil
}

func (a *Agent) avRemove(args client.AVRemoveArgs) error {
	v, err := a.namedAV(args.Name)
	if err != nil {
		return err
	}
	return v.Remove(args.FiAddrs, 0)
}

func (a *Agent) avLookup(args client.AVLookupArgs) (client.AVEntry, error) {
	v, err := a.namedAV(args.Name)
	if err != nil {
		return client.AVEntry{}, err
	}
	ap, err := v.LookupAddr(args.FiAddr)
	if err != nil {
		return client.AVEntry{}, err
	}
	e := client.AVEntry{FiAddr: args.FiAddr, Addr: ap, Str: fi.FormatAddrStr(ap), UserID: fi.AddrNotAvail}
	if list, err := v.Entries(); err == nil {
		for _, x := range list {
			if x.Addr == args.FiAddr {
				e.UserID, e.Refs = x.UserID, x.Refs
			}
		}
	}
	return e, nil
}

func (a *Agent) avList(name string, withEntries bool) (client.AVInfo, error) {
	v, err := a.namedAV(name)
	if err != nil {
		return client.AVInfo{}, err
	}
	attr := v.Attr()
	info := client.AVInfo{Name: name, ID: v.ID(), Type: strings.ToLower(strings.TrimPrefix(attr.Type.String(), "FI_AV_")), Flags: attr.Flags}
	list, err := v.Entries()
	if err != nil {
		return info, err
	}
	info.Entries = len(list)
	if withEntries {
		for _, x := range list {
			info.List = append(info.List, client.AVEntry{FiAddr: x.Addr, Addr: x.Peer, Str: fi.FormatAddrStr(x.Peer), UserID: x.UserID, Refs: x.Refs})
		}
	}
	return info, nil
}

func (a *Agent) avStrAddr(args client.StrAddrArgs) (string, error) {
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

func (a *Agent) avSetUserID(args client.AVSetUserIDArgs) error {
	v, err := a.namedAV(args.Name)
	if err != nil {
		return err
	}
	return v.SetUserID(args.FiAddr, args.UserID, 0)
}

func (a *Agent) avDestroy(name string) error {
	a.mu.Lock()
	v := a.avs[name]
	delete(a.avs, name)
	a.mu.Unlock()
	if v != nil {
		if err := v.Close(); err != nil {
			a.mu.Lock()
			a.avs[name] = v
			a.mu.Unlock()
			return fmt.Errorf("av destroy %q: %w", name, err)
		}
	}
	return av.Destroy(a.dp, name)
}
