package agent

import (
	"fmt"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/av"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/loader"
)

func (a *Agent) stats() (map[string]uint64, error) {
	c, err := a.dp.Counters()
	if err != nil {
		return nil, err
	}
	out := make(map[string]uint64, len(c))
	for i, v := range c {
		out[bpf.Counter(i).String()] = v
	}
	return out, nil
}

// status describes the node; withCounters adds the XDP counters (the
// metrics collector reads them per interface instead).
func (a *Agent) status(withCounters bool) (ctl.Status, error) {
	s := ctl.Status{PinRoot: a.cfg.PinRoot, Restarts: a.restarts}
	for _, att := range a.attachments() {
		s.Attachments = append(s.Attachments, ctl.Attachment{Iface: att.Ifname, Ifindex: att.Ifindex, Mode: att.Mode.String(), Adopted: att.Adopted})
	}
	var k bpf.EPKey
	var v bpf.EPVal
	for it := a.dp.EP.Iterate(); it.Next(&k, &v); {
		s.Endpoints = append(s.Endpoints, ctl.EndpointInfo{
			ID: v.EpId, Local: k.Local.AddrPort().String(), AVID: v.AvId, XSKBase: v.XskBase,
			RxCtxs: int(v.RxCtxs), Queues: int(v.Queues), Policy: policyName(bpf.Policy(v.Policy)),
			OwnerPID: a.endpointOwner(v.EpId),
		})
	}
	sort.Slice(s.Endpoints, func(i, j int) bool { return s.Endpoints[i].ID < s.Endpoints[j].ID })
	s.Maps = []ctl.MapUsage{
		{Name: bpf.MapAVTab, MaxEntries: a.dp.AVTab.MaxEntries(), Entries: a.avTables()},
		{Name: bpf.MapAuthKey, MaxEntries: a.dp.AuthKey.MaxEntries(), Entries: count[bpf.RevKey, bpf.AuthKeyVal](a.dp.AuthKey)},
		{Name: bpf.MapEP, MaxEntries: a.dp.EP.MaxEntries(), Entries: len(s.Endpoints)},
		{Name: bpf.MapLocal, MaxEntries: a.dp.Local.MaxEntries(), Entries: count[bpf.Addr, uint32](a.dp.Local)},
	}
	for _, name := range a.namedAVs() {
		if info, err := a.avInfo(name); err == nil {
			s.AVs = append(s.AVs, info)
		}
	}
	s.Queues = a.domainInfos()
	a.mu.Lock()
	s.Clients = len(a.clients)
	a.mu.Unlock()
	if !withCounters {
		return s, nil
	}
	var err error
	s.Counters, err = a.stats()
	return s, err
}

// avTables counts the AVs that have a table (xdpfab_avtab); each table's
// size follows its AV.
func (a *Agent) avTables() int {
	ids, _ := a.dp.AVTableIDs()
	return len(ids)
}

// count counts a hash map's entries in batches (a syscall per 4096).
func count[K, V any](m *ebpf.Map) int {
	keys, vals := make([]K, 4096), make([]V, 4096)
	var cursor ebpf.MapBatchCursor
	total := 0
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		total += n
		if err != nil { // ErrKeyNotExist at the end
			return total
		}
	}
}

// namedAVs lists the names of every named AV in the dataplane.
func (a *Agent) namedAVs() []string {
	var names []string
	av.Slots(a.dp, func(_ uint32, m *bpf.AVMeta) {
		if m.Name[0] != 0 {
			names = append(names, m.NameString())
		}
	})
	sort.Strings(names)
	return names
}

func policyName(p bpf.Policy) string {
	switch p {
	case bpf.PolicySourceErr:
		return "source_err"
	case bpf.PolicyDrop:
		return "drop"
	}
	return "notavail"
}

func (a *Agent) detach(iface string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, att := range a.atts {
		if att.Ifname == iface {
			if err := att.Detach(); err != nil {
				return fmt.Errorf("detach %s: %w", iface, err)
			}
			a.atts = append(a.atts[:i], a.atts[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("detach %s: the agent has no program there: %w", quote(iface), fi.ENOENT)
}

// attachments copies the attachment list.
func (a *Agent) attachments() []*loader.Attachment {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*loader.Attachment(nil), a.atts...)
}
