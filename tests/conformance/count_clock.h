/* SPDX-License-Identifier: MIT */
/*
 * clock_reads: this thread's clock_gettime calls, counted by interposing
 * clock_gettime. Include it in one file of a test binary.
 */
#ifndef RDMX_TEST_COUNT_CLOCK_H
#define RDMX_TEST_COUNT_CLOCK_H

#include <dlfcn.h>
#include <stdatomic.h>
#include <time.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);
static _Thread_local unsigned long clock_reads;
static _Atomic(clock_gettime_fn) real_clock_gettime;

int clock_gettime(clockid_t id, struct timespec *ts)
{
	clock_gettime_fn real =
		atomic_load_explicit(&real_clock_gettime, memory_order_relaxed);

	if (!real) { /* found at the first call: before any constructor */
		real = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
		atomic_store_explicit(&real_clock_gettime, real,
				      memory_order_relaxed);
	}
	clock_reads++;
	return real(id, ts);
}

#endif
