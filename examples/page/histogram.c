// SPDX-License-Identifier: MIT
/*
 * histogram - a program whose data set lives on a memory server and is
 * four times larger than the memory it may hold locally (lib/page).
 *
 *   rdmx page serve :7480 --size 64m &
 *   histogram 127.0.0.1:7480/mem
 *
 * It fills the region with a data set, builds a histogram of it, updates
 * every element in place, and builds the histogram again, all through
 * ordinary loads and stores on the mapping; pages come and go through a
 * cache of a quarter of the region. It runs the same program on local
 * memory, checks that both give the same histograms and the same
 * elements, and prints both run times.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rdmx.h"
#include "rdmx_page.h"

#define BINS 256

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The program: fill, histogram, update in place, histogram again. */
static void work(uint32_t *x, uint64_t n, uint64_t hist[2][BINS])
{
	memset(hist, 0, 2 * BINS * sizeof(uint64_t));
	for (uint64_t i = 0; i < n; i++)
		x[i] = (uint32_t)(i * 2654435761u ^ (i >> 7));
	for (uint64_t i = 0; i < n; i++)
		hist[0][x[i] >> 24]++;
	for (uint64_t i = 0; i < n; i++)
		x[i] = x[i] * 1103515245u + 12345u;
	for (uint64_t i = 0; i < n; i++)
		hist[1][x[i] >> 24]++;
}

int main(int argc, char **argv)
{
	struct rdmx_page_attr attr = { .mask = RDMX_PAGE_ATTR_CACHE_BYTES };
	uint64_t hist_remote[2][BINS], hist_local[2][BINS], len, n;
	struct rdmx_page_map *map = NULL;
	struct rdmx_page_stats ps;
	struct rdmx_ctx *ctx = NULL;
	uint32_t *remote, *local;
	double t0, t_remote, t_local;
	void *addr;
	rdmx_status st;
	int rc = 1;

	if (argc != 2) {
		fprintf(stderr, "usage: histogram HOST[:PORT]/NAME\n");
		return 2;
	}
	st = rdmx_ctx_create(NULL, &ctx);
	if (!st)
		st = rdmx_page_map(ctx, argv[1], NULL, &map);
	if (st) {
		fprintf(stderr, "histogram: cannot map %s: %s\n", argv[1],
			rdmx_strerror(st));
		goto out;
	}
	/* Map it again with a cache of a quarter of the region. */
	len = rdmx_page_length(map);
	rdmx_page_unmap(map);
	attr.cache_bytes = len / 4;
	st = rdmx_page_map(ctx, argv[1], &attr, &map);
	if (!st)
		st = rdmx_page_mmap(map, &addr);
	if (st) {
		fprintf(stderr, "histogram: %s\n", rdmx_strerror(st));
		goto out;
	}
	remote = addr;
	n = len / sizeof(uint32_t);
	local = malloc(len);
	if (!local)
		goto out;

	t0 = now_s();
	work(remote, n, hist_remote);
	st = rdmx_page_sync(map, remote, len);
	t_remote = now_s() - t0;
	t0 = now_s();
	work(local, n, hist_local);
	t_local = now_s() - t0;
	rdmx_page_stats(map, &ps);

	if (st || memcmp(hist_remote, hist_local, sizeof(hist_local))) {
		fprintf(stderr, "histogram: results differ (%s)\n",
			rdmx_strerror(st));
		goto out_free;
	}
	/* What the server holds now: forget the cache and read it back. */
	st = rdmx_page_drop(map, remote, len);
	if (st || memcmp(remote, local, len)) {
		fprintf(stderr, "histogram: the server's elements differ\n");
		goto out_free;
	}
	printf("histogram of %" PRIu64 " MiB on %s through a %" PRIu64
	       " MiB cache: same result as local memory\n",
	       len >> 20, argv[1], (len / 4) >> 20);
	printf("  remote %.3f s (%" PRIu64 " faults, %" PRIu64
	       " pages fetched, %" PRIu64 " written back), local %.3f s\n",
	       t_remote, ps.faults, ps.pages_fetched, ps.written_back, t_local);
	rc = 0;
out_free:
	free(local);
out:
	rdmx_page_unmap(map);
	rdmx_ctx_destroy(ctx);
	return rc;
}
