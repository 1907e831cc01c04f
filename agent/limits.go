package agent

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/xdpfab/xdpfab/dataplane"
	"github.com/xdpfab/xdpfab/ep"
	"github.com/xdpfab/xdpfab/fi"
	"github.com/xdpfab/xdpfab/internal/avtab"
	"golang.org/x/sys/unix"
)

// Limits bound what callers may ask of the agent and hold at once. Every
// request field is checked against them before anything is allocated;
// quotas are per uid (several processes of one user share them) and are
// given back when the caller closes, ends its connection or dies. A zero
// field takes DefaultLimits' value.
type Limits struct {
	// Conns bounds connections at once, ConnsPerUID those of one uid.
	Conns, ConnsPerUID int
	// EndpointsPerUID bounds endpoints one uid holds through the agent.
	EndpointsPerUID int
	// UMEMBytesPerUID bounds the frame memory (UMEM) of one uid's
	// endpoints together.
	UMEMBytesPerUID int64
	// Endpoints, UMEMBytes and Channels bound what uids other than root
	// hold together: endpoints, their frame memory, same-host channels.
	// The per-uid quotas alone would not split the node: a member with
	// subordinate uids (newuidmap) multiplies them. Zero: three quarters
	// of the endpoint table (the rest is root's, which is not refused),
	// half the node's memory, 8192 channels.
	Endpoints int
	UMEMBytes int64
	Channels  int
	// Frames, RingSize and RxContexts bound one endpoint's request.
	Frames, RingSize, RxContexts int
	// XSKSlotsPerUID bounds the XSKMAP slots one uid's endpoints hold
	// together (an endpoint takes one per receive context and queue),
	// XSKSlots those of all uids other than root, so that the rest stays
	// root's. Zero: a quarter and three quarters of the XSKMAP
	// (loader.Config.XSKSlots; 256 and 768 of 1024).
	XSKSlotsPerUID, XSKSlots int
	// AVsPerUID bounds the named AVs one uid owns, EntriesPerUID the
	// entries in them together.
	AVsPerUID, EntriesPerUID int
	// Entries bounds the entries in the named AVs uids other than root
	// own together, so that four uids at EntriesPerUID do not fill the
	// node's AV entries and root's AVs always have room. Zero: three
	// quarters of the node's AV entries (loader.Config.AVEntries).
	Entries int
	// AVRoomPerUID bounds the room (indices) of the tables of the named
	// AVs one uid owns together: a table is locked kernel memory the size
	// of its room (~56 B an index) from the start (its count hint) and
	// as it grows, however few entries it holds. Zero: twice
	// EntriesPerUID (a table doubles when it fills) plus the smallest
	// table (64 indices) for each of AVsPerUID.
	AVRoomPerUID int
	// AVs bounds the named AVs uids other than root own together, so
	// that root and the admin group (who are not refused) always find a
	// free AV slot. Zero: three quarters of the node's AV slots
	// (loader.Config.MaxAVs).
	AVs int
	// AVCount bounds an AV's count hint (fi_av_attr count).
	AVCount int
	// Ports is the range of UDP ports applications may claim for
	// endpoints. Ports below 1024 are refused unless the range includes
	// them explicitly; a port the kernel has a socket bound to is always
	// refused (EADDRINUSE).
	Ports PortRange
	// Neighbors bounds the neighbour entries the agent made the kernel
	// create for applications (neigh.use) that no host answered for yet,
	// NeighborsPerUID those of one uid, which also creates at most a
	// quarter of them a second. Zero: half and an eighth of the kernel's
	// limit (gc_thresh3, 1024 by default), a table all namespaces share.
	Neighbors, NeighborsPerUID int
	// DomainSlots, DomainRxFrames and DomainTxFrames size every sharing
	// domain the agent makes: endpoints at most, the receive pool they
	// share, the frames each transmits with (ep.DomainConfig).
	DomainSlots, DomainRxFrames, DomainTxFrames int
}

// DefaultLimits are the limits of an agent configured with none.
var DefaultLimits = Limits{
	Conns:           1024,
	ConnsPerUID:     64,
	EndpointsPerUID: 64,
	UMEMBytesPerUID: 1 << 30,
	Frames:          1 << 16,
	RingSize:        1 << 13,
	RxContexts:      64,
	AVsPerUID:       64,
	EntriesPerUID:   1 << 16,
	AVCount:         1 << 20,
	Ports:           PortRange{Min: 1024, Max: 65535},
	DomainSlots:     ep.DefaultDomainSlots,
	DomainRxFrames:  ep.DefaultDomainRxFrames,
	DomainTxFrames:  ep.DefaultDomainTxFrames,
}

func (l *Limits) defaults() {
	d := DefaultLimits
	set := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	set(&l.Conns, d.Conns)
	set(&l.ConnsPerUID, d.ConnsPerUID)
	set(&l.EndpointsPerUID, d.EndpointsPerUID)
	set(&l.Frames, d.Frames)
	set(&l.RingSize, d.RingSize)
	set(&l.RxContexts, d.RxContexts)
	set(&l.AVsPerUID, d.AVsPerUID)
	set(&l.EntriesPerUID, d.EntriesPerUID)
	set(&l.AVCount, d.AVCount)
	set(&l.AVRoomPerUID, 2*l.EntriesPerUID+l.AVsPerUID*minTableRoom)
	set(&l.Channels, DefaultChannels)
	set(&l.DomainSlots, d.DomainSlots)
	set(&l.DomainRxFrames, d.DomainRxFrames)
	set(&l.DomainTxFrames, d.DomainTxFrames)
	if l.UMEMBytesPerUID == 0 {
		l.UMEMBytesPerUID = d.UMEMBytesPerUID
	}
	if l.UMEMBytes == 0 {
		l.UMEMBytes = max(nodeMemory()/2, l.UMEMBytesPerUID)
	}
	if l.Ports == (PortRange{}) {
		l.Ports = d.Ports
	}
	if l.Neighbors == 0 || l.NeighborsPerUID == 0 {
		t := gcThresh3()
		set(&l.Neighbors, max(1, t/2))
		set(&l.NeighborsPerUID, max(1, t/8))
	}
}

// validate refuses limits that make no sense.
func (l *Limits) validate() error {
	for name, v := range map[string]int64{"conns": int64(l.Conns), "conns per uid": int64(l.ConnsPerUID),
		"endpoints per uid": int64(l.EndpointsPerUID), "UMEM bytes per uid": l.UMEMBytesPerUID,
		"frames": int64(l.Frames), "ring size": int64(l.RingSize), "receive contexts": int64(l.RxContexts),
		"AVs per uid": int64(l.AVsPerUID), "entries per uid": int64(l.EntriesPerUID), "AV count": int64(l.AVCount),
		"domain slots": int64(l.DomainSlots), "domain rx frames": int64(l.DomainRxFrames), "domain tx frames": int64(l.DomainTxFrames),
		"neighbors": int64(l.Neighbors), "neighbors per uid": int64(l.NeighborsPerUID),
		"endpoints": int64(l.Endpoints), "UMEM bytes": l.UMEMBytes, "channels": int64(l.Channels),
		"AV room per uid": int64(l.AVRoomPerUID), "AVs": int64(l.AVs), "AV entries": int64(l.Entries),
		"XSKMAP slots per uid": int64(l.XSKSlotsPerUID), "XSKMAP slots": int64(l.XSKSlots)} {
		if v < 0 {
			return fmt.Errorf("agent: limit %s is negative (%d): %w", name, v, fi.EINVAL)
		}
	}
	if l.Ports.Min == 0 || l.Ports.Min > l.Ports.Max {
		return fmt.Errorf("agent: port range %v: %w", l.Ports, fi.EINVAL)
	}
	return nil
}

// PortRange is an inclusive range of UDP ports.
type PortRange struct{ Min, Max uint16 }

func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.Min, r.Max) }

// Contains reports whether port is in the range.
func (r PortRange) Contains(port uint16) bool { return port >= r.Min && port <= r.Max }

// ParsePortRange reads "LOW-HIGH" (or one port), 1..65535.
func ParsePortRange(s string) (PortRange, error) {
	lo, hi, found := strings.Cut(s, "-")
	if !found {
		hi = lo
	}
	a, err1 := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
	b, err2 := strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
	if err1 != nil || err2 != nil || a == 0 || a > b {
		return PortRange{}, fmt.Errorf("port range %q: want LOW-HIGH within 1-65535: %w", s, fi.EINVAL)
	}
	return PortRange{uint16(a), uint16(b)}, nil
}

// DefaultChannels is Limits.Channels' default: the channels of two uids
// whose 64 endpoints each send on 64.
const DefaultChannels = 8192

// minTableRoom is the room of the smallest AV table (avtab.Lines).
var minTableRoom = func() int { _, c, _ := avtab.Lines(0); return int(c) }()

// nodeMemory is the node's physical memory in bytes (1 GiB if unknown).
func nodeMemory() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil || si.Totalram == 0 {
		return 1 << 30
	}
	return int64(si.Totalram) * int64(max(si.Unit, 1))
}

// limitOr is a limit's value: n when set (positive), else num/den of
// size, the loaded maps' (at least 1).
func limitOr(n int, size uint32, num, den int) int {
	if n > 0 {
		return n
	}
	return max(1, int(size)*num/den)
}

// userAVs is Limits.AVs, or its default: 3/4 of the AV slots.
func (a *Agent) userAVs() int { return limitOr(a.cfg.Limits.AVs, a.dp.AVMeta.MaxEntries(), 3, 4) }

// userEndpoints is Limits.Endpoints, or its default: 3/4 of the endpoint
// table.
func (a *Agent) userEndpoints() int {
	return limitOr(a.cfg.Limits.Endpoints, a.dp.EP.MaxEntries(), 3, 4)
}

// xskQuota is Limits.XSKSlotsPerUID, or its default: a quarter of the
// XSKMAP.
func (a *Agent) xskQuota() int {
	return limitOr(a.cfg.Limits.XSKSlotsPerUID, a.dp.XSKs.MaxEntries(), 1, 4)
}

// userXSKSlots is Limits.XSKSlots, or its default: 3/4 of the XSKMAP.
func (a *Agent) userXSKSlots() int {
	return limitOr(a.cfg.Limits.XSKSlots, a.dp.XSKs.MaxEntries(), 3, 4)
}

// userEntries is Limits.Entries, or its default: 3/4 of the node's AV
// entries.
func (a *Agent) userEntries() int {
	return limitOr(a.cfg.Limits.Entries, a.dp.Config().AVEntries, 3, 4)
}

// usersHold sums what uids other than root hold; a.mu held.
func (a *Agent) usersHold() (sum usage) {
	for uid, u := range a.usage {
		if uid != 0 {
			sum.endpoints += u.endpoints
			sum.umem += u.umem
			sum.slots += u.slots
		}
	}
	return sum
}

// usage is what one uid holds through the agent.
type usage struct {
	conns, endpoints int
	slots            int // XSKMAP slots of its endpoints
	umem             int64
	lingering        int64 // of umem: closed endpoints' (linger.go)
}

// umemBytes is the frame memory an endpoint request costs.
func umemBytes(frames int) int64 {
	if frames == 0 {
		frames = 4096 // ep's default
	}
	return int64(frames) * dataplane.DefaultFrameSize
}
