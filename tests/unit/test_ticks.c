/* SPDX-License-Identifier: MIT */
/*
 * Description: rdmx bench's interval clock (apps/ticks.c): calibrated, an
 * interval it measures agrees with CLOCK_MONOTONIC's. A counter whose
 * calibration was off (or a conversion of the wrong unit) would report
 * every latency in rdmx bench and compare.sh wrongly, and nothing else
 * would notice. Its laps, one read per sample, leave no gap.
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

static void sleep_ms(long ms)
{
	struct timespec d = { 0, ms * 1000000 };

	nanosleep(&d, NULL);
}

/*
 * rdmx bench's samples are laps: what happens between two operations (a
 * send's RECV, the bookkeeping) is in the next one's figure, as in
 * perftest's and ucx_perftest's. A lap that began at its own operation's
 * start, not at the last lap's end, would leave out the 10 ms "between".
 */
static void test_laps_leave_no_gap(void **state)
{
	uint64_t mark;
	double m0, lap1, lap2;

	(void)state;
	cli_ticks_init();
	m0 = mono_us();
	mark = cli_ticks();
	sleep_ms(5); /* the first operation */
	lap1 = cli_lap_us(&mark);
	sleep_ms(10); /* between the two */
	sleep_ms(5); /* the second operation */
	lap2 = cli_lap_us(&mark);
	assert_true(lap1 >= 5e3 * 0.98);
	assert_true(lap2 >= 15e3 * 0.98);
	assert_true(lap1 + lap2 <= (mono_us() - m0) * 1.02 + 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ticks_match_monotonic),
		cmocka_unit_test(test_laps_leave_no_gap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
