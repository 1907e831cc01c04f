package cli

import (
	"strconv"
	"strings"

	"github.com/xdpfab/xdpfab/ctl"
	"github.com/xdpfab/xdpfab/fi"
)

// SchemaVersion is the "schema" field of every JSON document the command
// writes (docs/cli-json.md, docs/cli-json.schema.json). It changes when a
// field is removed, renamed or changes type; adding a field keeps it.
const SchemaVersion = 1

// The documents' kinds.
const (
	kindError       = "error"
	kindVersion     = "version"
	kindStatus      = "status"
	kindStats       = "stats"
	kindStatsRate   = "stats_rate"
	kindDetach      = "detach"
	kindAV          = "av"
	kindAVList      = "av_list"
	kindAVEntry     = "av_entry"
	kindAVInsert    = "av_insert"
	kindAVRemove    = "av_remove"
	kindAVStrAddr   = "av_straddr"
	kindAVSetUserID = "av_set_user_id"
	kindAVDestroy   = "av_destroy"
)

// header opens every document.
type docHeader struct {
	Schema int    `json:"schema"`
	Kind   string `json:"kind"`
}

func header(kind string) docHeader { return docHeader{SchemaVersion, kind} }

// id is a 64-bit identifier (fi_addr, user ID) as JSON carries it: a
// decimal string, since JSON numbers lose precision past 2^53, and null for
// FI_ADDR_NOTAVAIL.
type id = *string

func addrID(a fi.Addr) id {
	if a == fi.AddrNotAvail {
		return nil
	}
	s := strconv.FormatUint(uint64(a), 10)
	return &s
}

func addrIDs(as []fi.Addr) []id {
	out := make([]id, len(as))
	for i, a := range as {
		out[i] = addrID(a)
	}
	return out
}

// flagNames lists the set flags by their libfabric names ([] for none):
// flag words use all 64 bits, more than a JSON number holds.
func flagNames(f fi.Flags) []string {
	if f == 0 {
		return []string{}
	}
	return strings.Split(f.String(), "|")
}

type errorDoc struct {
	docHeader
	Command    string  `json:"command"`
	Error      string  `json:"error"`
	Errno      *int    `json:"errno"`
	ErrnoName  *string `json:"errno_name"`
	ExitStatus int     `json:"exit_status"`
	Usage      bool    `json:"usage"`
}

// avFields describe a named AV.
type avFields struct {
	Name    string   `json:"name"`
	ID      uint32   `json:"id"`
	Type    string   `json:"type"`
	Flags   []string `json:"flags"`
	Entries int      `json:"entries"`
}

func toAVFields(v ctl.AVInfo) avFields {
	return avFields{v.Name, v.ID, v.Type, flagNames(v.Flags), v.Entries}
}

type avDoc struct {
	docHeader
	avFields
}

type avEntry struct {
	FiAddr id     `json:"fi_addr"`
	Addr   string `json:"addr"`
	Str    string `json:"str"`
	UserID id     `json:"user_id"`
	Refs   uint32 `json:"refs"`
}

func toAVEntry(x ctl.AVEntry) avEntry {
	return avEntry{addrID(x.FiAddr), x.Addr.String(), x.Str, addrID(x.UserID), x.Refs}
}

type avEntryDoc struct {
	docHeader
	avEntry
}

type avListDoc struct {
	avDoc
	Addresses []avEntry `json:"addresses"`
}

type insertRow struct {
	Addr   string  `json:"addr"`
	FiAddr id      `json:"fi_addr"`
	Errno  *int    `json:"errno"`
	Error  *string `json:"error"`
}

type insertDoc struct {
	docHeader
	Inserted int         `json:"inserted"`
	Failed   int         `json:"failed"`
	Results  []insertRow `json:"results"`
}

type statusDoc struct {
	docHeader
	PinRoot     string            `json:"pin_root"`
	Restarts    uint64            `json:"restarts"`
	Clients     int               `json:"clients"`
	Attachments []attachmentDoc   `json:"attachments"`
	Maps        []mapDoc          `json:"maps"`
	AVs         []avFields        `json:"avs"`
	Endpoints   []endpointDoc     `json:"endpoints"`
	Queues      []queueHoldDoc    `json:"queue_holds"`
	Counters    map[string]uint64 `json:"counters"`
}

// queueHoldDoc is a hold on an interface's rx queues: a sharing domain
// (domain set) or a private endpoint (domain null).
type queueHoldDoc struct {
	Iface      string  `json:"iface"`
	FirstQueue int     `json:"first_queue"`
	Queues     int     `json:"queues"`
	Holder     string  `json:"holder"`
	Domain     *string `json:"domain"`
	Users      int     `json:"users"`
	Slots      int     `json:"slots"`
}

type attachmentDoc struct {
	Iface   string `json:"iface"`
	Ifindex int    `json:"ifindex"`
	Mode    string `json:"mode"`
	Adopted bool   `json:"adopted"`
}

type mapDoc struct {
	Name       string `json:"name"`
	Entries    int    `json:"entries"`
	MaxEntries uint32 `json:"max_entries"`
}

type endpointDoc struct {
	ID       uint32 `json:"id"`
	Local    string `json:"local"`
	AVID     uint32 `json:"av_id"`
	XSKBase  uint32 `json:"xsk_base"`
	RxCtxs   int    `json:"rx_ctxs"`
	Queues   int    `json:"queues"`
	Policy   string `json:"policy"`
	OwnerPID *int32 `json:"owner_pid"`
}

func toStatusDoc(s ctl.Status) statusDoc {
	d := statusDoc{docHeader: header(kindStatus), PinRoot: s.PinRoot, Restarts: s.Restarts, Clients: s.Clients,
		Attachments: []attachmentDoc{}, Maps: []mapDoc{}, AVs: []avFields{}, Endpoints: []endpointDoc{},
		Queues: []queueHoldDoc{}, Counters: s.Counters}
	for _, q := range s.Queues {
		x := queueHoldDoc{Iface: q.Iface, FirstQueue: q.FirstQueue, Queues: q.Queues, Holder: q.Holder, Users: q.Users, Slots: q.Slots}
		if q.Name != "" {
			name := q.Name
			x.Domain = &name
		}
		d.Queues = append(d.Queues, x)
	}
	for _, a := range s.Attachments {
		d.Attachments = append(d.Attachments, attachmentDoc{a.Iface, a.Ifindex, a.Mode, a.Adopted})
	}
	for _, m := range s.Maps {
		d.Maps = append(d.Maps, mapDoc{m.Name, m.Entries, m.MaxEntries})
	}
	for _, v := range s.AVs {
		d.AVs = append(d.AVs, toAVFields(v))
	}
	for _, p := range s.Endpoints {
		x := endpointDoc{p.ID, p.Local, p.AVID, p.XSKBase, p.RxCtxs, p.Queues, p.Policy, nil}
		if p.OwnerPID != 0 {
			pid := p.OwnerPID
			x.OwnerPID = &pid
		}
		d.Endpoints = append(d.Endpoints, x)
	}
	if d.Counters == nil {
		d.Counters = map[string]uint64{}
	}
	return d
}
