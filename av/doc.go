// Package av implements libfabric's address vector (fi_av(3)) on xdpfab's
// BPF maps: every insert becomes an entry the XDP program uses to translate
// a datagram's source (IP address, UDP port) into the peer's fi_addr or user
// ID before user space sees the frame.
//
// An AV is opened on a loader.Objects. Its entries live in two maps: the
// forward map xdpfab_av, (AV, source) -> fi_addr, read by XDP per packet,
// and the reverse table xdpfab_avrev, (AV, index) -> address, which is the
// source of truth for user space and for other processes sharing a named
// AV. The process keeps a cache of the reverse table; a named AV re-reads
// it when the AV's generation (xdpfab_avmeta) shows another process changed
// it.
//
// Semantics follow fi_av(3), with the choices it leaves open made as
// docs/semantics.md#address-vector records: lowest free index,
// reference-counted duplicates, per-element errors (FI_SYNC_ERR), FI_MORE
// batching, FI_AV_USER_ID at open and per insert, auth keys, FI_ADDR_STR,
// named AVs with FI_READ, and the deprecated FI_EVENT mode with a minimal
// EventQueue. Every call-level error wraps a libfabric errno from package fi
// and changes nothing.
//
// Nil and zero values never panic. A method called on a nil *AV, or on an
// AV that did not come from Open (its zero value), fails with fi.EINVAL; on
// a closed or destroyed AV it fails with fi.EOPBADSTATE. Methods without an
// error result return their zero value (Resolve reports false) or do
// nothing, and Close on a nil or zero AV returns nil, as on a closed one. A
// nil or unloaded (zero) *loader.Objects given to Open, Destroy or
// DestroyOrphan is EINVAL. A nil *EventQueue is EINVAL too (its Close
// returns nil); the zero EventQueue is an empty queue.
//
// This package does not send or receive; endpoints (which bind AVs) do.
package av
