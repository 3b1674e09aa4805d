/* SPDX-License-Identifier: MIT */
/* Description: one-sided access checks: rkey, bounds, flags, deregistration. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { LEN = 4096 };

struct rig {
	struct pair p;
	struct buf target, src, res;
	struct rdmx_remote rem;
};

static void rig_open(struct rig *r, unsigned access)
{
	pair_open(&r->p);
	buf_alloc(&r->p.s, &r->target, LEN, access);
	memset(r->target.p, 0x5a, LEN);
	buf_alloc(&r->p.c, &r->src, LEN, RDMX_ACCESS_LOCAL_WRITE);
	buf_fill(&r->src, 1);
	buf_alloc(&r->p.c, &r->res, 8, RDMX_ACCESS_LOCAL_WRITE);
	r->rem = share_remote(&r->p, &r->target);
}

static void rig_close(struct rig *r)
{
	buf_free(&r->src);
	buf_free(&r->res);
	if (r->target.mr)
		buf_free(&r->target);
	pair_close(&r->p);
}

/* Post a WRITE, a READ and a fetch-add at @addr/@rkey; each must fail with
 * a remote access error and leave the target's bytes as they were. */
static void expect_refused(struct rig *r, uint64_t addr, uint32_t rkey,
			   size_t len, enum rdmx_opcode only)
{
	struct rdmx_sge s = sge_of(&r->src, 0, len);
	struct rdmx_sge a = sge_of(&r->res, 0, 8);

	if (!only || only == RDMX_OP_WRITE) {
		assert_int_equal(rdmx_post_write(r->p.cconn, &s, addr, rkey, 1),
				 RDMX_OK);
		expect_wc(r->p.c.cq, RDMX_ERR_REMOTE_ACCESS, RDMX_OP_WRITE);
	}
	if (!only || only == RDMX_OP_READ) {
		assert_int_equal(rdmx_post_read(r->p.cconn, &s, addr, rkey, 2),
				 RDMX_OK);
		expect_wc(r->p.c.cq, RDMX_ERR_REMOTE_ACCESS, RDMX_OP_READ);
	}
	if (!only || only == RDMX_OP_FETCH_ADD) {
		assert_int_equal(rdmx_post_fetch_add(r->p.cconn, &a,
						     addr & ~7ull, rkey, 1, 3),
				 RDMX_OK);
		expect_wc(r->p.c.cq, RDMX_ERR_REMOTE_ACCESS, RDMX_OP_FETCH_ADD);
	}
}

/* The target survived: its memory is untouched and a good op works. */
static void expect_target_alive(struct rig *r)
{
	struct rdmx_sge s = sge_of(&r->src, 0, 64);

	for (size_t i = 0; i < LEN; i++)
		if (r->target.p[i] != 0x5a)
			fail_msg("target byte %zu was changed", i);
	assert_int_equal(rdmx_post_write(r->p.cconn, &s, r->rem.addr,
					 r->rem.rkey, 9),
			 RDMX_OK);
	expect_wc(r->p.c.cq, RDMX_OK, RDMX_OP_WRITE);
	assert_pattern(r->target.p, 64, 1, 0);
}

#define ALL                                                                    \
	(RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE |                  \
	 RDMX_ACCESS_REMOTE_READ | RDMX_ACCESS_REMOTE_ATOMIC)

static void test_mr_bad_rkey(void **state)
{
	struct rig r;

	(void)state;
	rig_open(&r, ALL);
	expect_refused(&r, r.rem.addr, r.rem.rkey ^ 0x80000001u, 64, 0);
	expect_target_alive(&r);
	rig_close(&r);
}

static void test_mr_out_of_bounds(void **state)
{
	struct rig r;

	(void)state;
	rig_open(&r, ALL);
	/* One byte past the end, one before the start, and a huge length. */
	expect_refused(&r, r.rem.addr + 1, r.rem.rkey, LEN, RDMX_OP_WRITE);
	expect_refused(&r, r.rem.addr + 1, r.rem.rkey, LEN, RDMX_OP_READ);
	expect_refused(&r, r.rem.addr - 8, r.rem.rkey, 16, 0);
	expect_refused(&r, r.rem.addr + LEN, r.rem.rkey, 8, RDMX_OP_FETCH_ADD);
	expect_refused(&r, UINT64_MAX - 8, r.rem.rkey, 64, RDMX_OP_WRITE);
	expect_target_alive(&r);
	rig_close(&r);
}

static void test_mr_missing_access(void **state)
{
	struct rig r;

	(void)state;
	rig_open(&r, RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_READ);
	expect_refused(&r, r.rem.addr, r.rem.rkey, 64, RDMX_OP_WRITE);
	expect_refused(&r, r.rem.addr, r.rem.rkey, 64, RDMX_OP_FETCH_ADD);
	rig_close(&r);

	rig_open(&r, RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE);
	expect_refused(&r, r.rem.addr, r.rem.rkey, 64, RDMX_OP_READ);
	expect_target_alive(&r);
	rig_close(&r);
}

static void test_mr_deregistered(void **state)
{
	struct rig r;
	uint8_t *mem;

	(void)state;
	rig_open(&r, ALL);
	mem = r.target.p;
	assert_int_equal(rdmx_mr_dereg(r.target.mr), RDMX_OK);
	r.target.mr = NULL;
	expect_refused(&r, r.rem.addr, r.rem.rkey, 64, 0);
	for (size_t i = 0; i < LEN; i++)
		assert_int_equal(mem[i], 0x5a);
	free(mem);
	rig_close(&r);
}

static void test_mr_write_imm_refused_keeps_recv(void **state)
{
	struct rig r;
	struct buf rb;
	struct rdmx_sge s, rs;
	struct rdmx_completion wc;

	(void)state;
	rig_open(&r, RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_READ);
	buf_alloc(&r.p.s, &rb, 64, RDMX_ACCESS_LOCAL_WRITE);
	rs = sge_of(&rb, 0, 64);
	s = sge_of(&r.src, 0, 16);
	assert_int_equal(rdmx_post_recv(r.p.sconn, &rs, 1, 7), RDMX_OK);
	assert_int_equal(rdmx_post_write_imm(r.p.cconn, &s, r.rem.addr,
					     r.rem.rkey, 1, 8),
			 RDMX_OK);
	expect_wc(r.p.c.cq, RDMX_ERR_REMOTE_ACCESS, RDMX_OP_WRITE_IMM);
	/* The RECV was not consumed: a SEND still lands in it. */
	assert_int_equal(rdmx_poll(r.p.s.cq, &wc, 1), 0);
	assert_int_equal(rdmx_post_send(r.p.cconn, &s, 9), RDMX_OK);
	expect_wc(r.p.c.cq, RDMX_OK, RDMX_OP_SEND);
	wc = expect_wc(r.p.s.cq, RDMX_OK, RDMX_OP_RECV);
	assert_int_equal(wc.wr_id, 7);
	buf_free(&rb);
	rig_close(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mr_bad_rkey),
		cmocka_unit_test(test_mr_out_of_bounds),
		cmocka_unit_test(test_mr_missing_access),
		cmocka_unit_test(test_mr_deregistered),
		cmocka_unit_test(test_mr_write_imm_refused_keeps_recv),
	};

	return cmocka_run_group_tests_name(suite_transport(), tests, NULL,
					   NULL);
}
