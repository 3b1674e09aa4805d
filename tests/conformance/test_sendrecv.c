/* SPDX-License-Identifier: MIT */
/* Description: SEND/RECV order, sizes, credits and too-small receive buffers.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static const size_t sizes[] = { 0, 1, 4095, 4096, 4097, 1 << 20, 16 << 20 };

static void test_send_order_10000(void **state)
{
	enum { N = 10000, SLOTS = 256, MSG = 8 };
	struct pair p;
	struct buf src, dst;
	struct rdmx_completion wc;
	int sent = 0, posted = 0, got = 0, sdone = 0;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, SLOTS * MSG, 0);
	buf_alloc(&p.s, &dst, SLOTS * MSG, RDMX_ACCESS_LOCAL_WRITE);
	while (got < N || sdone < N) {
		/* Keep RECVs posted in a ring; slot i gets message i. */
		while (posted < N && posted - got < SLOTS) {
			struct rdmx_sge r =
				sge_of(&dst, (posted % SLOTS) * MSG, MSG);

			assert_int_equal(rdmx_post_recv(p.sconn, &r, 1, posted),
					 RDMX_OK);
			posted++;
		}
		while (sent < N && sent - sdone < SLOTS) {
			struct rdmx_sge s =
				sge_of(&src, (sent % SLOTS) * MSG, MSG);
			uint64_t v = (uint64_t)sent;

			memcpy(s.addr, &v, MSG);
			if (rdmx_post_send(p.cconn, &s, sent) == RDMX_ERR_AGAIN)
				break;
			sent++;
		}
		while (rdmx_poll(p.c.cq, &wc, 1) == 1) {
			assert_int_equal(wc.status, RDMX_OK);
			assert_int_equal(wc.wr_id, sdone);
			sdone++;
		}
		while (rdmx_poll(p.s.cq, &wc, 1) == 1) {
			uint64_t v;

			assert_int_equal(wc.status, RDMX_OK);
			assert_int_equal(wc.opcode, RDMX_OP_RECV);
			assert_int_equal(wc.wr_id, got);
			assert_int_equal(wc.byte_len, MSG);
			memcpy(&v, dst.p + (got % SLOTS) * MSG, MSG);
			assert_int_equal(v, got);
			got++;
		}
	}
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

static void test_send_sizes(void **state)
{
	struct pair p;

	(void)state;
	pair_open(&p);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct buf src, dst;
		struct rdmx_sge s, r;
		struct rdmx_completion wc;

		buf_alloc(&p.c, &src, sizes[i], 0);
		buf_alloc(&p.s, &dst, sizes[i] + 64, RDMX_ACCESS_LOCAL_WRITE);
		buf_fill(&src, (uint8_t)i);
		s = sge_of(&src, 0, sizes[i]);
		r = sge_of(&dst, 0, dst.len);
		assert_int_equal(rdmx_post_recv(p.sconn, &r, 1, i), RDMX_OK);
		assert_int_equal(rdmx_post_send(p.cconn, &s, i), RDMX_OK);
		expect_wc(p.c.cq, RDMX_OK, RDMX_OP_SEND);
		wc = expect_wc(p.s.cq, RDMX_OK, RDMX_OP_RECV);
		assert_int_equal(wc.byte_len, sizes[i]);
		assert_pattern(dst.p, sizes[i], (uint8_t)i, 0);
		buf_free(&src);
		buf_free(&dst);
	}
	pair_close(&p);
}

static void test_send_gather_scatter(void **state)
{
	struct pair p;
	struct buf src, dst;
	struct rdmx_sge s[3], r[2];

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, 3000, 0);
	buf_alloc(&p.s, &dst, 4000, RDMX_ACCESS_LOCAL_WRITE);
	buf_fill(&src, 9);
	s[0] = sge_of(&src, 0, 1000);
	s[1] = sge_of(&src, 1000, 1000);
	s[2] = sge_of(&src, 2000, 1000);
	r[0] = sge_of(&dst, 0, 1500);
	r[1] = sge_of(&dst, 2000, 2000);
	assert_int_equal(rdmx_post_recv(p.sconn, r, 2, 1), RDMX_OK);
	assert_int_equal(rdmx_post(p.cconn,
				   &(struct rdmx_wr){ .wr_id = 2,
						      .opcode = RDMX_OP_SEND,
						      .sg_list = s,
						      .num_sge = 3 }),
			 RDMX_OK);
	expect_wc(p.c.cq, RDMX_OK, RDMX_OP_SEND);
	assert_int_equal(expect_wc(p.s.cq, RDMX_OK, RDMX_OP_RECV).byte_len,
			 3000);
	assert_pattern(dst.p, 1500, 9, 0);
	assert_pattern(dst.p + 2000, 1500, 9, 1500);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

/* conn.max_sge: a longer list is refused on both queues; the limit works. */
static void test_send_max_sge(void **state)
{
	struct pair p;
	struct buf src, dst;
	struct rdmx_sge s[3], r[3];
	struct rdmx_wr wr = { .wr_id = 1,
			      .opcode = RDMX_OP_SEND,
			      .sg_list = s };

	(void)state;
	pair_open_with(&p, "RDMX_CONN_MAX_SGE", "2");
	buf_alloc(&p.c, &src, 300, 0);
	buf_alloc(&p.s, &dst, 300, RDMX_ACCESS_LOCAL_WRITE);
	buf_fill(&src, 4);
	for (int i = 0; i < 3; i++) {
		s[i] = sge_of(&src, (size_t)i * 100, 100);
		r[i] = sge_of(&dst, (size_t)i * 100, 100);
	}
	assert_int_equal(rdmx_post_recv(p.sconn, r, 3, 1), RDMX_ERR_INVALID);
	wr.num_sge = 3;
	assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_ERR_INVALID);
	assert_int_equal(rdmx_post_recv(p.sconn, r, 2, 1), RDMX_OK);
	wr.num_sge = 2;
	assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_OK);
	expect_wc(p.c.cq, RDMX_OK, RDMX_OP_SEND);
	assert_int_equal(expect_wc(p.s.cq, RDMX_OK, RDMX_OP_RECV).byte_len,
			 200);
	assert_pattern(dst.p, 200, 4, 0);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

static void test_send_waits_for_recv(void **state)
{
	struct pair p;
	struct buf src, dst;
	struct rdmx_sge s, r;
	struct rdmx_completion wc;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, 64, 0);
	buf_alloc(&p.s, &dst, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_fill(&src, 3);
	s = sge_of(&src, 0, 64);
	r = sge_of(&dst, 0, 64);
	/* No RECV yet: the SEND must wait, not fail and not vanish. */
	assert_int_equal(rdmx_post_send(p.cconn, &s, 1), RDMX_OK);
	assert_int_equal(rdmx_cq_wait(p.c.cq, 200), RDMX_ERR_TIMEOUT);
	assert_int_equal(rdmx_poll(p.s.cq, &wc, 1), 0);
	assert_int_equal(rdmx_post_recv(p.sconn, &r, 1, 2), RDMX_OK);
	expect_wc(p.c.cq, RDMX_OK, RDMX_OP_SEND);
	expect_wc(p.s.cq, RDMX_OK, RDMX_OP_RECV);
	assert_pattern(dst.p, 64, 3, 0);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

static void test_recv_too_small(void **state)
{
	struct pair p;
	struct buf src, dst;
	struct rdmx_sge s, r;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, 4097, 0);
	buf_alloc(&p.s, &dst, 4097, RDMX_ACCESS_LOCAL_WRITE);
	memset(dst.p, 0xee, dst.len);
	s = sge_of(&src, 0, 4097);
	r = sge_of(&dst, 0, 4096);
	assert_int_equal(rdmx_post_recv(p.sconn, &r, 1, 1), RDMX_OK);
	assert_int_equal(rdmx_post_send(p.cconn, &s, 2), RDMX_OK);
	/* An error on both sides, never a silent truncation (where a SEND
	 * completes once sent, the sender learns it as the end of the
	 * connection rather than on that SEND). */
	expect_wc(p.s.cq, RDMX_ERR_LOCAL_LENGTH, RDMX_OP_RECV);
	if (conn_has(p.cconn, RDMX_CONN_COMPLETES_LOCALLY))
		assert_int_equal(wait_wc(p.c.cq).opcode, RDMX_OP_SEND);
	else
		expect_wc(p.c.cq, RDMX_ERR_REMOTE_INVALID, RDMX_OP_SEND);
	assert_int_equal(dst.p[4096], 0xee);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

static void test_recv_needs_local_write(void **state)
{
	struct pair p;
	struct buf dst;
	struct rdmx_sge r;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.s, &dst, 64, RDMX_ACCESS_REMOTE_READ);
	r = sge_of(&dst, 0, 64);
	assert_int_equal(rdmx_post_recv(p.sconn, &r, 1, 1), RDMX_ERR_INVALID);
	r = sge_of(&dst, 1, 64); /* one byte past the registration */
	assert_int_equal(rdmx_post_recv(p.sconn, &r, 1, 1), RDMX_ERR_INVALID);
	buf_free(&dst);
	pair_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_send_order_10000),
		cmocka_unit_test(test_send_sizes),
		cmocka_unit_test(test_send_gather_scatter),
		cmocka_unit_test(test_send_max_sge),
		cmocka_unit_test(test_send_waits_for_recv),
		cmocka_unit_test(test_recv_too_small),
		cmocka_unit_test(test_recv_needs_local_write),
	};

	return cmocka_run_group_tests_name(suite_transport(), tests, NULL,
					   NULL);
}
