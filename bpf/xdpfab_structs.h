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

/* Forward AV map key: which AV, which source. */
struct av_key {
	__u32 av_id;
	struct udp_addr src;
};

/* Forward AV map value: what XDP reports for that source. */
struct av_val {
	__u64 fi_addr;  /* the AV index */
	__u64 user_id;  /* FI_AV_USER_ID id, FI_ADDR_NOTAVAIL when unset */
	__u32 group;    /* peer group (fi_group_addr) */
	__u32 auth_key; /* auth key value the entry is bound to, 0 = none */
	__u32 flags;    /* XDPFAB_AVF_* */
	__u32 pad;
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
	__u32 pad2;
	__u64 owner_start;
};

/* Reverse AV table key: (AV, index). */
struct rev_key {
	__u32 av_id;
	__u32 index;
};

/* Reverse AV table value: everything needed to rebuild the forward entry,
 * plus the reference count of duplicate inserts. */
struct rev_val {
	__u64 user_id;
	struct udp_addr addr;
	__u32 refcnt;   /* duplicate inserts still to be removed */
	__u32 group;
	__u32 auth_key; /* handle in xdpfab_authkey (+1), 0 = none */
	__u32 flags;    /* XDPFAB_AVF_* */
};

/* Per-AV attributes (array indexed by av_id). Slot 0 is no AV: its count is
 * the AV entries reserved node-wide and its generation counts agent starts. */
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

/* Metadata in front of every redirected frame (bpf_xdp_adjust_meta). It
 * must stay a multiple of 4 bytes and at most 32. */
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
XDPFAB_AT(ep_val, policy, 16);
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
