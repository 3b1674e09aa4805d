/* SPDX-License-Identifier: MIT */
/*
 * Description: rdmx_mr_dereg of a region that posted requests still use
 * ends their connection and waits for the flush, so no byte of the region
 * leaves (or lands) after it returns; a region nothing uses is
 * deregistered without touching any connection. It used to return at once
 * with the requests still queued: a SEND waiting for the peer's RECV went
 * out later, from memory the application had freed.
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
			test_dereg_ends_the_connection_of_a_waiting_send),
		cmocka_unit_test(
			test_dereg_of_an_unused_region_leaves_connections),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
