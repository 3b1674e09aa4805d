/* SPDX-License-Identifier: MIT */
/* Description: one-sided access checks: rkey, bounds, flags, deregistration. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include <string.h>

#include "harness.h"

enum { LEN = 4096 };

struct rig {
	struct pair p;
	struct buf target, src, res;
	struct rdmx_remote rem;
	bool ended; /* a refusal ended the connection (RDMX_CONN_ERRORS_CLOSE)
		     */
};

static void rig_open(struct rig *r, unsigned access)
{
	memset(r, 0, sizeof(*r));
	/* These cases count refusals of every kind on one connection; the
	 * cut-off of a prober has its own case. */
	pair_open_with(&r->p, "RDMX_CONN_MAX_ACCESS_ERRORS", "64");
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

/* The next completion is a refused @op (assert_refused). */
static void expect_refusal(struct rdmx_conn *conn, struct rdmx_cq *cq,
			   enum rdmx_opcode op)
{
	struct rdmx_completion wc = wait_wc(cq);

	assert_int_equal(wc.opcode, op);
	assert_refused(conn, wc.status);
}

/* Post a WRITE, a READ and a fetch-add at @addr/@rkey; each must fail with
 * a remote access error and leave the target's bytes as they were. */
static void expect_refused(struct rig *r, uint64_t addr, uint64_t rkey,
			   size_t len, enum rdmx_opcode only)
{
	struct rdmx_sge s = sge_of(&r->src, 0, len);
	struct rdmx_sge a = sge_of(&r->res, 0, 8);

	/* Where a refusal ends the connection, one refusal per connection. */
	if (r->ended)
		return;
	r->ended = errors_close(r->p.cconn);
	if (r->ended && !only)
		only = RDMX_OP_WRITE;
	if (only != RDMX_OP_READ && !write_refusal_reported(r->p.cconn)) {
		/* The memory check in expect_target_alive still applies. */
		r->ended = false;
		return;
	}
	if (!only || only == RDMX_OP_WRITE) {
		assert_int_equal(rdmx_post_write(r->p.cconn, &s, addr, rkey, 1),
				 RDMX_OK);
		expect_wc(r->p.c.cq, RDMX_ERR_REMOTE_ACCESS, RDMX_OP_WRITE);
	}
	if (!only || only == RDMX_OP_READ) {
		assert_int_equal(rdmx_post_read(r->p.cconn, &s, addr, rkey, 2),
				 RDMX_OK);
		expect_refusal(r->p.cconn, r->p.c.cq, RDMX_OP_READ);
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
	if (r->ended) /* this connection is over; the memory check stands */
		return;
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

/*
 * rkeys are 64 bits: the software transports check all of them, so a key
 * whose low half is right (on a host with a NIC, the NIC's own key, an
 * index and a few bits) is still refused; a NIC reads only that low half.
 */
static void test_mr_rkey_high_half(void **state)
{
	struct rdmx_sge d;
	struct rig r;

	(void)state;
	rig_open(&r, ALL);
	assert_true(r.rem.rkey >> 32); /* random, never zero */
	d = sge_of(&r.res, 0, 8); /* where a NIC lets it in, not over src */
	assert_int_equal(rdmx_post_read(r.p.cconn, &d, r.rem.addr,
					r.rem.rkey ^ (1ull << 45), 1),
			 RDMX_OK);
	if (!strcmp(suite_transport(), "verbs") || errors_close(r.p.cconn)) {
		expect_wc(r.p.c.cq, RDMX_OK, RDMX_OP_READ);
		print_message("%s: the NIC checks the low 32 bits only\n",
			      suite_transport());
	} else {
		expect_wc(r.p.c.cq, RDMX_ERR_REMOTE_ACCESS, RDMX_OP_READ);
	}
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

/* Large enough for the single-copy path of transports that have one. */
static void test_mr_large_out_of_bounds(void **state)
{
	enum { BIG = 256 << 10 };
	struct pair p;
	struct buf target, src;
	struct rdmx_remote rem;
	struct rdmx_sge s;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.s, &target, BIG,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE |
			  RDMX_ACCESS_REMOTE_READ);
	memset(target.p, 0x5a, BIG);
	buf_alloc(&p.c, &src, BIG, RDMX_ACCESS_LOCAL_WRITE);
	buf_fill(&src, 4);
	rem = share_remote(&p, &target);
	s = sge_of(&src, 0, BIG);
	if (conn_has(p.cconn, RDMX_CONN_COMPLETES_LOCALLY)) {
		/* Only a READ can report the refusal here. */
		assert_int_equal(rdmx_post_read(p.cconn, &s, rem.addr + 1,
						rem.rkey, 1),
				 RDMX_OK);
		expect_refusal(p.cconn, p.c.cq, RDMX_OP_READ);
		buf_free(&target);
		buf_free(&src);
		pair_close(&p);
		return;
	}
	assert_int_equal(rdmx_post_write(p.cconn, &s, rem.addr + 1, rem.rkey,
					 1),
			 RDMX_OK);
	expect_wc(p.c.cq, RDMX_ERR_REMOTE_ACCESS, RDMX_OP_WRITE);
	if (errors_close(p.cconn)) { /* that refusal ended this connection */
		for (size_t i = 0; i < BIG; i++)
			if (target.p[i] != 0x5a)
				fail_msg("target byte %zu was changed", i);
		buf_free(&target);
		buf_free(&src);
		pair_close(&p);
		return;
	}
	assert_int_equal(rdmx_post_read(p.cconn, &s, rem.addr + 1, rem.rkey, 2),
			 RDMX_OK);
	expect_wc(p.c.cq, RDMX_ERR_REMOTE_ACCESS, RDMX_OP_READ);
	for (size_t i = 0; i < BIG; i++)
		if (target.p[i] != 0x5a)
			fail_msg("target byte %zu was changed", i);
	/* In bounds, the same size works both ways. */
	assert_int_equal(rdmx_post_write(p.cconn, &s, rem.addr, rem.rkey, 3),
			 RDMX_OK);
	expect_wc(p.c.cq, RDMX_OK, RDMX_OP_WRITE);
	assert_pattern(target.p, BIG, 4, 0);
	memset(src.p, 0, BIG);
	assert_int_equal(rdmx_post_read(p.cconn, &s, rem.addr, rem.rkey, 4),
			 RDMX_OK);
	expect_wc(p.c.cq, RDMX_OK, RDMX_OP_READ);
	assert_pattern(src.p, BIG, 4, 0);
	buf_free(&target);
	buf_free(&src);
	pair_close(&p);
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
	if (conn_has(r.p.cconn, RDMX_CONN_COMPLETES_LOCALLY)) {
		/*
		 * The READ responder is the provider's, not ours: Linux siw
		 * (6.1, siw_qp_tx.c) sends the response without checking
		 * REMOTE_READ. Report what the provider did; the bytes it
		 * read must still be the target's own.
		 */
		struct rdmx_sge s = sge_of(&r.src, 0, 64);
		struct rdmx_completion wc;

		assert_int_equal(rdmx_post_read(r.p.cconn, &s, r.rem.addr,
						r.rem.rkey, 2),
				 RDMX_OK);
		wc = wait_wc(r.p.c.cq);
		assert_int_equal(wc.opcode, RDMX_OP_READ);
		if (wc.status == RDMX_OK) {
			print_message("%s: the provider answered a READ of a "
				      "region without REMOTE_READ\n",
				      suite_transport());
			for (size_t i = 0; i < 64; i++)
				assert_int_equal(r.src.p[i], 0x5a);
		} else {
			assert_refused(r.p.cconn, wc.status);
		}
		rig_close(&r);
		return;
	}
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
	buf_free(&r.target); /* its memory; the registration is gone */
	rig_close(&r);
}

/*
 * A peer that keeps guessing rkeys is cut off: conn.max_access_errors
 * refusals are answered, the next one too, and then the connection ends,
 * as a NIC ends a queue pair at its first.
 */
static void test_mr_probe_cut_off(void **state)
{
	enum { MAX = 3 };
	struct pair p;
	struct buf target, dst;
	struct rdmx_remote rem;
	struct rdmx_sge s;
	struct rdmx_stats st;
	char max[8];

	(void)state;
	snprintf(max, sizeof(max), "%d", MAX);
	pair_open_with(&p, "RDMX_CONN_MAX_ACCESS_ERRORS", max);
	buf_alloc(&p.s, &target, 64,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_READ);
	buf_alloc(&p.c, &dst, 64, RDMX_ACCESS_LOCAL_WRITE);
	rem = share_remote(&p, &target);
	s = sge_of(&dst, 0, 8);
	if (errors_close(p.cconn)) {
		buf_free(&target);
		buf_free(&dst);
		pair_close(&p);
		suite_skip("%s: the device ends the connection at the first "
			   "refusal",
			   suite_transport());
	}
	for (int i = 0; i <= MAX; i++) {
		/* A guess: never the real rkey. */
		uint64_t guess = rem.rkey ^ (0x9e3779b9u * (uint32_t)(i + 1));

		assert_int_equal(rdmx_post_read(p.cconn, &s, rem.addr, guess,
						(uint64_t)i),
				 RDMX_OK);
		expect_wc(p.c.cq, RDMX_ERR_REMOTE_ACCESS, RDMX_OP_READ);
	}
	/* The right key now finds the connection over. */
	if (rdmx_post_read(p.cconn, &s, rem.addr, rem.rkey, 99) == RDMX_OK)
		expect_wc(p.c.cq, RDMX_ERR_CONN_LOST, RDMX_OP_READ);
	assert_int_not_equal(rdmx_conn_check(p.cconn), RDMX_OK);
	rdmx_ctx_stats(p.s.ctx, &st);
	assert_int_equal(st.refused, MAX + 1);
	assert_int_equal(st.peers_cut, 1);
	buf_free(&target);
	buf_free(&dst);
	pair_close(&p);
}

/*
 * The target counts what it refused, by reason, and what it served: one
 * READ of each kind of refusal, then a good WRITE. (A misaligned atomic
 * cannot be posted: tests/regress/10-hostile-sw-peer.c sends one.)
 * Software transports only: a NIC refuses and serves unseen by the CPU.
 */
static void test_mr_refusals_by_reason(void **state)
{
	static const struct {
		enum rdmx_refusal why;
		int64_t off; /* from the region's start */
		bool bad_key;
	} cases[] = {
		{ RDMX_REFUSED_RKEY, 0, true },
		{ RDMX_REFUSED_BOUNDS, LEN - 8, false },
		{ RDMX_REFUSED_ACCESS, 0, false },
	};
	struct rdmx_stats s0, s;
	struct rig r;

	(void)state;
	/* No REMOTE_READ: a READ in bounds with the right key is refused
	 * for access; the bounds case reads 64 bytes from 8 before the end. */
	rig_open(&r, RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE);
	if (errors_close(r.p.cconn)) {
		rig_close(&r);
		suite_skip("%s: the NIC refuses, unseen by the CPU",
			   suite_transport());
	}
	rdmx_ctx_stats(r.p.s.ctx, &s0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rdmx_sge d = sge_of(&r.src, 0, 64);
		uint64_t key = r.rem.rkey ^
			       (cases[i].bad_key ? 0x80000001u : 0);

		assert_int_equal(rdmx_post_read(r.p.cconn, &d,
						r.rem.addr + cases[i].off, key,
						i),
				 RDMX_OK);
		expect_wc(r.p.c.cq, RDMX_ERR_REMOTE_ACCESS, RDMX_OP_READ);
		rdmx_ctx_stats(r.p.s.ctx, &s);
		assert_int_equal(s.refused_by[cases[i].why] -
					 s0.refused_by[cases[i].why],
				 1);
		assert_int_equal(s.refused - s0.refused, i + 1);
	}
	/* Nothing refused was counted as served; a good WRITE is (unless
	 * the initiator did it on mapped memory, unseen by the target). */
	for (int op = 0; op < RDMX_STATS_OPS; op++)
		assert_int_equal(s.served_ops[transport_index(r.p.cconn)][op],
				 s0.served_ops[transport_index(r.p.cconn)][op]);
	expect_target_alive(&r);
	if (suite_mem_mapped()) {
		rig_close(&r);
		return;
	}
	rdmx_ctx_stats(r.p.s.ctx, &s);
	assert_int_equal(
		s.served_ops[transport_index(r.p.cconn)][RDMX_OP_WRITE] -
			s0.served_ops[transport_index(r.p.cconn)][RDMX_OP_WRITE],
		1);
	assert_int_equal(
		s.served_bytes[transport_index(r.p.cconn)][RDMX_OP_WRITE] -
			s0.served_bytes[transport_index(r.p.cconn)]
				       [RDMX_OP_WRITE],
		64);
	rig_close(&r);
}

/*
 * After a refused WRITE, a READ posted once the refusal had time to come
 * back, and the RECV posted before, complete, whatever the transport does
 * with the refusal, and soon. On siw the WRITE completes once sent, the
 * target ends the QP with a Terminate, and the READ posted after it got no
 * completion: the request watchdog fired after 30 s, and still nothing.
 */
static void test_mr_refused_write_then_read_completes(void **state)
{
	struct rig r;
	struct rdmx_sge s, rv;
	struct rdmx_completion wc;
	bool ends, got_read = false, got_recv = false;
	rdmx_status st;
	double t0;

	(void)state;
	rig_open(&r, ALL);
	ends = errors_close(r.p.cconn);
	s = sge_of(&r.src, 0, 64);
	rv = sge_of(&r.res, 0, 8);
	assert_int_equal(rdmx_post_recv(r.p.cconn, &rv, 1, 10), RDMX_OK);
	assert_int_equal(rdmx_post_write(r.p.cconn, &s, r.rem.addr,
					 r.rem.rkey ^ 0x80000001u, 11),
			 RDMX_OK);
	for (;;) { /* where the refusal ends the connection, the RECV too */
		wc = wait_wc(r.p.c.cq);
		if (wc.wr_id != 10)
			break;
		assert_true(ends);
		assert_int_not_equal(wc.status, RDMX_OK);
		got_recv = true;
	}
	assert_int_equal(wc.wr_id, 11);
	assert_int_equal(wc.opcode, RDMX_OP_WRITE);
	if (!conn_has(r.p.cconn, RDMX_CONN_COMPLETES_LOCALLY))
		assert_int_equal(wc.status, RDMX_ERR_REMOTE_ACCESS);
	else if (wc.status != RDMX_OK && wc.status != RDMX_ERR_CONN_LOST)
		/* Done once sent; or, where the Terminate came back before
		 * the device completed it (siw, 1 CI run in many), flushed
		 * with the connection it ended. */
		assert_int_equal(wc.status, RDMX_ERR_REMOTE_ACCESS);
	usleep((useconds_t)(200000 * time_scale())); /* the Terminate's time */
	t0 = now_s();
	s = sge_of(&r.src, 64, 64); /* the source of the last check stays */
	st = rdmx_post_read(r.p.cconn, &s, r.rem.addr, r.rem.rkey, 12);
	if (st) { /* the connection is over already: no completion */
		assert_true(ends);
		got_read = true;
	}
	while (!got_read || (ends && !got_recv)) {
		wc = wait_wc(r.p.c.cq);
		if (wc.wr_id == 10) {
			assert_true(ends);
			assert_int_not_equal(wc.status, RDMX_OK);
			got_recv = true;
			continue;
		}
		assert_int_equal(wc.wr_id, 12);
		assert_int_equal(wc.opcode, RDMX_OP_READ);
		if (!ends)
			assert_int_equal(wc.status, RDMX_OK);
		if (!wc.status)
			for (size_t i = 64; i < 128; i++)
				assert_int_equal(r.src.p[i], 0x5a);
		got_read = true;
	}
	print_message("%s: READ %s; everything completed %.0f ms after it\n",
		      suite_transport(), st ? "refused at post" : "posted",
		      (now_s() - t0) * 1000);
	assert_true(now_s() - t0 < T_FLUSH_S);
	r.ended = ends;
	expect_target_alive(&r);
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
	if (errors_close(r.p.cconn)) {
		rig_close(&r);
		suite_skip("%s: a refused WRITE_IMM ends the connection, so no "
			   "later SEND can use the RECV",
			   suite_transport());
	}
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

/* The initiator: READ the whole region until the target deregisters it. */
static int reader(int port, int flag)
{
	struct side c;
	struct rdmx_conn *conn;
	struct buf dst, desc;
	struct rdmx_remote rem;
	struct rdmx_sge s;

	(void)flag;
	side_open(&c);
	conn = side_connect(&c, port);
	buf_alloc(&c, &desc, RDMX_REMOTE_PACKED_LEN, RDMX_ACCESS_LOCAL_WRITE);
	s = sge_of(&desc, 0, desc.len);
	if (rdmx_post_recv(conn, &s, 1, 0) || wait_wc(c.cq).status ||
	    rdmx_remote_unpack(desc.p, desc.len, &rem))
		return 1;
	buf_alloc(&c, &dst, rem.length, RDMX_ACCESS_LOCAL_WRITE);
	s = sge_of(&dst, 0, dst.len);
	for (int i = 0; i < 10000; i++) {
		struct rdmx_completion wc;

		if (rdmx_post_read(conn, &s, rem.addr, rem.rkey, i))
			return 2;
		wc = wait_wc(c.cq);
		if (wc.status == RDMX_ERR_REMOTE_ACCESS)
			return 0; /* refused once deregistered */
		/*
		 * Where an error ends the connection, a device may also drop
		 * the READ it was serving (rxe does, with no NAK): then
		 * verbs.request_timeout fails it. Both are fine; a hang is not.
		 */
		if (wc.status == RDMX_ERR_CONN_LOST && errors_close(conn))
			return 0;
		if (wc.status)
			return 4;
		/* A READ that completed read the pattern, whole. */
		for (size_t j = 0; j < dst.len; j += 4096)
			if (dst.p[j] != (uint8_t)(j / 4096))
				return 5;
	}
	return 6;
}

static void test_mr_dereg_during_read(void **state)
{
	enum { LEN = 8 << 20 };
	struct rdmx_listener *lst;
	struct rdmx_conn_attr attr;
	struct rdmx_conn *conn;
	struct rdmx_remote rem;
	struct rdmx_mr *mr;
	struct rdmx_sge s;
	struct side t;
	struct buf desc;
	uint8_t *mem;
	int port;
	pid_t pid;

	(void)state;
	/* Both sides: a dropped READ fails within seconds, not 30. */
	setenv("RDMX_VERBS_REQUEST_TIMEOUT", "2s", 1);
	side_open(&t);
	port = side_listen(&t, &lst);
	pid = spawn("reader", port, 0);
	attr = (struct rdmx_conn_attr){ .cq = t.cq };
	assert_int_equal(rdmx_accept(lst, &attr, T_TIMEOUT_MS, &conn), RDMX_OK);
	/* mmap, so that any access after munmap faults at once. */
	mem = mmap(NULL, LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(mem != MAP_FAILED);
	for (size_t j = 0; j < LEN; j += 4096)
		memset(mem + j, (uint8_t)(j / 4096), 4096);
	assert_int_equal(rdmx_mr_reg(t.ctx, mem, LEN, RDMX_ACCESS_REMOTE_READ,
				     &mr),
			 RDMX_OK);
	buf_alloc(&t, &desc, RDMX_REMOTE_PACKED_LEN, 0);
	rdmx_mr_remote(mr, &rem);
	rdmx_remote_pack(&rem, desc.p);
	s = sge_of(&desc, 0, desc.len);
	assert_int_equal(rdmx_post_send(conn, &s, 1), RDMX_OK);
	expect_wc(t.cq, RDMX_OK, RDMX_OP_SEND);
	/* While READs stream out of it: deregister, then unmap at once. */
	usleep(100 * 1000);
	assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	assert_int_equal(munmap(mem, LEN), 0);
	reap_ok(pid);
	rdmx_conn_close(conn);
	buf_free(&desc);
	rdmx_listener_close(lst);
	side_close(&t);
}

static const struct child children[] = {
	{ "reader", reader },
	{ NULL, NULL },
};

int main(int argc, char **argv)
{
	harness_children(argc, argv, children);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mr_bad_rkey),
		cmocka_unit_test(test_mr_rkey_high_half),
		cmocka_unit_test(test_mr_out_of_bounds),
		cmocka_unit_test(test_mr_large_out_of_bounds),
		cmocka_unit_test(test_mr_missing_access),
		cmocka_unit_test(test_mr_deregistered),
		cmocka_unit_test(test_mr_probe_cut_off),
		cmocka_unit_test(test_mr_refusals_by_reason),
		cmocka_unit_test(test_mr_write_imm_refused_keeps_recv),
		cmocka_unit_test(test_mr_refused_write_then_read_completes),
		cmocka_unit_test(test_mr_dereg_during_read),
	};

	return cmocka_run_group_tests_name(suite_transport(), tests, NULL,
					   NULL);
}
