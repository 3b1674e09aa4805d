/* SPDX-License-Identifier: MIT */
/*
 * Description: what the host-limit programs under bench/ share: the clock
 * their latencies are read from, and the order they sort them in. The
 * programs stand alone (no rdmx), so these are inline.
 */
#ifndef RDMX_BENCH_H
#define RDMX_BENCH_H

#include <time.h>

/* CLOCK_MONOTONIC in microseconds. */
static inline double bench_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* qsort's order for doubles, smallest first. */
static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

#endif
