/* SPDX-License-Identifier: MIT */
/* Description: who serves one-sided operations: a spinning caller, then the
 * progress thread again. */
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "harness.h"

/* Spin on the target's cq for @ms: its caller drives progress. */
static void spin_target(struct pair *p, int ms)
{
	struct rdmx_completion wc;
	double end = now_s() + ms / 1e3;

	while (now_s() < end)
		assert_true(rdmx_poll(p->s.cq, &wc, 1) >= 0);
}

/* WRITE into the target, which makes no call; check it lands promptly. */
static void write_served(struct pair *p, struct buf *src, struct buf *dst,
			 const struct rdmx_remote *rem, uint8_t seed)
{
	struct rdmx_sge s = sge_of(src, 0, src->len);
	double t0;

	buf_fill(src, seed);
	t0 = now_s();
	assert_int_equal(rdmx_post_write(p->cconn, &s, rem->addr, rem->rkey,
					 seed),
			 RDMX_OK);
	expect_wc(p->c.cq, RDMX_OK, RDMX_OP_WRITE);
	/* progress.idle_after is 1 ms; allow a loaded machine plenty. */
	assert_true(now_s() - t0 < T_FLUSH_S);
	assert_pattern(dst->p, dst->len, seed, 0);
}

static void test_progress_resumes_after_spinning_stops(void **state)
{
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, 4096, 0);
	buf_alloc(&p.s, &dst, 4096,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE);
	rem = share_remote(&p, &dst);
	for (uint8_t round = 1; round <= 5; round++) {
		/* The target spins, so its thread steps aside ... */
		spin_target(&p, 20);
		/* ... then stops, with no wait and no goodbye. */
		write_served(&p, &src, &dst, &rem, round);
	}
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

/* CPU seconds this process used while rdmx_cq_wait timed out @ms. */
static double cpu_while_waiting(struct rdmx_cq *cq, int ms)
{
	struct rusage a, b;

	getrusage(RUSAGE_SELF, &a);
	assert_int_equal(rdmx_cq_wait(cq, ms), RDMX_ERR_TIMEOUT);
	getrusage(RUSAGE_SELF, &b);
	return (double)(b.ru_utime.tv_sec - a.ru_utime.tv_sec) +
	       (double)(b.ru_stime.tv_sec - a.ru_stime.tv_sec) +
	       (double)(b.ru_utime.tv_usec - a.ru_utime.tv_usec) / 1e6 +
	       (double)(b.ru_stime.tv_usec - a.ru_stime.tv_usec) / 1e6;
}

/* progress.use_event_channel: off polls (a core busy), on sleeps. */
static void test_progress_polling_or_events(void **state)
{
	struct side poll_side, event_side;
	double polled, slept;

	(void)state;
	side_open_with(&poll_side, "RDMX_PROGRESS_USE_EVENT_CHANNEL", "off");
	side_open(&event_side);
	polled = cpu_while_waiting(poll_side.cq, 300);
	slept = cpu_while_waiting(event_side.cq, 300);
	print_message("cpu over a 300 ms wait: polling %.3f s, events %.3f s\n",
		      polled, slept);
	assert_true(polled > 0.09); /* at least 30% of a core, if shared */
	assert_true(slept < 0.03);
	side_close(&poll_side);
	side_close(&event_side);
}

static void test_progress_fd_users_are_served(void **state)
{
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, 4096, 0);
	buf_alloc(&p.s, &dst, 4096,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE);
	rem = share_remote(&p, &dst);
	/* An event-driven target: it drains by rdmx_poll, waits on the fd. */
	assert_true(rdmx_cq_fd(p.s.cq) >= 0);
	spin_target(&p, 20);
	write_served(&p, &src, &dst, &rem, 9);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_progress_resumes_after_spinning_stops),
		cmocka_unit_test(test_progress_fd_users_are_served),
		cmocka_unit_test(test_progress_polling_or_events),
	};

	return cmocka_run_group_tests_name(suite_transport(), tests, NULL,
					   NULL);
}
