/* SPDX-License-Identifier: MIT */
/*
 * Description: a small SEND with nothing of its connection queued before
 * it but ACKs goes to the pipe before its op is filled and queued
 * (rdmx_sw_send_now): over shm the peer sees it ~40 ns sooner. That path
 * must keep every rule of the regular one: a SEND it sends in part
 * leaves the rest queued, one that finds no room at all is posted the
 * regular way, one posted behind queued frames waits its turn, and the
 * credits it carries and the ACKs it takes along are not lost. Over a
 * 4 KiB ring whose reader does not read (no progress threads), SENDs of
 * many sizes fill it, one of them in part; then both sides poll, and
 * every RECV must hold its SEND whole, in posting order, as over tcp.
 * And the ACKs of a ping-pong, queued between its SENDs, ride with them.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "shm.h"

#define N 64
#define MAX 1024

static const size_t sizes[] = { 1000, 1000, 1000, 1000, 1,   1024, 24,
				700,  8,    1023, 512,	100, 333 };

static size_t size_of(int i)
{
	return sizes[i % (sizeof(sizes) / sizeof(sizes[0]))];
}

/* Poll both sides until @nrecv RECVs and @nsend SENDs completed, in order. */
static void drain(struct pair *p, struct buf *in, struct buf *out, int nrecv,
		  int nsend)
{
	struct rdmx_completion wc;
	int recvs = 0, sends = 0;
	double end = now_s() + T_TIMEOUT_MS / 1e3;

	while ((recvs < nrecv || sends < nsend) && now_s() < end) {
		if (rdmx_poll(p->s.cq, &wc, 1) == 1) {
			assert_int_equal(wc.status, RDMX_OK);
			assert_int_equal(wc.opcode, RDMX_OP_RECV);
			assert_int_equal(wc.wr_id, (uint64_t)recvs);
			assert_int_equal(wc.byte_len, size_of(recvs));
			assert_memory_equal(in->p + (size_t)recvs * MAX,
					    out->p + (size_t)recvs * MAX,
					    size_of(recvs));
			recvs++;
		}
		if (rdmx_poll(p->c.cq, &wc, 1) == 1) {
			assert_int_equal(wc.status, RDMX_OK);
			assert_int_equal(wc.opcode, RDMX_OP_SEND);
			assert_int_equal(wc.wr_id, (uint64_t)sends);
			sends++;
		}
	}
	assert_int_equal(recvs, nrecv);
	assert_int_equal(sends, nsend);
}

static void run(const char *transport)
{
	struct pair p;
	struct buf in, out;
	struct rdmx_sge s;
	struct rdmx_completion wc;
	struct rdmx_sw_conn *c, *srv;
	int helds = 0;

	print_message("%s\n", transport);
	setenv("RDMX_TRANSPORT", transport, 1);
	setenv("RDMX_PROGRESS_THREAD", "off", 1);
	pair_open_with(&p, "RDMX_SHM_RING_SIZE", "4096");
	c = to_sw_conn(p.cconn);
	buf_alloc(&p.s, &in, (size_t)N * MAX, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.c, &out, (size_t)N * MAX, RDMX_ACCESS_LOCAL_WRITE);
	for (size_t i = 0; i < (size_t)N * MAX; i++)
		out.p[i] = (uint8_t)(i * 7 + i / MAX);
	for (int i = 0; i < N; i++) {
		s = sge_of(&in, (size_t)i * MAX, MAX);
		assert_int_equal(rdmx_post_recv(p.sconn, &s, 1, (uint64_t)i),
				 RDMX_OK);
	}
	/* The client hears the credits (some ride with the server's next
	 * frames: the SENDs past them wait for those). */
	for (int i = 0; i < 100; i++)
		assert_int_equal(rdmx_poll(p.c.cq, &wc, 1), 0);
	assert_true(c->peer_credits >= 16);

	/* RECVs of the client: the first are told at once, the rest ride
	 * with its next frame, the first SEND below. All take the server's
	 * replies of the ping-pong further down at one place. */
	for (int i = 0; i < 20; i++) {
		s = sge_of(&out, MAX, MAX);
		assert_int_equal(rdmx_post_recv(p.cconn, &s, 1, 0), RDMX_OK);
	}
	assert_true(c->grant > 0);
	/* Nobody reads the server's ring: four SENDs of 1000 bytes do not
	 * fit 4 KiB, and over shm the fourth leaves in part. */
	for (int i = 0; i < 4; i++) {
		s = sge_of(&out, (size_t)i * MAX, size_of(i));
		assert_int_equal(rdmx_post_send(p.cconn, &s, (uint64_t)i),
				 RDMX_OK);
	}
	if (!strcmp(transport, "shm")) {
		rdmx_spin_lock(&c->lock);
		bool part = c->tx_head && c->tx_off && !c->sq.head;
		rdmx_spin_unlock(&c->lock);
		assert_true(part);
	}
	/* The rest wait behind it, or find no room at all. */
	for (int i = 4; i < N; i++) {
		s = sge_of(&out, (size_t)i * MAX, size_of(i));
		assert_int_equal(rdmx_post_send(p.cconn, &s, (uint64_t)i),
				 RDMX_OK);
	}
	drain(&p, &in, &out, N, N);

	/*
	 * A ping-pong as rdmx bench runs it: each SEND of the client goes in
	 * one write with the ACK of the server's last reply, which waited
	 * for it; that reply's completion follows.
	 */
	s = sge_of(&in, 0, MAX);
	assert_int_equal(rdmx_post_recv(p.sconn, &s, 1, 0), RDMX_OK);
	for (int i = 0; i < 100 && !c->peer_credits; i++) {
		rdmx_poll(p.s.cq, &wc, 1); /* a credit it held goes */
		assert_int_equal(rdmx_poll(p.c.cq, &wc, 1), 0);
	}
	for (int i = 0; i < 200; i++) {
		uint64_t sends = c->tx_sends;

		bool held = c->acks_held;

		s = sge_of(&out, 0, 8);
		assert_int_equal(rdmx_post_send(p.cconn, &s, 0), RDMX_OK);
		assert_int_equal(c->tx_sends, sends + 1);
		/* ACKs held for it taught the connection that they ride. */
		if (held)
			assert_true(c->acks_ride);
		helds += held;
		if (i) /* the ACK came first in the write */
			spin_wc(p.s.cq, p.c.cq, RDMX_OP_SEND, false);
		spin_wc(p.s.cq, p.c.cq, RDMX_OP_RECV, false);
		s = sge_of(&in, 0, MAX);
		assert_int_equal(rdmx_post_recv(p.sconn, &s, 1, 0), RDMX_OK);
		s = sge_of(&out, MAX, MAX);
		assert_int_equal(rdmx_post_recv(p.cconn, &s, 1, 0), RDMX_OK);
		s = sge_of(&in, 8, 8);
		assert_int_equal(rdmx_post_send(p.sconn, &s, 0), RDMX_OK);
		spin_wc(p.c.cq, p.s.cq, RDMX_OP_SEND, false);
		spin_wc(p.c.cq, p.s.cq, RDMX_OP_RECV, false);
		assert_memory_equal(out.p + MAX, in.p + 8, 8);
	}
	assert_true(helds > 100);
	/* The last reply's ACK, held for a SEND that does not come, goes. */
	spin_wc(p.s.cq, p.c.cq, RDMX_OP_SEND, false);
	/* Quiet now: each side holds as many credits as the other has
	 * RECVs posted and told, none granted twice. */
	for (int i = 0; i < 300; i++) {
		assert_int_equal(rdmx_poll(p.s.cq, &wc, 1), 0);
		assert_int_equal(rdmx_poll(p.c.cq, &wc, 1), 0);
	}
	srv = to_sw_conn(p.sconn);
	assert_int_equal(srv->peer_credits + c->grant, c->rq_count);
	assert_int_equal(c->peer_credits + srv->grant, srv->rq_count);
	buf_free(&in);
	buf_free(&out);
	pair_close(&p);
	unsetenv("RDMX_PROGRESS_THREAD");
}

static void test_send_now_order(void **state)
{
	(void)state;
	run("shm");
	run("tcp");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_send_now_order),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
