/* SPDX-License-Identifier: MIT */
/*
 * Description: what one core copies on this host, for bench/compare.sh to
 * set beside rdmx's bandwidth: glibc memcpy of SIZE bytes, hot (the same
 * source and destination each time) and, for 4 KiB, from a 256 MiB pool
 * (a different, cold buffer each time), for about SECONDS each.
 *
 *   memcpy_bw [SECONDS]
 *
 * Prints one JSON line per case: GB/s (1e9 bytes) and microseconds per copy.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Copy @size bytes from @src + k * @stride (k cycling over @span) to @dst.
 * Both page-aligned, as rdmx_mem_alloc's are: two malloc blocks lay 16
 * bytes apart modulo 4096, where rep movsb on AMD CPUs with FSRM (glibc
 * bug 30994) copied 4 KiB and 64 KiB at ~2.4 GB/s, and this printed that
 * as the host's limit.
 */
static void run(const char *name, size_t size, size_t span, double secs)
{
	char *src = aligned_alloc(4096, span), *dst = aligned_alloc(4096, size);
	size_t slots = span / size, k = 0;
	uint64_t n = 0;
	double t0, t;

	if (!src || !dst) {
		fprintf(stderr, "memcpy_bw: out of memory\n");
		exit(1);
	}
	memset(src, 1, span); /* fault every page in before timing */
	memset(dst, 2, size);
	t0 = now_s();
	do {
		for (int i = 0; i < 64; i++, n++) {
			memcpy(dst, src + k * size, size);
			k = k + 1 == slots ? 0 : k + 1;
		}
		/* Keep the copies from being optimised away. */
		__asm__ volatile("" : : "r"(dst) : "memory");
		t = now_s() - t0;
	} while (t < secs);
	printf("{\"tool\":\"memcpy_bw\",\"case\":\"%s\",\"size\":%zu,"
	       "\"gb_per_s\":%.3f,\"us_per_copy\":%.4f}\n",
	       name, size, (double)n * (double)size / t / 1e9,
	       t * 1e6 / (double)n);
	free(src);
	free(dst);
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 0.5;

	if (secs <= 0 || secs > 60) {
		fprintf(stderr, "usage: memcpy_bw [SECONDS]\n");
		return 2;
	}
	run("4k-hot", 4096, 4096, secs);
	run("4k-pool", 4096, 256u << 20, secs);
	run("64k-hot", 65536, 65536, secs);
	run("1m-hot", 1 << 20, 1 << 20, secs);
	run("64m", 64u << 20, 64u << 20, secs);
	return 0;
}
