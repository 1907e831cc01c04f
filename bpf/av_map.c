//go:build ignore
/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * xdpfab_rx: the receive half of the xdpfab dataplane.
 *
 * For every UDP datagram addressed to a local xdpfab endpoint (xdpfab_ep),
 * translate its source (address, port) through the endpoint's address vector
 * (xdpfab_av) into an fi_addr and user id, write them in front of the frame
 * as struct xdpfab_meta, and redirect the frame to the endpoint's AF_XDP
 * socket. Everything else passes to the kernel untouched: the program never
 * writes a frame it does not redirect.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "xdpfab_maps.h"

char __license[] SEC("license") = "Dual BSD/GPL";

#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

struct vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

/* cbase is this frame's counter row: ingress ifindex * XDPFAB_C_MAX. */
#define count(idx, verdict) count_at(cbase + (idx), verdict)

static __always_inline int count_at(__u32 idx, int verdict)
{
	__u64 *c = bpf_map_lookup_elem(&xdpfab_stats, &idx);
	if (c)
		*c += 1;
	return verdict;
}

SEC("xdp")
int xdpfab_rx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct xdpfab_ep_key ek = {};
	struct xdpfab_av_key ak = {};
	struct xdpfab_ep_val *ep;
	struct xdpfab_av_val *av;
	struct udphdr *udp;
	void *l3;
	__u16 proto, ip_len = 0;
	__u32 cbase = ctx->ingress_ifindex;

	if (cbase >= XDPFAB_IFINDEX_SLOTS)
		cbase = 0;
	cbase *= XDPFAB_C_MAX;
	count(XDPFAB_C_RX, 0);

	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return count(XDPFAB_C_PASS, XDP_PASS);
	proto = eth->h_proto;
	l3 = eth + 1;

	/* Up to two VLAN tags (802.1Q, 802.1ad QinQ). */
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		struct vlan_hdr *vh = l3;
		if ((void *)(vh + 1) > end)
			return count(XDPFAB_C_PASS, XDP_PASS);
		proto = vh->encap_proto;
		l3 = vh + 1;
	}

	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = l3;
		if ((void *)(ip + 1) > end)
			return count(XDPFAB_C_PASS, XDP_PASS);
		/* Fragments pass: only the first carries the UDP header and
		 * none can be attributed alone. */
		if (ip->protocol != IPPROTO_UDP || ip->ihl < 5 ||
		    (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)))
			return count(XDPFAB_C_PASS, XDP_PASS);
		udp = l3 + ip->ihl * 4;
		/* clang-14 may recompute udp after the check; pin it
		 * (FINDINGS.md: verifier "invalid access to packet"). */
		asm volatile("" : "+r"(udp));
		if ((void *)(udp + 1) > end)
			return count(XDPFAB_C_PASS, XDP_PASS);
		ip_len = bpf_ntohs(ip->tot_len);
		if (ip_len < ip->ihl * 4)
			return count(XDPFAB_C_PASS, XDP_PASS);
		ip_len -= ip->ihl * 4;
		ek.local.family = XDPFAB_AF_INET;
		__builtin_memcpy(ek.local.addr, &ip->daddr, 4);
		ak.src.family = XDPFAB_AF_INET;
		__builtin_memcpy(ak.src.addr, &ip->saddr, 4);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = l3;
		if ((void *)(ip6 + 1) > end)
			return count(XDPFAB_C_PASS, XDP_PASS);
		/* Extension headers before UDP (fragments included) pass. */
		if (ip6->nexthdr != IPPROTO_UDP)
			return count(XDPFAB_C_PASS, XDP_PASS);
		udp = (void *)(ip6 + 1);
		if ((void *)(udp + 1) > end)
			return count(XDPFAB_C_PASS, XDP_PASS);
		ip_len = bpf_ntohs(ip6->payload_len);
		ek.local.family = XDPFAB_AF_INET6;
		__builtin_memcpy(ek.local.addr, &ip6->daddr, 16);
		ak.src.family = XDPFAB_AF_INET6;
		__builtin_memcpy(ak.src.addr, &ip6->saddr, 16);
	} else {
		return count(XDPFAB_C_PASS, XDP_PASS);
	}

	ek.local.port = udp->dest;
	ep = bpf_map_lookup_elem(&xdpfab_ep, &ek);
	if (!ep) {
		/* An endpoint bound to the wildcard address of the family. */
		__builtin_memset(ek.local.addr, 0, sizeof(ek.local.addr));
		ep = bpf_map_lookup_elem(&xdpfab_ep, &ek);
		if (!ep)
			return count(XDPFAB_C_PASS, XDP_PASS);
	}

	/* From here on the datagram is addressed to an xdpfab endpoint. */
	__u16 udp_len = bpf_ntohs(udp->len);
	if (udp_len < sizeof(*udp) + sizeof(struct xdpfab_hdr) || udp_len > ip_len)
		return count(XDPFAB_C_MALFORMED, XDP_DROP);
	if ((void *)udp + udp_len > end)
		return count(XDPFAB_C_MALFORMED, XDP_DROP);
	struct xdpfab_hdr *hdr = (void *)(udp + 1);
	if ((void *)(hdr + 1) > end)
		return count(XDPFAB_C_MALFORMED, XDP_DROP);
	if (hdr->magic != bpf_htonl(XDPFAB_MAGIC) || hdr->version != XDPFAB_VERSION ||
	    hdr->op == 0 || hdr->op > XDPFAB_OP_MAX || hdr->rx_ctx >= ep->rx_ctxs)
		return count(XDPFAB_C_MALFORMED, XDP_DROP);

	ak.av_id = ep->av_id;
	ak.src.port = udp->source;
	av = ak.av_id ? bpf_map_lookup_elem(&xdpfab_av, &ak) : NULL;
	/* An endpoint enabled with an auth key knows only peers bound to that
	 * key that also carry it on the wire. */
	if (av && ep->auth_key &&
	    (av->auth_key != ep->auth_key || hdr->auth_key != bpf_htonl(ep->auth_key)))
		av = NULL;

	__u16 mflags = 0;
	__u64 fi_addr = ~0ULL, user_id = ~0ULL;
	if (av) {
		mflags = XDPFAB_META_KNOWN;
		if (av->flags & XDPFAB_AVF_USER_ID)
			mflags |= XDPFAB_META_USER_ID;
		fi_addr = av->fi_addr;
		user_id = av->user_id;
	} else if (ep->policy == XDPFAB_POLICY_DROP) {
		return count(XDPFAB_C_DROP_POLICY, XDP_DROP);
	} else if (ep->policy == XDPFAB_POLICY_SOURCE_ERR) {
		mflags = XDPFAB_META_SOURCE_ERR;
	}

	__u32 queue = ctx->rx_queue_index;
	if (queue >= ep->queues)
		return count(XDPFAB_C_REDIRECT_FAIL, XDP_DROP);
	__u32 slot = ep->xsk_base + (__u32)hdr->rx_ctx * ep->queues + queue;
	__u8 rx_ctx = hdr->rx_ctx;
	__u16 l3_off = l3 - data;
	__u16 hdr_off = (void *)hdr - data;
	__u16 payload_len = udp_len - sizeof(*udp) - sizeof(*hdr);
	__u32 ep_id = ep->ep_id;

	/* Packet pointers are invalid after adjust_meta. */
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct xdpfab_meta)))
		return count(XDPFAB_C_REDIRECT_FAIL, XDP_DROP);
	data = (void *)(long)ctx->data;
	struct xdpfab_meta *meta = (void *)(long)ctx->data_meta;
	if ((void *)(meta + 1) > data)
		return count(XDPFAB_C_REDIRECT_FAIL, XDP_DROP);
	meta->fi_addr = fi_addr;
	meta->user_id = user_id;
	meta->ep_id = ep_id;
	meta->flags = mflags;
	meta->l3_off = l3_off;
	meta->hdr_off = hdr_off;
	meta->payload_len = payload_len;
	meta->family = ak.src.family;
	meta->version = XDPFAB_META_VERSION;
	meta->rx_ctx = rx_ctx;
	meta->pad = 0;

	long act = bpf_redirect_map(&xdpfab_xsks, slot, XDP_DROP);
	if (act != XDP_REDIRECT)
		return count(XDPFAB_C_REDIRECT_FAIL, XDP_DROP);
	return count(av ? XDPFAB_C_TRANSLATED : XDPFAB_C_UNKNOWN, XDP_REDIRECT);
}
