/* SPDX-License-Identifier: MIT */
/*
 * Description: a caller that spins on shm rings asks epoll (a system
 * call) once a millisecond at most. It asked one empty poll in 32: on a
 * VM where a system call costs ~1 us, that put one in most round trips of
 * an 8-byte SEND (p50 0.47 -> 0.95-1.1 us). Each time the spinner asks,
 * it stamps spin_epoll_us: 30 ms of empty polls stamp it at most ~31
 * times, and at least once (conformance peer_death checks that what epoll
 * shows still reaches a spinner).
 */
#include <time.h>

#include "harness.h"
#include "core.h"
#include "sw.h"

static void test_spinner_epolls_rarely(void **state)
{
	struct rdmx_ctx *ctx;
	struct rdmx_sw_ctx *t;
	void *priv;
	uint64_t start, last = 0, polls = 0;
	int looks = 0;

	(void)state;
	assert_int_equal(rdmx_ctx_create(NULL, &ctx), RDMX_OK);
	assert_int_equal(rdmx_ctx_transport(ctx, RDMX_TRANSPORT_SHM, &priv),
			 RDMX_OK);
	t = priv;
	start = rdmx_now_us();
	while (rdmx_now_us() - start < 30 * 1000) {
		uint64_t at;

		assert_int_equal(rdmx_sw_progress(t, true), 0);
		polls++;
		at = atomic_load(&t->spin_epoll_us);
		if (at != last) {
			assert_true(at >= last + 1000 || !last);
			looks++;
			last = at;
		}
	}
	print_message("%llu empty polls, %d looks at epoll\n",
		      (unsigned long long)polls, looks);
	assert_true(polls > 32);
	assert_true(looks >= 1 && looks <= 31);
	assert_int_equal(rdmx_ctx_destroy(ctx), RDMX_OK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spinner_epolls_rarely),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
