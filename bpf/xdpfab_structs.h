/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Structs shared by the XDP program and Go. bpf2go generates the Go types
 * of the maps' keys and values from these (bpf/types.go names them; the
 * wire package decodes rx_meta and wire_hdr); change both sides together.
 * All padding is explicit so the layouts are the same on every compiler.
 * The names carry no xdpfab_ prefix: bpf2go prefixes the Go names with
 * its identifier (struct av_key becomes xdpfabAvKey). */
#ifndef XDPFAB_STRUCTS_H
#define XDPFAB_STRUCTS_H

#include <linux/types.h>
#include "xdpfab_consts.h"

/* A peer address as the AV stores it: IPv4 uses addr[0..3], the rest zero. */
struct udp_addr {
	__u8 addr[16];
	__be16 port;  /* UDP port, network byte order */
	__u8 family;  /* XDPFAB_AF_INET or XDPFAB_AF_INET6 */
	__u8 pad;
};

/* What an AV says about one source, (AV, source) -> translation: the
 * lookup the AV table (struct av_slot) implements. No map holds these; the
 * Go model of the program (internal/xdpmodel) and tests describe AV
 * contents with them (loader.PutAVEntry). */
struct av_key {
	__u32 av_id;
	struct udp_addr src;
};

struct av_val {
	__u64 fi_addr;  /* the AV index */
	__u64 user_id;  /* FI_AV_USER_ID id, FI_ADDR_NOTAVAIL when unset */
	__u32 group;    /* peer group (fi_group_addr) */
	__u32 auth_key; /* auth key value the entry is bound to, 0 = none */
	__u32 flags;    /* XDPFAB_AVF_* */
	__u32 pad;
};

/* An AV's table: one BPF_F_MMAPABLE array map per AV (xdpfab_avtab holds
 * it at the AV's id), of 64-byte lines (struct av_line, 64 to an element:
 * struct av_page), which user space maps and writes without system calls
 * and XDP reads in place:
 *
 *   line 0                        struct av_hdr: geometry, seed, counts
 *   lines 1 .. nbuckets           the forward index: open addressing, two
 *                                 struct av_slot per line (a bucket)
 *   lines 1 + nbuckets ..         the index table: struct av_aux per fi_addr,
 *                                 four per line
 *
 * A source hashes (seeded, av_hash) to two buckets and lives in one of
 * their four slots (cuckoo hashing: an insert that finds both full moves
 * other entries to their other bucket). A slot is written under its
 * sequence number (seq odd while it changes), so a reader never combines
 * one entry's key with another's value; moves happen under the header's
 * move count, so a lookup that missed while entries moved looks again:
 * see docs/ARCHITECTURE.md#the-av-table. */
struct av_slot {
	__u32 seq;      /* even: stable; odd: being written */
	__u32 fi_addr;  /* the AV index */
	__u8 addr[16];  /* struct udp_addr's fields, inline */
	__be16 port;
	__u8 family;    /* 0: free; else XDPFAB_AF_* */
	__u8 flags;     /* XDPFAB_AVF_* */
	__u32 auth_key; /* auth key value the entry is bound to, 0 = none */
};

/* Per fi_addr: what XDP reads only for FI_AV_USER_ID entries (user_id,
 * under the slot's sequence number) and what user space keeps per index. */
struct av_aux {
	__u64 user_id;
	__u32 slot;   /* the index's slot: bucket * 2 + i (buckets from 0) */
	__u32 refcnt; /* duplicate inserts still to be removed; 0: index free */
};

/* Line 0 of a table. XDP reads seed and nbuckets; the rest is user
 * space's, under the dataplane lock. */
struct av_hdr {
	__u64 seed;      /* av_hash's seed, random per table */
	__u32 magic;     /* XDPFAB_AV_MAGIC */
	__u32 av_id;
	__u32 nbuckets;  /* forward index buckets (lines 1 .. nbuckets) */
	__u32 cap;       /* fi_addr capacity: struct av_aux entries */
	__u32 live;      /* slots in use */
	__u32 moves;     /* odd while entries move between buckets */
	__u32 high;      /* indices ever handed out: the next new index */
	__u32 retired;   /* 1: replaced by another table (growth): re-open */
	__u64 pad[3];
};

/* One line of a table: a bucket of two slots (or the header, or four aux
 * entries). */
struct av_line {
	struct av_slot slot[2];
};

/* An element of a table's array map: XDPFAB_AV_PAGE_LINES lines, a page.
 * Line L is line L % XDPFAB_AV_PAGE_LINES of element L / XDPFAB_AV_PAGE_LINES;
 * in the mapping (elements back to back) it is simply at L * 64. Whole
 * pages let one map lookup serve the header and both buckets of a small
 * table. */
struct av_page {
	struct av_line line[XDPFAB_AV_PAGE_LINES];
};

/* Endpoint table key: a local address/port. An all-zero addr is the
 * wildcard for the family (bound to "any"). */
struct ep_key {
	struct udp_addr local;
};

/* Endpoint table value. */
struct ep_val {
	__u32 ep_id;
	__u32 av_id;    /* 0 = no AV bound: every source is unknown */
	__u32 xsk_base; /* first XSKMAP slot of this endpoint */
	__u16 rx_ctxs;  /* receive contexts (>= 1) */
	__u16 queues;   /* rx queues listened on (>= 1) */
	enum policy policy; /* one byte (packed) */
	__u8 flags;
	__u16 first_queue; /* rx queues first_queue .. first_queue+queues-1 */
	__u32 auth_key; /* only sources bound to this key value are known; 0 = any */
	/* The process that registered the endpoint (pid and start time, see
	 * internal/procid): the agent removes entries whose process is gone.
	 * XDP never reads these. */
	__u32 owner_pid;
	__u32 owner_uid; /* with XDPFAB_EPF_CHARGED: the uid the agent charged */
	__u64 owner_start;
};

/* The endpoint index's entry (xdpfab_epslot, xdpfab_maps.h): one
 * endpoint's key and value, copied from xdpfab_ep for a port that has
 * exactly one endpoint, so that XDP finds it with two array lookups
 * instead of hashing the 24-byte key (loader/epindex.go writes it). */
struct ep_slot {
	struct udp_addr local; /* the endpoint's key; family 0: matches nothing */
	__u32 state;           /* XDPFAB_EPS_*; user space's, XDP ignores it */
	struct ep_val val;
};

/* Auth key table key: (AV, handle). */
struct rev_key {
	__u32 av_id;
	__u32 index;
};

/* Per-AV attributes (array indexed by av_id). Slot 0 is no AV: its count is
 * the AV entries reserved node-wide, its generation counts agent starts and
 * its flags are the node's AV entry limit (loader.Config.AVEntries), fixed
 * by the first load of pinned maps. */
struct av_meta {
	__u64 generation; /* bumped by every change: other openers resync */
	__u64 flags;      /* open flags (FI_AV_USER_ID, FI_SYMMETRIC, ...) */
	__u32 in_use;
	__u32 type;       /* FI_AV_MAP / FI_AV_TABLE */
	__u32 addr_format;
	__u32 rx_ctx_bits;
	__u32 count;      /* count hint at open; slot 0: AV entries reserved, all AVs */
	__u32 owner_pid;  /* anonymous AVs: the process that opened it ... */
	__u8 name[48];    /* NUL-terminated; "" = anonymous */
	__u64 owner_start; /* ... and its start time (internal/procid) */
	__u32 owner_uid;  /* who may change it (besides admins): the creator ... */
	__u32 group_gid;  /* ... and members of this group (0xffffffff: none) */
};

/* A process's reserve of AV capacity (taken from av_meta slot 0's count
 * in chunks), so that what a dead process held can be given back. */
struct proc_id {
	__u32 pid;
	__u32 pad;
	__u64 start;
};

struct pool_val {
	__u32 entries;
	__u32 pad;
};

/* Auth key table (key: rev_key with index = handle). */
struct authkey_val {
	__u64 user_id; /* FI_AV_USER_ID id of the key (FI_SOURCE_ERR events) */
	__u32 len;
	__u32 value;   /* the key as carried on the wire and in av_val */
	__u8 key[64];
};

/* Metadata in front of every redirected frame, pushed with
 * bpf_xdp_adjust_head: a descriptor's first 32 bytes (wire.Meta). Its
 * offsets count from the byte after it. */
struct rx_meta {
	__u64 fi_addr;
	__u64 user_id;
	__u32 ep_id;
	__u16 flags;       /* XDPFAB_META_* */
	__u16 l3_off;      /* offset of the IP header in the frame */
	__u16 hdr_off;     /* offset of the xdpfab header in the frame */
	__u16 payload_len; /* bytes after the xdpfab header, from UDP length */
	__u8 family;
	__u8 version;      /* XDPFAB_META_VERSION */
	__u8 rx_ctx;
	__u8 pad;
};

/* The xdpfab wire header at the start of the UDP payload (docs/wire.md). */
struct wire_hdr {
	__be32 magic;
	__u8 version;
	__u8 op;
	__u8 flags;
	__u8 rx_ctx;
	__be32 group;
	__be32 auth_key;
	__be64 tag;
	__be64 cq_data;
};

/* Go decodes the metadata and the wire header at fixed offsets
 * (wire.ParseMeta, wire.PutHdr, wire.ParseHdr): pin them here.
 * TestWireLayoutMatchesC checks the Go side against these lines. */
#define XDPFAB_AT(s, f, off) _Static_assert(__builtin_offsetof(struct s, f) == (off), #s "." #f)
/* The policy enum is packed to the byte the field always had. */
_Static_assert(sizeof(struct ep_val) == 40, "ep_val size");
_Static_assert(sizeof(struct ep_slot) == 64, "ep_slot size");
XDPFAB_AT(ep_val, policy, 16);
_Static_assert(sizeof(struct av_slot) == 32, "av_slot size");
_Static_assert(sizeof(struct av_aux) == 16, "av_aux size");
_Static_assert(sizeof(struct av_hdr) == 64, "av_hdr size");
_Static_assert(sizeof(struct av_line) == 64, "av_line size: a cache line");
_Static_assert(sizeof(struct av_page) == 4096, "av_page size: a page");
XDPFAB_AT(av_slot, seq, 0);
XDPFAB_AT(av_slot, fi_addr, 4);
XDPFAB_AT(av_slot, addr, 8);
XDPFAB_AT(av_slot, port, 24);
XDPFAB_AT(av_slot, family, 26);
XDPFAB_AT(av_slot, flags, 27);
XDPFAB_AT(av_slot, auth_key, 28);
_Static_assert(sizeof(struct rx_meta) == 32, "rx_meta size");
XDPFAB_AT(rx_meta, fi_addr, 0);
XDPFAB_AT(rx_meta, user_id, 8);
XDPFAB_AT(rx_meta, ep_id, 16);
XDPFAB_AT(rx_meta, flags, 20);
XDPFAB_AT(rx_meta, l3_off, 22);
XDPFAB_AT(rx_meta, hdr_off, 24);
XDPFAB_AT(rx_meta, payload_len, 26);
XDPFAB_AT(rx_meta, family, 28);
XDPFAB_AT(rx_meta, version, 29);
XDPFAB_AT(rx_meta, rx_ctx, 30);
_Static_assert(sizeof(struct wire_hdr) == 32, "wire_hdr size");
XDPFAB_AT(wire_hdr, magic, 0);
XDPFAB_AT(wire_hdr, version, 4);
XDPFAB_AT(wire_hdr, op, 5);
XDPFAB_AT(wire_hdr, flags, 6);
XDPFAB_AT(wire_hdr, rx_ctx, 7);
XDPFAB_AT(wire_hdr, group, 8);
XDPFAB_AT(wire_hdr, auth_key, 12);
XDPFAB_AT(wire_hdr, tag, 16);
XDPFAB_AT(wire_hdr, cq_data, 24);

#endif
