/* SPDX-License-Identifier: MIT */
/*
 * Description: rdmx bench's interval clock (apps/ticks.c): calibrated, an
 * interval it measures agrees with CLOCK_MONOTONIC's. A counter whose
 * calibration was off (or a conversion of the wrong unit) would report
 * every latency in rdmx bench and compare.sh wrongly, and nothing else
 * would notice.
 */
#include <time.h>

#include "harness.h"
#include "cli.h"

static double mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/*
 * Each interval read both ways: the clock's lies inside the reference's
 * (read just before and after) and is no shorter than the sleep, within
 * 2%. Both bounds hold however the test is scheduled.
 */
static void test_ticks_match_monotonic(void **state)
{
	(void)state;
	cli_ticks_init();
	for (long ns = 1000000; ns <= 64000000; ns *= 4) {
		struct timespec d = { ns / 1000000000, ns % 1000000000 };
		double m0 = mono_us();
		uint64_t t0 = cli_ticks();

		nanosleep(&d, NULL);
		uint64_t t1 = cli_ticks();
		double m1 = mono_us();
		double got = cli_ticks_us(t1 - t0), ref = m1 - m0;

		assert_true(got >= (double)ns / 1e3 * 0.98);
		assert_true(got <= ref * 1.02 + 2);
	}
	assert_true(cli_ticks_us(0) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ticks_match_monotonic),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
