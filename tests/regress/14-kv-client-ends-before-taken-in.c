/* SPDX-License-Identifier: MIT */
/*
 * Description: a kv client that ends before its worker took it in (its
 * first request malformed), while the accepter is slow to hand it over,
 * or still posting the client's own RECVs (without a srq, as on siw):
 * the worker closes its connection and frees it only once handed over.
 * It used to free the client under the hand-over, or close the freed
 * connection again (ASan: heap-use-after-free), or close the connection
 * the accepter was posting to (a crash, seen on siw).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "rdmx_kv.h"
#include "tsan.h"

#ifndef RDMX_TSAN
/*
 * The accepter hands a client over under its worker's lock, which the
 * worker takes at every idle turn, to take clients in: the mutex the
 * worker has locked 5 times first is that one. Once armed, the accepter
 * waits 300 ms before it locks it. TSan has a lock of its own here, so
 * its build skips this test.
 */
static int (*real_lock)(pthread_mutex_t *);
static _Atomic(pthread_mutex_t *) handover;
static atomic_bool slow, no_srq, slow_posts;
static pthread_mutex_t *seen[8]; /* the worker thread's only */
static int seen_n[8];

__attribute__((constructor)) static void find_real_lock(void)
{
	real_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT,
						      "pthread_mutex_lock");
}

static void worker_locks(pthread_mutex_t *m)
{
	for (int i = 0; i < 8; i++) {
		if (!seen[i])
			seen[i] = m;
		if (seen[i] == m) {
			if (++seen_n[i] == 5)
				atomic_store(&handover, m);
			return;
		}
	}
}

static bool thread_is(const char *want)
{
	char name[16];

	return !pthread_getname_np(pthread_self(), name, sizeof(name)) &&
	       !strcmp(name, want);
}

/*
 * Linked with --wrap: with no_srq the server finds no srq, as on siw, and
 * its accepter posts each client's own RECVs; with slow_posts it waits
 * 300 ms after the first.
 */
rdmx_status __real_rdmx_srq_create(struct rdmx_ctx *ctx,
				   const struct rdmx_srq_attr *attr,
				   struct rdmx_srq **srq_p);
rdmx_status __wrap_rdmx_srq_create(struct rdmx_ctx *ctx,
				   const struct rdmx_srq_attr *attr,
				   struct rdmx_srq **srq_p);
rdmx_status __real_rdmx_post_recv(struct rdmx_conn *conn,
				  const struct rdmx_sge *sg, int num_sge,
				  uint64_t wr_id);
rdmx_status __wrap_rdmx_post_recv(struct rdmx_conn *conn,
				  const struct rdmx_sge *sg, int num_sge,
				  uint64_t wr_id);

rdmx_status __wrap_rdmx_srq_create(struct rdmx_ctx *ctx,
				   const struct rdmx_srq_attr *attr,
				   struct rdmx_srq **srq_p)
{
	if (atomic_load(&no_srq))
		return RDMX_ERR_UNSUPPORTED;
	return __real_rdmx_srq_create(ctx, attr, srq_p);
}

rdmx_status __wrap_rdmx_post_recv(struct rdmx_conn *conn,
				  const struct rdmx_sge *sg, int num_sge,
				  uint64_t wr_id)
{
	rdmx_status st = __real_rdmx_post_recv(conn, sg, num_sge, wr_id);

	if (atomic_load(&slow_posts) && wr_id == 0 &&
	    thread_is("rdmx-kv-accept"))
		usleep(300000);
	return st;
}

int pthread_mutex_lock(pthread_mutex_t *m)
{
	char name[16];

	if (!pthread_getname_np(pthread_self(), name, sizeof(name))) {
		if (!strcmp(name, "rdmx-kv-worker") && !atomic_load(&handover))
			worker_locks(m);
		else if (!strcmp(name, "rdmx-kv-accept") &&
			 atomic_load(&slow) && atomic_load(&handover) == m)
			usleep(300000);
	}
	return real_lock(m);
}

static struct rdmx_kv_server_stats stats_of(struct rdmx_kv_server *srv)
{
	struct rdmx_kv_server_stats st;

	rdmx_kv_server_stats(srv, &st);
	return st;
}

static void client_ends_before_taken_in(atomic_bool *slow_part)
{
	struct rdmx_kv_server_attr a = { .mask = RDMX_KV_SERVER_ATTR_MEMORY |
						 RDMX_KV_SERVER_ATTR_THREADS,
					 .memory = 16 << 20,
					 .threads = 1 };
	struct rdmx_kv_attr ka = { .mask = RDMX_KV_ATTR_TIMEOUT_MS,
				   .timeout_ms = (uint32_t)T_TIMEOUT_MS };
	struct rdmx_kv_server *srv;
	struct rdmx_kv_client *kc;
	struct rdmx_conn *conn;
	struct side s, c;
	struct buf b;
	char addr[64], v[8];
	uint64_t vlen;
	double until;
	int port;

	side_open(&s);
	side_open(&c);
	assert_int_equal(rdmx_kv_server_create(s.ctx, "127.0.0.1:0", &a, &srv),
			 RDMX_OK);
	port = rdmx_kv_server_port(srv);
	until = now_s() + T_TIMEOUT_MS / 1000.0;
	while (!atomic_load(&handover) && now_s() < until)
		usleep(1000);
	assert_non_null(atomic_load(&handover));
	/* A client whose first request is no request at all. */
	atomic_store(slow_part, true);
	conn = side_connect(&c, port);
	buf_alloc(&c, &b, 8, RDMX_ACCESS_LOCAL_WRITE);
	memset(b.p, 0xff, 8);
	assert_int_equal(rdmx_post_send(conn,
					&(struct rdmx_sge){ b.p, 8, b.mr }, 1),
			 RDMX_OK);
	/* Ended by the worker (a few ms), whose idle turns go on, while
	 * the accepter has yet to let go of it. */
	usleep(150000);
	assert_int_equal(stats_of(srv).clients_total, 0);
	/* Not counted yet, nor uncounted: it used to wrap to 2^64 - 1. */
	assert_int_equal(stats_of(srv).clients_open, 0);
	/* Then the hand-over, the take, and the end of its connection. */
	until = now_s() + T_TIMEOUT_MS / 1000.0;
	while (rdmx_conn_check(conn) == RDMX_OK && now_s() < until)
		usleep(1000);
	assert_int_not_equal(rdmx_conn_check(conn), RDMX_OK);
	assert_int_equal(stats_of(srv).clients_total, 1);
	atomic_store(slow_part, false);
	rdmx_conn_close(conn);
	while (rdmx_poll(c.cq, &(struct rdmx_completion){ 0 }, 1) > 0)
		;
	buf_free(&b);
	/* The server serves on. */
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	assert_int_equal(rdmx_kv_connect(c.ctx, addr, &ka, &kc), RDMX_OK);
	assert_int_equal(rdmx_kv_put(kc, "k", 1, "value", 5), RDMX_OK);
	assert_int_equal(rdmx_kv_get(kc, "k", 1, v, sizeof(v), &vlen), RDMX_OK);
	assert_int_equal(vlen, 5);
	assert_memory_equal(v, "value", 5);
	rdmx_kv_close(kc);
	until = now_s() + T_TIMEOUT_MS / 1000.0;
	while (stats_of(srv).clients_open && now_s() < until)
		usleep(1000);
	assert_int_equal(stats_of(srv).clients_open, 0);
	rdmx_kv_server_destroy(srv);
	side_close(&c);
	side_close(&s);
}

/* Over a srq: the hand-over is slow. */
static void test_kv_client_ends_before_taken_in(void **state)
{
	(void)state;
	client_ends_before_taken_in(&slow);
}

/* RECVs of its own: their posting is slow. */
static void test_kv_client_ends_while_its_recvs_are_posted(void **state)
{
	(void)state;
	atomic_store(&no_srq, true);
	client_ends_before_taken_in(&slow_posts);
	atomic_store(&no_srq, false);
}
#endif

int main(void)
{
#ifdef RDMX_TSAN
	fprintf(stderr, "TSan intercepts pthread_mutex_lock itself, skip\n");
	return 77;
#else
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kv_client_ends_before_taken_in),
		cmocka_unit_test(
			test_kv_client_ends_while_its_recvs_are_posted),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
#endif
}
