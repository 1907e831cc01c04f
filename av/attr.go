package av

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/xdpfab/xdpfab/bpf"
	"github.com/xdpfab/xdpfab/fi"
)

// Type is the AV type (enum fi_av_type). String prints libfabric's names;
// an unknown value prints as Type(7).
type Type int

//go:generate go tool stringer -type Type -linecomment -output type_string.go

// AV types with libfabric's values. MAP behaves as TABLE: dense indices.
const (
	TypeUnspec Type = 0 // FI_AV_UNSPEC
	TypeMap    Type = 1 // FI_AV_MAP
	TypeTable  Type = 2 // FI_AV_TABLE
)

// Attr is struct fi_av_attr plus the domain's address format.
type Attr struct {
	// Type: UNSPEC is answered with the type chosen (TABLE).
	Type Type
	// RxCtxBits reserved in fi_addr for receive contexts (fi_rx_addr).
	RxCtxBits int
	// Count is a sizing hint; the AV grows past it.
	Count int
	// EPPerNode is a sizing hint, accepted and unused.
	EPPerNode int
	// Name opens or creates a named AV shared by the processes of the
	// node that share the dataplane's pins. At most MaxNameLen bytes.
	Name string
	// MapAddr is reported back as 0 for named AVs: fi_addr values are
	// identical in every process regardless.
	MapAddr uint64
	// Flags: fi.Event, fi.Read, fi.Symmetric, fi.AVUserID.
	Flags fi.Flags
	// AddrFormat of inserted addresses; UNSPEC accepts both families.
	AddrFormat fi.AddrFormat
	// LookupHost resolves host names for InsertSvc/InsertSym. Nil uses
	// the system resolver.
	LookupHost func(ctx context.Context, host string) ([]netip.Addr, error)
	// Owner, when set, is recorded as a new named AV's owner: who may
	// change it through the agent besides admins (see Owner). Nil: the
	// calling process's effective uid and no group. Opening an existing AV
	// ignores it.
	Owner *Owner
}

// Owner is who may change a named AV through the agent (besides its
// admins): the uid that created it, and the members of Group unless it is
// NoGroup. The agent enforces it; in-process users with write access to the
// maps are not bound by it.
type Owner struct {
	UID   uint32
	Group uint32
}

// NoGroup is Owner.Group when no group may change the AV.
const NoGroup = bpf.NoGroup

// Limits.
const (
	// MaxNameLen bounds Attr.Name (the map field holds 48 bytes with NUL).
	MaxNameLen = 47
	// MaxIndex is the largest AV index. Bit 31 marks auth-key handles.
	MaxIndex = 1<<31 - 1
	// MaxRxCtxBits leaves 32 bits of index under the receive context bits.
	MaxRxCtxBits = 16
	// AuthKeySize is the size of an xdpfab auth key: a 32-bit value,
	// big endian, carried in the wire header. Zero is not a key.
	AuthKeySize = 4
	// MaxAuthKeys per AV.
	MaxAuthKeys = 64
)

const openFlags = fi.Event | fi.Read | fi.Symmetric | fi.AVUserID

func (a *Attr) validate() error {
	switch a.Type {
	case TypeUnspec, TypeMap, TypeTable:
	default:
		return fmt.Errorf("av open: type %d: %w", int(a.Type), fi.EINVAL)
	}
	if bad := a.Flags &^ openFlags; bad != 0 {
		return fmt.Errorf("av open: unsupported flags %v: %w", bad, fi.EINVAL)
	}
	if a.Flags&fi.Read != 0 && a.Name == "" {
		return fmt.Errorf("av open: FI_READ needs a named AV: %w", fi.EINVAL)
	}
	if a.RxCtxBits < 0 || a.RxCtxBits > MaxRxCtxBits {
		return fmt.Errorf("av open: rx_ctx_bits %d outside 0..%d: %w", a.RxCtxBits, MaxRxCtxBits, fi.EINVAL)
	}
	if a.Count < 0 || a.EPPerNode < 0 {
		return fmt.Errorf("av open: negative count or ep_per_node: %w", fi.EINVAL)
	}
	if a.Name != "" {
		if err := ValidName(a.Name); err != nil {
			return fmt.Errorf("av open: %w", err)
		}
	}
	switch a.AddrFormat {
	case fi.FormatUnspec, fi.FormatSockaddr, fi.FormatSockaddrIn, fi.FormatSockaddrIn6, fi.FormatStr:
	default:
		return fmt.Errorf("av open: address format %v: %w", a.AddrFormat, fi.EINVAL)
	}
	return nil
}

// familyOK reports whether the AV's format admits ap's family.
func (a *Attr) familyOK(ap netip.AddrPort) bool {
	switch a.AddrFormat {
	case fi.FormatSockaddrIn:
		return ap.Addr().Unmap().Is4()
	case fi.FormatSockaddrIn6:
		return ap.Addr().Is6() && !ap.Addr().Is4In6()
	}
	return true
}

// ValidName checks an AV name against the grammar every named AV follows:
// 1 to MaxNameLen bytes of ASCII letters, digits, '.', '_' and '-',
// starting with a letter or digit. Names travel into logs, metrics labels,
// status output and file-like listings; the grammar keeps out path
// separators, control and invisible characters, invalid UTF-8 and
// look-alikes. Errors wrap fi.EINVAL.
func ValidName(name string) error {
	if name == "" || len(name) > MaxNameLen {
		return fmt.Errorf("AV name of %d bytes: want 1 to %d: %w", len(name), MaxNameLen, fi.EINVAL)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return fmt.Errorf("AV name %q: byte %d (%q) is not allowed; names are ASCII letters, digits, '.', '_' and '-', starting with a letter or digit: %w",
				name, i, rune(c), fi.EINVAL)
		}
	}
	return nil
}
