package agent

import (
	"fmt"
	"sort"

	"github.com/cilium/ebpf"
	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/client"
	"github.com/xdpfab/xdpfab/fi"
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

func (a *Agent) status() (client.Status, error) {
	s := client.Status{PinRoot: a.cfg.PinRoot, Restarts: a.restarts}
	for _, att := range a.atts {
		s.Attachments = append(s.Attachments, client.Attachment{Iface: att.Ifname, Ifindex: att.Ifindex, Mode: att.Mode.String(), Adopted: att.Adopted})
	}
	for _, m := range []struct {
		name string
		m    *ebpf.Map
	}{{bpf.MapAV, a.dp.AV}, {bpf.MapAVRev, a.dp.AVRev}, {bpf.MapAuthKey, a.dp.AuthKey}, {bpf.MapEP, a.dp.EP}} {
		s.Maps = append(s.Maps, client.MapUsage{Name: m.name, MaxEntries: m.m.MaxEntries(), Entries: countEntries(m.m)})
	}
	for _, name := range a.namedAVs() {
		if info, err := a.avList(name, false); err == nil {
			s.AVs = append(s.AVs, info)
		}
	}
	var k bpf.EPKey
	var v bpf.EPVal
	for it := a.dp.EP.Iterate(); it.Next(&k, &v); {
		s.Endpoints = append(s.Endpoints, client.EndpointInfo{
			ID: v.EpId, Local: k.Local.AddrPort().String(), AVID: v.AvId, XSKBase: v.XskBase,
			RxCtxs: int(v.RxCtxs), Queues: int(v.Queues), Policy: policyName(bpf.Policy(v.Policy)),
		})
	}
	sort.Slice(s.Endpoints, func(i, j int) bool { return s.Endpoints[i].ID < s.Endpoints[j].ID })
	a.mu.Lock()
	s.Clients = len(a.clients)
	a.mu.Unlock()
	var err error
	s.Counters, err = a.stats()
	return s, err
}

// namedAVs lists the names of every named AV in the dataplane.
func (a *Agent) namedAVs() []string {
	var names []string
	n := a.dp.AVMeta.MaxEntries()
	for id := uint32(1); id < n; id++ {
		var m bpf.AVMeta
		if a.dp.AVMeta.Lookup(id, &m) == nil && m.InUse != 0 && m.Name[0] != 0 {
			names = append(names, cstr(m.Name[:]))
		}
	}
	sort.Strings(names)
	return names
}

func cstr(b []uint8) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func countEntries(m *ebpf.Map) int {
	n := 0
	k := make([]byte, m.KeySize())
	v := make([]byte, m.ValueSize())
	for it := m.Iterate(); it.Next(&k, &v); {
		n++
	}
	return n
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
	for i, att := range a.atts {
		if att.Ifname == iface {
			if err := att.Detach(); err != nil {
				return fmt.Errorf("detach %s: %w", iface, err)
			}
			a.atts = append(a.atts[:i], a.atts[i+1:]...)
			a.log.Info("xdp detached", "iface", iface)
			return nil
		}
	}
	return fmt.Errorf("detach %s: the agent has no program there: %w", iface, fi.ENOENT)
}
