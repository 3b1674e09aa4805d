/* SPDX-License-Identifier: MIT */
/*
 * Description: a caller whose polls keep finding completions (the
 * progress thread queued them, or the caller's own shm requests made
 * them) must still tell the transports it spins, or the progress thread
 * never backs off and every message costs it a wake-up. rdmx_poll tells
 * them one fruitful poll in 8 (RDMX_CQ_POLLED_EVERY): the call through
 * each transport cost ~3 ns of a mapped 8-byte READ's ~47. Here the
 * transport's stamp must come within 8 such polls, and again after the
 * thread cleared it; it must not come from polls through an fd user's cq.
 */
#include "harness.h"
#include "core.h"
#include "sw.h"

/* @n polls of @cq that each find one completion; the stamp after. */
static uint64_t fruitful_polls(struct rdmx_sw_ctx *t, struct rdmx_cq *cq, int n)
{
	struct rdmx_completion wc = { .wr_id = 7 }, got;

	for (int i = 0; i < n; i++) {
		rdmx_cq_push(cq, &wc);
		assert_int_equal(rdmx_poll(cq, &got, 1), 1);
		assert_int_equal(got.wr_id, 7);
	}
	return atomic_load(&t->app_poll_us);
}

static void test_fruitful_polls_heard(void **state)
{
	struct rdmx_ctx *ctx;
	struct rdmx_cq *cq;
	void *priv;
	struct rdmx_sw_ctx *t;

	(void)state;
	assert_int_equal(rdmx_ctx_create(NULL, &ctx), RDMX_OK);
	assert_int_equal(rdmx_ctx_transport(ctx, RDMX_TRANSPORT_SHM, &priv),
			 RDMX_OK);
	t = priv;
	assert_true(t->thread_running);
	assert_int_equal(rdmx_cq_create(ctx, &cq), RDMX_OK);
	for (int round = 0; round < 3; round++) {
		/* As rdmx_sw_idle leaves it: the thread serves again. */
		atomic_store(&t->app_poll_us, 0);
		assert_true(fruitful_polls(t, cq, 8) != 0);
	}
	assert_int_equal(rdmx_cq_destroy(cq), RDMX_OK);

	/* Polls of a cq whose fd was handed out are an fd user's, woken
	 * by events: they are not a spinner's. */
	assert_int_equal(rdmx_cq_create(ctx, &cq), RDMX_OK);
	assert_true(rdmx_cq_fd(cq) >= 0);
	atomic_store(&t->app_poll_us, 0);
	assert_true(fruitful_polls(t, cq, 64) == 0);
	assert_int_equal(rdmx_cq_destroy(cq), RDMX_OK);
	assert_int_equal(rdmx_ctx_destroy(ctx), RDMX_OK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fruitful_polls_heard),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
