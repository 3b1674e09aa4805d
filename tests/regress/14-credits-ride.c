/* SPDX-License-Identifier: MIT */
/*
 * Description: a receiver that reposts its RECV after each message (rdmx
 * kv's client, after each answer) tells the peer of its new credits with
 * its next frame, not with a frame of its own per RECV. Over tcp, rdmx kv
 * bench's client (32 clients x 16 GETs in flight) sent a 40-byte CREDIT
 * for each answer: 0.9 of its sendmsg calls, ~5 a batch of 16 GETs.
 * The client's progress thread served it then (the caller's stamp came
 * late, tests/regress/16-spinner-stamps-rarely.c): no ACK or grant is
 * held for a frame then. A sender left without credits still gets them
 * at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "harness.h"
#include "shm.h"

enum { DEPTH = 16, RECVS = 2 * DEPTH, ROUNDS = 40 };

static void recv_on(struct rdmx_conn *conn, struct buf *b, int j)
{
	struct rdmx_sge sg = sge_of(b, (size_t)j * 8, 8);

	assert_int_equal(rdmx_post_recv(conn, &sg, 1, (uint64_t)j), RDMX_OK);
}

static uint64_t bare_credits(struct rdmx_conn *conn)
{
	return atomic_load_explicit(&to_sw_conn(conn)->tx_bare_credits,
				    memory_order_relaxed);
}

/* Wait for @n RECVs on @cq (SENDs' completions are counted in *@sends),
 * reposting each on @conn as rdmx kv's client does; with @answer, answer
 * each with a SEND from @out. */
static void take_recvs(struct rdmx_cq *cq, struct rdmx_conn *conn,
		       struct buf *in, struct buf *out, bool answer, int n,
		       int *sends)
{
	while (n > 0) {
		struct rdmx_completion wc = wait_wc(cq);

		assert_int_equal(wc.status, RDMX_OK);
		if (wc.opcode == RDMX_OP_SEND) {
			(*sends)++;
			continue;
		}
		assert_int_equal(wc.opcode, RDMX_OP_RECV);
		recv_on(conn, in, (int)wc.wr_id);
		if (answer) {
			struct rdmx_sge a = sge_of(out, 0, 8);

			assert_int_equal(rdmx_post_send(conn, &a, wc.wr_id),
					 RDMX_OK);
		}
		n--;
	}
}

/*
 * Batches of DEPTH requests, each answered with a SEND, both sides
 * reposting each RECV as it is taken, with RECVS posted: the peer always
 * holds DEPTH credits or more, and no grant need go alone. The progress
 * threads serve (progress.idle_after 0: they never leave it to a caller),
 * so nothing is held for a frame to come: before the fix, each RECV
 * reposted sent a CREDIT of its own.
 */
static void credits_ride(const char *transport)
{
	struct pair p;
	struct buf cin, cout, sin, sout;
	struct rdmx_wr wr[DEPTH];
	struct rdmx_sge sg[DEPTH];
	int csends = 0, ssends = 0, posted;
	uint64_t c0, s0;

	setenv("RDMX_TRANSPORT", transport, 1);
	pair_open_with(&p, "RDMX_PROGRESS_IDLE_AFTER", "0");
	buf_alloc(&p.c, &cin, 8 * RECVS, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.c, &cout, 8 * DEPTH, 0);
	buf_alloc(&p.s, &sin, 8 * RECVS, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.s, &sout, 8, 0);
	for (int j = 0; j < RECVS; j++) {
		recv_on(p.cconn, &cin, j);
		recv_on(p.sconn, &sin, j);
	}
	for (int j = 0; j < DEPTH; j++) {
		sg[j] = sge_of(&cout, (size_t)j * 8, 8);
		wr[j] = (struct rdmx_wr){ .wr_id = (uint64_t)j,
					  .opcode = RDMX_OP_SEND,
					  .sg_list = &sg[j],
					  .num_sge = 1 };
	}
	c0 = bare_credits(p.cconn);
	s0 = bare_credits(p.sconn);
	for (int i = 0; i < ROUNDS; i++) {
		assert_int_equal(rdmx_post_list(p.cconn, wr, DEPTH, &posted),
				 RDMX_OK);
		take_recvs(p.s.cq, p.sconn, &sin, &sout, true, DEPTH, &ssends);
		take_recvs(p.c.cq, p.cconn, &cin, NULL, false, DEPTH, &csends);
	}
	print_message("%s: %llu CREDIT frames alone from the client, %llu "
		      "from the server, in %d batches of %d\n",
		      transport,
		      (unsigned long long)(bare_credits(p.cconn) - c0),
		      (unsigned long long)(bare_credits(p.sconn) - s0), ROUNDS,
		      DEPTH);
	/* Before the fix: ~DEPTH a batch from the client. */
	assert_true(bare_credits(p.cconn) - c0 == 0);
	assert_true(bare_credits(p.sconn) - s0 == 0);
	/* The RECVs still posted use the buffers: connections go first. */
	rdmx_conn_close(p.cconn);
	rdmx_conn_close(p.sconn);
	p.cconn = p.sconn = NULL;
	buf_free(&cin);
	buf_free(&cout);
	buf_free(&sin);
	buf_free(&sout);
	pair_close(&p);
}

/*
 * A sender that spent every credit gets the next at once: one RECV
 * posted after all were spent is told in a frame of its own.
 */
static void credits_when_out(const char *transport)
{
	struct pair p;
	struct buf in, out;
	struct rdmx_sge sg;
	struct rdmx_completion wc;
	uint64_t t0;

	setenv("RDMX_TRANSPORT", transport, 1);
	pair_open(&p);
	buf_alloc(&p.s, &in, 8, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.c, &out, 8, 0);
	sg = sge_of(&out, 0, 8);
	/* The server posts nothing yet: the SEND waits for a credit. */
	assert_int_equal(rdmx_post_send(p.cconn, &sg, 1), RDMX_OK);
	t0 = bare_credits(p.sconn);
	recv_on(p.sconn, &in, 0);
	wc = wait_wc(p.s.cq);
	assert_int_equal(wc.status, RDMX_OK);
	assert_int_equal(wc.opcode, RDMX_OP_RECV);
	/* The server had nothing else to send: the grant went alone. */
	assert_true(bare_credits(p.sconn) - t0 == 1);
	wc = wait_wc(p.c.cq);
	assert_int_equal(wc.status, RDMX_OK);
	assert_int_equal(wc.opcode, RDMX_OP_SEND);
	buf_free(&in);
	buf_free(&out);
	pair_close(&p);
}

static void test_credits_ride_tcp(void **state)
{
	(void)state;
	credits_ride("tcp");
}

static void test_credits_ride_shm(void **state)
{
	(void)state;
	credits_ride("shm");
}

static void test_credits_when_out_tcp(void **state)
{
	(void)state;
	credits_when_out("tcp");
}

static void test_credits_when_out_shm(void **state)
{
	(void)state;
	credits_when_out("shm");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_credits_ride_tcp),
		cmocka_unit_test(test_credits_ride_shm),
		cmocka_unit_test(test_credits_when_out_tcp),
		cmocka_unit_test(test_credits_when_out_shm),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
