/* SPDX-License-Identifier: MIT */
/*
 * Description: a context whose shared-memory rings have input on more
 * connections than one pass takes (32) serves them all in turn. Each pass
 * looked at the rings from the first connection on, so with the first 32
 * always ready again the others waited: an rdmx kv server with 64 clients
 * over shm kept half of them waiting 60-300 ms at a time, the same half
 * every time (200 k GETs of 4 KiB, 16 in flight each: max 186-308 ms, then
 * 14-16 ms).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "shm.h"

/* More connections than a pass takes (RDMX_SW_READY_MAX in sw_progress.c).
 */
enum { M = 40, PASSES = 4 };

struct many {
	struct side s, c;
	struct rdmx_listener *lst;
	struct rdmx_conn *sconn[M], *cconn[M];
	struct buf in, out;
	int served[M]; /* SENDs the server took, per connection */
};

static void send_on(struct many *m, int j)
{
	struct rdmx_sge sg = sge_of(&m->out, 0, 8);

	assert_int_equal(rdmx_post_send(m->cconn[j], &sg, (uint64_t)j),
			 RDMX_OK);
}

static int index_of(struct many *m, const struct rdmx_conn *conn)
{
	for (int j = 0; j < M; j++)
		if (m->sconn[j] == conn)
			return j;
	fail_msg("a completion of no connection of ours");
	return -1;
}

/*
 * Poll both sides until nothing happens for a while: with no progress
 * thread, what either sent (credits, ACKs) is taken only here. Returns
 * the SENDs the server took meanwhile.
 */
static int settle(struct many *m)
{
	struct rdmx_completion wc[2 * M];
	int recvs = 0;

	for (int quiet = 0; quiet < 100;) {
		int a = rdmx_poll(m->c.cq, wc, 2 * M);
		int b = rdmx_poll(m->s.cq, wc, 2 * M);

		assert_true(a >= 0 && b >= 0);
		for (int i = 0; i < b; i++)
			recvs += wc[i].opcode == RDMX_OP_RECV;
		quiet = a || b ? 0 : quiet + 1;
	}
	return recvs;
}

static void many_open(struct many *m)
{
	memset(m, 0, sizeof(*m));
	setenv("RDMX_TRANSPORT", "shm", 1);
	/* One thread drives both sides: each server poll is one pass. */
	side_open_with(&m->s, "RDMX_PROGRESS_THREAD", "off");
	side_open_with(&m->c, "RDMX_PROGRESS_THREAD", "off");
	side_listen(&m->s, &m->lst);
	for (int j = 0; j < M; j++)
		side_pair_connect(&m->s, m->lst, &m->c, &m->sconn[j],
				  &m->cconn[j]);
	buf_alloc(&m->s, &m->in, 8 * M * (PASSES + 1), RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&m->c, &m->out, 8, 0);
	for (int j = 0; j < M; j++)
		for (int k = 0; k <= PASSES; k++) {
			size_t off = 8 * ((size_t)j * (PASSES + 1) + k);
			struct rdmx_sge sg = sge_of(&m->in, off, 8);

			assert_int_equal(rdmx_post_recv(m->sconn[j], &sg, 1,
							(uint64_t)j),
					 RDMX_OK);
		}
	assert_int_equal(settle(m), 0); /* the client has its credits */
}

static void many_close(struct many *m)
{
	buf_free(&m->in);
	buf_free(&m->out);
	for (int j = 0; j < M; j++) {
		rdmx_conn_close(m->cconn[j]);
		rdmx_conn_close(m->sconn[j]);
	}
	rdmx_listener_close(m->lst);
	side_close(&m->c);
	side_close(&m->s);
}

/*
 * A SEND on every connection; then, PASSES times, the server polls once
 * (one pass over its rings) and the connections it served send again at
 * once, as busy clients do: ready again before the next pass.
 */
static void test_busy_rings_served_in_turn(void **state)
{
	struct many m;
	struct rdmx_completion wc[2 * M];
	int never = 0, took_last = 0;

	(void)state;
	many_open(&m);
	for (int j = 0; j < M; j++)
		send_on(&m, j);
	for (int p = 0; p < PASSES; p++) {
		int n = rdmx_poll(m.s.cq, wc, 2 * M), took = 0;

		assert_true(n >= 0);
		for (int i = 0; i < n; i++) {
			int j;

			if (wc[i].opcode != RDMX_OP_RECV)
				continue;
			assert_int_equal(wc[i].status, RDMX_OK);
			j = index_of(&m, wc[i].conn);
			m.served[j]++;
			took++;
			if (p + 1 < PASSES)
				send_on(&m, j);
		}
		print_message("pass %d: %d connections served\n", p, took);
		/* A pass takes what it can; each takes some. */
		assert_true(took > 0);
		took_last = took;
	}
	for (int j = 0; j < M; j++)
		never += !m.served[j];
	print_message("%d of %d busy connections never served in %d passes\n",
		      never, M, PASSES);
	/* Before: 8, every pass took the same first 32. */
	assert_int_equal(never, 0);
	/* The rest of the last SENDs. */
	assert_int_equal(settle(&m), M - took_last);
	many_close(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_busy_rings_served_in_turn),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
