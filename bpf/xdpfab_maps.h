/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Every map of the xdpfab dataplane. Names are bpftool-visible (at most 15
 * characters) and name the pins: with a pin root, the loader pins each map
 * under <root>/maps/<name> and re-opens what is there (LIBBPF_PIN_BY_NAME);
 * without one it drops the pinning. max_entries here are defaults; the
 * loader resizes them. */
#ifndef XDPFAB_MAPS_H
#define XDPFAB_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "xdpfab_consts.h"
#include "xdpfab_structs.h"

/* AV tables by av id (struct av_hdr in xdpfab_structs.h): each AV's
 * table is an array map of its own, sized by the AV (its count hint, then
 * growth), which user space memory-maps. BPF_F_INNER_MAP lets tables of
 * different sizes share the slot type; growth swaps in a bigger table with
 * one update of this map. User space creates the tables (loader/avtable.go);
 * max_entries here is the template's. */
struct av_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct av_page);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 256);
	__type(key, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__array(values, struct av_table);
} xdpfab_avtab SEC(".maps");

/* AV attributes by av id. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct av_meta);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xdpfab_avmeta SEC(".maps");

/* Auth keys by (av, handle). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct rev_key);
	__type(value, struct authkey_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xdpfab_authkey SEC(".maps");

/* Reserved AV capacity by process. Only user space uses it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct proc_id);
	__type(value, struct pool_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xdpfab_avpool SEC(".maps");

/* Local endpoints by (address, port). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct ep_key);
	__type(value, struct ep_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xdpfab_ep SEC(".maps");

/* The endpoint index: the fast path in front of xdpfab_ep. xdpfab_epport,
 * indexed by local UDP port (host order), lists the port's endpoints when it
 * has at most XDPFAB_EP_PER_PORT: four 16-bit references, the lowest first,
 * each 1 + the xdpfab_epslot element that holds one endpoint's key and
 * value, 0 ending the list; those bound to an address come before the
 * wildcards. The first slot whose key matches the datagram (port, family,
 * and its address or the wildcard) is its endpoint: the exact address
 * before the wildcard, as in xdpfab_ep. 0: no entry (no endpoint, or more
 * than the list holds), and XDP looks in xdpfab_ep, as it does when no slot
 * matches. XDP checks every slot's key against the datagram, so a stale or
 * missing entry costs the hash lookup, never a wrong endpoint.
 * User space writes both through memory mappings, under the dataplane
 * lock (loader/epindex.go): a slot only while no port entry lists it,
 * then the port entry with one aligned 64-bit store (a __u64: array
 * elements are 8 bytes apart whatever the value size); a slot a port entry
 * stopped pointing to is reused only after a grace period. The loader sizes
 * xdpfab_epslot to twice the endpoints; the index uses its first 65535. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xdpfab_epport SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 2048);
	__type(key, __u32);
	__type(value, struct ep_slot);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xdpfab_epslot SEC(".maps");

/* The host's local unicast addresses (key: the address with port 0),
 * which a wildcard endpoint (bound to 0.0.0.0 or ::) receives on: user
 * space keeps it in step with the kernel's addresses (ep's local-address
 * watcher); the value is the ifindex the address was seen on. Read by XDP
 * only for datagrams that matched a wildcard endpoint. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct udp_addr);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xdpfab_local SEC(".maps");

/* AF_XDP sockets by slot. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xdpfab_xsks SEC(".maps");

/* Per-CPU counters by ingress ifindex, enum counter. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX * XDPFAB_IFINDEX_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} xdpfab_stats SEC(".maps");

#endif
