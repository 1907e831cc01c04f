/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Packet parsing for the XDP program: Ethernet with up to two VLAN tags,
 * IPv4 or IPv6, UDP, and the xdpfab header. Each helper checks every
 * header against the end of the packet before it reads it (the verifier
 * rejects any packet access it cannot prove in bounds: docs/platform.md)
 * and reports whether the packet is one it handles. All are inlined into
 * the program, so they cost no call. */
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

#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

struct vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

/* A UDP datagram as parse_udp found it. */
struct udp_packet {
	void *l3;            /* the IP header */
	struct udphdr *udp;  /* the UDP header, whole within the packet */
	__u16 ip_len;        /* IP payload length: bounds the UDP length */
	__u16 udp_len;       /* UDP length, once parse_hdr checked it */
	struct udp_addr src; /* source address and port */
	struct udp_addr dst; /* destination address and port */
};

/* parse_eth finds the network header behind Ethernet and up to two VLAN
 * tags (802.1Q, 802.1ad QinQ): its ethertype in *proto (network byte
 * order) and its start in *l3. It returns 0 when the packet ends first. */
static __always_inline int parse_eth(void *data, void *end, __u16 *proto, void **l3)
{
	struct ethhdr *eth = data;
	if ((void *)(eth + 1) > end)
		return 0;
	*proto = eth->h_proto;
	*l3 = eth + 1;

#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (*proto != bpf_htons(ETH_P_8021Q) && *proto != bpf_htons(ETH_P_8021AD))
			break;
		struct vlan_hdr *vh = *l3;
		if ((void *)(vh + 1) > end)
			return 0;
		*proto = vh->encap_proto;
		*l3 = vh + 1;
	}
	return 1;
}

/* parse_ipv4 finds the UDP header behind an IPv4 header at p->l3 and
 * fills p. It returns 0 for anything that is not a whole unfragmented UDP
 * header: fragments cannot be attributed alone (only the first carries the
 * UDP header), so they are not ours. */
static __always_inline int parse_ipv4(struct udp_packet *p, void *end)
{
	struct iphdr *ip = p->l3;
	if ((void *)(ip + 1) > end)
		return 0;
	if (ip->protocol != IPPROTO_UDP || ip->ihl < 5 ||
	    (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)))
		return 0;
	struct udphdr *udp = p->l3 + ip->ihl * 4;
	/* clang-14 may recompute udp after the check; pin it (docs/platform.md:
	 * the verifier's "invalid access to packet"). */
	asm volatile("" : "+r"(udp));
	if ((void *)(udp + 1) > end)
		return 0;
	__u16 ip_len = bpf_ntohs(ip->tot_len);
	if (ip_len < ip->ihl * 4)
		return 0;
	p->udp = udp;
	p->ip_len = ip_len - ip->ihl * 4;
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
	p->ip_len = bpf_ntohs(ip6->payload_len);
	p->src.family = XDPFAB_AF_INET6;
	__builtin_memcpy(p->src.addr, &ip6->saddr, 16);
	p->dst.family = XDPFAB_AF_INET6;
	__builtin_memcpy(p->dst.addr, &ip6->daddr, 16);
	return 1;
}

/* parse_udp fills p (zeroed by the caller) from the frame [data, end): an
 * IPv4 or IPv6 UDP datagram behind Ethernet and VLAN tags. It returns 0
 * for anything else. */
static __always_inline int parse_udp(struct udp_packet *p, void *data, void *end)
{
	__u16 proto;

	if (!parse_eth(data, end, &proto, &p->l3))
		return 0;
	if (proto == bpf_htons(ETH_P_IP)) {
		if (!parse_ipv4(p, end))
			return 0;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		if (!parse_ipv6(p, end))
			return 0;
	} else {
		return 0;
	}
	p->src.port = p->udp->source;
	p->dst.port = p->udp->dest;
	return 1;
}

/* parse_hdr checks a datagram addressed to an endpoint with rx_ctxs receive
 * contexts: the UDP length against the IP payload and the frame, then the
 * xdpfab header (docs/wire.md). It returns the header, and sets
 * p->udp_len, or returns NULL when the datagram is malformed. */
static __always_inline struct wire_hdr *parse_hdr(struct udp_packet *p, void *end, __u16 rx_ctxs)
{
	struct udphdr *udp = p->udp;
	__u16 udp_len = bpf_ntohs(udp->len);
	if (udp_len < sizeof(*udp) + sizeof(struct wire_hdr) || udp_len > p->ip_len)
		return NULL;
	if ((void *)udp + udp_len > end)
		return NULL;
	struct wire_hdr *hdr = (void *)(udp + 1);
	if ((void *)(hdr + 1) > end)
		return NULL;
	if (hdr->magic != bpf_htonl(XDPFAB_MAGIC) || hdr->version != XDPFAB_VERSION ||
	    hdr->op == 0 || hdr->op > XDPFAB_OP_MAX || hdr->rx_ctx >= rx_ctxs)
		return NULL;
	p->udp_len = udp_len;
	return hdr;
}

#endif
