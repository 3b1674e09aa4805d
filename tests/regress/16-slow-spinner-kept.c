/* SPDX-License-Identifier: MIT */
/*
 * Description: a caller that keeps polling, but whose calls became slow
 * (each takes many answers, after a stretch of fast empty polls that
 * grew its stamp interval to one call in 1024), stamps more than
 * progress.idle_after apart. The progress thread took it for gone at
 * each look: it took over, no ACK or grant could wait for a frame any
 * more, each went alone, and the calls got slower still (rdmx kv bench
 * over tcp, 32 x 16: ~740 thread wake-ups a second, 1 run in 6). The
 * thread now watches the caller's call count before it takes over.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "harness.h"
#include "sw.h"

enum { SLOW_CALLS = 1100, SLOW_NS = 20000, RUN_MS = 450 };

static void spin_ns(long ns)
{
	double end = now_s() + (double)ns / 1e9;

	while (now_s() < end)
		;
}

/*
 * Gaps between the caller's polls longer than progress.idle_after: the
 * caller was descheduled (a loaded machine, a sanitizer's neighbours), and
 * a thread that looked then rightly took it for gone.
 */
static double last_poll;
static unsigned gaps;

/* Poll once; a RECV taken is counted and posted again. */
static void poll_once(struct pair *p, struct buf *in, int *recvs)
{
	struct rdmx_completion wc;
	struct rdmx_sge sg;
	double now = now_s();

	if (last_poll && now - last_poll > 1e-3)
		gaps++;
	last_poll = now;

	if (rdmx_poll(p->c.cq, &wc, 1) != 1)
		return;
	assert_int_equal(wc.status, RDMX_OK);
	assert_int_equal(wc.opcode, RDMX_OP_RECV);
	(*recvs)++;
	sg = sge_of(in, 0, 8);
	assert_int_equal(rdmx_post_recv(p->cconn, &sg, 1, 0), RDMX_OK);
}

static void slow_spinner(const char *transport)
{
	struct pair p;
	struct buf in, out;
	struct rdmx_sge sg;
	struct rdmx_sw_ctx *t;
	double end;
	unsigned t0, taken;
	int recvs = 0, sent = 0, cycles = 0;

	setenv("RDMX_TRANSPORT", transport, 1);
	pair_open(&p);
	t = to_sw_conn(p.cconn)->tctx;
	buf_alloc(&p.c, &in, 8, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.s, &out, 8, 0);
	sg = sge_of(&in, 0, 8);
	assert_int_equal(rdmx_post_recv(p.cconn, &sg, 1, 0), RDMX_OK);
	/* The client spins on traffic until its thread backs off. */
	end = now_s() + T_TIMEOUT_MS / 1e3;
	while (!atomic_load(&t->backing_off)) {
		sg = sge_of(&out, 0, 8);
		if (sent == recvs) {
			assert_int_equal(rdmx_post_send(p.sconn, &sg, 0),
					 RDMX_OK);
			sent++;
		}
		poll_once(&p, &in, &recvs);
		assert_true(now_s() < end);
	}
	t0 = atomic_load(&t->take_overs);
	gaps = 0;
	end = now_s() + RUN_MS / 1e3;
	while (now_s() < end) {
		/* Fast empty polls: the stamp interval grows to 1024. */
		for (int i = 0;
		     i < 4000000 && atomic_load(&t->stamp_every) < 1024; i++)
			poll_once(&p, &in, &recvs);
		/* A message each cycle, the stamp fresh: a thread that took
		 * over wakes for it (before the caller looks: over tcp it
		 * would take the event first), sees the caller and backs off
		 * again, to count the next take-over. */
		sg = sge_of(&out, 0, 8);
		if (sent == recvs) {
			assert_int_equal(rdmx_post_send(p.sconn, &sg, 0),
					 RDMX_OK);
			sent++;
		}
		spin_ns(300 * 1000);
		/* Then slow ones: ~22 ms between stamps. */
		for (int i = 0; i < SLOW_CALLS; i++) {
			poll_once(&p, &in, &recvs);
			spin_ns(SLOW_NS);
		}
		cycles++;
	}
	taken = atomic_load(&t->take_overs) - t0;
	print_message("%s: %d cycles of slow polls, the thread took over %u "
		      "times; the caller was away %u times\n",
		      transport, cycles, taken, gaps);
	/*
	 * Before the fix: about once a look (one every 50 ms, 6-7 here)
	 * while the caller never stopped. A caller descheduled for the
	 * thread's whole watch (2 ms) looks gone, as it is: each time it was
	 * away more than idle_after allows one, and one more for the turn
	 * of a cycle (a gap this clock missed).
	 */
	assert_true(taken <= 1 + gaps);
	/* Everything sent arrived. */
	end = now_s() + T_TIMEOUT_MS / 1e3;
	last_poll = 0;
	while (recvs < sent) {
		poll_once(&p, &in, &recvs);
		assert_true(now_s() < end);
	}
	rdmx_conn_close(p.cconn);
	p.cconn = NULL;
	buf_free(&in);
	buf_free(&out);
	pair_close(&p);
}

static void test_slow_spinner_tcp(void **state)
{
	(void)state;
	slow_spinner("tcp");
}

static void test_slow_spinner_shm(void **state)
{
	(void)state;
	slow_spinner("shm");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slow_spinner_tcp),
		cmocka_unit_test(test_slow_spinner_shm),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
