/* SPDX-License-Identifier: MIT */
/*
 * Description: a caller that spins on rdmx_poll tells the progress thread
 * it is there with a clock stamp, one call in 8: a clock read of ~17 ns
 * made every eighth mapped READ of 4 KiB 15-25 ns slower (12% of them,
 * the p99). The stamp now comes one call in up to 1024 while the calls
 * come fast, and stays within a quarter of progress.idle_after; a caller
 * that slows down is stamped one call in 8 again.
 */
#include <time.h>

#include "harness.h"
#include "core.h"
#include "sw.h"

static void test_spinner_stamps_rarely(void **state)
{
	struct rdmx_ctx *ctx;
	struct rdmx_sw_ctx *t;
	void *priv;
	uint64_t before;
	struct timespec nap = { 0, 2 * 1000 * 1000 }; /* 2 ms */

	(void)state;
	assert_int_equal(rdmx_ctx_create(NULL, &ctx), RDMX_OK);
	assert_int_equal(rdmx_ctx_transport(ctx, RDMX_TRANSPORT_SHM, &priv),
			 RDMX_OK);
	t = priv;
	/* Fast calls: the interval grows to its top (a preemption on the
	 * way sends it back to 8: the calls go on). */
	for (int i = 0; i < 20000000 && atomic_load(&t->stamp_every) < 1024;
	     i++)
		rdmx_sw_polled(t);
	print_message("after fast calls: one stamp in %u\n",
		      atomic_load(&t->stamp_every));
	assert_int_equal(atomic_load(&t->stamp_every), 1024);
	/*
	 * The next stamp comes within 1024 calls. (Not checked by the
	 * clock after the calls: a test preempted between the last stamp
	 * and its look, under CI's load or a sanitizer, found the stamp
	 * older than quiet / 4.)
	 */
	before = rdmx_now_us();
	for (int i = 0; i < 1024; i++)
		rdmx_sw_polled(t);
	assert_true(atomic_load(&t->app_poll_us) >= before);
	/* A pause longer than a quarter of idle_after: back to 8. */
	nanosleep(&nap, NULL);
	before = atomic_load(&t->app_poll_us);
	for (int i = 0; i < 1024 && atomic_load(&t->app_poll_us) == before; i++)
		rdmx_sw_polled(t);
	assert_true(atomic_load(&t->app_poll_us) > before);
	assert_int_equal(atomic_load(&t->stamp_every), 8);
	assert_int_equal(rdmx_ctx_destroy(ctx), RDMX_OK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spinner_stamps_rarely),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
