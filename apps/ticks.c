/* SPDX-License-Identifier: MIT */
/* The CLI's clocks: cli_now_us, and rdmx bench's interval clock
 * (cli.h: cli_ticks). */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static bool cli_tsc; /* cli_ticks reads the time-stamp counter */
static double cli_us_per_tick; /* its calibration; 1e-3 for nanoseconds */

static uint64_t cli_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double cli_now_us(void)
{
	return (double)cli_mono_ns() / 1e3;
}

#if defined(__x86_64__) || defined(__i386__)
/* Does /proc/cpuinfo list both flags of an invariant counter? */
static bool cli_tsc_invariant(void)
{
	char line[4096];
	bool yes = false;
	FILE *f = fopen("/proc/cpuinfo", "r");

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "flags", 5)) {
			yes = strstr(line, " constant_tsc") &&
			      strstr(line, " nonstop_tsc");
			break;
		}
	if (f)
		fclose(f);
	return yes;
}
#endif

uint64_t cli_ticks(void)
{
#if defined(__x86_64__) || defined(__i386__)
	if (cli_tsc)
		return __builtin_ia32_rdtsc();
#endif
	return cli_mono_ns();
}

#if defined(__x86_64__) || defined(__i386__)
/* The counter and CLOCK_MONOTONIC read together: the tightest of five
 * tries, so that a preemption between the reads cannot skew the pair. */
static void cli_tsc_pair(uint64_t *tsc_p, uint64_t *ns_p)
{
	uint64_t best = UINT64_MAX;

	for (int i = 0; i < 5; i++) {
		uint64_t a = __builtin_ia32_rdtsc(), ns = cli_mono_ns();
		uint64_t b = __builtin_ia32_rdtsc();

		if (b - a < best) {
			best = b - a;
			*tsc_p = a + (b - a) / 2;
			*ns_p = ns;
		}
	}
}
#endif

void cli_ticks_init(void)
{
	if (cli_us_per_tick)
		return;
	cli_us_per_tick = 1e-3;
#if defined(__x86_64__) || defined(__i386__)
	if (cli_tsc_invariant()) {
		struct timespec two_ms = { 0, 2000000 };
		uint64_t t0, n0, t1, n1;

		cli_tsc_pair(&t0, &n0);
		nanosleep(&two_ms, NULL);
		cli_tsc_pair(&t1, &n1);
		if (t1 > t0 && n1 > n0) {
			cli_us_per_tick =
				(double)(n1 - n0) / 1e3 / (double)(t1 - t0);
			cli_tsc = true;
		}
	}
#endif
}

double cli_ticks_us(uint64_t ticks)
{
	return (double)ticks * cli_us_per_tick;
}

double cli_lap_us(uint64_t *mark)
{
	uint64_t now = cli_ticks(), was = *mark;

	*mark = now;
	return cli_ticks_us(now - was);
}
