/* SPDX-License-Identifier: MIT */
/*
 * Description: a spinner's poll walks a context's connection slots up to
 * the highest one in use, not the whole table. The table doubles as
 * connections come and never shrinks, and every poll over shm walked all
 * of it: after 600 connection pairs had come and gone in one context
 * (2048 slots), a one-thread SEND/RECV round trip on the pair left took
 * 7.4-9.6 us, where it takes 0.57. The walk's end follows the
 * connections, and the connection in the highest slot is still served at
 * the first poll after its peer's SEND, as is a lower one once the
 * highest closes.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "core.h"
#include "sw.h"

enum { M = 20, PINGS = 8 };

struct many {
	struct rdmx_sw_ctx *t; /* the server's shm context */
	struct side s, c;
	struct buf in, out;
	struct rdmx_listener *lst;
	struct rdmx_conn *sconn[M], *cconn[M];
};

static uint32_t used(struct many *m)
{
	uint32_t n;

	rdmx_spin_lock(&m->t->slots_lock);
	n = m->t->slots_used;
	rdmx_spin_unlock(&m->t->slots_lock);
	return n;
}

/* Poll both sides until nothing happens for a while (no progress
 * threads: credits and ACKs move only here). */
static void settle(struct many *m)
{
	struct rdmx_completion wc[8];

	for (int quiet = 0; quiet < 100;) {
		int a = rdmx_poll(m->c.cq, wc, 8);
		int b = rdmx_poll(m->s.cq, wc, 8);

		assert_true(a >= 0 && b >= 0);
		assert_int_equal(b, 0); /* no RECV completes unasked */
		quiet = a ? 0 : quiet + 1;
	}
}

static void open_one(struct many *m, int j)
{
	side_pair_connect(&m->s, m->lst, &m->c, &m->sconn[j], &m->cconn[j]);
}

static void close_one(struct many *m, int j)
{
	rdmx_conn_close(m->cconn[j]);
	rdmx_conn_close(m->sconn[j]);
	m->cconn[j] = m->sconn[j] = NULL;
}

/*
 * PINGS SENDs on connection @j, each taken by the server's first poll
 * after it is posted (in the ring by then): the walk reached its slot. A
 * walk that missed it would leave it to the spinner's look at epoll,
 * which comes one empty poll in 32 at most.
 */
static void served_at_once(struct many *m, int j)
{
	struct rdmx_sge out = sge_of(&m->out, 0, 8);

	for (int k = 0; k < PINGS; k++) {
		struct rdmx_sge r = sge_of(&m->in, 8 * (size_t)k, 8);

		assert_int_equal(rdmx_post_recv(m->sconn[j], &r, 1, k),
				 RDMX_OK);
	}
	settle(m); /* the client has its credits */
	for (int k = 0; k < PINGS; k++) {
		struct rdmx_completion wc;

		assert_int_equal(rdmx_post_send(m->cconn[j], &out, k), RDMX_OK);
		if (rdmx_poll(m->s.cq, &wc, 1) != 1)
			fail_msg("connection %d: SEND %d not taken by the "
				 "first poll (%u slots walked)",
				 j, k, used(m));
		assert_int_equal(wc.status, RDMX_OK);
		assert_ptr_equal(wc.conn, m->sconn[j]);
		assert_int_equal(wc.wr_id, k);
		settle(m);
	}
}

static void test_slots_walk_ends_at_last_used(void **state)
{
	struct many m;
	void *priv;

	(void)state;
	memset(&m, 0, sizeof(m));
	setenv("RDMX_TRANSPORT", "shm", 1);
	side_open_with(&m.s, "RDMX_PROGRESS_THREAD", "off");
	side_open_with(&m.c, "RDMX_PROGRESS_THREAD", "off");
	assert_int_equal(rdmx_ctx_transport(m.s.ctx, RDMX_TRANSPORT_SHM, &priv),
			 RDMX_OK);
	m.t = priv;
	side_listen(&m.s, &m.lst);
	buf_alloc(&m.s, &m.in, 8 * PINGS, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&m.c, &m.out, 8, 0);
	for (int j = 0; j < M; j++)
		open_one(&m, j);
	assert_int_equal(used(&m), M);
	/* All but the highest close: the walk still reaches it. */
	for (int j = 0; j < M - 1; j++)
		close_one(&m, j);
	assert_int_equal(used(&m), M);
	served_at_once(&m, M - 1);
	/* One comes back into the lowest slot; then the highest closes. */
	open_one(&m, 0);
	assert_int_equal(used(&m), M);
	close_one(&m, M - 1);
	assert_int_equal(used(&m), 1);
	served_at_once(&m, 0);
	close_one(&m, 0);
	assert_int_equal(used(&m), 0);
	buf_free(&m.in);
	buf_free(&m.out);
	rdmx_listener_close(m.lst);
	side_close(&m.c);
	side_close(&m.s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slots_walk_ends_at_last_used),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
