package bpf

import "github.com/xdpfab/xdpfab/wire"

// The wire format moved to package wire. These forwarders keep the
// agent's tests building until they use wire directly; nothing else in the
// repository uses them, and they go once that is done.

// WireHdr is wire.Hdr.
//
// Deprecated: use wire.Hdr.
type WireHdr = wire.Hdr

// Deprecated: use wire.HdrLen and wire.OpMsg.
const (
	HdrLen = wire.HdrLen
	OpMsg  = wire.OpMsg
)

// PutHdr is wire.PutHdr.
//
// Deprecated: use wire.PutHdr.
func PutHdr(b []byte, h wire.Hdr) int { return wire.PutHdr(b, h) }
