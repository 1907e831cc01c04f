// fiav: libfabric's own fi_av_insert/fi_av_remove on its udp provider, the
// peer of xdpfab's AV control plane in bench section 4. bench/run.sh builds
// it with gcc against Debian's libfabric-dev; the bench runs it inside one of
// its network namespaces (it sends nothing) and reads one JSON object from
// stdout.
//
//   fiav SMALL BULK    insert and remove SMALL addresses one per call, one
//                      per call with FI_MORE, 1024 per call; then insert
//                      BULK in calls of 1024 (a fresh AV each time) and
//                      time fi_av_lookup of random fi_addr values in it
#include <malloc.h>
#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>

static struct fid_domain *domain;

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

// The same addresses as the Go side's avAddr (IPv4): 198.18.0.0/15.
static void addr(int i, struct sockaddr_in *sa) {
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons(1024 + (i >> 17));
	unsigned char *b = (unsigned char *)&sa->sin_addr;
	b[0] = 198;
	b[1] = 18 + ((i >> 16) & 1);
	b[2] = i >> 8;
	b[3] = i;
}

static struct fid_av *open_av(size_t count) {
	struct fi_av_attr attr = {.type = FI_AV_TABLE, .count = count};
	struct fid_av *av;
	int ret = fi_av_open(domain, &attr, &av, NULL);
	if (ret) {
		fprintf(stderr, "fi_av_open: %s\n", fi_strerror(-ret));
		exit(1);
	}
	return av;
}

static void die(const char *what, int ret) {
	fprintf(stderr, "%s: %s\n", what, fi_strerror(ret < 0 ? -ret : ret));
	exit(1);
}

// run inserts n addresses in calls of batch (flags on all but the last
// call of each 1024 when more is set) and removes them in calls of batch,
// printing rates and the heap growth per entry.
// lookups is how many fi_av_lookup calls the bulk run times.
#define LOOKUPS (1 << 20)

static void run(const char *name, int n, int batch, int more, int remove, int last) {
	struct sockaddr_in *sa = calloc(n, sizeof(*sa));
	fi_addr_t *fa = calloc(n, sizeof(*fa));
	for (int i = 0; i < n; i++)
		addr(i, &sa[i]);
	struct mallinfo2 m0 = mallinfo2();
	struct fid_av *av = open_av(n);
	double t0 = now();
	for (int i = 0; i < n; i += batch) {
		int k = n - i < batch ? n - i : batch;
		uint64_t flags = 0;
		if (more && (i + k) % 1024 != 0 && i + k < n)
			flags = FI_MORE;
		int ret = fi_av_insert(av, &sa[i], k, &fa[i], flags, NULL);
		if (ret != k)
			die("fi_av_insert", ret);
	}
	double t1 = now();
	struct mallinfo2 m1 = mallinfo2();
	double t2 = now();
	for (int i = 0; remove && i < n; i += batch) {
		int k = n - i < batch ? n - i : batch;
		int ret = fi_av_remove(av, &fa[i], k, 0);
		if (ret)
			die("fi_av_remove", ret);
	}
	double t3 = now();
	// Lookups of random fi_addr values (an LCG over the inserted ones),
	// when the entries are still in.
	double lookup_ns = 0;
	if (!remove) {
		fi_addr_t *order = calloc(LOOKUPS, sizeof(*order));
		unsigned int x = 12345;
		for (int i = 0; i < LOOKUPS; i++) {
			x = x * 1103515245u + 12345u;
			order[i] = fa[(x >> 8) % (unsigned int)n];
		}
		struct sockaddr_in out;
		double t4 = now();
		for (int i = 0; i < LOOKUPS; i++) {
			size_t len = sizeof(out);
			int ret = fi_av_lookup(av, order[i], &out, &len);
			if (ret)
				die("fi_av_lookup", ret);
		}
		lookup_ns = (now() - t4) * 1e9 / LOOKUPS;
		free(order);
	}
	fi_close(&av->fid);
	printf("\"%s\":{\"n\":%d,\"insert_per_s\":%.1f,\"remove_per_s\":%.1f,\"heap_bytes_per_entry\":%.1f,\"lookup_ns\":%.1f}%s\n",
	       name, n, n / (t1 - t0), remove ? n / (t3 - t2) : 0.0,
	       (double)(m1.uordblks + m1.hblkhd - m0.uordblks - m0.hblkhd) / n, lookup_ns, last ? "" : ",");
	free(sa);
	free(fa);
}

int main(int argc, char **argv) {
	if (argc != 3) {
		fprintf(stderr, "usage: fiav SINGLE BULK\n");
		return 2;
	}
	int single = atoi(argv[1]), bulk = atoi(argv[2]);
	struct fi_info *hints = fi_allocinfo(), *info;
	hints->fabric_attr->prov_name = strdup("udp");
	hints->ep_attr->type = FI_EP_DGRAM;
	hints->caps = FI_MSG;
	hints->addr_format = FI_SOCKADDR_IN;
	int ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info);
	if (ret)
		die("fi_getinfo udp", ret);
	struct fid_fabric *fabric;
	if ((ret = fi_fabric(info->fabric_attr, &fabric, NULL)))
		die("fi_fabric", ret);
	if ((ret = fi_domain(fabric, info, &domain, NULL)))
		die("fi_domain", ret);
	printf("{\"provider\":\"%s\",\"version\":\"%d.%d\",\n", info->fabric_attr->prov_name,
	       FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
	run("single", single, 1, 0, 1, 0);
	run("single_more", single, 1, 1, 1, 0);
	run("batch1024", single, 1024, 0, 1, 0);
	// Removes are O(entries) each in 1.17's util AV: not timed at BULK.
	run("bulk", bulk, 1024, 0, 0, 1);
	printf("}\n");
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}
