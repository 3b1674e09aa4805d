/* SPDX-License-Identifier: MIT */
/* Description: shared receive queues: one pool of RECVs for many connections.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "harness.h"

enum { NMAX = 4, SLOT = 64, NSLOTS = 16 };

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A server whose connections all take their RECVs from one srq. */
struct srv {
	struct side s;
	struct rdmx_srq *srq;
	struct rdmx_listener *lst;
	struct rdmx_conn *conn[NMAX];
	int port, n;
	struct buf rx;
};

/* Client side: one context, a connection per server connection. */
struct cli {
	struct side c;
	struct rdmx_conn *conn[NMAX];
	struct buf tx;
};

/* With @var: its context made with that variable set to @value
 * (side_open_with). */
static bool srv_open_with(struct srv *v, uint32_t max_wr, const char *var,
			  const char *value)
{
	struct rdmx_srq_attr a = { .mask = RDMX_SRQ_ATTR_MAX_WR,
				   .max_wr = max_wr };
	rdmx_status st;

	memset(v, 0, sizeof(*v));
	side_open_with(&v->s, var, value);
	a.cq = v->s.cq;
	st = rdmx_srq_create(v->s.ctx, &a, &v->srq);
	if (st == RDMX_ERR_UNSUPPORTED) {
		side_close(&v->s);
		return false;
	}
	assert_int_equal(st, RDMX_OK);
	v->port = side_listen(&v->s, &v->lst);
	buf_alloc(&v->s, &v->rx, NSLOTS * SLOT, RDMX_ACCESS_LOCAL_WRITE);
	return true;
}

#define SRV_OPEN_WITH(v, max_wr, var, value)                                   \
	do {                                                                   \
		if (!srv_open_with(v, max_wr, var, value))                     \
			suite_skip("%s has no shared receive queues",          \
				   suite_transport());                         \
	} while (0)
#define SRV_OPEN(v, max_wr) SRV_OPEN_WITH(v, max_wr, NULL, NULL)

static void *srv_accept(void *arg)
{
	struct srv *v = arg;
	struct rdmx_conn_attr a = { .mask = RDMX_CONN_ATTR_SRQ,
				    .cq = v->s.cq,
				    .srq = v->srq };

	if (rdmx_accept(v->lst, &a, T_TIMEOUT_MS, &v->conn[v->n]))
		v->conn[v->n] = NULL;
	return NULL;
}

/* Connect client connection @i to the server's next accepted one. */
static void cli_connect(struct cli *k, struct srv *v, int i)
{
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, srv_accept, v), 0);
	k->conn[i] = side_connect(&k->c, v->port);
	pthread_join(t, NULL);
	assert_non_null(v->conn[v->n]);
	v->n++;
}

static void cli_open(struct cli *k, struct srv *v, int n)
{
	memset(k, 0, sizeof(*k));
	side_open(&k->c);
	buf_alloc(&k->c, &k->tx, 4 * NSLOTS * SLOT, 0);
	for (int i = 0; i < n; i++)
		cli_connect(k, v, i);
}

static void cli_close(struct cli *k)
{
	for (int i = 0; i < NMAX; i++)
		rdmx_conn_close(k->conn[i]);
	buf_free(&k->tx);
	side_close(&k->c);
}

static void srv_close(struct srv *v)
{
	for (int i = 0; i < v->n; i++)
		rdmx_conn_close(v->conn[i]);
	rdmx_listener_close(v->lst);
	assert_int_equal(rdmx_srq_destroy(v->srq), RDMX_OK);
	/* RECVs left in the srq flush into the cq: drain them. */
	for (struct rdmx_completion wc; rdmx_poll(v->s.cq, &wc, 1) > 0;)
		assert_int_equal(wc.status, RDMX_ERR_FLUSHED);
	buf_free(&v->rx);
	side_close(&v->s);
}

static void srv_post(struct srv *v, int slot)
{
	struct rdmx_sge r = sge_of(&v->rx, (size_t)slot * SLOT, SLOT);

	assert_int_equal(rdmx_srq_post_recv(v->srq, &r, 1, 100 + slot),
			 RDMX_OK);
}

/* Send "<conn> <seq>" on client connection @i from tx slot @slot. */
static void cli_send(struct cli *k, int i, int seq, int slot)
{
	struct rdmx_sge s = sge_of(&k->tx, (size_t)slot * SLOT, SLOT);

	snprintf(s.addr, SLOT, "%d %d", i, seq);
	assert_int_equal(rdmx_post_send(k->conn[i], &s, (uint64_t)seq),
			 RDMX_OK);
}

/* The client's SEND completes; the server's RECV came on connection @i. */
static struct rdmx_completion sent_to(struct cli *k, struct srv *v, int i)
{
	struct rdmx_completion wc;

	expect_wc(k->c.cq, RDMX_OK, RDMX_OP_SEND);
	wc = expect_wc(v->s.cq, RDMX_OK, RDMX_OP_RECV);
	assert_ptr_equal(wc.conn, v->conn[i]);
	return wc;
}

/* The server connection a completion came from, by index. */
static int srv_index(const struct srv *v, const struct rdmx_completion *wc)
{
	for (int i = 0; i < v->n; i++)
		if (wc->conn == v->conn[i])
			return i;
	fail_msg("completion from no connection of the srq");
	return -1;
}

static void test_srq_send_two_conns(void **state)
{
	struct srv v;
	struct cli k;
	struct rdmx_sge r;

	(void)state;
	SRV_OPEN(&v, 8);
	for (int i = 0; i < 4; i++)
		srv_post(&v, i);
	cli_open(&k, &v, 2);
	/* The connection's own queue is not there to post to. */
	r = sge_of(&v.rx, 0, 8);
	assert_int_equal(rdmx_post_recv(v.conn[0], &r, 1, 1), RDMX_ERR_INVALID);
	for (int n = 0; n < 4; n++) {
		struct rdmx_completion wc;
		char want[SLOT];

		cli_send(&k, n % 2, n, n);
		expect_wc(k.c.cq, RDMX_OK, RDMX_OP_SEND);
		/* Taken in posting order, whichever connection sent. */
		wc = expect_wc(v.s.cq, RDMX_OK, RDMX_OP_RECV);
		assert_int_equal(wc.wr_id, 100 + n);
		assert_int_equal(wc.byte_len, SLOT);
		assert_int_equal(srv_index(&v, &wc), n % 2);
		snprintf(want, sizeof(want), "%d %d", n % 2, n);
		assert_string_equal((char *)v.rx.p + n * SLOT, want);
	}
	cli_close(&k);
	srv_close(&v);
}

/* No RECV in the srq: the SEND waits, and goes once one is posted. */
static void test_srq_send_waits_for_recv(void **state)
{
	struct srv v;
	struct cli k;
	struct rdmx_completion wc;

	(void)state;
	SRV_OPEN(&v, 8);
	cli_open(&k, &v, 1);
	cli_send(&k, 0, 7, 0);
	assert_int_equal(rdmx_cq_wait(k.c.cq, 200), RDMX_ERR_TIMEOUT);
	assert_int_equal(rdmx_poll(v.s.cq, &wc, 1), 0);
	srv_post(&v, 3);
	wc = sent_to(&k, &v, 0);
	assert_int_equal(wc.wr_id, 103);
	assert_string_equal((char *)v.rx.p + 3 * SLOT, "0 7");
	cli_close(&k);
	srv_close(&v);
}

/*
 * One RECV, promised to the idle connection that came first: a SEND on the
 * other must still get it (the idle one's credit is taken back), and the
 * idle one's later SEND waits for the next RECV.
 */
static void test_srq_idle_credit_revoked(void **state)
{
	struct srv v;
	struct cli k;

	(void)state;
	SRV_OPEN(&v, 8);
	srv_post(&v, 0);
	cli_open(&k, &v, 2);
	cli_send(&k, 1, 1, 1);
	sent_to(&k, &v, 1);
	cli_send(&k, 0, 2, 2);
	assert_int_equal(rdmx_cq_wait(k.c.cq, 100), RDMX_ERR_TIMEOUT);
	srv_post(&v, 1);
	sent_to(&k, &v, 0);
	assert_string_equal((char *)v.rx.p + SLOT, "0 2");
	cli_close(&k);
	srv_close(&v);
}

/* A connection that closes gives its credits back to the pool. */
static void test_srq_closed_conn_returns_credit(void **state)
{
	struct srv v;
	struct cli k;

	(void)state;
	SRV_OPEN(&v, 8);
	srv_post(&v, 0);
	cli_open(&k, &v, 1); /* holds the one credit */
	cli_connect(&k, &v, 1);
	rdmx_conn_close(v.conn[0]);
	v.conn[0] = NULL;
	cli_send(&k, 1, 5, 0);
	sent_to(&k, &v, 1);
	cli_close(&k);
	srv_close(&v);
}

/*
 * SENDs the client saw complete were placed: their RECVs complete, also
 * when the server closes the connection before anything polled them.
 * Over verbs they wait in the NIC's cq until a poll, and close collected
 * them only while requests of its own were outstanding: with no progress
 * thread and nothing posted, they went with the QP, and the srq's RECVs
 * with them (rdmx kv's server lost its request buffers so). The
 * completions name the closed connection, whose address stays theirs
 * until they are polled (test_conns: closed_named_until_polled).
 */
static void test_srq_recvs_done_before_close_complete(void **state)
{
	enum { N = 4 };
	bool verbs = !strcmp(suite_transport(), "verbs");
	struct rdmx_completion wc;
	struct rdmx_conn *gone;
	struct srv v;
	struct cli k;
	int got = 0;

	(void)state;
	/* The software transports place (and complete) before they ACK: a
	 * thread of theirs must run for the client's SENDs to complete. */
	SRV_OPEN_WITH(&v, 8, verbs ? "RDMX_PROGRESS_THREAD" : NULL, "off");
	for (int i = 0; i < N; i++)
		srv_post(&v, i);
	cli_open(&k, &v, 1);
	for (int i = 0; i < N; i++)
		cli_send(&k, 0, i, i);
	for (int i = 0; i < N; i++)
		expect_wc(k.c.cq, RDMX_OK, RDMX_OP_SEND);
	gone = v.conn[0];
	rdmx_conn_close(gone);
	v.conn[0] = NULL;
	while (rdmx_poll(v.s.cq, &wc, 1) > 0) {
		assert_ptr_equal(wc.conn, gone);
		assert_int_equal(wc.status, RDMX_OK);
		assert_int_equal(wc.opcode, RDMX_OP_RECV);
		assert_int_equal(wc.wr_id, 100 + got++);
	}
	assert_int_equal(got, N);
	cli_close(&k);
	srv_close(&v);
}

/* Its end completes nothing in the srq: rdmx_conn_check says so. */
static void test_srq_conn_check_sees_end(void **state)
{
	struct srv v;
	struct cli k;
	uint64_t deadline;
	rdmx_status st;

	(void)state;
	SRV_OPEN(&v, 8);
	srv_post(&v, 0);
	cli_open(&k, &v, 1);
	assert_int_equal(rdmx_conn_check(v.conn[0]), RDMX_OK);
	assert_int_equal(rdmx_conn_check(NULL), RDMX_ERR_INVALID);
	rdmx_conn_close(k.conn[0]);
	k.conn[0] = NULL;
	deadline = now_ms() + (uint64_t)T_TIMEOUT_MS;
	while (!(st = rdmx_conn_check(v.conn[0])) && now_ms() < deadline) {
		struct rdmx_completion wc;

		assert_int_equal(rdmx_poll(v.s.cq, &wc, 1), 0);
	}
	assert_int_equal(st, RDMX_ERR_CONN_LOST);
	cli_close(&k);
	srv_close(&v);
}

/*
 * Three connections stream 300 SENDs each through a srq of 16 RECVs that
 * the server re-posts as they complete: every message arrives, in order
 * per connection, and no connection starves.
 */
static void test_srq_stream_many(void **state)
{
	enum { NC = 3, PER = 300, WINDOW = 8 };
	struct srv v;
	struct cli k;
	int sent[NC] = { 0 }, done[NC] = { 0 }, next[NC] = { 0 };
	int got = 0;
	uint64_t deadline = now_ms() + 3 * (uint64_t)T_TIMEOUT_MS;

	(void)state;
	SRV_OPEN(&v, NSLOTS);
	for (int i = 0; i < NSLOTS; i++)
		srv_post(&v, i);
	cli_open(&k, &v, NC);
	while (got < NC * PER) {
		struct rdmx_completion wc;
		int i, seq;

		if (now_ms() > deadline)
			fail_msg("stuck: %d of %d arrived (sent %d %d %d, done "
				 "%d %d %d)",
				 got, NC * PER, sent[0], sent[1], sent[2],
				 done[0], done[1], done[2]);

		for (i = 0; i < NC; i++)
			while (sent[i] < PER && sent[i] - done[i] < WINDOW) {
				cli_send(&k, i, sent[i],
					 i * WINDOW + sent[i] % WINDOW);
				sent[i]++;
			}
		while (rdmx_poll(k.c.cq, &wc, 1) > 0) {
			assert_int_equal(wc.status, RDMX_OK);
			for (i = 0; wc.conn != k.conn[i]; i++)
				;
			done[i]++;
		}
		if (rdmx_poll(v.s.cq, &wc, 1) <= 0)
			continue;
		assert_int_equal(wc.status, RDMX_OK);
		i = (int)(wc.wr_id - 100);
		assert_int_equal(
			sscanf((char *)v.rx.p + i * SLOT, "%*d %d", &seq), 1);
		/* Per connection, in order. */
		assert_int_equal(seq, next[srv_index(&v, &wc)]++);
		srv_post(&v, i);
		got++;
	}
	for (int i = 0; i < NC; i++)
		assert_int_equal(next[i], PER);
	while (done[0] + done[1] + done[2] < NC * PER) {
		struct rdmx_completion wc = wait_wc(k.c.cq);

		assert_int_equal(wc.status, RDMX_OK);
		done[0]++;
	}
	cli_close(&k);
	srv_close(&v);
}

static void test_srq_write_imm(void **state)
{
	struct srv v;
	struct cli k;
	struct rdmx_completion wc;
	struct buf target;
	struct rdmx_remote rem;
	struct rdmx_sge s;

	(void)state;
	SRV_OPEN(&v, 8);
	buf_alloc(&v.s, &target, 64,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE);
	rdmx_mr_remote(target.mr, &rem);
	srv_post(&v, 0);
	cli_open(&k, &v, 2);
	s = sge_of(&k.tx, 0, 16);
	memcpy(s.addr, "written directly", 16);
	assert_int_equal(rdmx_post_write_imm(k.conn[1], &s, rem.addr, rem.rkey,
					     0xfeed, 9),
			 RDMX_OK);
	expect_wc(k.c.cq, RDMX_OK, RDMX_OP_WRITE_IMM);
	wc = expect_wc(v.s.cq, RDMX_OK, RDMX_OP_RECV_IMM);
	assert_int_equal(wc.wr_id, 100);
	assert_int_equal(wc.imm, 0xfeed);
	assert_int_equal(wc.byte_len, 16);
	assert_ptr_equal(wc.conn, v.conn[1]);
	assert_memory_equal(target.p, "written directly", 16);
	cli_close(&k);
	buf_free(&target);
	srv_close(&v);
}

/* Destroy refuses while a connection uses it, then flushes what is left. */
static void test_srq_destroy_flushes(void **state)
{
	struct srv v;
	struct cli k;

	(void)state;
	SRV_OPEN(&v, 8);
	for (int i = 0; i < 3; i++)
		srv_post(&v, i);
	cli_open(&k, &v, 1);
	assert_int_equal(rdmx_srq_destroy(v.srq), RDMX_ERR_BUSY);
	assert_int_equal(rdmx_cq_destroy(v.s.cq), RDMX_ERR_BUSY);
	rdmx_conn_close(v.conn[0]);
	v.n = 0;
	assert_int_equal(rdmx_srq_destroy(v.srq), RDMX_OK);
	for (int i = 0; i < 3; i++) {
		struct rdmx_completion wc =
			expect_wc(v.s.cq, RDMX_ERR_FLUSHED, RDMX_OP_RECV);

		assert_int_equal(wc.wr_id, 100 + i);
		assert_null(wc.conn);
	}
	assert_int_equal(
		rdmx_srq_create(v.s.ctx,
				&(struct rdmx_srq_attr){ .cq = v.s.cq },
				&v.srq),
		RDMX_OK);
	cli_close(&k);
	srv_close(&v);
}

static void test_srq_bad_input(void **state)
{
	struct srv v;
	struct rdmx_srq *srq;
	struct rdmx_srq_attr a = { 0 };
	struct buf ro;
	struct rdmx_sge r;

	(void)state;
	SRV_OPEN(&v, 2);
	assert_int_equal(rdmx_srq_create(v.s.ctx, &a, &srq), RDMX_ERR_INVALID);
	a.cq = v.s.cq;
	a.mask = RDMX_SRQ_ATTR_MAX_WR;
	a.max_wr = 0;
	assert_int_equal(rdmx_srq_create(v.s.ctx, &a, &srq), RDMX_ERR_INVALID);
	assert_int_equal(rdmx_srq_post_recv(NULL, NULL, 0, 0),
			 RDMX_ERR_INVALID);
	/* RECV memory needs LOCAL_WRITE. */
	buf_alloc(&v.s, &ro, 64, 0);
	r = sge_of(&ro, 0, 64);
	assert_int_equal(rdmx_srq_post_recv(v.srq, &r, 1, 1), RDMX_ERR_INVALID);
	/* max_wr 2: the third waits for room. */
	srv_post(&v, 0);
	srv_post(&v, 1);
	r = sge_of(&v.rx, 2 * SLOT, SLOT);
	assert_int_equal(rdmx_srq_post_recv(v.srq, &r, 1, 102), RDMX_ERR_AGAIN);
	/* The context is busy while the srq lives. */
	assert_int_equal(rdmx_ctx_destroy(v.s.ctx), RDMX_ERR_BUSY);
	buf_free(&ro);
	srv_close(&v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_srq_send_two_conns),
		cmocka_unit_test(test_srq_send_waits_for_recv),
		cmocka_unit_test(test_srq_idle_credit_revoked),
		cmocka_unit_test(test_srq_closed_conn_returns_credit),
		cmocka_unit_test(test_srq_recvs_done_before_close_complete),
		cmocka_unit_test(test_srq_conn_check_sees_end),
		cmocka_unit_test(test_srq_stream_many),
		cmocka_unit_test(test_srq_write_imm),
		cmocka_unit_test(test_srq_destroy_flushes),
		cmocka_unit_test(test_srq_bad_input),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
