//go:build ignore
/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * xdpfab_rx: the receive half of the xdpfab dataplane.
 *
 * For every UDP datagram addressed to a local xdpfab endpoint (xdpfab_ep),
 * translate its source (address, port) through the endpoint's address vector
 * (its table in xdpfab_avtab: av_find) into an fi_addr and user id, write them in front of the frame
 * as struct rx_meta, and redirect the frame to the endpoint's AF_XDP
 * socket, once it passed the checks the kernel makes before delivering a
 * datagram (IP header, lengths, checksums: xdpfab_parse.h). A datagram
 * to an endpoint that fails them is dropped and counted; everything else
 * passes to the kernel untouched, malformed or not: the program never
 * writes a frame it does not redirect. internal/xdpmodel is its reference
 * model in Go.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdpfab_maps.h"
#include "xdpfab_parse.h"
#include "xdpfab_stamp.h"

char __license[] SEC("license") = "Dual BSD/GPL";

/* Go's bpf.Counter is generated from enum counter (bpf2go -type), which
 * needs the enum in the object's BTF; nothing else there names it (the
 * counter index is a __u32 map key). This declaration does, in a section
 * the loader ignores: it is never loaded. */
const enum counter *xdpfab_btf_counter __attribute__((unused)) SEC(".xdpfab.btf");
/* Likewise the AV table's types: xdpfab_avtab's inner map definition
 * (struct av_table) and its value (struct av_line), referenced only through
 * pointers, which clang would describe as forward declarations the loader
 * cannot size, and the structs only Go uses (bpf2go -type). */
struct xdpfab_btf_types {
	struct ep_slot ep_slot;
	struct av_table table;
	struct av_page page;
	struct av_hdr hdr;
	struct av_aux aux;
	struct av_key key;
	struct av_val val;
} xdpfab_btf_types __attribute__((unused)) SEC(".xdpfab.btf");

/* Reads of memory user space writes concurrently (the AV table): the
 * compiler must neither cache nor reorder them across a barrier. */
#define READ_ONCE32(x) (*(volatile __u32 *)&(x))
#define barrier() asm volatile("" ::: "memory")

/* What av_find found for a source. */
struct av_found {
	__u64 user_id;
	__u32 fi_addr;
	__u32 auth_key;
	__u8 flags;
};

/* av_hash: the seeded hash of a source (its address as two 64-bit words in
 * host order, port and family as a third), the same as Go's bpf.AVHash. */
static __always_inline __u64 av_mix(__u64 h, __u64 w)
{
	h ^= w;
	h *= 0x9e3779b97f4a7c15ULL;
	return h ^ (h >> 32);
}

/* av_eqmask: all ones when slot s holds the source (w0, w1, w2), else 0,
 * without a branch. The verifier walks every branch of the program, and
 * branches that only compute a 0 or 1 multiply its paths (the lookup of
 * four slots, retried, would take it close to its limit); arithmetic does
 * not. OPAQUE keeps clang from turning the arithmetic back into a compare. */
#define OPAQUE(x) asm volatile("" : "+r"(x))

static __always_inline __u64 av_eqmask(struct av_slot *s, __u64 w0, __u64 w1, __u64 w2)
{
	__u64 *a = (__u64 *)s->addr;
	__u64 pf = *(__u32 *)&s->port;
	__u64 x = (a[0] ^ w0) | (a[1] ^ w1) | ((pf ^ w2) & 0x00ffffff);
	__u64 nz = x | -x;
	OPAQUE(nz);
	return (nz >> 63) - 1;
}

/* av_stable: all ones when a slot's sequence number read before (q) and
 * after (e) its fields was the same even value, else 0; no branch. */
static __always_inline __u64 av_stable(__u64 q, __u64 e)
{
	__u64 bad = (q ^ e) | (q & 1);
	__u64 nz = bad | -bad;
	OPAQUE(nz);
	return (nz >> 63) - 1;
}

/* av_bucket_read reads bucket b's two slots, whose sequence numbers the
 * caller read (q0, q1) before this: 1 and *out when a slot that stayed
 * stable holds the source (w0, w1, w2), 0 when neither holds it and both
 * stayed stable, -1 when a slot changed meanwhile. */
static __always_inline int av_bucket_read(void *tab, __u32 nb, struct av_line *b, __u64 q0, __u64 q1,
					  __u64 w0, __u64 w1, __u64 w2, struct av_found *out)
{
	struct av_slot *s0 = &b->slot[0], *s1 = &b->slot[1];
	__u64 m0 = av_eqmask(s0, w0, w1, w2), m1 = av_eqmask(s1, w0, w1, w2);
	__u64 f0 = s0->fi_addr, f1 = s1->fi_addr;
	__u64 k0 = s0->auth_key, k1 = s1->auth_key;
	__u64 g0 = s0->flags, g1 = s1->flags;
	barrier();
	/* st: all ones for a slot whose number was even and did not change:
	 * what was read of it holds. */
	__u64 st0 = av_stable(q0, READ_ONCE32(s0->seq)), st1 = av_stable(q1, READ_ONCE32(s1->seq));
	/* The first stable slot that holds the source (an entry that moves to
	 * its other bucket is in two slots for a moment). */
	m0 &= st0;
	m1 &= st1;
	__u64 c1 = m1 & ~m0;
	if (!(m0 | m1))
		return (st0 & st1) ? 0 : -1;
	__u64 fa = (f0 & m0) | (f1 & c1);
	__u64 fl = (g0 & m0) | (g1 & c1);
	__u64 uid = ~0ULL;
	if (fl & XDPFAB_AVF_USER_ID) {
		/* The index's user ID, read under the slot's number too: read the
		 * number again after it. */
		__u32 idx = fa;
		__u32 line = 1 + nb + idx / 4;
		__u32 elem = line / XDPFAB_AV_PAGE_LINES;
		struct av_page *p = bpf_map_lookup_elem(tab, &elem);
		if (!p)
			return -1;
		struct av_aux *aux = (void *)&p->line[line % XDPFAB_AV_PAGE_LINES];
		uid = aux[idx & 3].user_id;
		barrier();
		__u64 q = (q0 & m0) | (q1 & c1);
		__u64 e = (READ_ONCE32(s0->seq) & m0) | (READ_ONCE32(s1->seq) & c1);
		if (q != e)
			return -1;
	}
	out->fi_addr = fa;
	out->auth_key = (k0 & m0) | (k1 & c1);
	out->flags = fl;
	out->user_id = uid;
	return 1;
}

/* av_find looks a source up in AV av_id's table: 1 and *out when found.
 * The source is three words (av_words): its address as two 64-bit words,
 * its port and family as a third.
 *
 * The source's two buckets are two cache lines whose addresses are known
 * from the hash (no dependent miss); most sources live in the first. The
 * four slots are read under their sequence numbers (a seqlock read): their
 * numbers, then their fields (and for an FI_AV_USER_ID entry the index's
 * user_id in its aux line), then their numbers again. A hit counts only
 * when the number of the slot it came from was even and unchanged; a miss
 * only when all four were, and the table's move count was even and
 * unchanged over the look (an insert may be moving entries between their
 * two buckets). Otherwise the program looks again, up to XDPFAB_AV_RETRY
 * times, then reports the source unknown: a frame is never attributed to
 * another entry.
 *
 * A global function, so that the verifier checks it once, not once per
 * path of the program that reaches it (which multiplied its work by ten).
 *
 * Memory ordering: Go makes a slot's number odd before it changes any of
 * the slot's fields or its index's user ID and even after
 * (internal/avtab), with an atomic swap (a full barrier on every
 * architecture Go supports) and a release store. barrier() keeps the compiler from moving the
 * loads across the number reads; the CPU must not either: x86-64 (TSO)
 * keeps loads in program order, which is what xdpfab builds for
 * (docs/platform.md#the-av-table-and-memory-ordering). A weakly ordered CPU
 * (arm64) would need load-acquire reads of the numbers (BPF_LOAD_ACQ: LLVM
 * 21 and Linux 6.15), which clang-14 cannot emit. */
__attribute__((noinline)) int av_find(__u32 av_id, __u64 w0, __u64 w1, __u64 w2, struct av_found *out)
{
	if (!out)
		return 0;
	void *tab = bpf_map_lookup_elem(&xdpfab_avtab, &av_id);
	if (!tab)
		return 0;
	__u32 key = 0; /* one stack slot for every lookup: av_find's frame
			* adds to the program's (512 bytes together) */
	struct av_page *p0 = bpf_map_lookup_elem(tab, &key);
	if (!p0)
		return 0;
	struct av_hdr *h = (void *)&p0->line[0];
	__u32 nb = h->nbuckets;
	if (!nb)
		return 0;
	__u64 x = av_mix(av_mix(av_mix(h->seed, w0), w1), w2);
	__u32 l1 = 1 + (__u32)(((x & 0xffffffff) * (__u64)nb) >> 32);
	__u32 l2 = 1 + (__u32)(((x >> 32) * (__u64)nb) >> 32);
	if (l2 == l1)
		l2 = l1 == nb ? 1 : l1 + 1;
	/* The buckets' elements: the header's for a table of one page, so one
	 * map lookup in all; at most three. */
	__u32 e1 = l1 / XDPFAB_AV_PAGE_LINES, e2 = l2 / XDPFAB_AV_PAGE_LINES;
	struct av_page *p1 = p0, *p2;
	if (e1) {
		key = e1;
		p1 = bpf_map_lookup_elem(tab, &key);
	}
	if (e2 == e1) {
		p2 = p1;
	} else if (!e2) {
		p2 = p0;
	} else {
		key = e2;
		p2 = bpf_map_lookup_elem(tab, &key);
	}
	if (!p1 || !p2)
		return 0;
	struct av_line *b1 = &p1->line[l1 % XDPFAB_AV_PAGE_LINES];
	struct av_line *b2 = &p2->line[l2 % XDPFAB_AV_PAGE_LINES];
	/* Not unrolled: copies of the body would spill into more stack
	 * (av_find's frame and the program's share 512 bytes). */
#pragma clang loop unroll(disable)
	for (int t = 0; t < XDPFAB_AV_RETRY; t++) {
		/* Opaque copies: clang would otherwise hoist every field address
		 * of both buckets out of the loop and spill them. */
		struct av_line *c1 = b1, *c2 = b2;
		OPAQUE(c1);
		OPAQUE(c2);
		__u64 moves = READ_ONCE32(h->moves);
		/* Both lines' first loads now: their misses overlap. */
		__u64 q0 = READ_ONCE32(c1->slot[0].seq), q1 = READ_ONCE32(c1->slot[1].seq);
		__u64 q2 = READ_ONCE32(c2->slot[0].seq), q3 = READ_ONCE32(c2->slot[1].seq);
		barrier();
		int r = av_bucket_read(tab, nb, c1, q0, q1, w0, w1, w2, out);
		if (r > 0)
			return 1;
		int r2 = av_bucket_read(tab, nb, c2, q2, q3, w0, w1, w2, out);
		if (r2 > 0)
			return 1;
		/* A miss counts when all four slots were stable and nothing moved. */
		if (!r && !r2 && !(moves & 1) && READ_ONCE32(h->moves) == moves)
			return 0;
	}
	return 0;
}

/* cbase is this frame's counter row: ingress ifindex * STAT_MAX. */
#define count(idx, verdict) count_at(cbase + (idx), verdict)

static __always_inline int count_at(__u32 idx, int verdict)
{
	__u64 *c = bpf_map_lookup_elem(&xdpfab_stats, &idx);
	if (c)
		*c += 1;
	return verdict;
}

/* xdp.frags: multi-buffer aware, so that native XDP attaches at jumbo MTUs
 * (veth refuses an MTU above a page for a program without it: ERANGE);
 * the checks cover fragments (xdpfab_parse.h). */
SEC("xdp.frags")
int xdpfab_rx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct udp_packet pkt = {};
	struct ep_key ek = {};
	struct ep_val *ep;
	__u32 cbase = ctx->ingress_ifindex;

	if (cbase >= XDPFAB_IFINDEX_SLOTS)
		cbase = 0;
	cbase *= STAT_MAX;
	/* STAT_RX is not counted here: every frame counts in exactly one
	 * outcome counter (its return), and user space reports their sum as
	 * RX (loader's Counters), which saves a counter update per frame. */

	/* 1. A UDP datagram (untagged Ethernet, IPv4 without options or IPv6)
	 * with its destination, or not ours. */
	if (!parse_udp(&pkt, data, end))
		return count(STAT_PASS, XDP_PASS);

	/* 2. To a local endpoint: its address, else the family's wildcard.
	 * First the endpoint index (the port's endpoints, when it has at most
	 * XDPFAB_EP_PER_PORT: array lookups), whose first slot that holds the
	 * datagram's port and family and its address or the wildcard is the
	 * endpoint (addresses are listed before wildcards); else the hash, as
	 * the index says nothing (no endpoint, too many, or not there yet). */
	int wild = 0;
	ep = NULL;
	__u32 port = bpf_ntohs(pkt.dst.port);
	__u64 *pe = bpf_map_lookup_elem(&xdpfab_epport, &port);
	if (pe) {
		__u64 refs = *(volatile __u64 *)pe;
		__u64 d0, d1;
		__builtin_memcpy(&d0, &pkt.dst.addr[0], 8);
		__builtin_memcpy(&d1, &pkt.dst.addr[8], 8);
#pragma unroll
		for (int i = 0; i < XDPFAB_EP_PER_PORT; i++) {
			__u32 si = (refs >> (16 * i)) & 0xffff;
			if (!si)
				break;
			si--;
			struct ep_slot *es = bpf_map_lookup_elem(&xdpfab_epslot, &si);
			if (!es || es->local.port != pkt.dst.port || es->local.family != pkt.dst.family)
				continue;
			__u64 a0, a1;
			__builtin_memcpy(&a0, &es->local.addr[0], 8);
			__builtin_memcpy(&a1, &es->local.addr[8], 8);
			if (!(a0 | a1)) {
				ep = &es->val;
				wild = 1;
				break;
			}
			if (a0 == d0 && a1 == d1) {
				ep = &es->val;
				break;
			}
		}
	}
	if (!ep) {
		ek.local = pkt.dst;
		ep = bpf_map_lookup_elem(&xdpfab_ep, &ek);
		if (!ep) {
			__builtin_memset(ek.local.addr, 0, sizeof(ek.local.addr));
			ep = bpf_map_lookup_elem(&xdpfab_ep, &ek);
			if (!ep)
				return count(STAT_PASS, XDP_PASS);
			wild = 1;
		}
	}

	/* 3. Only to a unicast address, and for a wildcard endpoint one of the
	 * host's: anything else to the port (broadcast, multicast, loopback,
	 * another host's address) is not the endpoint's; the kernel decides. */
	if (!dst_unicast(&pkt.dst) || (wild && !dst_local(&pkt.dst)))
		return count(STAT_NOT_LOCAL, XDP_PASS);

	/* 4. From here on the datagram is ours: what the kernel would check
	 * (IP header, lengths, checksums), then the xdpfab header, or drop. */
	int bad = check_ip(ctx, &pkt, data, end);
	if (!bad)
		bad = check_udp(ctx, &pkt, data, end);
	if (bad)
		return count(bad, XDP_DROP);
	struct wire_hdr *hdr = parse_hdr(&pkt, end, ep->rx_ctxs);
	if (!hdr)
		return count(STAT_MALFORMED, XDP_DROP);

	/* 5. The source in the endpoint's AV. An endpoint enabled with an auth
	 * key knows only peers bound to that key that also carry it on the
	 * wire. */
	struct av_found av = {};
	int known = 0;
	if (ep->av_id) {
		__u64 w0, w1;
		__builtin_memcpy(&w0, &pkt.src.addr[0], sizeof(w0));
		__builtin_memcpy(&w1, &pkt.src.addr[8], sizeof(w1));
		__u64 w2 = (__u32)pkt.src.port | (__u32)pkt.src.family << 16;
		known = av_find(ep->av_id, w0, w1, w2, &av);
	}
	if (known && ep->auth_key &&
	    (av.auth_key != ep->auth_key || hdr->auth_key != bpf_htonl(ep->auth_key)))
		known = 0;

	/* 6. Unknown sources follow the endpoint's policy. */
	__u16 mflags = 0;
	__u64 fi_addr = ~0ULL, user_id = ~0ULL;
	if (known) {
		mflags = XDPFAB_META_KNOWN;
		if (av.flags & XDPFAB_AVF_USER_ID)
			mflags |= XDPFAB_META_USER_ID;
		fi_addr = av.fi_addr;
		user_id = av.user_id;
	} else if (ep->policy == UNKNOWN_DROP) {
		return count(STAT_DROP_POLICY, XDP_DROP);
	} else if (ep->policy == UNKNOWN_SOURCE_ERR) {
		mflags = XDPFAB_META_SOURCE_ERR;
	}

	/* 7. The socket: receive context and rx queue pick the XSKMAP slot. */
	__u32 queue = ctx->rx_queue_index - ep->first_queue; /* wraps below first */
	if (queue >= ep->queues)
		return count(STAT_WRONG_QUEUE, XDP_DROP);
	__u32 slot = ep->xsk_base + (__u32)hdr->rx_ctx * ep->queues + queue;
	__u8 rx_ctx = hdr->rx_ctx;
	__u16 l3_off = pkt.l3 - data;
	__u16 hdr_off = (void *)hdr - data;
	__u16 payload_len = pkt.udp_len - sizeof(struct udphdr) - sizeof(*hdr);
	__u32 ep_id = ep->ep_id;

	/* 8. The metadata in front of the frame, and for an endpoint being
	 * measured (XDPFAB_EPF_STAMP) a stamp between the two (stamp.h).
	 * Both are pushed in front of the packet with bpf_xdp_adjust_head, so
	 * that they reach the socket as the descriptor's first bytes: the
	 * kernel's own metadata area (bpf_xdp_adjust_meta) is refused to XDP
	 * programs by some kernels (docs/platform.md#xdp-metadata).
	 * Packet pointers are invalid after either helper. */
	if ((ep->flags & XDPFAB_EPF_STAMP) && !stamp_frame(ctx, &l3_off, &hdr_off, &mflags))
		return count(STAT_REDIRECT_FAIL, XDP_DROP);
	/* struct rx_meta's last 16 bytes as two words (little endian, as every
	 * target xdpfab builds for): four values live across the helper calls
	 * below instead of nine, which clang kept on the stack (1 ns). */
	__u64 m2 = (__u64)ep_id | (__u64)mflags << 32 | (__u64)l3_off << 48;
	__u64 m3 = (__u64)hdr_off | (__u64)payload_len << 16 | (__u64)pkt.src.family << 32 |
		   (__u64)XDPFAB_META_VERSION << 40 | (__u64)rx_ctx << 48;
	if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct rx_meta)))
		return count(STAT_REDIRECT_FAIL, XDP_DROP);
	struct rx_meta *meta = (void *)(long)ctx->data;
	if ((void *)(meta + 1) > (void *)(long)ctx->data_end)
		return count(STAT_REDIRECT_FAIL, XDP_DROP);
	__u64 *mw = (void *)meta;
	mw[0] = fi_addr;
	mw[1] = user_id;
	mw[2] = m2;
	mw[3] = m3;

	/* 9. Redirect. */
	long act = bpf_redirect_map(&xdpfab_xsks, slot, XDP_DROP);
	if (act != XDP_REDIRECT)
		return count(STAT_REDIRECT_FAIL, XDP_DROP);
	return count(known ? STAT_TRANSLATED : STAT_UNKNOWN, XDP_REDIRECT);
}
