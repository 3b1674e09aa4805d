/* SPDX-License-Identifier: MIT */
/*
 * Description: rdmx_mr_dereg of a region that posted requests still use
 * ends their connection and waits for the flush, so no byte of the region
 * leaves (or lands) after it returns; a RECV on a deregistered region (of
 * a connection or a srq) ends the connection of the SEND that takes it,
 * its bytes never placed; a region nothing uses is deregistered without
 * touching any connection. It used to return at once with the requests
 * still queued: a SEND waiting for the peer's RECV went out later, from
 * memory the application had freed, and a RECV's buffer was written.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static const char *const transports[] = { "tcp", "shm" };

static void test_dereg_ends_the_connection_of_a_waiting_send(void **state)
{
	(void)state;
	for (unsigned t = 0; t < 2; t++) {
		struct pair p;
		struct buf b;
		struct rdmx_sge sg;

		pair_open_with(&p, "RDMX_TRANSPORT", transports[t]);
		buf_alloc(&p.c, &b, 4096, RDMX_ACCESS_LOCAL_WRITE);
		buf_fill(&b, 3);
		sg = sge_of(&b, 0, b.len);
		/* The server posts no RECV: the SEND waits for a credit. */
		assert_int_equal(rdmx_post_send(p.cconn, &sg, 11), RDMX_OK);
		assert_int_equal(rdmx_mr_dereg(b.mr), RDMX_OK);
		expect_wc(p.c.cq, RDMX_ERR_FLUSHED, RDMX_OP_SEND);
		assert_int_not_equal(rdmx_conn_check(p.cconn), RDMX_OK);
		free(b.p);
		pair_close(&p);
	}
}

static void test_dereg_of_an_unused_region_leaves_connections(void **state)
{
	(void)state;
	for (unsigned t = 0; t < 2; t++) {
		struct pair p;
		struct buf used, unused, rbuf;
		struct rdmx_sge sg;
		struct rdmx_completion wc;

		pair_open_with(&p, "RDMX_TRANSPORT", transports[t]);
		buf_alloc(&p.c, &used, 4096, RDMX_ACCESS_LOCAL_WRITE);
		buf_alloc(&p.c, &unused, 4096, RDMX_ACCESS_LOCAL_WRITE);
		buf_alloc(&p.s, &rbuf, 4096, RDMX_ACCESS_LOCAL_WRITE);
		buf_fill(&used, 5);
		sg = sge_of(&used, 0, used.len);
		assert_int_equal(rdmx_post_send(p.cconn, &sg, 12), RDMX_OK);
		buf_free(&unused);
		assert_int_equal(rdmx_conn_check(p.cconn), RDMX_OK);
		/* The SEND goes through once a RECV is there. */
		sg = sge_of(&rbuf, 0, rbuf.len);
		assert_int_equal(rdmx_post_recv(p.sconn, &sg, 1, 13), RDMX_OK);
		wc = expect_wc(p.s.cq, RDMX_OK, RDMX_OP_RECV);
		assert_int_equal(wc.byte_len, 4096);
		assert_pattern(rbuf.p, rbuf.len, 5, 0);
		expect_wc(p.c.cq, RDMX_OK, RDMX_OP_SEND);
		buf_free(&used);
		buf_free(&rbuf);
		pair_close(&p);
	}
}

/* A SEND into a RECV (of the connection, or of @srq) whose region went. */
static void send_into_revoked_recv(const char *transport, bool use_srq)
{
	struct side s, c;
	struct rdmx_srq *srq = NULL;
	struct acc a = { .s = &s };
	struct rdmx_conn *cconn;
	struct buf rbuf, sbuf;
	struct rdmx_sge sg;
	struct rdmx_completion wc;
	uint8_t *keep;

	setenv("RDMX_TRANSPORT", transport, 1);
	side_open(&s);
	side_open(&c);
	unsetenv("RDMX_TRANSPORT");
	a.attr.cq = s.cq;
	if (use_srq) {
		struct rdmx_srq_attr sa = { .cq = s.cq };

		assert_int_equal(rdmx_srq_create(s.ctx, &sa, &srq), RDMX_OK);
		a.attr.mask = RDMX_CONN_ATTR_SRQ;
		a.attr.srq = srq;
	}
	side_listen(&s, &a.lst);
	acc_start(&a);
	cconn = side_connect(&c, rdmx_listener_port(a.lst));
	acc_join(&a);
	assert_int_equal(a.st, RDMX_OK);
	buf_alloc(&s, &rbuf, 4096, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&c, &sbuf, 4096, 0);
	memset(rbuf.p, 0, rbuf.len);
	buf_fill(&sbuf, 9);
	sg = sge_of(&rbuf, 0, rbuf.len);
	if (srq)
		assert_int_equal(rdmx_srq_post_recv(srq, &sg, 1, 21), RDMX_OK);
	else
		assert_int_equal(rdmx_post_recv(a.conn, &sg, 1, 21), RDMX_OK);
	/* Deregistered, not freed: the test can see that nothing landed. */
	keep = rbuf.p;
	assert_int_equal(rdmx_mr_dereg(rbuf.mr), RDMX_OK);
	sg = sge_of(&sbuf, 0, sbuf.len);
	assert_int_equal(rdmx_post_send(cconn, &sg, 22), RDMX_OK);
	wc = expect_wc(s.cq, RDMX_ERR_FLUSHED, RDMX_OP_RECV);
	assert_int_equal(wc.wr_id, 21);
	wc = wait_wc(c.cq);
	assert_int_equal(wc.wr_id, 22);
	assert_int_not_equal(wc.status, RDMX_OK);
	for (size_t i = 0; i < 4096; i++)
		assert_int_equal(keep[i], 0);
	free(keep);
	buf_free(&sbuf);
	rdmx_conn_close(cconn);
	rdmx_conn_close(a.conn);
	rdmx_srq_destroy(srq);
	rdmx_listener_close(a.lst);
	side_close(&c);
	side_close(&s);
}

static void test_dereg_revokes_a_posted_recv(void **state)
{
	(void)state;
	for (unsigned t = 0; t < 2; t++) {
		send_into_revoked_recv(transports[t], false);
		send_into_revoked_recv(transports[t], true);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
			test_dereg_ends_the_connection_of_a_waiting_send),
		cmocka_unit_test(
			test_dereg_of_an_unused_region_leaves_connections),
		cmocka_unit_test(test_dereg_revokes_a_posted_recv),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
