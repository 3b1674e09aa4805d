/* SPDX-License-Identifier: MIT */
/*
 * Description: how often this host stops a running thread, and for how
 * long, for bench/kv-vs-redis.sh to print under its table: a thread that
 * copies 4 KiB blocks (as a store serves values) and reads the clock
 * after each counts the gaps between reads longer than 20, 50 and 100 us.
 * On a VM those are mostly the hypervisor's; they set the p99 of anything
 * that keeps requests queued behind one spinning thread (seen here:
 * 250-500 a second over 20 us, up to a few hundred us each).
 *
 *   host_stalls SECONDS
 *
 * Prints one JSON line: stalls per second over each bound, the share of
 * the time lost in them, and the longest, in microseconds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define AREA (1 << 20) /* the blocks' area: 256 of 4 KiB, in cache */

int main(int argc, char **argv)
{
	double secs = argc == 2 ? atof(argv[1]) : 0, t0, last, now, lost = 0,
	       max = 0;
	long over[3] = { 0 }, copies = 0;
	const double bound[3] = { 20, 50, 100 };
	char *src = malloc(AREA), *dst = malloc(AREA);

	if (argc != 2 || !(secs > 0 && secs <= 3600)) {
		fprintf(stderr, "usage: host_stalls SECONDS (0 < SECONDS <= "
				"3600)\n");
		return 2;
	}
	if (!src || !dst)
		return 1;
	memset(src, 1, AREA);
	memset(dst, 2, AREA);
	t0 = last = bench_now_us();
	do {
		size_t off = (size_t)(copies++ % (AREA / 4096)) * 4096;

		memcpy(dst + off, src + (AREA - 4096 - off), 4096);
		now = bench_now_us();
		if (now - last > bound[0])
			lost += now - last;
		for (int i = 0; i < 3; i++)
			over[i] += now - last > bound[i];
		if (now - last > max)
			max = now - last;
		last = now;
	} while (now - t0 < secs * 1e6);
	secs = (now - t0) / 1e6;
	printf("{\"tool\":\"host_stalls\",\"seconds\":%.2f,\"copies\":%ld,"
	       "\"per_s_over_20us\":%.0f,\"per_s_over_50us\":%.0f,"
	       "\"per_s_over_100us\":%.0f,\"lost_pct\":%.2f,\"max_us\":%.0f}\n",
	       secs, copies, over[0] / secs, over[1] / secs, over[2] / secs,
	       lost / (now - t0) * 100, max);
	free(src);
	free(dst);
	return copies > 0 ? 0 : 1;
}
