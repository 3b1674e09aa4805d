/* SPDX-License-Identifier: MIT */
/*
 * Description: memory from rdmx_mem_alloc: its errors, and one-sided
 * requests that land in it while the target's CPU does nothing.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

enum {
	PAGE = 4096,
	DATA = 0, /* a page the parent WRITEs, then READs back */
	COUNTER = 2 * PAGE, /* fetch-added twice, then swapped */
	MARKER = 3 * PAGE, /* the parent's last WRITE: check now */
	SIZE = 4 * PAGE,
	SEED = 3,
	DONE = 0xd0,
};

static const unsigned all_access =
	RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE |
	RDMX_ACCESS_REMOTE_READ | RDMX_ACCESS_REMOTE_ATOMIC;

static void test_mem_alloc_errors(void **state)
{
	struct side s;
	struct rdmx_mr *mr;
	void *p, *h;
	int x;

	(void)state;
	side_open(&s);
	assert_int_equal(rdmx_mem_alloc(NULL, 64, 0, &p), RDMX_ERR_INVALID);
	assert_int_equal(rdmx_mem_alloc(s.ctx, 64, 0, NULL), RDMX_ERR_INVALID);
	assert_int_equal(rdmx_mem_alloc(s.ctx, 0, 0, &p), RDMX_ERR_INVALID);
	assert_int_equal(rdmx_mem_alloc(s.ctx, 64, 0x10, &p), RDMX_ERR_INVALID);
	assert_int_equal(rdmx_mem_free(s.ctx, NULL), RDMX_OK);
	assert_int_equal(rdmx_mem_free(s.ctx, &x), RDMX_ERR_INVALID);

	assert_int_equal(rdmx_mem_alloc(s.ctx, 100, 0, &p), RDMX_OK);
	assert_int_equal((uintptr_t)p % PAGE, 0);
	for (int i = 0; i < 100; i++)
		assert_int_equal(((uint8_t *)p)[i], 0);
	/* Huge pages where the system has them, ordinary ones where not:
	 * memory either way. */
	assert_int_equal(rdmx_mem_alloc(s.ctx, 3 << 20, RDMX_MEM_HUGE, &h),
			 RDMX_OK);
	memset(h, 0x77, 3 << 20);
	assert_int_equal(rdmx_mem_free(s.ctx, (uint8_t *)p + 1),
			 RDMX_ERR_INVALID);

	/* A registration inside keeps it, as it keeps the context. */
	assert_int_equal(rdmx_mr_reg(s.ctx, (uint8_t *)p + 8, 16, all_access,
				     &mr),
			 RDMX_OK);
	assert_int_equal(rdmx_mem_free(s.ctx, p), RDMX_ERR_BUSY);
	assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	assert_int_equal(rdmx_cq_destroy(s.cq), RDMX_OK);
	assert_int_equal(rdmx_ctx_destroy(s.ctx), RDMX_ERR_BUSY);
	assert_int_equal(rdmx_mem_free(s.ctx, p), RDMX_OK);
	assert_int_equal(rdmx_mem_free(s.ctx, p), RDMX_ERR_INVALID);
	assert_int_equal(rdmx_mem_free(s.ctx, h), RDMX_OK);
	assert_int_equal(rdmx_ctx_destroy(s.ctx), RDMX_OK);
}

/*
 * The target: no progress thread, and after handing over its descriptor
 * it never calls rdmx again; it watches its memory until the marker comes,
 * then checks what landed there.
 */
static int idle_target(int port, int flag)
{
	struct side c;
	struct rdmx_conn *conn;
	struct rdmx_remote rem;
	struct buf desc, mem;
	struct rdmx_sge s;
	uint8_t *m;

	(void)flag;
	setenv("RDMX_PROGRESS_THREAD", "off", 1);
	side_open(&c);
	conn = side_connect(&c, port);
	buf_alloc_from(&c, &mem, SIZE, all_access, true);
	m = mem.p;
	buf_alloc(&c, &desc, RDMX_REMOTE_PACKED_LEN, 0);
	rdmx_mr_remote(mem.mr, &rem);
	rdmx_remote_pack(&rem, desc.p);
	s = sge_of(&desc, 0, desc.len);
	if (rdmx_post_send(conn, &s, 0) || wait_wc(c.cq).status)
		return 3;
	for (int i = 0; __atomic_load_n(&m[MARKER], __ATOMIC_ACQUIRE) != DONE;
	     i++) {
		if (i > 30000 * time_scale())
			return 4; /* 30 s: nothing came */
		usleep(1000);
	}
	assert_pattern(m + DATA, PAGE, SEED, 0);
	if (*(uint64_t *)(m + COUNTER) != 77)
		return 5;
	return 0;
}

/* One request of @op on the target's memory at @off; its completion. */
static struct rdmx_completion one(struct pair *p, struct rdmx_sge *s,
				  enum rdmx_opcode op,
				  const struct rdmx_remote *rem, uint64_t off,
				  uint64_t add, uint64_t swap)
{
	struct rdmx_wr wr = { .opcode = op,
			      .sg_list = s,
			      .num_sge = 1,
			      .remote_addr = rem->addr + off,
			      .rkey = rem->rkey,
			      .compare_add = add,
			      .swap = swap };

	assert_int_equal(rdmx_post(p->sconn, &wr), RDMX_OK);
	return expect_wc(p->s.cq, RDMX_OK, op);
}

/*
 * WRITE, READ, fetch-add and compare-and-swap on the memory of a process
 * that does not run rdmx at all meanwhile (no thread, no poll): over shm
 * the initiator maps it; a NIC needs no CPU either. Over tcp the target's
 * engine must run: skipped.
 */
static void test_mem_one_sided_without_target_cpu(void **state)
{
	struct pair p = { 0 };
	struct rdmx_conn_attr attr = { 0 };
	struct buf data, word, desc;
	struct rdmx_remote rem;
	struct rdmx_sge s;
	pid_t pid;

	(void)state;
	if (!strcmp(suite_transport(), "tcp"))
		suite_skip("tcp: the target's engine serves every request");
	side_open(&p.s);
	pid = spawn("idle_target", side_listen(&p.s, &p.lst), 0);
	attr.cq = p.s.cq;
	assert_int_equal(rdmx_accept(p.lst, &attr, T_TIMEOUT_MS, &p.sconn),
			 RDMX_OK);
	buf_alloc(&p.s, &desc, RDMX_REMOTE_PACKED_LEN, RDMX_ACCESS_LOCAL_WRITE);
	s = sge_of(&desc, 0, desc.len);
	assert_int_equal(rdmx_post_recv(p.sconn, &s, 1, 0), RDMX_OK);
	expect_wc(p.s.cq, RDMX_OK, RDMX_OP_RECV);
	assert_int_equal(rdmx_remote_unpack(desc.p, desc.len, &rem), RDMX_OK);

	buf_alloc(&p.s, &data, PAGE, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.s, &word, 8, RDMX_ACCESS_LOCAL_WRITE);
	buf_fill(&data, SEED);
	s = sge_of(&data, 0, PAGE);
	one(&p, &s, RDMX_OP_WRITE, &rem, DATA, 0, 0);
	memset(data.p, 0, PAGE);
	one(&p, &s, RDMX_OP_READ, &rem, DATA, 0, 0);
	assert_pattern(data.p, PAGE, SEED, 0);
	s = sge_of(&word, 0, 8);
	if (conn_has(p.sconn, RDMX_CONN_ATOMICS)) {
		for (uint64_t i = 0; i < 2; i++) {
			one(&p, &s, RDMX_OP_FETCH_ADD, &rem, COUNTER, 5, 0);
			assert_int_equal(*(uint64_t *)word.p, 5 * i);
		}
		one(&p, &s, RDMX_OP_CMP_SWAP, &rem, COUNTER, 10, 77);
		assert_int_equal(*(uint64_t *)word.p, 10);
	} else { /* iWARP has no atomics: the value they would leave */
		*(uint64_t *)word.p = 77;
		one(&p, &s, RDMX_OP_WRITE, &rem, COUNTER, 0, 0);
	}
	one(&p, &s, RDMX_OP_READ, &rem, COUNTER, 0, 0);
	assert_int_equal(*(uint64_t *)word.p, 77);
	/* The marker: the target checks its memory and exits. */
	memset(word.p, DONE, 8);
	one(&p, &s, RDMX_OP_WRITE, &rem, MARKER, 0, 0);
	reap_ok(pid);

	rdmx_conn_close(p.sconn);
	p.sconn = NULL;
	buf_free(&data);
	buf_free(&word);
	buf_free(&desc);
	rdmx_listener_close(p.lst);
	side_close(&p.s);
}

/*
 * RDMX_CONN_MAPPED on both ends over shm (each maps the other's grant
 * table at connect), on neither elsewhere. Where it is set, a READ of the
 * peer's rdmx_mem_alloc memory is done by the initiator: the target's
 * engine serves nothing. Over tcp it serves the READ (verbs: the NIC does,
 * and nothing counts it).
 */
static void test_mem_conn_says_mapped(void **state)
{
	bool shm = !strcmp(suite_transport(), "shm");
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;
	struct rdmx_sge s;
	struct rdmx_stats st;

	(void)state;
	pair_open(&p);
	assert_int_equal(conn_has(p.cconn, RDMX_CONN_MAPPED), shm);
	assert_int_equal(conn_has(p.sconn, RDMX_CONN_MAPPED), shm);
	buf_alloc_from(&p.s, &src, PAGE, all_access, true);
	buf_alloc(&p.c, &dst, PAGE, RDMX_ACCESS_LOCAL_WRITE);
	buf_fill(&src, SEED);
	rem = share_remote(&p, &src);
	s = sge_of(&dst, 0, PAGE);
	assert_int_equal(rdmx_post_read(p.cconn, &s, rem.addr, rem.rkey, 1),
			 RDMX_OK);
	expect_wc(p.c.cq, RDMX_OK, RDMX_OP_READ);
	assert_pattern(dst.p, PAGE, SEED, 0);
	rdmx_ctx_stats(p.s.ctx, &st);
	if (strcmp(suite_transport(), "verbs"))
		assert_int_equal(
			st.served_ops[transport_index(p.sconn)][RDMX_OP_READ],
			shm ? 0 : 1);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

/* No completion on @cq for @ms milliseconds. */
static void expect_none(struct rdmx_cq *cq, int ms)
{
	struct rdmx_completion wc;

	for (double end = now_s() + ms / 1e3; now_s() < end;)
		if (rdmx_poll(cq, &wc, 1))
			fail_msg("wr_id %llu completed (%s) while it should "
				 "wait",
				 (unsigned long long)wc.wr_id,
				 rdmx_strerror(wc.status));
}

/*
 * RDMX_WR_UNORDERED: behind a SEND that waits (the target has posted no
 * RECV), a WRITE with it is done at once where the connection maps the
 * target's memory (completed inside rdmx_post, its bytes there), while a
 * plain WRITE after it waits its turn. Elsewhere it keeps its place: all
 * three complete in order once the RECV is posted. On SEND, and with
 * RDMX_WR_FENCE, it is refused.
 */
static void test_mem_unordered_write_passes_waiting_send(void **state)
{
	struct pair p;
	struct buf dst, src, msg, rbuf;
	struct rdmx_remote rem;
	struct rdmx_sge s, r;
	struct rdmx_completion wc;
	struct rdmx_wr wr;
	bool mapped;

	(void)state;
	pair_open(&p);
	mapped = conn_has(p.cconn, RDMX_CONN_MAPPED);
	buf_alloc_from(&p.s, &dst, PAGE, all_access, true);
	buf_alloc(&p.c, &src, PAGE, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.c, &msg, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.s, &rbuf, 64, RDMX_ACCESS_LOCAL_WRITE);
	memset(dst.p, 0, PAGE);
	buf_fill(&src, SEED);
	rem = share_remote(&p, &dst);

	s = sge_of(&msg, 0, 64);
	wr = (struct rdmx_wr){ .opcode = RDMX_OP_SEND,
			       .sg_list = &s,
			       .num_sge = 1,
			       .flags = RDMX_WR_UNORDERED };
	assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_ERR_INVALID);
	wr.flags = 0;
	wr.wr_id = 1;
	assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_OK);
	s = sge_of(&src, 0, PAGE / 2);
	wr = (struct rdmx_wr){ .wr_id = 2,
			       .opcode = RDMX_OP_WRITE,
			       .sg_list = &s,
			       .num_sge = 1,
			       .remote_addr = rem.addr,
			       .rkey = rem.rkey,
			       .flags = RDMX_WR_UNORDERED | RDMX_WR_FENCE };
	assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_ERR_INVALID);
	wr.flags = RDMX_WR_UNORDERED;
	assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_OK);
	if (mapped) { /* done inside rdmx_post: no waiting, no timing */
		assert_int_equal(rdmx_poll(p.c.cq, &wc, 1), 1);
		assert_int_equal(wc.wr_id, 2);
		assert_int_equal(wc.status, RDMX_OK);
		assert_pattern(dst.p, PAGE / 2, SEED, 0);
	}
	s = sge_of(&src, PAGE / 2, PAGE / 2);
	wr.wr_id = 3;
	wr.flags = 0;
	wr.remote_addr = rem.addr + PAGE / 2;
	assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_OK);
	expect_none(p.c.cq, 50); /* the SEND waits, and the rest behind */
	assert_int_equal(dst.p[PAGE / 2], 0);

	r = sge_of(&rbuf, 0, 64);
	assert_int_equal(rdmx_post_recv(p.sconn, &r, 1, 9), RDMX_OK);
	expect_wc(p.s.cq, RDMX_OK, RDMX_OP_RECV);
	for (uint64_t id = 1; id <= 3; id++) {
		if (mapped && id == 2)
			continue;
		wc = expect_wc(p.c.cq, RDMX_OK,
			       id == 1 ? RDMX_OP_SEND : RDMX_OP_WRITE);
		assert_int_equal(wc.wr_id, id);
	}
	assert_pattern(dst.p, PAGE, SEED, 0);
	buf_free(&dst);
	buf_free(&src);
	buf_free(&msg);
	buf_free(&rbuf);
	pair_close(&p);
}

/* @op (WRITE or READ) of all of @b at @rem from the client; its status. */
static rdmx_status rdma_all(struct pair *p, enum rdmx_opcode op, struct buf *b,
			    const struct rdmx_remote *rem)
{
	struct rdmx_sge s = sge_of(b, 0, b->len);
	struct rdmx_wr wr = { .opcode = op,
			      .sg_list = &s,
			      .num_sge = 1,
			      .remote_addr = rem->addr,
			      .rkey = rem->rkey };
	rdmx_status st = rdmx_post(p->cconn, &wr);

	return st ? st : wait_wc(p->c.cq).status;
}

/*
 * Two regions of the target's, WRITEd in turn, and a second registration
 * of the first that grants only READs: each request is checked against
 * the grant its own rkey names (over shm the initiator keeps the grant it
 * used last, and must not take it for another's, though both cover the
 * same bytes). A dereg of one region leaves the other writable.
 */
static void test_mem_grants_kept_apart(void **state)
{
	struct pair p;
	struct buf a, b, src, ro = { 0 };
	struct rdmx_remote ra, rb, rro;

	(void)state;
	pair_open(&p);
	buf_alloc_from(&p.s, &a, PAGE, all_access, true);
	buf_alloc_from(&p.s, &b, PAGE, all_access, true);
	buf_alloc(&p.c, &src, PAGE, RDMX_ACCESS_LOCAL_WRITE);
	ro.p = a.p;
	ro.len = PAGE;
	assert_int_equal(rdmx_mr_reg(p.s.ctx, a.p, PAGE,
				     RDMX_ACCESS_REMOTE_READ, &ro.mr),
			 RDMX_OK);
	ra = share_remote(&p, &a);
	rb = share_remote(&p, &b);
	rro = share_remote(&p, &ro);
	for (uint8_t i = 0; i < 20; i++) {
		buf_fill(&src, SEED + i);
		assert_int_equal(rdma_all(&p, RDMX_OP_WRITE, &src, &ra),
				 RDMX_OK);
		buf_fill(&src, SEED + 100 + i);
		assert_int_equal(rdma_all(&p, RDMX_OP_WRITE, &src, &rb),
				 RDMX_OK);
		assert_pattern(a.p, PAGE, SEED + i, 0);
		assert_pattern(b.p, PAGE, SEED + 100 + i, 0);
	}
	assert_int_equal(rdmx_mr_dereg(b.mr), RDMX_OK);
	b.mr = NULL;
	buf_fill(&src, SEED + 50);
	assert_int_equal(rdma_all(&p, RDMX_OP_WRITE, &src, &ra), RDMX_OK);
	assert_pattern(a.p, PAGE, SEED + 50, 0);
	/* READ through the second grant, then WRITE through each. */
	memset(src.p, 0, PAGE);
	assert_int_equal(rdma_all(&p, RDMX_OP_READ, &src, &rro), RDMX_OK);
	assert_pattern(src.p, PAGE, SEED + 50, 0);
	buf_fill(&src, SEED + 60);
	assert_int_equal(rdma_all(&p, RDMX_OP_WRITE, &src, &ra), RDMX_OK);
	buf_fill(&src, SEED + 70);
	/* The kept grant is shm's, whose WRITEs report their refusals;
	 * test_access checks refusals over iWARP with READs. */
	if (write_refusal_reported(p.cconn))
		assert_refused(p.cconn,
			       rdma_all(&p, RDMX_OP_WRITE, &src, &rro));
	assert_pattern(a.p, PAGE, SEED + 60, 0);
	assert_int_equal(rdmx_mr_dereg(ro.mr), RDMX_OK);
	buf_free(&a);
	buf_free(&b);
	buf_free(&src);
	pair_close(&p);
}

struct hammer {
	struct pair *p;
	struct buf *src;
	struct rdmx_remote rem;
	atomic_int ok; /* WRITEs that completed well */
	_Atomic rdmx_status end; /* the first that did not */
	atomic_bool stop;
};

/* WRITE the region over and over until one fails. */
static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	struct rdmx_sge s = sge_of(h->src, 0, h->src->len);
	struct rdmx_completion wc;

	for (uint64_t i = 0; !atomic_load(&h->stop); i++) {
		h->src->p[0] = (uint8_t)i;
		if (rdmx_post_write(h->p->cconn, &s, h->rem.addr, h->rem.rkey,
				    i)) {
			h->end = RDMX_ERR_CONN_LOST;
			return NULL;
		}
		wc = wait_wc(h->p->c.cq);
		if (wc.status) {
			h->end = wc.status;
			return NULL;
		}
		atomic_fetch_add(&h->ok, 1);
	}
	return NULL;
}

/*
 * rdmx_mr_dereg while a peer WRITEs the region as fast as it can (over
 * shm on mapped memory, itself): once dereg returns, not one byte of the
 * region changes, and the peer's next WRITE is refused.
 */
static void test_mem_dereg_stops_writes(void **state)
{
	enum { LEN = 64 * 1024 };
	struct pair p;
	struct buf dst, src;
	struct hammer h = { .p = &p, .src = &src };
	static uint8_t snap[LEN];
	pthread_t t;

	(void)state;
	pair_open(&p);
	buf_alloc_from(&p.s, &dst, LEN,
		       RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE,
		       true);
	buf_alloc(&p.c, &src, LEN, 0);
	h.rem = share_remote(&p, &dst);
	assert_int_equal(pthread_create(&t, NULL, hammer_main, &h), 0);
	while (atomic_load(&h.ok) < 1000 && !h.end)
		usleep(100);
	assert_int_equal(rdmx_mr_dereg(dst.mr), RDMX_OK);
	dst.mr = NULL;
	memcpy(snap, dst.p, LEN);
	for (double t0 = now_s(); !h.end && now_s() - t0 < T_FLUSH_S;)
		usleep(1000);
	atomic_store(&h.stop, true);
	assert_int_equal(pthread_join(t, NULL), 0);
	if (!h.end)
		fail_msg("the peer still WRITEs the region after dereg");
	usleep(20000);
	assert_memory_equal(snap, dst.p, LEN);
	print_message("%d WRITEs landed, then %s\n", atomic_load(&h.ok),
		      rdmx_strerror(h.end));
	assert_refused(p.cconn, h.end);
	buf_free(&dst);
	buf_free(&src);
	pair_close(&p);
}

static const struct child children[] = {
	{ "idle_target", idle_target },
	{ NULL, NULL },
};

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mem_alloc_errors),
		cmocka_unit_test(test_mem_one_sided_without_target_cpu),
		cmocka_unit_test(test_mem_conn_says_mapped),
		cmocka_unit_test(test_mem_unordered_write_passes_waiting_send),
		cmocka_unit_test(test_mem_grants_kept_apart),
		cmocka_unit_test(test_mem_dereg_stops_writes),
	};

	harness_children(argc, argv, children);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
