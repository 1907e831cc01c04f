// xskfloor: the floor of bench section 3, a minimal AF_XDP ping-pong in C
// (libxdp's xsk API over libbpf), with no Go and no libfabric layer: what
// the kernel path costs by itself. bench/run.sh builds it with gcc against
// Debian's libxdp-dev; the bench runs the server in one namespace and the
// client in the other (ip netns exec, taskset), as it runs fi_pingpong.
//
// The bench loads the XDP program, a few instructions that redirect UDP
// datagrams to PORT into the XSKMAP slot of their rx queue, attaches it to
// both interfaces in the mode xdpfab runs in, and hands this program the
// XSKMAP as file descriptor 3: libxdp loads no program of its own
// (XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD) and no clang runs at bench time.
// The sockets are bound like xdpfab's on veth: copy mode, need_wakeup,
// queue 0, 4096 frames of 4096 bytes.
//
//   xskfloor server IFNAME PORT COUNT
//       echo COUNT datagrams to PORT back to their sender, swapping the
//       addresses in place (the cheapest echo there is), then exit
//   xskfloor client IFNAME PORT SRC_MAC DST_MAC SRC_IP DST_IP SIZE ITERS WARM
//       WARM untimed and ITERS timed ping-pongs of SIZE-byte UDP payloads;
//       print one JSON object: the elapsed time of the timed ones and each
//       one's half round trip, in ns (CLOCK_MONOTONIC)
//   xskfloor pauses SECONDS
//       no socket: spin reading the clock for SECONDS and print one JSON
//       object counting the gaps between consecutive reads of at least
//       each of pause_min_ns, and their total length: the times the
//       machine (interrupts, the hypervisor) took the CPU from a program
//       that never gives it up, which any ping-pong on that CPU meets too
//
// The server prints "ready" once its socket is in the XSKMAP. Either side
// fails after 10 s without the datagram it waits for.
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <linux/if_xdp.h>
#include <xdp/xsk.h>

#define NUM_FRAMES 4096
#define FRAME_SIZE 4096
#define RING_SIZE 1024
#define XSKMAP_FD 3
#define HDRS 42 // Ethernet + IPv4 + UDP
#define TIMEOUT_NS 10000000000LL

static struct xsk_umem *umem;
static struct xsk_socket *xsk;
static struct xsk_ring_prod fq, tx;
static struct xsk_ring_cons cq, rx;
static uint8_t *area;
static int fd;
static uint64_t free_tx[NUM_FRAMES / 2];
static int nfree;

static int64_t now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *what, int err) {
	fprintf(stderr, "xskfloor: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

// setup makes the UMEM and the socket, gives half the frames to the fill
// ring and keeps the other half for transmitting, and puts the socket in
// XSKMAP slot 0 (queue 0).
static void setup(const char *ifname) {
	// In transparent huge pages where the system allows them, as xdpfab's
	// private UMEM: a frame's first touch is then rarely a TLB miss.
	area = mmap(NULL, (size_t)NUM_FRAMES * FRAME_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED)
		die("mmap", errno);
	madvise(area, (size_t)NUM_FRAMES * FRAME_SIZE, MADV_HUGEPAGE);
	if (madvise(area, (size_t)NUM_FRAMES * FRAME_SIZE, MADV_POPULATE_WRITE))
		memset(area, 0, (size_t)NUM_FRAMES * FRAME_SIZE);
	struct xsk_umem_config ucfg = {.fill_size = NUM_FRAMES / 2, .comp_size = RING_SIZE, .frame_size = FRAME_SIZE};
	struct xsk_socket_config scfg = {
		.rx_size = RING_SIZE,
		.tx_size = RING_SIZE,
		.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,
		.bind_flags = XDP_COPY | XDP_USE_NEED_WAKEUP,
	};
	// The kernel releases the previous run's socket on the queue
	// asynchronously: bind fails with EBUSY until it has. Retry for 2 s,
	// with a fresh UMEM each time (as xdpfab's dataplane retries).
	for (int attempt = 0;; attempt++) {
		int ret = xsk_umem__create(&umem, area, (uint64_t)NUM_FRAMES * FRAME_SIZE, &fq, &cq, &ucfg);
		if (ret)
			die("xsk_umem__create", ret);
		ret = xsk_socket__create(&xsk, ifname, 0, umem, &rx, &tx, &scfg);
		if (!ret)
			break;
		if (ret != -EBUSY || attempt >= 200)
			die("xsk_socket__create", ret);
		xsk_umem__delete(umem);
		usleep(10000);
	}
	fd = xsk_socket__fd(xsk);
	uint32_t idx;
	if (xsk_ring_prod__reserve(&fq, NUM_FRAMES / 2, &idx) != NUM_FRAMES / 2)
		die("fill ring", ENOSPC);
	for (int i = 0; i < NUM_FRAMES / 2; i++)
		*xsk_ring_prod__fill_addr(&fq, idx + i) = (uint64_t)i * FRAME_SIZE;
	xsk_ring_prod__submit(&fq, NUM_FRAMES / 2);
	for (int i = NUM_FRAMES / 2; i < NUM_FRAMES; i++)
		free_tx[nfree++] = (uint64_t)i * FRAME_SIZE;
	uint32_t key = 0;
	if (bpf_map_update_elem(XSKMAP_FD, &key, &fd, BPF_ANY))
		die("XSKMAP update (descriptor 3)", errno);
}

// send puts one frame on the TX ring and kicks the kernel, which in copy
// mode transmits inside the sendto.
static void send_frame(uint64_t addr, uint32_t len) {
	uint32_t idx;
	while (xsk_ring_prod__reserve(&tx, 1, &idx) != 1)
		;
	struct xdp_desc *d = xsk_ring_prod__tx_desc(&tx, idx);
	d->addr = addr;
	d->len = len;
	xsk_ring_prod__submit(&tx, 1);
	if (xsk_ring_prod__needs_wakeup(&tx))
		sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0);
}

// recv_frame spins until the RX ring has a frame and takes it.
static struct xdp_desc recv_frame(void) {
	uint32_t idx;
	int64_t deadline = 0;
	for (unsigned spin = 0;; spin++) {
		if (xsk_ring_cons__peek(&rx, 1, &idx) == 1)
			break;
		if (xsk_ring_prod__needs_wakeup(&fq))
			recvfrom(fd, NULL, 0, MSG_DONTWAIT, NULL, NULL);
		if ((spin & 4095) == 0) {
			int64_t t = now();
			if (!deadline)
				deadline = t + TIMEOUT_NS;
			else if (t > deadline)
				die("no datagram within 10 s", ETIMEDOUT);
		}
	}
	struct xdp_desc d = *xsk_ring_cons__rx_desc(&rx, idx);
	xsk_ring_cons__release(&rx, 1);
	return d;
}

// fill gives a received frame back to the fill ring.
static void fill(uint64_t addr) {
	uint32_t idx;
	while (xsk_ring_prod__reserve(&fq, 1, &idx) != 1)
		;
	*xsk_ring_prod__fill_addr(&fq, idx) = xsk_umem__extract_addr(addr);
	xsk_ring_prod__submit(&fq, 1);
}

// complete takes transmitted frames off the completion ring and hands
// them to done.
static void complete(void (*done)(uint64_t)) {
	uint32_t idx;
	unsigned n = xsk_ring_cons__peek(&cq, RING_SIZE, &idx);
	for (unsigned i = 0; i < n; i++)
		done(*xsk_ring_cons__comp_addr(&cq, idx + i));
	xsk_ring_cons__release(&cq, n);
}

static void to_free(uint64_t addr) { free_tx[nfree++] = xsk_umem__extract_addr(addr); }

static int is_ours(const uint8_t *p, uint32_t len, uint16_t port) {
	return len >= HDRS && p[12] == 0x08 && p[13] == 0x00 && p[23] == IPPROTO_UDP &&
	       ((p[36] << 8) | p[37]) == port;
}

static void swap(uint8_t *a, uint8_t *b, int n) {
	uint8_t t[6];
	memcpy(t, a, n);
	memcpy(a, b, n);
	memcpy(b, t, n);
}

static int server(const char *ifname, uint16_t port, long count) {
	setup(ifname);
	printf("ready\n");
	fflush(stdout);
	for (long i = 0; i < count;) {
		struct xdp_desc d = recv_frame();
		uint8_t *p = xsk_umem__get_data(area, d.addr);
		if (!is_ours(p, d.len, port)) {
			fill(d.addr);
			continue;
		}
		// Swapping both ends leaves the IPv4 and UDP checksums valid.
		swap(p, p + 6, 6);
		swap(p + 26, p + 30, 4);
		swap(p + 34, p + 36, 2);
		send_frame(d.addr, d.len);
		complete(fill);
		i++;
	}
	xsk_socket__delete(xsk);
	xsk_umem__delete(umem);
	return 0;
}

static void parse_mac(const char *s, uint8_t *mac) {
	if (sscanf(s, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &mac[0], &mac[1], &mac[2], &mac[3], &mac[4], &mac[5]) != 6) {
		fprintf(stderr, "xskfloor: bad MAC %s\n", s);
		exit(2);
	}
}

static uint16_t csum(const uint8_t *p, int n, uint32_t acc) {
	for (int i = 0; i + 1 < n; i += 2)
		acc += (p[i] << 8) | p[i + 1];
	if (n & 1)
		acc += p[n - 1] << 8;
	while (acc >> 16)
		acc = (acc & 0xffff) + (acc >> 16);
	return ~acc;
}

// build writes the headers of a SIZE-byte datagram into hdr; the UDP
// checksum is 0 (none), as the peer checks nothing.
static void build(uint8_t *hdr, const char **argv, int size, uint16_t port) {
	memset(hdr, 0, HDRS);
	parse_mac(argv[1], hdr + 6);
	parse_mac(argv[2], hdr);
	hdr[12] = 0x08;
	uint8_t *ip = hdr + 14;
	ip[0] = 0x45;
	uint16_t tot = 20 + 8 + size;
	ip[2] = tot >> 8, ip[3] = tot;
	ip[8] = 64;
	ip[9] = IPPROTO_UDP;
	if (inet_pton(AF_INET, argv[3], ip + 12) != 1 || inet_pton(AF_INET, argv[4], ip + 16) != 1) {
		fprintf(stderr, "xskfloor: bad IPv4 address\n");
		exit(2);
	}
	uint16_t c = csum(ip, 20, 0);
	ip[10] = c >> 8, ip[11] = c;
	uint8_t *udp = ip + 20;
	udp[0] = port >> 8, udp[1] = port;
	udp[2] = port >> 8, udp[3] = port;
	udp[4] = (8 + size) >> 8, udp[5] = 8 + size;
}

static int client(const char *ifname, uint16_t port, const char **argv) {
	int size = atoi(argv[5]), iters = atoi(argv[6]), warm = atoi(argv[7]);
	if (size < 1 || HDRS + size > FRAME_SIZE - XDP_PACKET_HEADROOM || iters < 1 || warm < 0) {
		fprintf(stderr, "xskfloor: bad size or counts\n");
		return 2;
	}
	uint8_t hdr[HDRS];
	build(hdr, argv, size, port);
	uint8_t *msg = malloc(size);
	for (int i = 0; i < size; i++)
		msg[i] = i;
	int64_t *halves = malloc(sizeof(int64_t) * iters);
	if (!halves) {
		fprintf(stderr, "xskfloor: out of memory\n");
		return 1;
	}
	/* Written now, not by the timed loop: its first write to each page
	 * would fault (as the Go side's sample arrays, bench/threads.go). */
	memset(halves, 0, sizeof(int64_t) * iters);
	setup(ifname);
	int64_t start = 0;
	for (int i = 0; i < warm + iters; i++) {
		if (i == warm)
			start = now();
		int64_t t0 = now();
		if (nfree == 0)
			complete(to_free);
		uint64_t a = free_tx[--nfree];
		uint8_t *p = xsk_umem__get_data(area, a);
		memcpy(p, hdr, HDRS);
		memcpy(p + HDRS, msg, size);
		send_frame(a, HDRS + size);
		struct xdp_desc d;
		for (;;) {
			d = recv_frame();
			if (is_ours(xsk_umem__get_data(area, d.addr), d.len, port))
				break;
			fill(d.addr);
		}
		if (d.len != (uint32_t)(HDRS + size)) {
			fprintf(stderr, "xskfloor: echo of %d bytes came back with %u\n", HDRS + size, d.len);
			return 1;
		}
		fill(d.addr);
		if (i >= warm)
			halves[i - warm] = (now() - t0) / 2;
		complete(to_free);
	}
	int64_t elapsed = now() - start;
	printf("{\"size\":%d,\"iters\":%d,\"elapsed_ns\":%lld,\"halves_ns\":[", size, iters, (long long)elapsed);
	for (int i = 0; i < iters; i++)
		printf("%s%lld", i ? "," : "", (long long)halves[i]);
	printf("]}\n");
	xsk_socket__delete(xsk);
	xsk_umem__delete(umem);
	return 0;
}

// pauses spins reading CLOCK_MONOTONIC for secs seconds and prints, for
// each threshold, how many gaps between two consecutive reads were at
// least that long and how long they were in all.
static int pauses(double secs) {
	static const int64_t min_ns[] = {1000, 2000, 5000, 10000, 20000, 50000};
	enum { K = sizeof(min_ns) / sizeof(min_ns[0]) };
	int64_t count[K] = {0}, total[K] = {0}, loops = 0, longest = 0;
	if (!(secs > 0 && secs <= 60)) {
		fprintf(stderr, "xskfloor: pauses: SECONDS must be in (0, 60]\n");
		return 2;
	}
	int64_t start = now(), end = start + (int64_t)(secs * 1e9), prev = start;
	for (int64_t t = start; t < end; prev = t, loops++) {
		t = now();
		int64_t gap = t - prev;
		if (gap > longest)
			longest = gap;
		for (int i = 0; i < K && gap >= min_ns[i]; i++) {
			count[i]++;
			total[i] += gap;
		}
	}
	printf("{\"elapsed_ns\":%lld,\"loops\":%lld,\"longest_ns\":%lld,\"pause_min_ns\":[", (long long)(prev - start),
	       (long long)loops, (long long)longest);
	for (int i = 0; i < K; i++)
		printf("%s%lld", i ? "," : "", (long long)min_ns[i]);
	printf("],\"count\":[");
	for (int i = 0; i < K; i++)
		printf("%s%lld", i ? "," : "", (long long)count[i]);
	printf("],\"total_ns\":[");
	for (int i = 0; i < K; i++)
		printf("%s%lld", i ? "," : "", (long long)total[i]);
	printf("]}\n");
	return 0;
}

int main(int argc, const char **argv) {
	if (argc == 3 && !strcmp(argv[1], "pauses"))
		return pauses(atof(argv[2]));
	if (argc == 5 && !strcmp(argv[1], "server"))
		return server(argv[2], atoi(argv[3]), atol(argv[4]));
	if (argc == 11 && !strcmp(argv[1], "client"))
		return client(argv[2], atoi(argv[3]), argv + 3);
	fprintf(stderr, "usage: xskfloor server IFNAME PORT COUNT\n"
	                "       xskfloor client IFNAME PORT SRC_MAC DST_MAC SRC_IP DST_IP SIZE ITERS WARM\n"
	                "       xskfloor pauses SECONDS\n");
	return 2;
}
