/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The measurement stamp (XDPFAB_EPF_STAMP, xdpfab_consts.h): only endpoints
 * that asked for it pay for it; for the others it is one test of a byte the
 * program has loaded anyway. */
#ifndef XDPFAB_STAMP_H
#define XDPFAB_STAMP_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdpfab_consts.h"

/* stamp_frame grows the frame at its head by XDPFAB_STAMP_LEN bytes and
 * writes the time into them; the offsets into the frame move along, and
 * the metadata flags say so. It fails (0) only when the frame has no
 * headroom left, which no driver does. Packet pointers are invalid
 * afterwards. */
static __always_inline int stamp_frame(struct xdp_md *ctx, __u16 *l3_off, __u16 *hdr_off, __u16 *mflags)
{
	__u64 now = bpf_ktime_get_ns();

	if (bpf_xdp_adjust_head(ctx, -XDPFAB_STAMP_LEN))
		return 0;
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + XDPFAB_STAMP_LEN > end)
		return 0;
	__builtin_memcpy(data, &now, XDPFAB_STAMP_LEN);
	*l3_off += XDPFAB_STAMP_LEN;
	*hdr_off += XDPFAB_STAMP_LEN;
	*mflags |= XDPFAB_META_STAMP;
	return 1;
}

#endif
