/* SPDX-License-Identifier: MIT */
/* Description: RDMA WRITE, WRITE-with-immediate and READ, bytes checked. */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static const size_t sizes[] = { 0, 1, 4095, 4096, 4097, 1 << 20, 16 << 20 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define OFF 100 /* a remote offset that is not page aligned */

static void test_write_sizes(void **state)
{
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, (16 << 20), 0);
	buf_alloc(&p.s, &dst, (16 << 20) + 2 * OFF,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE);
	rem = share_remote(&p, &dst);
	for (size_t i = 0; i < NSIZES; i++) {
		struct rdmx_sge s = sge_of(&src, 0, sizes[i]);

		buf_fill(&src, (uint8_t)(i + 1));
		memset(dst.p, 0xee, dst.len);
		assert_int_equal(rdmx_post_write(p.cconn, &s, rem.addr + OFF,
						 rem.rkey, i),
				 RDMX_OK);
		/* Completed means placed: the target's bytes are there now. */
		expect_wc(p.c.cq, RDMX_OK, RDMX_OP_WRITE);
		assert_pattern(dst.p + OFF, sizes[i], (uint8_t)(i + 1), 0);
		assert_int_equal(dst.p[OFF - 1], 0xee);
		assert_int_equal(dst.p[OFF + sizes[i]], 0xee);
	}
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

static void test_read_sizes(void **state)
{
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.s, &src, (16 << 20) + 2 * OFF, RDMX_ACCESS_REMOTE_READ);
	buf_alloc(&p.c, &dst, (16 << 20) + 1, RDMX_ACCESS_LOCAL_WRITE);
	buf_fill(&src, 42);
	rem = share_remote(&p, &src);
	for (size_t i = 0; i < NSIZES; i++) {
		struct rdmx_sge d = sge_of(&dst, 0, sizes[i]);

		/*
		 * On the lossy link a 16 MiB READ over rxe now and then ends
		 * in CONN_LOST from a device error (no watchdog line: rxe
		 * itself gave up; 2 of about 8 clean-clone runs). Sizes up
		 * to 1 MiB still cross that link; the clean suites read
		 * 16 MiB on rxe and siw.
		 */
		if (sizes[i] > (1u << 20) && suite_lossy() &&
		    !strcmp(suite_transport(), "verbs")) {
			print_message(
				"skip the %zu B READ on the lossy link over "
				"verbs\n",
				sizes[i]);
			continue;
		}
		memset(dst.p, 0xee, dst.len);
		assert_int_equal(rdmx_post_read(p.cconn, &d, rem.addr + OFF,
						rem.rkey, i),
				 RDMX_OK);
		expect_wc(p.c.cq, RDMX_OK, RDMX_OP_READ);
		assert_pattern(dst.p, sizes[i], 42, OFF);
		assert_int_equal(dst.p[sizes[i]], 0xee);
	}
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

static void test_write_imm_consumes_recv(void **state)
{
	rdmx_status st;
	struct pair p;
	struct buf src, dst, rbuf;
	struct rdmx_remote rem;
	struct rdmx_sge s, r;
	struct rdmx_completion wc;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, 5000, 0);
	buf_alloc(&p.s, &dst, 5000,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE);
	buf_alloc(&p.s, &rbuf, 16, RDMX_ACCESS_LOCAL_WRITE);
	rem = share_remote(&p, &dst);
	buf_fill(&src, 77);
	s = sge_of(&src, 0, 5000);
	r = sge_of(&rbuf, 0, 16);
	assert_int_equal(rdmx_post_recv(p.sconn, &r, 1, 10), RDMX_OK);
	st = rdmx_post_write_imm(p.cconn, &s, rem.addr, rem.rkey, 0xdeadbeef,
				 11);
	if (st == RDMX_ERR_UNSUPPORTED) {
		buf_free(&src);
		buf_free(&dst);
		buf_free(&rbuf);
		pair_close(&p);
		suite_skip("%s: this device has no WRITE with immediate "
			   "(iWARP)",
			   suite_transport());
	}
	assert_int_equal(st, RDMX_OK);
	expect_wc(p.c.cq, RDMX_OK, RDMX_OP_WRITE_IMM);
	wc = expect_wc(p.s.cq, RDMX_OK, RDMX_OP_RECV_IMM);
	assert_int_equal(wc.wr_id, 10);
	assert_int_equal(wc.imm, 0xdeadbeef);
	assert_int_equal(wc.byte_len, 5000);
	assert_pattern(dst.p, 5000, 77, 0);
	buf_free(&src);
	buf_free(&dst);
	buf_free(&rbuf);
	pair_close(&p);
}

static void test_ops_complete_in_order(void **state)
{
	enum { N = 300 };
	struct pair p;
	struct buf src, dst, rd;
	struct rdmx_remote rem;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, 4096, 0);
	buf_alloc(&p.c, &rd, 4096, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.s, &dst, 4096,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE |
			  RDMX_ACCESS_REMOTE_READ);
	rem = share_remote(&p, &dst);
	/* Mixed WRITEs and READs: completions come back in posting order. */
	for (int i = 0; i < N; i++) {
		struct rdmx_sge s = sge_of(i % 2 ? &rd : &src, 0, 1 + i * 13);

		if (i % 2)
			assert_int_equal(rdmx_post_read(p.cconn, &s, rem.addr,
							rem.rkey, i),
					 RDMX_OK);
		else
			assert_int_equal(rdmx_post_write(p.cconn, &s, rem.addr,
							 rem.rkey, i),
					 RDMX_OK);
	}
	for (int i = 0; i < N; i++) {
		struct rdmx_completion wc = wait_wc(p.c.cq);

		assert_int_equal(wc.status, RDMX_OK);
		assert_int_equal(wc.wr_id, i);
	}
	buf_free(&src);
	buf_free(&rd);
	buf_free(&dst);
	pair_close(&p);
}

/*
 * A READ then a fenced WRITE of the same place: the READ returns what was
 * there before, never the WRITE's bytes. Without the fence the transports
 * may let the WRITE land first (InfiniBand allows it; tcp and shm did it in
 * most rounds), so rounds without it only show the case can fail.
 */
static void test_write_fenced_after_read(void **state)
{
	enum { ROUNDS = 300, SZ = 64 << 10 };
	struct pair p;
	struct buf src, dst, rd;
	struct rdmx_remote rem;
	int early = 0;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, SZ, 0);
	buf_alloc(&p.c, &rd, SZ, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.s, &dst, SZ,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE |
			  RDMX_ACCESS_REMOTE_READ);
	rem = share_remote(&p, &dst);
	for (int r = 1; r <= ROUNDS; r++) {
		struct rdmx_sge rs = sge_of(&rd, 0, SZ),
				ws = sge_of(&src, 0, SZ);
		struct rdmx_wr wr = { .wr_id = 2,
				      .opcode = RDMX_OP_WRITE,
				      .sg_list = &ws,
				      .num_sge = 1,
				      .remote_addr = rem.addr,
				      .rkey = rem.rkey,
				      .flags = RDMX_WR_FENCE };

		memset(src.p, r & 0xff, SZ); /* round r writes r */
		assert_int_equal(rdmx_post_read(p.cconn, &rs, rem.addr,
						rem.rkey, 1),
				 RDMX_OK);
		assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_OK);
		expect_wc(p.c.cq, RDMX_OK, RDMX_OP_READ);
		expect_wc(p.c.cq, RDMX_OK, RDMX_OP_WRITE);
		/* The READ saw round r - 1's bytes, whole. */
		for (int i = 0; i < SZ; i += 512)
			if (rd.p[i] != ((r - 1) & 0xff) ||
			    rd.p[SZ - 1] != rd.p[0]) {
				early++;
				break;
			}
	}
	assert_int_equal(early, 0);
	buf_free(&src);
	buf_free(&rd);
	buf_free(&dst);
	pair_close(&p);
}

static void test_ops_posted_as_a_list(void **state)
{
	enum { N = 40, SZ = 512 }; /* more than one verbs chain of 32 */
	struct pair p;
	struct buf src, dst, back;
	struct rdmx_remote rem;
	struct rdmx_sge sg[N];
	struct rdmx_wr wr[N];
	int posted = -1;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, N * SZ, 0);
	buf_alloc(&p.c, &back, N * SZ, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.s, &dst, N * SZ,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE |
			  RDMX_ACCESS_REMOTE_READ);
	buf_fill(&src, 21);
	rem = share_remote(&p, &dst);
	/* Slot i: WRITE it, then (at i + 1) READ the slot written before. */
	for (int i = 0; i < N; i++) {
		bool rd = i % 2;
		size_t slot = (size_t)(rd ? i - 1 : i) * SZ;

		sg[i] = sge_of(rd ? &back : &src, slot, SZ);
		wr[i] = (struct rdmx_wr){ .wr_id = (uint64_t)i,
					  .opcode = rd ? RDMX_OP_READ
						       : RDMX_OP_WRITE,
					  .sg_list = &sg[i],
					  .num_sge = 1,
					  .remote_addr = rem.addr + slot,
					  .rkey = rem.rkey };
	}
	assert_int_equal(rdmx_post_list(p.cconn, wr, N, &posted), RDMX_OK);
	assert_int_equal(posted, N);
	for (int i = 0; i < N; i++) {
		struct rdmx_completion wc = wait_wc(p.c.cq);

		assert_int_equal(wc.status, RDMX_OK);
		assert_int_equal(wc.wr_id, i);
	}
	for (int i = 0; i < N; i += 2)
		assert_pattern(back.p + (size_t)i * SZ, SZ, 21, (size_t)i * SZ);
	/* A bad request stops the list: the good prefix is posted. */
	wr[3].num_sge = RDMX_MAX_SGE + 1;
	assert_int_equal(rdmx_post_list(p.cconn, wr, 6, &posted),
			 RDMX_ERR_INVALID);
	assert_int_equal(posted, 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(wait_wc(p.c.cq).wr_id, i);
	buf_free(&src);
	buf_free(&back);
	buf_free(&dst);
	pair_close(&p);
}

/* Selective signaling: only signaled requests complete, unless one fails. */
static void test_unsignaled_requests(void **state)
{
	enum { N = 32, EVERY = 8, SZ = 256 };
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;
	struct rdmx_sge sg;
	struct rdmx_completion wc;
	struct rdmx_wr wr;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, N * SZ, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.s, &dst, N * SZ,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE);
	buf_fill(&src, 33);
	rem = share_remote(&p, &dst);
	for (int i = 0; i < N; i++) {
		sg = sge_of(&src, (size_t)i * SZ, SZ);
		wr = (struct rdmx_wr){
			.wr_id = (uint64_t)i,
			.opcode = RDMX_OP_WRITE,
			.sg_list = &sg,
			.num_sge = 1,
			.remote_addr = rem.addr + (uint64_t)i * SZ,
			.rkey = rem.rkey,
			.flags = i % EVERY == EVERY - 1 ? 0
							: RDMX_WR_UNSIGNALED,
		};
		assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_OK);
	}
	/* One completion per signaled request; it covers those before. */
	for (int i = EVERY - 1; i < N; i += EVERY) {
		wc = expect_wc(p.c.cq, RDMX_OK, RDMX_OP_WRITE);
		assert_int_equal(wc.wr_id, i);
	}
	assert_pattern(dst.p, N * SZ, 33, 0);
	assert_int_equal(rdmx_poll(p.c.cq, &wc, 1), 0);
	/* An unknown flag is refused. */
	wr.flags = 1u << 7;
	assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_ERR_INVALID);
	/* A failed unsignaled request completes with its error. */
	sg = sge_of(&src, 0, SZ);
	wr = (struct rdmx_wr){ .wr_id = 99,
			       .opcode = RDMX_OP_READ,
			       .sg_list = &sg,
			       .num_sge = 1,
			       .remote_addr = rem.addr,
			       .rkey = rem.rkey ^ 0x80000001u,
			       .flags = RDMX_WR_UNSIGNALED };
	assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_OK);
	wc = wait_wc(p.c.cq);
	assert_int_equal(wc.wr_id, 99);
	assert_int_equal(wc.opcode, RDMX_OP_READ);
	assert_refused(p.cconn, wc.status);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

/*
 * conn.max_send_wr requests may be outstanding, and not one more: the
 * next post is RDMX_ERR_AGAIN on every transport (verbs took one more).
 * Nothing completes meanwhile: progress runs only in rdmx_poll here.
 */
static void test_post_stops_at_max_send_wr(void **state)
{
	enum { DEPTH = 16 };
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;
	struct rdmx_sge s;

	(void)state;
	if (suite_mem_mapped())
		suite_skip("a shm initiator does requests on mapped memory as "
			   "it posts them: none stays outstanding");
	setenv("RDMX_PROGRESS_THREAD", "off", 1);
	pair_open_with(&p, "RDMX_CONN_MAX_SEND_WR", "16");
	unsetenv("RDMX_PROGRESS_THREAD");
	buf_alloc(&p.c, &src, 64, 0);
	buf_alloc(&p.s, &dst, 64,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE);
	rdmx_mr_remote(dst.mr, &rem); /* one process: no need to send it */
	s = sge_of(&src, 0, 8);
	for (int i = 0; i < DEPTH; i++)
		assert_int_equal(rdmx_post_write(p.cconn, &s, rem.addr,
						 rem.rkey, (uint64_t)i),
				 RDMX_OK);
	assert_int_equal(rdmx_post_write(p.cconn, &s, rem.addr, rem.rkey, 99),
			 RDMX_ERR_AGAIN);
	rdmx_conn_close(p.cconn); /* flushes them */
	p.cconn = NULL;
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

/*
 * Unsignaled requests hold their send queue slots until a later request
 * completes, on every transport, as on a NIC (tcp and shm freed them when
 * the target answered: 2,058 unsignaled WRITEs posted without an AGAIN,
 * where verbs stalls). Done or not, 16 unsignaled WRITEs fill a queue of
 * 16; a signaled one's completion frees them all.
 */
static void test_unsignaled_hold_send_queue_slots(void **state)
{
	enum { DEPTH = 16 };
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;
	struct rdmx_completion wc;
	struct rdmx_sge s;
	struct rdmx_wr wr = { .opcode = RDMX_OP_WRITE, .num_sge = 1 };

	(void)state;
	pair_open_with(&p, "RDMX_CONN_MAX_SEND_WR", "16");
	buf_alloc(&p.c, &src, 64, 0);
	buf_alloc(&p.s, &dst, 64,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE);
	rdmx_mr_remote(dst.mr, &rem);
	s = sge_of(&src, 0, 8);
	wr.sg_list = &s;
	wr.remote_addr = rem.addr;
	wr.rkey = rem.rkey;
	for (int round = 0; round < 2; round++) {
		/* 15 unsignaled and a signaled one: its completion frees 16. */
		for (int i = 0; i < DEPTH; i++) {
			wr.wr_id = (uint64_t)i;
			wr.flags = i < DEPTH - 1 ? RDMX_WR_UNSIGNALED : 0;
			assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_OK);
		}
		wc = expect_wc(p.c.cq, RDMX_OK, RDMX_OP_WRITE);
		assert_int_equal(wc.wr_id, DEPTH - 1);
	}
	/* Only unsignaled ones: done at the target, yet the queue is full. */
	wr.flags = RDMX_WR_UNSIGNALED;
	for (int i = 0; i < DEPTH; i++)
		assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_OK);
	for (int i = 0; i < 50; i++) { /* time for all of them to finish */
		assert_int_equal(rdmx_poll(p.c.cq, &wc, 1), 0);
		usleep(2000);
	}
	assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_ERR_AGAIN);
	rdmx_conn_close(p.cconn);
	p.cconn = NULL;
	while (rdmx_poll(p.c.cq, &wc, 1) > 0) /* flushed, or not */
		assert_true(wc.status == RDMX_ERR_FLUSHED ||
			    wc.status == RDMX_ERR_CONN_LOST);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

/*
 * Once rdmx_conn_close has returned, the peer touches the initiator's
 * buffers no more, even with READs outstanding (shm's single copy used to
 * go on writing them from the target after the close).
 */
static void test_read_close_ends_placement(void **state)
{
	enum { N = 32, LEN = 1 << 20 };
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;
	struct rdmx_completion wc;
	struct timespec nap = { 0, 300 * 1000 * 1000 };

	(void)state;
	pair_open(&p);
	buf_alloc(&p.s, &src, LEN,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_READ);
	memset(src.p, 0xab, LEN);
	buf_alloc(&p.c, &dst, (size_t)N * LEN, RDMX_ACCESS_LOCAL_WRITE);
	rem = share_remote(&p, &src);
	for (int i = 0; i < N; i++) {
		struct rdmx_sge s = sge_of(&dst, (size_t)i * LEN, LEN);

		assert_int_equal(rdmx_post_read(p.cconn, &s, rem.addr, rem.rkey,
						(uint64_t)i),
				 RDMX_OK);
	}
	rdmx_conn_close(p.cconn);
	p.cconn = NULL;
	/* The application takes its buffer back at once. */
	memset(dst.p, 0, dst.len);
	nanosleep(&nap, NULL);
	for (size_t i = 0; i < dst.len; i++)
		if (dst.p[i])
			fail_msg("byte %zu written after rdmx_conn_close", i);
	while (rdmx_poll(p.c.cq, &wc, 1) > 0)
		assert_int_equal(wc.opcode, RDMX_OP_READ);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

/*
 * The cq's first poller (this thread, in share_remote) gets its own
 * completions without the ring's lock: a shm READ of mapped memory
 * completes inside rdmx_post, into the owner's lane (core/cq.c). What
 * follows checks that nothing in the lane is lost to another poller, to
 * rdmx_cq_fd or to rdmx_cq_wait, and that order holds.
 */
struct lane_pair {
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;
};

enum { LANE_READ = 64 };

static void lane_open(struct lane_pair *l, const char *var, const char *val)
{
	if (var)
		pair_open_with(&l->p, var, val);
	else
		pair_open(&l->p);
	buf_alloc(&l->p.s, &l->src, 4096, RDMX_ACCESS_REMOTE_READ);
	buf_alloc(&l->p.c, &l->dst, 4096, RDMX_ACCESS_LOCAL_WRITE);
	buf_fill(&l->src, 9);
	l->rem = share_remote(&l->p, &l->src);
}

static void lane_read(struct lane_pair *l, uint64_t i)
{
	size_t off = (size_t)(i % (4096 / LANE_READ)) * LANE_READ;
	struct rdmx_sge d = sge_of(&l->dst, off, LANE_READ);

	assert_int_equal(rdmx_post_read(l->p.cconn, &d, l->rem.addr + off,
					l->rem.rkey, i),
			 RDMX_OK);
}

/* Close, checking the bytes READs @lo..@hi - 1 brought. */
static void lane_close(struct lane_pair *l, size_t lo, size_t hi)
{
	assert_pattern(l->dst.p + lo * LANE_READ, (hi - lo) * LANE_READ, 9,
		       lo * LANE_READ);
	buf_free(&l->src);
	buf_free(&l->dst);
	pair_close(&l->p);
}

enum { LANE_N = 40 }; /* more than the lane holds (16): the ring too */

struct lane_poller {
	struct rdmx_cq *cq;
	int want, got;
	uint64_t ids[LANE_N];
};

static void *lane_poll_all(void *arg)
{
	struct lane_poller *lp = arg;
	double end = now_s() + T_TIMEOUT_MS / 1e3;
	struct rdmx_completion wc;

	while (lp->got < lp->want && now_s() < end)
		if (rdmx_poll(lp->cq, &wc, 1) == 1)
			lp->ids[lp->got++] = wc.status ? UINT64_MAX : wc.wr_id;
	return NULL;
}

static void test_cq_second_poller_gets_all(void **state)
{
	struct lane_pair l;
	struct lane_poller lp = { 0 };
	pthread_t t;

	(void)state;
	lane_open(&l, NULL, NULL);
	for (int i = 0; i < LANE_N; i++)
		lane_read(&l, (uint64_t)i);
	/* Another thread polls them all, in posting order. */
	lp.cq = l.p.c.cq;
	lp.want = LANE_N;
	assert_int_equal(pthread_create(&t, NULL, lane_poll_all, &lp), 0);
	pthread_join(t, NULL);
	assert_int_equal(lp.got, LANE_N);
	for (int i = 0; i < LANE_N; i++)
		assert_int_equal(lp.ids[i], i);
	/* Shared now: what this thread makes next, another thread sees. */
	lane_read(&l, LANE_N);
	lp.got = 0;
	lp.want = 1;
	assert_int_equal(pthread_create(&t, NULL, lane_poll_all, &lp), 0);
	pthread_join(t, NULL);
	assert_int_equal(lp.got, 1);
	assert_int_equal(lp.ids[0], LANE_N);
	/* And this thread's polls see what it makes. */
	lane_read(&l, LANE_N + 1);
	assert_int_equal(expect_wc(l.p.c.cq, RDMX_OK, RDMX_OP_READ).wr_id,
			 LANE_N + 1);
	lane_close(&l, 0, LANE_N + 2);
}

static void test_cq_fd_shows_own_completion(void **state)
{
	struct lane_pair l;
	struct rdmx_completion wc;
	double end;
	int fd, n = 0;

	(void)state;
	lane_open(&l, NULL, NULL);
	/* Empty polls first: their progress takes the doorbells share_remote
	 * rang, which would make the fd readable on their own. */
	for (int i = 0; i < 5000; i++)
		assert_int_equal(rdmx_poll(l.p.c.cq, &wc, 1), 0);
	lane_read(&l, 1);
	fd = rdmx_cq_fd(l.p.c.cq);
	assert_true(fd >= 0);
	/* Over shm, a READ of mapped memory is done inside rdmx_post: its
	 * completion is there before the fd is, and the fd shows it at once
	 * (not at the watchdog's next tick). */
	if (suite_mem_mapped() && !strcmp(suite_transport(), "shm")) {
		struct pollfd now = { .fd = fd, .events = POLLIN };

		assert_int_equal(poll(&now, 1, 0), 1);
	}
	end = now_s() + T_TIMEOUT_MS / 1e3;
	while (!n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int left = (int)((end - now_s()) * 1e3);

		if (left <= 0 || poll(&pfd, 1, left) != 1)
			fail_msg("rdmx_cq_fd never readable: a completion "
				 "the poller made itself is not shown");
		n = rdmx_poll(l.p.c.cq, &wc, 1);
		assert_true(n >= 0);
	}
	assert_int_equal(wc.wr_id, 1);
	lane_close(&l, 1, 2);
}

static void test_cq_wait_sees_own_completion(void **state)
{
	struct lane_pair l;
	struct rdmx_completion wc;

	(void)state;
	/* Waits spin, never sleep: a wait blind to the lane times out. */
	lane_open(&l, "RDMX_PROGRESS_USE_EVENT_CHANNEL", "off");
	lane_read(&l, 1);
	assert_int_equal(rdmx_cq_wait(l.p.c.cq, T_TIMEOUT_MS), RDMX_OK);
	assert_int_equal(rdmx_poll(l.p.c.cq, &wc, 1), 1);
	assert_int_equal(wc.wr_id, 1);
	lane_close(&l, 1, 2);
}

/*
 * The lane closed while its owner is inside it: the owner posts and polls
 * without pause, and another thread starts polling the same cq halfway.
 * Every completion is taken exactly once, and each poller takes them in
 * posting order. A cq closes its lane once: rounds of fresh pairs give the
 * race more chances (a closer that does not wait for the owner to leave
 * the lane failed about one run in six with one round).
 */
enum { RACE_ROUNDS = 16, RACE_N = 2000, RACE_DEPTH = 8 };

struct lane_race {
	struct lane_pair *l;
	atomic_uint taken, started;
	atomic_uchar seen[RACE_N];
	atomic_bool disorder, dup;
};

static void lane_race_take(struct lane_race *r, uint64_t *last)
{
	struct rdmx_completion wc;

	if (rdmx_poll(r->l->p.c.cq, &wc, 1) != 1)
		return;
	if (wc.status || wc.wr_id >= RACE_N ||
	    atomic_exchange(&r->seen[wc.wr_id], 1))
		atomic_store(&r->dup, true);
	if (*last != UINT64_MAX && wc.wr_id <= *last)
		atomic_store(&r->disorder, true);
	*last = wc.wr_id;
	atomic_fetch_add(&r->taken, 1);
}

static void *lane_race_other(void *arg)
{
	struct lane_race *r = arg;
	uint64_t last = UINT64_MAX;
	double end = now_s() + T_TIMEOUT_MS / 1e3;

	while (atomic_load(&r->started) < RACE_N / 2 && now_s() < end)
		;
	while (atomic_load(&r->taken) < RACE_N && now_s() < end)
		lane_race_take(r, &last);
	return NULL;
}

static void lane_race_round(void)
{
	struct lane_pair l;
	struct lane_race *r = calloc(1, sizeof(*r));
	uint64_t last = UINT64_MAX;
	double end = now_s() + T_TIMEOUT_MS / 1e3;
	pthread_t t;

	assert_non_null(r);
	lane_open(&l, NULL, NULL);
	r->l = &l;
	assert_int_equal(pthread_create(&t, NULL, lane_race_other, r), 0);
	while (atomic_load(&r->taken) < RACE_N && now_s() < end) {
		unsigned posted = atomic_load(&r->started);

		if (posted < RACE_N &&
		    posted - atomic_load(&r->taken) < RACE_DEPTH) {
			lane_read(&l, posted);
			atomic_store(&r->started, posted + 1);
		}
		lane_race_take(r, &last);
	}
	pthread_join(t, NULL);
	assert_int_equal(atomic_load(&r->taken), RACE_N);
	assert_false(atomic_load(&r->dup));
	assert_false(atomic_load(&r->disorder));
	lane_close(&l, 0, 4096 / LANE_READ);
	free(r);
}

static void test_cq_shared_under_its_owner(void **state)
{
	(void)state;
	/* 32000 READs: on a lossy link (tests/vm/suite.sh netem) minutes,
	 * for a lane that fills only where completions come fast. */
	if (strcmp(suite_transport(), "shm"))
		suite_skip("the race of the lane's closing is run over shm");
	for (int i = 0; i < RACE_ROUNDS; i++)
		lane_race_round();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_sizes),
		cmocka_unit_test(test_read_sizes),
		cmocka_unit_test(test_write_imm_consumes_recv),
		cmocka_unit_test(test_ops_complete_in_order),
		cmocka_unit_test(test_write_fenced_after_read),
		cmocka_unit_test(test_ops_posted_as_a_list),
		cmocka_unit_test(test_unsignaled_requests),
		cmocka_unit_test(test_read_close_ends_placement),
		cmocka_unit_test(test_post_stops_at_max_send_wr),
		cmocka_unit_test(test_unsignaled_hold_send_queue_slots),
		cmocka_unit_test(test_cq_second_poller_gets_all),
		cmocka_unit_test(test_cq_fd_shows_own_completion),
		cmocka_unit_test(test_cq_wait_sees_own_completion),
		cmocka_unit_test(test_cq_shared_under_its_owner),
	};

	return cmocka_run_group_tests_name(suite_transport(), tests, NULL,
					   NULL);
}
