// Package av implements libfabric's address vector (fi_av(3)) on xdpfab's
// BPF maps: every insert becomes an entry the XDP program uses to translate
// a datagram's source (IP address, UDP port) into the peer's fi_addr or user
// ID before user space sees the frame.
//
// An AV is opened on a loader.Objects. Its entries live in its table: one
// BPF array map per AV, created with BPF_F_MMAPABLE and sized by the AV
// (its count hint, then growth), which this process maps into memory and
// the XDP program reads in place (xdpfab_avtab holds each AV's table at the
// AV's id). Inserts, removes and lookups are loads and stores into that
// mapping: no system call per entry, and no copy of the table in the Go
// heap; the process keeps only the AV's free indices (a bitmap, for the
// lowest free index), its auth keys, and per index a 4-byte hint of the
// index's slot for lookups (avtab.Reader).
//
// # The table
//
// Line 0 of the table is its header (hash seed, geometry, counts); then a
// forward index of buckets, one 64-byte cache line each, holding two
// 32-byte slots (source address, port and family inline, fi_addr, flags,
// auth key value, sequence number); then 16 bytes per index (user ID, the
// index's slot, its reference count). A source hashes (seeded per table) to
// two buckets and sits in one of their four slots: the XDP program reads
// the first bucket's line, and the second only when the source is not in
// the first, both at addresses known from the hash. An insert whose two
// buckets are full moves entries to their other bucket (cuckoo hashing);
// when that fails, or the AV outgrows the table's indices, a new table is
// built (new seed, twice the size when needed) and swapped in.
//
// # Concurrency
//
// All writers, in every process, hold the dataplane lock
// (loader.Objects.Lock), which also guards the AV's own fields. Readers
// take no lock: the XDP program, readers in other processes, and this
// process's Lookup, LookupAddr, Resolve and SourceOf, which read the
// table through an avtab.Reader (loaded from an atomic pointer the writer
// swaps with the table) with no lock, no locked instruction and no system
// call, and fall back to the locked way only on a miss (an index not in
// use, a named AV another process grew, a table this process holds as a
// copy). Each slot carries a sequence number that a writer makes odd
// before it changes the slot (or the index's user ID) and even after, and
// a reader uses what it read only when the number was the same even value
// before and after; a lookup that missed while the header's move count
// changed looks again. So a frame is never translated, and an fi_addr
// never looked up, with one entry's address and another's fi_addr or user
// ID. Remove empties the slot before it frees the index, and an insert
// writes the index's entry before the slot that makes it visible, so from
// Remove's return on no XDP run that starts translates the removed source
// and no lookup that starts finds it.
//
// What keeps the memory there: a swapped-out table is unmapped from XDP's
// view only after an RCU grace period (loader.WaitReaders), so that no XDP
// run still reads it. In the process, closing a table (AV.Close, growth)
// replaces its pages by zeros in one mmap(MAP_FIXED), so that a lookup
// still holding its Reader reads nothing, never a fault; the address range
// itself is unmapped once no Reader refers to it (runtime.AddCleanup). The
// memory-ordering assumptions per architecture are in
// docs/platform.md#the-av-table-and-memory-ordering.
//
// # Why this layout
//
// The kernel's hash maps made every insert a system call per map and every
// packet two dependent cache misses (bucket, then element), and they are
// preallocated for the node's capacity. Memory-mapped arrays make the
// writes plain stores and let the table follow each AV's size; keys inline
// in cache-line buckets make a lookup one line in the common case. A BPF
// arena would do as well but needs a newer compiler for the XDP side than
// this project builds with. docs/ARCHITECTURE.md#the-av-table has more.
//
// Named AVs are shared by the processes on the node that open the same
// pins: writers map the table read-write, readers (FI_READ) read-only;
// a reader that may open the table only read-only (Linux maps a BPF map only
// through a descriptor opened for writing) works on a copy that it re-reads
// when the AV's generation (xdpfab_avmeta) shows a change.
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
