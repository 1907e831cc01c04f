package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/xdpfab/xdpfab/cq"
	"github.com/xdpfab/xdpfab/fi"
	"golang.org/x/sys/unix"
)

// DefaultSocket is where the agent listens unless told otherwise.
const DefaultSocket = "/run/xdpfab/agent.sock"

// MaxFDs is the most descriptors one message carries (the kernel's
// SCM_MAX_FD).
const MaxFDs = 253

// MaxMessage bounds one protocol message. A SEQPACKET message must also fit
// its sender's socket buffer: the agent raises its own to hold MaxMessage
// (SO_SNDBUFFORCE); a client's stays at the system default (about 208 KiB
// here), which is why large AV inserts go in batches of insertBatch.
const MaxMessage = 1 << 20

// Request is one call.
type Request struct {
	ID   uint64          `json:"id"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Response answers the Request with the same ID.
type Response struct {
	ID     uint64          `json:"id"`
	Errno  int             `json:"errno,omitempty"`
	Error  string          `json:"error,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Operations.
const (
	OpStatus      = "status"
	OpStats       = "stats"
	OpDetach      = "detach"
	OpAVCreate    = "av.create"
	OpAVInsert    = "av.insert"
	OpAVInsertSym = "av.insertsym"
	OpAVRemove    = "av.remove"
	OpAVLookup    = "av.lookup"
	OpAVList      = "av.list"
	OpAVStrAddr   = "av.straddr"
	OpAVSetUserID = "av.set-user-id"
	OpAVDestroy   = "av.destroy"
	OpEPOpen      = "ep.open"
	OpEPClose     = "ep.close"
)

// AVCreateArgs opens or creates a named AV in the agent.
type AVCreateArgs struct {
	Name   string `json:"name"`
	Type   string `json:"type,omitempty"` // "table" (default), "map"
	UserID bool   `json:"user_id,omitempty"`
	Count  int    `json:"count,omitempty"`
	// RxCtxBits as in fi_av_attr.
	RxCtxBits int `json:"rx_ctx_bits,omitempty"`
}

// AVInsertArgs inserts addresses ("198.18.0.1:5000", "[2001:2::1]:5000" or
// FI_ADDR_STR) into a named AV. UserIDs, when set, are per-insert user IDs
// (FI_AV_USER_ID), one per address.
type AVInsertArgs struct {
	Name    string    `json:"name"`
	Addrs   []string  `json:"addrs"`
	UserIDs []fi.Addr `json:"user_ids,omitempty"`
	Flags   fi.Flags  `json:"flags,omitempty"`
}

// AVInsertSymArgs is fi_av_insertsym (NodeCnt = SvcCnt = 1: insertsvc).
type AVInsertSymArgs struct {
	Name    string   `json:"name"`
	Node    string   `json:"node"`
	NodeCnt int      `json:"node_cnt,omitempty"`
	Service string   `json:"service"`
	SvcCnt  int      `json:"svc_cnt,omitempty"`
	Flags   fi.Flags `json:"flags,omitempty"`
}

// InsertResult is the outcome of an insert: one fi_addr (fi.AddrNotAvail
// when it failed) and one errno (0 on success) per address.
type InsertResult struct {
	FiAddrs  []fi.Addr  `json:"fi_addrs"`
	Errnos   []fi.Errno `json:"errnos"`
	Inserted int        `json:"inserted"`
}

// AVRemoveArgs removes fi_addrs from a named AV.
type AVRemoveArgs struct {
	Name    string    `json:"name"`
	FiAddrs []fi.Addr `json:"fi_addrs"`
}

// AVLookupArgs names one entry.
type AVLookupArgs struct {
	Name   string  `json:"name"`
	FiAddr fi.Addr `json:"fi_addr"`
}

// AVSetUserIDArgs is fi_av_set_user_id.
type AVSetUserIDArgs struct {
	Name   string  `json:"name"`
	FiAddr fi.Addr `json:"fi_addr"`
	UserID fi.Addr `json:"user_id"`
}

// AVListArgs asks for one page of an AV's entries, from Offset, at most
// Limit (0: the agent's maximum).
type AVListArgs struct {
	Name   string `json:"name"`
	Offset int    `json:"offset,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// AVNameArgs names an AV.
type AVNameArgs struct {
	Name string `json:"name"`
}

// AVEntry is one address of an AV.
type AVEntry struct {
	FiAddr fi.Addr        `json:"fi_addr"`
	Addr   netip.AddrPort `json:"addr"`
	Str    string         `json:"str"`
	UserID fi.Addr        `json:"user_id"`
	Refs   uint32         `json:"refs"`
}

// AVInfo describes a named AV.
type AVInfo struct {
	Name    string    `json:"name"`
	ID      uint32    `json:"id"`
	Type    string    `json:"type"`
	Flags   fi.Flags  `json:"flags"`
	Entries int       `json:"entries"`
	List    []AVEntry `json:"list,omitempty"`
}

// StrAddrArgs formats an address (fi_av_straddr); Addr is a raw sockaddr.
type StrAddrArgs struct {
	Name string `json:"name"`
	Addr []byte `json:"addr"`
}

// Status is what `xdpfab status` shows.
type Status struct {
	PinRoot     string            `json:"pin_root"`
	Attachments []Attachment      `json:"attachments"`
	Maps        []MapUsage        `json:"maps"`
	AVs         []AVInfo          `json:"avs"`
	Endpoints   []EndpointInfo    `json:"endpoints"`
	Clients     int               `json:"clients"`
	Restarts    uint64            `json:"restarts"`
	Counters    map[string]uint64 `json:"counters"`
}

// Attachment is the program on one interface.
type Attachment struct {
	Iface   string `json:"iface"`
	Ifindex int    `json:"ifindex"`
	Mode    string `json:"mode"`
	Adopted bool   `json:"adopted"`
}

// MapUsage is one map's size.
type MapUsage struct {
	Name       string `json:"name"`
	MaxEntries uint32 `json:"max_entries"`
	Entries    int    `json:"entries"`
}

// EndpointInfo describes an endpoint in the endpoint table.
type EndpointInfo struct {
	ID       uint32 `json:"id"`
	Local    string `json:"local"`
	AVID     uint32 `json:"av_id"`
	XSKBase  uint32 `json:"xsk_base"`
	RxCtxs   int    `json:"rx_ctxs"`
	Queues   int    `json:"queues"`
	Policy   string `json:"policy"`
	OwnerPID int32  `json:"owner_pid,omitempty"`
}

// DetachArgs names an interface.
type DetachArgs struct {
	Iface string `json:"iface"`
}

// errorFrom rebuilds an error from a response.
func errorFrom(r *Response) error {
	if r.Errno == 0 && r.Error == "" {
		return nil
	}
	code := fi.Errno(r.Errno)
	if code == 0 {
		code = fi.EOTHER
	}
	return &RemoteError{Msg: r.Error, Code: code}
}

// RemoteError is an error the agent reported. errors.Is matches its errno.
type RemoteError struct {
	Msg  string
	Code fi.Errno
}

func (e *RemoteError) Error() string { return "agent: " + e.Msg }

// Unwrap exposes the errno to errors.Is and fi.Code.
func (e *RemoteError) Unwrap() error { return e.Code }

// WriteMsg sends v as one message with fds attached (SCM_RIGHTS).
func WriteMsg(c *net.UnixConn, v any, fds []int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxMessage {
		return fmt.Errorf("message of %d bytes, at most %d: %w", len(b), MaxMessage, fi.EMSGSIZE)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err = c.WriteMsgUnix(b, oob, nil)
	if errors.Is(err, unix.EMSGSIZE) {
		// A SEQPACKET message must fit the sender's socket buffer.
		return fmt.Errorf("message of %d bytes does not fit the socket buffer: %w", len(b), fi.EMSGSIZE)
	}
	return err
}

// ReadMsg receives one message into v and returns the fds it carried; the
// caller owns them.
func ReadMsg(c *net.UnixConn, buf []byte, v any) ([]int, error) {
	oob := make([]byte, unix.CmsgSpace(4*MaxFDs))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if f, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, f...)
			}
		}
	}
	if flags&unix.MSG_TRUNC != 0 {
		closeAll(fds)
		return nil, fmt.Errorf("message larger than %d bytes: %w", len(buf), fi.EMSGSIZE)
	}
	if flags&unix.MSG_CTRUNC != 0 {
		closeAll(fds)
		return nil, fmt.Errorf("more than %d descriptors in one message: %w", MaxFDs, fi.EMSGSIZE)
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		closeAll(fds)
		return nil, fmt.Errorf("bad message: %v: %w", err, fi.EINVAL)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// Endpoint operations.
const (
	OpNeighUse = "neigh.use"
)

// EPOpenArgs asks the agent to prepare an endpoint for the caller.
type EPOpenArgs struct {
	Iface       string   `json:"iface"`
	Local       string   `json:"local"`
	AV          string   `json:"av"`
	Caps        fi.Flags `json:"caps,omitempty"`
	RxContexts  int      `json:"rx_contexts,omitempty"`
	Queues      int      `json:"queues,omitempty"`
	Frames      int      `json:"frames,omitempty"`
	RingSize    int      `json:"ring_size,omitempty"`
	DropUnknown bool     `json:"drop_unknown,omitempty"`
}

// EPCloseArgs names an endpoint the caller opened.
type EPCloseArgs struct {
	ID uint32 `json:"id"`
}

// NeighUseArgs asks the agent to make the kernel resolve a next hop.
type NeighUseArgs struct {
	Ifindex int        `json:"ifindex"`
	IP      netip.Addr `json:"ip"`
}

// OpMapsOpen returns read-only descriptors of the node's maps
// (loader.ReadOnlyMaps order): how an application reads named AVs when it
// cannot reach the pins.
const OpMapsOpen = "maps.open"

// OpEPReport carries an application endpoint's CQ statistics to the agent
// for its metrics.
const OpEPReport = "ep.report"

// EPReportArgs is one report.
type EPReportArgs struct {
	ID uint32   `json:"id"`
	TX cq.Stats `json:"tx"`
	RX cq.Stats `json:"rx"`
}
