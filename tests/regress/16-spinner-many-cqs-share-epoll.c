/* SPDX-License-Identifier: MIT */
/*
 * Description: one thread spinning over many cqs of one tcp context asks
 * epoll (a system call, ~1 us on these VMs) once for them all, not once
 * per empty cq: rdmx kv bench with 32 clients (a cq each) made 5.8
 * epoll_wait calls per GET at the client, nearly all finding nothing. A
 * spinner's empty look stands for the context for a few microseconds:
 * polls of other cqs within that time skip it. One cq polled alone still
 * looks every time. epoll_wait is counted here by interposing it.
 * The clock (~20 ns) is read one shared poll in 8, not at each, and not
 * after a look that shares nothing: counted the same way.
 */
#include <dlfcn.h>
#include <sys/epoll.h>

#include "count_clock.h"
#include "harness.h"
#include "core.h"
#include "sw.h"

/* epoll_wait calls of this thread that do not wait (the context's
 * progress thread makes its own). */
static _Thread_local unsigned looks;
static int (*real_epoll_wait)(int, struct epoll_event *, int, int);

__attribute__((constructor)) static void find_epoll_wait(void)
{
	real_epoll_wait = (int (*)(int, struct epoll_event *, int,
				   int))dlsym(RTLD_NEXT, "epoll_wait");
}

int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout)
{
	if (!timeout)
		looks++;
	return real_epoll_wait(epfd, ev, max, timeout);
}

/* @calls progress calls of a spinner, for cqs[i % ncqs] in turn: looks,
 * and clock readings in *clocks_p. */
static unsigned spin(struct rdmx_sw_ctx *t, const struct rdmx_cq **cqs,
		     int ncqs, int calls, unsigned *clocks_p)
{
	unsigned before = looks;
	unsigned long read = clock_reads;

	for (int i = 0; i < calls; i++) {
		rdmx_progress_cq = cqs[i % ncqs];
		assert_int_equal(rdmx_sw_progress(t, true), 0);
	}
	rdmx_progress_cq = NULL;
	*clocks_p = (unsigned)(clock_reads - read);
	return looks - before;
}

static void test_spinner_many_cqs_share_epoll(void **state)
{
	static int dummy[8];
	const struct rdmx_cq *cqs[8];
	struct rdmx_ctx *ctx;
	void *priv;
	unsigned one, many, one_clocks, many_clocks;

	(void)state;
	for (int i = 0; i < 8; i++)
		cqs[i] = (const struct rdmx_cq *)&dummy[i];
	assert_int_equal(rdmx_ctx_create(NULL, &ctx), RDMX_OK);
	assert_int_equal(rdmx_ctx_transport(ctx, RDMX_TRANSPORT_TCP, &priv),
			 RDMX_OK);
	one = spin(priv, cqs, 1, 4000, &one_clocks);
	many = spin(priv, cqs, 8, 8000, &many_clocks);
	print_message("one cq: %u looks and %u clocks in 4000 polls; eight: "
		      "%u and %u in 8000\n",
		      one, one_clocks, many, many_clocks);
	/* Alone, every poll looks; eight in turn share a look (one in 8
	 * when a turn takes under RDMX_SW_EPOLL_SHARE_US; slow builds more). */
	assert_int_equal(one, 4000);
	assert_true(many >= 1 && many < 8000 / 2);
	/* A clock after each look, or at each shared poll: 4000, ~7000. */
	assert_true(one_clocks < 4000 / 4);
	assert_true(many_clocks < 8000 / 4);
	assert_int_equal(rdmx_ctx_destroy(ctx), RDMX_OK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spinner_many_cqs_share_epoll),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
