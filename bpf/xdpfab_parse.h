/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Packet parsing for the XDP program, in two halves.
 *
 * Attribution (parse_udp): untagged Ethernet, IPv4 without options or
 * IPv6, UDP: just enough to find the destination address and port. A frame
 * it cannot attribute is not xdpfab's and passes to the kernel untouched,
 * whatever else is wrong with it.
 *
 * Validity (dst_unicast, dst_local, check_ip, check_udp, parse_hdr): for
 * a datagram addressed to an endpoint, everything the kernel would check
 * before delivering it to a UDP socket, and the xdpfab header. Each
 * returns the counter of the first failure (STAT_MALFORMED,
 * STAT_CSUM_ERROR) or 0. internal/xdpmodel is the Go model of both halves,
 * check by check in the same order; a change here changes it too.
 *
 * Each helper checks every header against the end of the packet before it
 * reads it (the verifier rejects any packet access it cannot prove in
 * bounds: docs/platform.md). All are inlined into the program, so they cost
 * no call.
 *
 * Multi-buffer frames (the program is SEC("xdp.frags")): [data, end) is
 * the frame's linear part only; a jumbo frame continues in fragments. The
 * headers (Ethernet to the xdpfab header, at most 94 bytes) must lie in
 * the linear part, as every kernel path lays a frame out (at least the
 * first 3.5 KB, or the whole frame, linear: docs/platform.md#multi-buffer-xdp);
 * a frame whose linear part ends before them is not parsed further. The
 * lengths are checked against the whole frame (bpf_xdp_get_buff_len), and
 * the UDP checksum is summed over the whole datagram, fragments included
 * (check_udp). */
#ifndef XDPFAB_PARSE_H
#define XDPFAB_PARSE_H

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "xdpfab_consts.h"
#include "xdpfab_structs.h"
#include "xdpfab_maps.h"

#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

/* A UDP datagram as parse_udp found it. */
struct udp_packet {
	void *l3;            /* the IP header */
	struct udphdr *udp;  /* the UDP header, whole within the packet */
	__u16 ip_len;        /* IP payload length, once check_ip checked it */
	__u16 udp_len;       /* UDP length, once check_udp checked it */
	struct udp_addr src; /* source address and port */
	struct udp_addr dst; /* destination address and port */
};

/* parse_ipv4 finds the UDP header behind an IPv4 header at p->l3 and
 * fills p. It returns 0 for anything that is not a whole unfragmented UDP
 * header right behind a 20-byte header:
 *  - fragments cannot be attributed alone (only the first carries the UDP
 *    header) and are never delivered as datagrams: the kernel reassembles
 *    them;
 *  - a header with options (ihl above 5) is the kernel's to judge: it
 *    refuses source routes (accept_source_route, off by default) and
 *    malformed options, which UDP senders do not use anyway; one below 5
 *    leaves no place for UDP.
 * The version and the lengths are check_ip's. */
static __always_inline int parse_ipv4(struct udp_packet *p, void *end)
{
	struct iphdr *ip = p->l3;
	if ((void *)(ip + 1) > end)
		return 0;
	if (ip->protocol != IPPROTO_UDP || ip->ihl != 5 ||
	    (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)))
		return 0;
	struct udphdr *udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end)
		return 0;
	p->udp = udp;
	p->src.family = XDPFAB_AF_INET;
	__builtin_memcpy(p->src.addr, &ip->saddr, 4);
	p->dst.family = XDPFAB_AF_INET;
	__builtin_memcpy(p->dst.addr, &ip->daddr, 4);
	return 1;
}

/* parse_ipv6 is parse_ipv4 for IPv6: UDP must follow the fixed header
 * directly; extension headers (fragments included) are not ours. */
static __always_inline int parse_ipv6(struct udp_packet *p, void *end)
{
	struct ipv6hdr *ip6 = p->l3;
	if ((void *)(ip6 + 1) > end)
		return 0;
	if (ip6->nexthdr != IPPROTO_UDP)
		return 0;
	struct udphdr *udp = (void *)(ip6 + 1);
	if ((void *)(udp + 1) > end)
		return 0;
	p->udp = udp;
	p->src.family = XDPFAB_AF_INET6;
	__builtin_memcpy(p->src.addr, &ip6->saddr, 16);
	p->dst.family = XDPFAB_AF_INET6;
	__builtin_memcpy(p->dst.addr, &ip6->daddr, 16);
	return 1;
}

/* parse_udp fills p (zeroed by the caller) from the frame [data, end): an
 * IPv4 or IPv6 UDP datagram right behind the Ethernet header, chosen by
 * the ethertype. It returns 0 for anything else, VLAN-tagged frames
 * (802.1Q, 802.1ad) included: an endpoint receives its interface's
 * untagged traffic. The kernel delivers a frame tagged with VLAN n only
 * through a VLAN device for n, an interface of its own (whose generic XDP
 * sees the frame untagged), and drops it where there is none; reading
 * through the tags would hand the endpoint every VLAN of a trunk port. */
static __always_inline int parse_udp(struct udp_packet *p, void *data, void *end)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return 0;
	p->l3 = eth + 1;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		if (!parse_ipv4(p, end))
			return 0;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		if (!parse_ipv6(p, end))
			return 0;
	} else {
		return 0;
	}
	p->src.port = p->udp->source;
	p->dst.port = p->udp->dest;
	return 1;
}

/* csum_fold folds a ones' complement sum of 16-bit words (in packet byte
 * order, as loaded) to 16 bits: 0xffff for a correct checksum. */
static __always_inline __u16 csum_fold(__u64 s)
{
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffffffff) + (s >> 32);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return s;
}

/* dst_unicast reports whether a destination can be an endpoint's at all:
 * not multicast, broadcast, loopback or "this network" (the kernel drops
 * those from the wire or delivers them to sockets as group traffic). */
static __always_inline int dst_unicast(const struct udp_addr *a)
{
	const __u8 *b = a->addr;
	if (a->family == XDPFAB_AF_INET) {
		/* 0/8, 127/8, 224/4 multicast, 255.255.255.255. */
		if (b[0] == 0 || b[0] == 127 || (b[0] >= 224 && b[0] < 240))
			return 0;
		if (b[0] == 255 && b[1] == 255 && b[2] == 255 && b[3] == 255)
			return 0;
		return 1;
	}
	/* ff00::/8 multicast, :: and ::1. */
	const __u64 *w = (const void *)b;
	if (b[0] == 0xff)
		return 0;
	if (w[0] == 0 && (w[1] == 0 || w[1] == bpf_cpu_to_be64(1)))
		return 0;
	return 1;
}

/* dst_local reports whether a destination is one of the host's addresses
 * (xdpfab_local): what a wildcard endpoint receives on. A subnet broadcast
 * is never one, however it looks. */
static __always_inline int dst_local(const struct udp_addr *dst)
{
	struct udp_addr k = *dst;
	k.port = 0;
	return bpf_map_lookup_elem(&xdpfab_local, &k) != NULL;
}

/* src_martian reports a source address the kernel drops as impossible on
 * the wire: IPv4 0/8, loopback, multicast, limited broadcast; IPv6
 * multicast and loopback. */
static __always_inline int src_martian(const struct udp_addr *a)
{
	const __u8 *b = a->addr;
	if (a->family == XDPFAB_AF_INET) {
		if (b[0] == 0 || b[0] == 127 || (b[0] >= 224 && b[0] < 240))
			return 1;
		return b[0] == 255 && b[1] == 255 && b[2] == 255 && b[3] == 255;
	}
	const __u64 *w = (const void *)b;
	return b[0] == 0xff || (w[0] == 0 && w[1] == bpf_cpu_to_be64(1));
}

/* check_ip checks the IP header of a datagram to an endpoint as the kernel
 * does before UDP sees it, after checking that the frame has room for the
 * UDP and xdpfab headers (else it holds no xdpfab datagram): the version;
 * for IPv4 the header checksum (a 20-byte header: parse_ipv4 left options
 * to the kernel) and a total length within the frame and at least the
 * header; for IPv6 a payload within the frame; then a source that is not
 * martian. The
 * lengths are checked against the whole frame, its fragments included
 * (bpf_xdp_get_buff_len, called only for a frame longer than its linear
 * part [data, end), which holds the headers). It sets p->ip_len. */
static __always_inline int check_ip(struct xdp_md *ctx, struct udp_packet *p, void *data, void *end)
{
	if ((void *)(p->udp + 1) + sizeof(struct wire_hdr) > end)
		return STAT_MALFORMED;
	if (p->src.family == XDPFAB_AF_INET) {
		struct iphdr *ip = p->l3;
		if (ip->version != 4)
			return STAT_MALFORMED;
		const __u32 *w = p->l3;
		if (csum_fold((__u64)w[0] + w[1] + w[2] + w[3] + w[4]) != 0xffff)
			return STAT_CSUM_ERROR;
		__u32 tot = bpf_ntohs(ip->tot_len);
		if (tot < sizeof(*ip) ||
		    (p->l3 + tot > end && (__u32)(p->l3 - data) + tot > bpf_xdp_get_buff_len(ctx)))
			return STAT_MALFORMED;
		p->ip_len = tot - sizeof(*ip);
	} else {
		struct ipv6hdr *ip6 = p->l3;
		if ((void *)(ip6 + 1) > end) /* parse_udp saw it; for the verifier */
			return STAT_MALFORMED;
		if (ip6->version != 6)
			return STAT_MALFORMED;
		__u32 plen = bpf_ntohs(ip6->payload_len);
		if ((void *)(ip6 + 1) + plen > end &&
		    (__u32)((void *)(ip6 + 1) - data) + plen > bpf_xdp_get_buff_len(ctx))
			return STAT_MALFORMED;
		p->ip_len = plen;
	}
	if (src_martian(&p->src))
		return STAT_MALFORMED;
	return 0;
}

/* csum_step adds the n bytes at UDP offset len & ~(2n - 1) to the
 * checksum when len has bit n (n 256 or 128; csum_words below 128): after
 * the 512-byte chunks, the remainder's set bits from the highest down tile
 * the rest of the datagram. The offset comes from len, which the verifier
 * knows only as a range, so each step's pointer is a fresh one and its
 * bounds check leaves the others alone (with pointers that advanced step
 * by step, every combination of steps was a distinct verifier state and
 * the program exceeded the verifier's 1M instructions). */
#define csum_step(n)                                                        \
	if (len & (n)) {                                                    \
		void *q = (void *)udp + (len & ~(2 * (n) - 1));             \
		asm volatile("" : "+r"(q));                                 \
		if (q + (n) > end)                                          \
			return STAT_MALFORMED;                              \
		s = bpf_csum_diff(NULL, 0, q, (n), s);                      \
	}

/* csum_words is csum_step for n up to 64, summed here as 32-bit words
 * into the 64-bit accumulator t (folded at the end) instead of by a
 * helper call: a call costs more than the loads it saves below 128 bytes
 * (a 104-byte datagram, which has bits 64, 32 and 8: 4 ns less per packet,
 * measured on Linux 6.18 in 2026, section 1 of docs/BENCHMARKS.md). */
#define csum_words(n)                                                       \
	if (len & (n)) {                                                    \
		__u32 *q = (void *)udp + (len & ~(2 * (n) - 1));            \
		asm volatile("" : "+r"(q));                                 \
		if ((void *)q + (n) > end)                                  \
			return STAT_MALFORMED;                              \
		_Pragma("unroll") for (int k = 0; k < (n) / 4; k++)         \
			t += q[k];                                          \
	}

/* xdpfab_scratch: a per-CPU buffer that csum_frags copies a
 * multi-buffer datagram through, XDPFAB_CSUM_SCRATCH bytes at a time, to
 * sum it (bpf_csum_diff reads memory, not fragments). XDP runs with
 * bottom halves off, so one run per CPU uses it at a time. Not pinned:
 * each loaded program has its own. */
struct csum_scratch {
	__u32 w[XDPFAB_CSUM_SCRATCH / 4];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct csum_scratch);
} xdpfab_scratch SEC(".maps");

/* The state of csum_frags's loop, on its stack: the callback of bpf_loop
 * reads and writes it through its context pointer. */
struct csum_loop {
	struct xdp_md *ctx;
	struct csum_scratch *b;
	__u32 off;
	__u32 len;
	__u32 s;
	__u32 err;
};

/* csum_piece sums piece i of csum_frags's datagram (bpf_loop's callback:
 * 0 goes on, 1 stops the loop). */
static long csum_piece(__u32 i, void *data)
{
	struct csum_loop *c = data;
	struct csum_scratch *b = c->b;
	__u32 at = i * XDPFAB_CSUM_SCRATCH;
	if (at >= c->len)
		return 1;
	__u32 n = c->len - at;
	if (n > XDPFAB_CSUM_SCRATCH)
		n = XDPFAB_CSUM_SCRATCH;
	/* n is 1 to XDPFAB_CSUM_SCRATCH; said so that the verifier sees it
	 * (it tracks len - at as signed). */
	asm volatile("" : "+r"(n));
	n = ((n - 1) & (XDPFAB_CSUM_SCRATCH - 1)) + 1;
	/* The zero pad behind a short last piece: the word it ends in,
	 * zeroed before the copy. */
	b->w[((n - 1) / 4) & (XDPFAB_CSUM_SCRATCH / 4 - 1)] = 0;
	if (bpf_xdp_load_bytes(c->ctx, c->off + at, b->w, n)) {
		c->err = 1;
		return 1;
	}
	__u32 n4 = (n + 3) & ~3;
	asm volatile("" : "+r"(n4));
	n4 &= 2 * XDPFAB_CSUM_SCRATCH - 1;
	if (n4 > XDPFAB_CSUM_SCRATCH) {
		c->err = 1;
		return 1;
	}
	c->s = bpf_csum_diff(NULL, 0, (void *)b->w, n4, c->s);
	return 0;
}

/* csum_frags sums the len-byte UDP datagram at frame offset off onto the
 * partial sum seed and returns the folded sum (0xffff: correct), or -1
 * when a piece cannot be read (the frame is shorter than check_ip saw:
 * never). It reads any frame, fragments included: bpf_xdp_load_bytes
 * copies each XDPFAB_CSUM_SCRATCH-byte piece, which starts at an even
 * offset of the datagram, into xdpfab_scratch, and bpf_csum_diff sums it;
 * the last piece is padded with zeros to a multiple of 4 bytes (RFC 768
 * pads an odd datagram with a zero byte).
 *
 * A global function, so that the verifier checks it once, not once per
 * path of the program that reaches it (inlined, the program took 968,000
 * of the verifier's 1M instructions); and its loop of up to 128 pieces (the
 * longest UDP datagram) is bpf_loop's (Linux 5.17 and later), whose
 * callback the verifier checks once for any piece: as a bounded loop it
 * walked all 128 iterations, 325,000 of the program's 362,000
 * instructions processed and 0.4 s per load (docs/platform.md#loops-over-packet-memory). */
__attribute__((noinline)) int csum_frags(struct xdp_md *ctx, __u32 off, __u32 len, __u32 seed)
{
	__u32 zero = 0;
	if (!ctx)
		return -1;
	struct csum_scratch *b = bpf_map_lookup_elem(&xdpfab_scratch, &zero);
	if (!b)
		return -1;
	struct csum_loop c = {.ctx = ctx, .b = b, .off = off, .len = len, .s = seed};
	bpf_loop(XDPFAB_MAX_UDP_LEN / XDPFAB_CSUM_SCRATCH + 1, csum_piece, &c, 0);
	if (c.err)
		return -1;
	return csum_fold(c.s);
}

/* check_udp checks the UDP header of a datagram whose IP header check_ip
 * passed: a length that holds the xdpfab header and fits the IP payload
 * (the kernel trims what the IP payload has beyond it), and the checksum.
 * A zero checksum means none over IPv4, as for the kernel, and is invalid
 * over IPv6 (RFC 8200). It sets p->udp_len.
 *
 * A checksum field that holds exactly the pseudo-header sum is accepted
 * without summing the datagram: that is CHECKSUM_PARTIAL, what a kernel
 * UDP socket sends over veth (the checksum is left to a device that never
 * computes it; the kernel itself does not verify such a packet), measured
 * in docs/platform.md#udp-checksums-over-veth. A corrupted datagram from
 * a real wire passes this test only by the same 1-in-65536 chance as the
 * checksum itself.
 *
 * A datagram wholly in the frame's linear part and at most
 * XDPFAB_CSUM_CHUNKS * 512 + 511 bytes long (every datagram of a frame
 * without fragments, at any MTU up to 4.6 KB) is summed in packet memory
 * with bpf_csum_diff (the kernel's csum_partial): up to XDPFAB_CSUM_CHUNKS
 * calls of 512 bytes, then one call per set bit of the remainder for 256
 * and 128, then the bits from 64 down to 4 as 32-bit words (csum_words),
 * then 2 and 1 bytes by hand. Any other (a jumbo frame's, in
 * fragments) is copied through a scratch buffer and summed there
 * (csum_frags), fragments included.
 *
 * Here rather than in the endpoint's receive copy, which could sum
 * the payload while copying it: measured on Linux 6.18 (2026), the sum
 * adds 10 ns per datagram here at 64 bytes of payload, 27 at 1 KiB and 41
 * at 1440, and would add 21, 122 and 166 ns there (Go has no fast ones'
 * complement sum); and here every refused datagram is counted
 * (docs/platform.md#where-the-udp-checksum-is-verified). */
static __always_inline int check_udp(struct xdp_md *ctx, struct udp_packet *p, void *data, void *end)
{
	struct udphdr *udp = p->udp;
	__u32 len = bpf_ntohs(udp->len);
	if (len < sizeof(*udp) + sizeof(struct wire_hdr) || len > p->ip_len)
		return STAT_MALFORMED;
	p->udp_len = len;
	if (udp->check == 0)
		return p->src.family == XDPFAB_AF_INET ? 0 : STAT_CSUM_ERROR;

	/* The pseudo header: addresses, protocol, UDP length. */
	const __u32 *a = (const void *)p->src.addr, *b = (const void *)p->dst.addr;
	__u64 ps = (__u64)udp->len + bpf_htons(IPPROTO_UDP) + a[0] + b[0];
	if (p->src.family == XDPFAB_AF_INET6)
		ps += (__u64)a[1] + a[2] + a[3] + b[1] + b[2] + b[3];
	__u16 pfold = csum_fold(ps);
	if (udp->check == pfold)
		return 0; /* CHECKSUM_PARTIAL */

	__u32 s = pfold;
	if (len > XDPFAB_CSUM_CHUNKS * 512 + 511 || (void *)udp + len > end) {
		int r = csum_frags(ctx, (void *)udp - data, len, s);
		if (r < 0)
			return STAT_MALFORMED;
		return r == 0xffff ? 0 : STAT_CSUM_ERROR;
	}
	for (int i = 0; i < XDPFAB_CSUM_CHUNKS; i++) {
		if ((i + 1) * 512 > len)
			break;
		void *q = (void *)udp + i * 512;
		asm volatile("" : "+r"(q));
		if (q + 512 > end)
			return STAT_MALFORMED;
		s = bpf_csum_diff(NULL, 0, q, 512, s);
	}
	csum_step(256);
	csum_step(128);
	__u64 t = s;
	csum_words(64);
	csum_words(32);
	csum_words(16);
	csum_words(8);
	csum_words(4);
	if (len & 2) {
		void *q = (void *)udp + (len & ~3);
		asm volatile("" : "+r"(q));
		if (q + 2 > end)
			return STAT_MALFORMED;
		t += *(__u16 *)q;
	}
	if (len & 1) {
		void *q = (void *)udp + (len - 1);
		asm volatile("" : "+r"(q));
		if (q + 1 > end)
			return STAT_MALFORMED;
		t += *(__u8 *)q;
	}
	if (csum_fold(t) != 0xffff)
		return STAT_CSUM_ERROR;
	return 0;
}

/* parse_hdr checks the xdpfab header (docs/wire.md) of a datagram that
 * passed check_udp, for an endpoint with rx_ctxs receive contexts. It
 * returns the header, or NULL when the datagram is malformed. */
static __always_inline struct wire_hdr *parse_hdr(struct udp_packet *p, void *end, __u16 rx_ctxs)
{
	struct wire_hdr *hdr = (void *)(p->udp + 1);
	if ((void *)(hdr + 1) > end)
		return NULL;
	if (hdr->magic != bpf_htonl(XDPFAB_MAGIC) || hdr->version != XDPFAB_VERSION ||
	    hdr->op == 0 || hdr->op > XDPFAB_OP_MAX || hdr->rx_ctx >= rx_ctxs)
		return NULL;
	return hdr;
}

#endif
