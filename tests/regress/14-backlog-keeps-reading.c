/* SPDX-License-Identifier: MIT */
/*
 * Description: a spinner that drains a backlog of completions keeps taking
 * in its peers' input meanwhile, as a NIC does while the application
 * drains its cq. A poll that found completions queued made no progress
 * call, so a server that took a pass over its clients' input read nothing
 * new until it had answered all of it: a request that came just after a
 * pass waited for a second one. An rdmx kv server's 32 clients keeping 16
 * GETs each in flight over shm: the two whose requests came last in each
 * pass were served every other pass, at twice the others' latency, and set
 * the p99 (2.1x the p50). Here, with no progress threads, one connection
 * fills the server's cq with SENDs and a second one sends one SEND: its
 * sender must see it completed (the server read it and answered) while
 * the server still drains the first one's backlog, one completion a poll.
 */
#include <stdlib.h>

#include "harness.h"

enum { N = 160 };

static void run(const char *transport)
{
	struct side s, c;
	struct rdmx_listener *lst;
	struct rdmx_conn *sa, *sb, *ca, *cb;
	struct buf in, out;
	struct rdmx_completion wc[N];
	struct rdmx_sge sg;
	int a_taken = 0, a_sent = 0, b_recv_at = -1, b_sent_at = -1;
	double end;

	print_message("%s\n", transport);
	setenv("RDMX_TRANSPORT", transport, 1);
	side_open_with(&s, "RDMX_PROGRESS_THREAD", "off");
	side_open_with(&c, "RDMX_PROGRESS_THREAD", "off");
	side_listen(&s, &lst);
	side_pair_connect(&s, lst, &c, &sa, &ca);
	side_pair_connect(&s, lst, &c, &sb, &cb);
	buf_alloc(&s, &in, 8 * (N + 1), RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&c, &out, 8, 0);
	for (int i = 0; i <= N; i++) {
		sg = sge_of(&in, 8 * (size_t)i, 8);
		assert_int_equal(rdmx_post_recv(i < N ? sa : sb, &sg, 1,
						(uint64_t)i),
				 RDMX_OK);
	}
	/* The client's credits arrive. */
	for (int quiet = 0; quiet < 100;) {
		int x = rdmx_poll(c.cq, wc, N), y = rdmx_poll(s.cq, wc, N);

		assert_int_equal(x, 0);
		assert_int_equal(y, 0);
		quiet++;
	}

	/* N SENDs on the first connection, all taken in by one server poll
	 * (its cq was empty: a progress call), which returns the first. */
	sg = sge_of(&out, 0, 8);
	for (int i = 0; i < N; i++)
		assert_int_equal(rdmx_post_send(ca, &sg, (uint64_t)i), RDMX_OK);
	end = now_s() + T_TIMEOUT_MS / 1e3;
	while (!a_taken && now_s() < end) {
		int x = rdmx_poll(c.cq, wc, N), y;

		assert_true(x >= 0);
		a_sent += x;
		y = rdmx_poll(s.cq, wc, 1);
		assert_true(y >= 0);
		if (y) {
			assert_int_equal(wc[0].status, RDMX_OK);
			assert_int_equal(wc[0].opcode, RDMX_OP_RECV);
			assert_ptr_equal(wc[0].conn, sa);
			assert_int_equal(wc[0].wr_id, 0);
			a_taken = 1;
		}
	}
	assert_int_equal(a_taken, 1);

	/* Then one SEND on the second, while the server drains the first's
	 * backlog one completion a poll. */
	assert_int_equal(rdmx_post_send(cb, &sg, 1000), RDMX_OK);
	while ((a_taken < N || b_recv_at < 0) && now_s() < end) {
		int x = rdmx_poll(c.cq, wc, N), y;

		assert_true(x >= 0);
		for (int i = 0; i < x; i++) {
			assert_int_equal(wc[i].status, RDMX_OK);
			assert_int_equal(wc[i].opcode, RDMX_OP_SEND);
			if (wc[i].wr_id == 1000)
				b_sent_at = a_taken;
			else
				a_sent++;
		}
		y = rdmx_poll(s.cq, wc, 1);
		assert_true(y >= 0);
		if (!y)
			continue;
		assert_int_equal(wc[0].status, RDMX_OK);
		assert_int_equal(wc[0].opcode, RDMX_OP_RECV);
		if (wc[0].conn == sb) {
			assert_int_equal(wc[0].wr_id, N);
			b_recv_at = a_taken;
		} else {
			assert_ptr_equal(wc[0].conn, sa);
			assert_int_equal(wc[0].wr_id, (uint64_t)a_taken);
			a_taken++;
		}
	}
	print_message("the second connection's SEND completed at its sender "
		      "after %d of %d RECVs of the first were taken\n",
		      b_sent_at, N);
	assert_int_equal(a_taken, N);
	assert_true(b_recv_at >= 0);
	/*
	 * A progress call within 32 completions taken while 32 or more
	 * stayed queued, and the ACK it held back left at the next one:
	 * 34 (shm) and 48 (tcp) here. Before, 136 on both: only once the
	 * cq was empty again.
	 */
	assert_true(b_sent_at >= 0 && b_sent_at < 96);

	rdmx_conn_close(ca);
	rdmx_conn_close(cb);
	rdmx_conn_close(sa);
	rdmx_conn_close(sb);
	rdmx_listener_close(lst);
	buf_free(&in);
	buf_free(&out);
	side_close(&c);
	side_close(&s);
}

static void test_backlog_keeps_reading(void **state)
{
	(void)state;
	run("shm");
	run("tcp");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backlog_keeps_reading),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
