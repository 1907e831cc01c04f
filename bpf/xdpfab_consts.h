/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Constants shared by the XDP program and Go (the wire package mirrors the
 * wire format's, bpf/types.go the others; TestConstsMatchC compares). */
#ifndef XDPFAB_CONSTS_H
#define XDPFAB_CONSTS_H

/* Wire header (docs/wire.md). "XFAB" in network byte order. */
#define XDPFAB_MAGIC 0x58464142
#define XDPFAB_VERSION 1
#define XDPFAB_OP_MSG 1
#define XDPFAB_OP_TAGGED 2
#define XDPFAB_OP_MAX XDPFAB_OP_TAGGED
#define XDPFAB_HF_CQ_DATA 0x01 /* cq_data carries remote CQ data */

/* Per-CPU counters (index into xdpfab_stats). Every frame the program sees
 * counts exactly once in one of the outcome counters, so
 * rx == translated + unknown + drop_policy + malformed + pass +
 * redirect_fail + csum_error + not_local + wrong_queue:
 * the program leaves STAT_RX's element alone (one counter update per frame,
 * not two) and user space reports that sum as RX (loader's Counters).
 * Programs before that counted RX too; the sum counts their frames alike.
 *
 * The enums are Go's too: bpf2go -type makes bpf.Counter and bpf.Policy of
 * them from the object's BTF, naming each constant after its type and
 * enumerator (STAT_RX becomes xdpfabCounterSTAT_RX), so the enumerators
 * carry no XDPFAB_ prefix of their own. */
enum counter {
	STAT_RX = 0,            /* frames seen */
	STAT_TRANSLATED = 1,    /* redirected, source found in the AV */
	STAT_UNKNOWN = 2,       /* redirected, source not in the AV */
	STAT_DROP_POLICY = 3,   /* unknown source, endpoint policy drop */
	STAT_MALFORMED = 4,     /* to an endpoint, bad IP/UDP/xdpfab header or lengths: dropped */
	STAT_PASS = 5,          /* not ours: XDP_PASS, untouched */
	STAT_REDIRECT_FAIL = 6, /* ours, but no socket / metadata failed: dropped */
	STAT_CSUM_ERROR = 7,    /* to an endpoint, bad IPv4 header or UDP checksum: dropped */
	STAT_NOT_LOCAL = 8,     /* to a wildcard endpoint's port, but not to a local
	                         * unicast address: XDP_PASS, untouched */
	STAT_WRONG_QUEUE = 9,   /* to an endpoint, on an rx queue it does not
	                         * listen on (flow steering missing): dropped */
	STAT_MAX = 10,
};

/* Counters are kept per ingress ifindex: xdpfab_stats[ifindex * STAT_MAX
 * + counter], a per-CPU array (lookups inlined: no cost per packet over a
 * single set). Ifindexes at or above XDPFAB_IFINDEX_SLOTS share slot 0,
 * which no interface uses. An ifindex is per network namespace. */
#define XDPFAB_IFINDEX_SLOTS 1024

/* What an endpoint does with a datagram whose source is not in its AV
 * (ep_val.policy: packed, one byte). */
enum policy {
	UNKNOWN_NOTAVAIL = 0,   /* deliver with fi_addr FI_ADDR_NOTAVAIL */
	UNKNOWN_SOURCE_ERR = 1, /* deliver, flagged for an error completion */
	UNKNOWN_DROP = 2,       /* XDP_DROP in the kernel, counted */
} __attribute__((packed));

/* rx_meta.flags */
#define XDPFAB_META_KNOWN 0x0001      /* source found: fi_addr/user_id valid */
#define XDPFAB_META_SOURCE_ERR 0x0002 /* unknown source under UNKNOWN_SOURCE_ERR */
#define XDPFAB_META_USER_ID 0x0004    /* report user_id in place of fi_addr */
#define XDPFAB_META_STAMP 0x0008      /* the packet starts with an XDP stamp (XDPFAB_EPF_STAMP) */
/* 2: the metadata is the descriptor's first 32 bytes (bpf_xdp_adjust_head);
 * 1 had it in the kernel's metadata area in front of the descriptor. */
#define XDPFAB_META_VERSION 2

/* ep_val.flags */
/* Measurement: put XDPFAB_STAMP_LEN bytes in front of every frame redirected
 * to the endpoint, bpf_ktime_get_ns() (CLOCK_MONOTONIC) as the program
 * redirects it, host byte order. The metadata flags the frame
 * (XDPFAB_META_STAMP) and its l3_off and hdr_off count the stamp, which
 * lies between the metadata and the Ethernet header. */
#define XDPFAB_EPF_STAMP 0x01
/* The agent prepared the endpoint and charged it to uid ep_val.owner_uid: a
 * restarted agent charges it again. XDP never reads it. */
#define XDPFAB_EPF_CHARGED 0x02

#define XDPFAB_EP_PER_PORT 4 /* endpoints an xdpfab_epport entry lists */

/* struct ep_slot's state (user space's bookkeeping; XDP never reads it):
 * free (its key cleared), linked from its port's xdpfab_epport entry, or
 * retired (unlinked, its contents kept until a grace period has passed). */
#define XDPFAB_EPS_FREE 0
#define XDPFAB_EPS_USED 1
#define XDPFAB_EPS_RETIRED 2
#define XDPFAB_STAMP_LEN 8

/* av_slot.flags / av_val.flags */
#define XDPFAB_AVF_USER_ID 0x0001 /* completions report user_id */

/* AV tables (struct av_hdr, struct av_slot). */
#define XDPFAB_AV_MAGIC 0x54564158 /* "XAVT" little endian */
#define XDPFAB_AV_PAGE_LINES 64     /* lines per table map element (struct av_page) */
#define XDPFAB_AV_RETRY 4          /* reads of a slot, or of both buckets, that change meanwhile */

/* The UDP checksum of a datagram in a frame's linear part is summed in
 * place, over at most this many 512-byte chunks (bpf_csum_diff's limit per
 * call) plus a shorter tail: UDP lengths up to XDPFAB_CSUM_CHUNKS * 512 +
 * 511 = 4607 bytes. A longer datagram, or one in fragments (a jumbo frame),
 * is summed through a per-CPU scratch buffer of XDPFAB_CSUM_SCRATCH bytes,
 * up to the longest UDP datagram, XDPFAB_MAX_UDP_LEN. */
#define XDPFAB_CSUM_CHUNKS 8
#define XDPFAB_CSUM_SCRATCH 512
#define XDPFAB_MAX_UDP_LEN 65535

/* Address families, as in Linux. */
#define XDPFAB_AF_INET 2
#define XDPFAB_AF_INET6 10

#endif
