/* SPDX-License-Identifier: MIT */
/*
 * Description: a thread that spun on one context's cq and then sleeps on
 * another's hands the first back. Spinning, it kept the first context's
 * progress thread backed off and its ACKs held for its next request;
 * asleep elsewhere it polled neither out, and the first context waited
 * for its thread's next look, 50 ms later (or forever, without one). One
 * thread driving both ends of a connection through two contexts, waiting
 * in rdmx_cq_wait on each in turn, took 20 ms a round over shm and tcp;
 * regress.16-shm-stamps-zeroed-ahead, 2,000 such rounds, took 45 s and
 * timed out under ThreadSanitizer.
 */
#include <stdlib.h>

#include "harness.h"

/*
 * Without progress threads, deterministic: the server's ACK of a SEND is
 * held after the one thread spun the server's cq, and only the server's
 * context can send it. The thread then sleeps on the client's cq: the
 * SEND completes only if that sleep hands the server's context back.
 */
static void held_ack_goes(const char *transport)
{
	struct pair p;
	struct buf in, out;
	struct rdmx_sge s;

	setenv("RDMX_TRANSPORT", transport, 1);
	pair_open_with(&p, "RDMX_PROGRESS_THREAD", "off");
	buf_alloc(&p.s, &in, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.c, &out, 8, 0);
	for (int i = 0; i < 20; i++) {
		s = sge_of(&in, 0, 64);
		assert_int_equal(rdmx_post_recv(p.sconn, &s, 1, 1), RDMX_OK);
		s = sge_of(&out, 0, 8);
		assert_int_equal(rdmx_post_send(p.cconn, &s, 2), RDMX_OK);
		spin_wc(p.s.cq, p.c.cq, RDMX_OP_RECV, true);
		/* Sleeps (after progress.wait_spin) on the client's cq. */
		expect_wc(p.c.cq, RDMX_OK, RDMX_OP_SEND);
	}
	buf_free(&in);
	buf_free(&out);
	pair_close(&p);
}

static void test_held_ack_goes_shm(void **state)
{
	(void)state;
	held_ack_goes("shm");
}

static void test_held_ack_goes_tcp(void **state)
{
	(void)state;
	held_ack_goes("tcp");
}

/*
 * With progress threads, as users run: rounds that sleep on each cq in
 * turn. 500 of them took ~10 s, each waiting for the look; now each takes
 * ~0.1 ms (a few under ThreadSanitizer). The bound is half the old time.
 */
static void test_rounds_with_threads(void **state)
{
	struct pair p;
	struct buf in, out;
	struct rdmx_sge s;
	double took;

	(void)state;
	setenv("RDMX_TRANSPORT", "shm", 1);
	pair_open(&p);
	buf_alloc(&p.s, &in, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.c, &out, 8, 0);
	took = now_s();
	for (int i = 0; i < 500; i++) {
		s = sge_of(&in, 0, 64);
		assert_int_equal(rdmx_post_recv(p.sconn, &s, 1, 1), RDMX_OK);
		s = sge_of(&out, 0, 8);
		assert_int_equal(rdmx_post_send(p.cconn, &s, 2), RDMX_OK);
		expect_wc(p.s.cq, RDMX_OK, RDMX_OP_RECV);
		expect_wc(p.c.cq, RDMX_OK, RDMX_OP_SEND);
	}
	took = now_s() - took;
	print_message("500 rounds: %.3f s\n", took);
	assert_true(took < 5);
	buf_free(&in);
	buf_free(&out);
	pair_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_held_ack_goes_shm),
		cmocka_unit_test(test_held_ack_goes_tcp),
		cmocka_unit_test(test_rounds_with_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
