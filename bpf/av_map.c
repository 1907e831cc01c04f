//go:build ignore
/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * xdpfab_rx: the receive half of the xdpfab dataplane.
 *
 * For every UDP datagram addressed to a local xdpfab endpoint (xdpfab_ep),
 * translate its source (address, port) through the endpoint's address vector
 * (xdpfab_av) into an fi_addr and user id, write them in front of the frame
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

/* cbase is this frame's counter row: ingress ifindex * STAT_MAX. */
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
	struct udp_packet pkt = {};
	struct ep_key ek = {};
	struct av_key ak = {};
	struct ep_val *ep;
	struct av_val *av;
	__u32 cbase = ctx->ingress_ifindex;

	if (cbase >= XDPFAB_IFINDEX_SLOTS)
		cbase = 0;
	cbase *= STAT_MAX;
	count(STAT_RX, 0);

	/* 1. A UDP datagram (Ethernet, VLAN tags, IPv4 or IPv6) with its
	 * destination, or not ours. */
	if (!parse_udp(&pkt, data, end))
		return count(STAT_PASS, XDP_PASS);

	/* 2. To a local endpoint: its address, else the family's wildcard. */
	ek.local = pkt.dst;
	ep = bpf_map_lookup_elem(&xdpfab_ep, &ek);
	int wild = 0;
	if (!ep) {
		__builtin_memset(ek.local.addr, 0, sizeof(ek.local.addr));
		ep = bpf_map_lookup_elem(&xdpfab_ep, &ek);
		if (!ep)
			return count(STAT_PASS, XDP_PASS);
		wild = 1;
	}

	/* 3. Only to a unicast address, and for a wildcard endpoint one of the
	 * host's: anything else to the port (broadcast, multicast, loopback,
	 * another host's address) is not the endpoint's; the kernel decides. */
	if (!dst_unicast(&pkt.dst) || (wild && !dst_local(&pkt.dst)))
		return count(STAT_NOT_LOCAL, XDP_PASS);

	/* 4. From here on the datagram is ours: what the kernel would check
	 * (IP header, lengths, checksums), then the xdpfab header, or drop. */
	int bad = check_ip(&pkt, end);
	if (!bad)
		bad = check_udp(&pkt, end);
	if (bad)
		return count(bad, XDP_DROP);
	struct wire_hdr *hdr = parse_hdr(&pkt, end, ep->rx_ctxs);
	if (!hdr)
		return count(STAT_MALFORMED, XDP_DROP);

	/* 5. The source in the endpoint's AV. An endpoint enabled with an auth
	 * key knows only peers bound to that key that also carry it on the
	 * wire. */
	ak.av_id = ep->av_id;
	ak.src = pkt.src;
	av = ak.av_id ? bpf_map_lookup_elem(&xdpfab_av, &ak) : NULL;
	if (av && ep->auth_key &&
	    (av->auth_key != ep->auth_key || hdr->auth_key != bpf_htonl(ep->auth_key)))
		av = NULL;

	/* 6. Unknown sources follow the endpoint's policy. */
	__u16 mflags = 0;
	__u64 fi_addr = ~0ULL, user_id = ~0ULL;
	if (av) {
		mflags = XDPFAB_META_KNOWN;
		if (av->flags & XDPFAB_AVF_USER_ID)
			mflags |= XDPFAB_META_USER_ID;
		fi_addr = av->fi_addr;
		user_id = av->user_id;
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
	 * measured (XDPFAB_EPF_STAMP) a stamp in front of that (stamp.h).
	 * Packet pointers are invalid after adjust_meta. */
	if ((ep->flags & XDPFAB_EPF_STAMP) && !stamp_frame(ctx, &l3_off, &hdr_off, &mflags))
		return count(STAT_REDIRECT_FAIL, XDP_DROP);
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct rx_meta)))
		return count(STAT_REDIRECT_FAIL, XDP_DROP);
	data = (void *)(long)ctx->data;
	struct rx_meta *meta = (void *)(long)ctx->data_meta;
	if ((void *)(meta + 1) > data)
		return count(STAT_REDIRECT_FAIL, XDP_DROP);
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

	/* 9. Redirect. */
	long act = bpf_redirect_map(&xdpfab_xsks, slot, XDP_DROP);
	if (act != XDP_REDIRECT)
		return count(STAT_REDIRECT_FAIL, XDP_DROP);
	return count(av ? STAT_TRANSLATED : STAT_UNKNOWN, XDP_REDIRECT);
}
