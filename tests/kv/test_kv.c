// SPDX-License-Identifier: MIT
/*
 * Description: lib/kv over the transport the suite runs on: round trips
 * from 0 B to 16 MiB, a missing key, 32 clients at once, GETs racing PUTs
 * of one key, a full pool, a buffer too small, the async forms (served
 * in the order posted), and a server killed under load.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "count_clock.h"
#include "harness.h"
#include "rdmx_kv.h"

/* A value whose every byte says which key and which version it is. */
static void val_fill(uint8_t *p, uint64_t len, uint32_t key, uint32_t ver)
{
	for (uint64_t i = 0; i < len; i++)
		p[i] = (uint8_t)(key * 31 + ver * 7 + i % 251);
}

static bool val_check(const uint8_t *p, uint64_t len, uint32_t key,
		      uint32_t ver)
{
	for (uint64_t i = 0; i < len; i++)
		if (p[i] != (uint8_t)(key * 31 + ver * 7 + i % 251))
			return false;
	return true;
}

struct kvs {
	struct side s;
	struct rdmx_kv_server *srv;
	char addr[80];
};

/* A server whose context is created with @var set to @value (NULL: as
 * is). */
static void kvs_open_with(struct kvs *k, uint64_t memory, uint32_t threads,
			  const char *var, const char *value)
{
	struct rdmx_kv_server_attr a = { .mask = RDMX_KV_SERVER_ATTR_MEMORY |
						 RDMX_KV_SERVER_ATTR_THREADS,
					 .memory = memory,
					 .threads = threads };
	char addr[80];

	side_open_with(&k->s, var, value);
	snprintf(addr, sizeof(addr), "%s:0", suite_addr());
	assert_int_equal(rdmx_kv_server_create(k->s.ctx, addr, &a, &k->srv),
			 RDMX_OK);
	snprintf(k->addr, sizeof(k->addr), "%s:%d", suite_addr(),
		 rdmx_kv_server_port(k->srv));
}

static void kvs_open_threads(struct kvs *k, uint64_t memory, uint32_t threads)
{
	kvs_open_with(k, memory, threads, NULL, NULL);
}

static void kvs_open(struct kvs *k, uint64_t memory)
{
	kvs_open_threads(k, memory, 2);
}

static void kvs_close(struct kvs *k)
{
	rdmx_kv_server_destroy(k->srv);
	side_close(&k->s);
}

/* The server's stats once it has had @total clients and has none open,
 * or after T_TIMEOUT_MS; looked at each ms. */
static struct rdmx_kv_server_stats clients_settled(struct kvs *k,
						   uint64_t total)
{
	struct rdmx_kv_server_stats st;

	for (int ms = 0; ms < T_TIMEOUT_MS; ms++) {
		rdmx_kv_server_stats(k->srv, &st);
		if (st.clients_total >= total && !st.clients_open)
			break;
		usleep(1000);
	}
	return st;
}

static struct rdmx_kv_client *client(struct side *s, const char *addr,
				     uint64_t buffer)
{
	struct rdmx_kv_attr a = { .mask = RDMX_KV_ATTR_TIMEOUT_MS,
				  .timeout_ms = (uint32_t)T_TIMEOUT_MS };
	struct rdmx_kv_client *c = NULL;

	if (buffer) {
		a.mask |= RDMX_KV_ATTR_BUFFER_BYTES;
		a.buffer_bytes = buffer;
	}
	assert_int_equal(rdmx_kv_connect(s->ctx, addr, &a, &c), RDMX_OK);
	return c;
}

/* Poll @c until @n results are in @res (room for @n); each poll must
 * bring one within T_TIMEOUT_MS. */
static void take_results(struct rdmx_kv_client *c, struct rdmx_kv_result *res,
			 int n)
{
	for (int got = 0; got < n;) {
		int m = rdmx_kv_poll(c, res + got, n - got, T_TIMEOUT_MS);

		assert_true(m > 0);
		got += m;
	}
}

static void test_kv_round_trips_0b_to_16m(void **state)
{
	static const uint64_t sizes[] = { 0, 1, 4096, 1 << 20, 16 << 20 };
	struct kvs k;
	struct side c;
	struct rdmx_kv_client *kc;
	uint8_t *in = malloc(16 << 20), *out = malloc(16 << 20);

	(void)state;
	kvs_open(&k, 64 << 20);
	side_open(&c);
	kc = client(&c, k.addr, 40 << 20);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char key[16];
		uint64_t len = 1;
		struct rdmx_kv_value v;

		snprintf(key, sizeof(key), "key%zu", i);
		val_fill(in, sizes[i], (uint32_t)i, 1);
		assert_int_equal(rdmx_kv_put(kc, key, strlen(key), in,
					     sizes[i]),
				 RDMX_OK);
		assert_int_equal(rdmx_kv_get(kc, key, strlen(key), out,
					     16 << 20, &len),
				 RDMX_OK);
		assert_int_equal(len, sizes[i]);
		assert_true(val_check(out, len, (uint32_t)i, 1));
		/* Zero copy: read where the server wrote it. */
		assert_int_equal(rdmx_kv_get_ref(kc, key, strlen(key), &v),
				 RDMX_OK);
		assert_int_equal(v.len, sizes[i]);
		assert_true(val_check(v.data, v.len, (uint32_t)i, 1));
		rdmx_kv_release(kc, &v);
		assert_int_equal(rdmx_kv_del(kc, key, strlen(key)), RDMX_OK);
		assert_int_equal(rdmx_kv_get(kc, key, strlen(key), out, 16,
					     &len),
				 RDMX_ERR_NOT_FOUND);
	}
	assert_int_equal(rdmx_kv_del(kc, "nokey", 5), RDMX_ERR_NOT_FOUND);
	rdmx_kv_close(kc);
	side_close(&c);
	kvs_close(&k);
	free(in);
	free(out);
}

/* The READs @ctx has posted. */
static uint64_t reads(struct rdmx_ctx *ctx)
{
	struct rdmx_stats st;

	rdmx_ctx_stats(ctx, &st);
	return st.ops_out[RDMX_OP_READ];
}

/* Transport @tp's (RDMX_TP_*) index in rdmx_stats' per-transport arrays. */
static int stats_index(unsigned tp)
{
	return __builtin_ctz(tp);
}

/* @ctx's connections went over @tp (whatever the suite was told). */
static bool conns_on(struct rdmx_ctx *ctx, unsigned tp)
{
	struct rdmx_stats st;

	rdmx_ctx_stats(ctx, &st);
	return st.conns_open[stats_index(tp)] != 0;
}

/*
 * How a PUT's value travels: inline in its request up to a few KiB,
 * pulled by the server's READ above that, and from 1 KiB where the
 * server maps the client's buffer (shm: RDMX_CONN_MAPPED), since there a
 * READ is one memcpy and inline three. The server's count of READs says
 * which way each went; every value comes back whole.
 */
static void test_kv_put_pulled_where_mapped(void **state)
{
	static const struct {
		uint64_t len;
		bool pulled, pulled_mapped;
	} puts[] = {
		{ 512, false, false },	  { 1023, false, false },
		{ 1024, false, true },	  { 4096, false, true },
		{ 64 << 10, true, true },
	};
	bool mapped;
	uint8_t *in = malloc(64 << 10), *out = malloc(64 << 10);
	struct rdmx_kv_client *kc;
	struct kvs k;
	struct side c;

	(void)state;
	kvs_open(&k, 16 << 20);
	side_open(&c);
	kc = client(&c, k.addr, 1 << 20);
	mapped = conns_on(k.s.ctx, RDMX_TP_SHM);
	for (size_t i = 0; i < sizeof(puts) / sizeof(puts[0]); i++) {
		uint64_t before = reads(k.s.ctx), len = 0;
		bool pulled = mapped ? puts[i].pulled_mapped : puts[i].pulled;
		char key[16];

		snprintf(key, sizeof(key), "pull%zu", i);
		val_fill(in, puts[i].len, (uint32_t)i, 2);
		assert_int_equal(rdmx_kv_put(kc, key, strlen(key), in,
					     puts[i].len),
				 RDMX_OK);
		if (reads(k.s.ctx) - before != (pulled ? 1 : 0))
			fail_msg("a PUT of %llu bytes (%s): %llu READs by "
				 "the server, expected %d",
				 (unsigned long long)puts[i].len,
				 mapped ? "shm" : "not shm",
				 (unsigned long long)(reads(k.s.ctx) - before),
				 pulled ? 1 : 0);
		assert_int_equal(rdmx_kv_get(kc, key, strlen(key), out,
					     64 << 10, &len),
				 RDMX_OK);
		assert_int_equal(len, puts[i].len);
		assert_true(val_check(out, len, (uint32_t)i, 2));
	}
	rdmx_kv_close(kc);
	side_close(&c);
	kvs_close(&k);
	free(in);
	free(out);
}

/*
 * Over shm the server maps a client's buffer when the client says hello
 * (rdmx_remote_attach), before its connect returns: the first GETs of 32
 * clients waited 5 ms for their mappings, one after another. Elsewhere
 * only the client maps it.
 */
static void test_kv_buffer_mapped_at_hello(void **state)
{
	const long kb = 3 << 10; /* a size no other mapping here has */
	long rss[64], size[64], found = 0, whole = 0;
	uint8_t in[4096], out[4096];
	struct rdmx_kv_client *kc;
	uint64_t len = 0;
	struct kvs k;
	struct side c;
	int n;

	(void)state;
	kvs_open(&k, 16 << 20);
	side_open(&c);
	kc = client(&c, k.addr, (uint64_t)kb << 10);
	n = harness_maps("rdmx-mem", size, rss, 64);
	for (int i = 0; i < n; i++)
		if (size[i] == kb) {
			found++;
			whole += rss[i] == kb;
		}
	print_message("%ld mappings of the client's buffer, %ld resident\n",
		      found, whole);
	assert_int_equal(found, conns_on(k.s.ctx, RDMX_TP_SHM) ? 2 : 1);
	assert_int_equal(whole, found);
	val_fill(in, sizeof(in), 7, 1);
	assert_int_equal(rdmx_kv_put(kc, "hello", 5, in, sizeof(in)), RDMX_OK);
	assert_int_equal(rdmx_kv_get(kc, "hello", 5, out, sizeof(out), &len),
			 RDMX_OK);
	assert_int_equal(len, sizeof(out));
	assert_true(val_check(out, len, 7, 1));
	rdmx_kv_close(kc);
	side_close(&c);
	kvs_close(&k);
}

static void test_kv_room_too_small_says_size(void **state)
{
	struct kvs k;
	struct side c;
	struct rdmx_kv_client *kc, *small;
	uint8_t in[10000], out[100];
	uint64_t len = 0;

	(void)state;
	kvs_open(&k, 1 << 20);
	side_open(&c);
	kc = client(&c, k.addr, 0);
	val_fill(in, sizeof(in), 3, 3);
	assert_int_equal(rdmx_kv_put(kc, "big", 3, in, sizeof(in)), RDMX_OK);
	assert_int_equal(rdmx_kv_get(kc, "big", 3, out, sizeof(out), &len),
			 RDMX_ERR_LOCAL_LENGTH);
	assert_int_equal(len, sizeof(in));
	/* A client whose whole buffer is smaller than the value. */
	small = client(&c, k.addr, 4096);
	struct rdmx_kv_value v;

	assert_int_equal(rdmx_kv_get_ref(small, "big", 3, &v),
			 RDMX_ERR_LOCAL_LENGTH);
	assert_int_equal(v.len, sizeof(in));
	/* ... and it goes on working. */
	assert_int_equal(rdmx_kv_put(small, "k", 1, "v", 1), RDMX_OK);
	assert_int_equal(rdmx_kv_get(small, "k", 1, out, sizeof(out), &len),
			 RDMX_OK);
	assert_int_equal(len, 1);
	assert_int_equal(rdmx_kv_put(kc, "", 0, "v", 1), RDMX_ERR_INVALID);
	rdmx_kv_close(small);
	rdmx_kv_close(kc);
	side_close(&c);
	kvs_close(&k);
}

static void test_kv_pool_full_says_out_of_memory(void **state)
{
	struct kvs k;
	struct side c;
	struct rdmx_kv_client *kc;
	struct rdmx_kv_server_stats st;
	uint8_t *in = calloc(1, 300 << 10);
	int stored = 0;
	rdmx_status rc = RDMX_OK;

	(void)state;
	kvs_open(&k, 1 << 20);
	side_open(&c);
	kc = client(&c, k.addr, 0);
	for (int i = 0; i < 10 && rc == RDMX_OK; i++) {
		char key[16];

		snprintf(key, sizeof(key), "k%d", i);
		rc = rdmx_kv_put(kc, key, strlen(key), in, 300 << 10);
		stored += rc == RDMX_OK;
	}
	assert_int_equal(rc, RDMX_ERR_NOMEM);
	assert_true(stored >= 1 && stored <= 3);
	/* Nothing lost: what was stored is still there, and a delete frees
	 * room for another. */
	assert_int_equal(rdmx_kv_del(kc, "k0", 2), RDMX_OK);
	assert_int_equal(rdmx_kv_put(kc, "again", 5, in, 300 << 10), RDMX_OK);
	rdmx_kv_server_stats(k.srv, &st);
	assert_true(st.refused_nomem >= 1);
	assert_int_equal(st.keys, (uint64_t)stored);
	rdmx_kv_close(kc);
	side_close(&c);
	kvs_close(&k);
	free(in);
}

/*
 * Freed blocks come back whole: a pool filled with 4 KiB values, then
 * emptied, takes one value as large as the pool (the blocks a PUT's
 * replacement would reuse at once wait apart, and merge only when an
 * allocation finds nothing else).
 */
static void test_kv_freed_blocks_merge_again(void **state)
{
	struct kvs k;
	struct side c;
	struct rdmx_kv_client *kc;
	struct rdmx_kv_server_stats st;
	uint8_t *in = malloc(1 << 20), *out = malloc(1 << 20);
	uint64_t len = 0;
	int stored = 0;
	char key[16];

	(void)state;
	kvs_open(&k, 1 << 20);
	side_open(&c);
	kc = client(&c, k.addr, 0);
	val_fill(in, 4096, 1, 1);
	for (rdmx_status rc = RDMX_OK; rc == RDMX_OK; stored++) {
		snprintf(key, sizeof(key), "k%d", stored);
		rc = rdmx_kv_put(kc, key, strlen(key), in, 4096);
		assert_true(rc == RDMX_OK || rc == RDMX_ERR_NOMEM);
	}
	assert_int_equal(--stored, 256); /* 1 MiB in 4 KiB blocks */
	for (int i = 0; i < stored; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		assert_int_equal(rdmx_kv_del(kc, key, strlen(key)), RDMX_OK);
	}
	val_fill(in, 1 << 20, 2, 1);
	assert_int_equal(rdmx_kv_put(kc, "whole", 5, in, 1 << 20), RDMX_OK);
	assert_int_equal(rdmx_kv_get(kc, "whole", 5, out, 1 << 20, &len),
			 RDMX_OK);
	assert_int_equal(len, 1 << 20);
	assert_true(val_check(out, len, 2, 1));
	rdmx_kv_server_stats(k.srv, &st);
	assert_int_equal(st.keys, 1);
	assert_int_equal(st.bytes_used, 1 << 20);
	rdmx_kv_close(kc);
	side_close(&c);
	kvs_close(&k);
	free(in);
	free(out);
}

static void test_kv_pool_full_evicts_lru(void **state)
{
	struct rdmx_kv_server_attr a = { .mask = RDMX_KV_SERVER_ATTR_MEMORY |
						 RDMX_KV_SERVER_ATTR_EVICT,
					 .memory = 1 << 20,
					 .evict = RDMX_KV_EVICT_LRU };
	struct side s, c;
	struct rdmx_kv_server *srv;
	struct rdmx_kv_client *kc;
	struct rdmx_kv_server_stats st;
	uint8_t in[200 << 10], out[200 << 10];
	char addr[80];
	uint64_t len;

	(void)state;
	side_open(&s);
	snprintf(addr, sizeof(addr), "%s:0", suite_addr());
	assert_int_equal(rdmx_kv_server_create(s.ctx, addr, &a, &srv), RDMX_OK);
	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(),
		 rdmx_kv_server_port(srv));
	side_open(&c);
	kc = client(&c, addr, 0);
	/* 256 KiB blocks: four fit. Keep k0 in use while k1..k7 come. */
	for (uint32_t i = 0; i < 8; i++) {
		char key[8];

		snprintf(key, sizeof(key), "k%u", i);
		val_fill(in, sizeof(in), i, 0);
		assert_int_equal(rdmx_kv_put(kc, key, 2, in, sizeof(in)),
				 RDMX_OK);
		assert_int_equal(rdmx_kv_get(kc, "k0", 2, out, sizeof(out),
					     &len),
				 RDMX_OK);
		assert_true(val_check(out, len, 0, 0));
	}
	/* The least recently used went: k1, k2, k3, k4; k0 stayed. */
	assert_int_equal(rdmx_kv_get(kc, "k1", 2, out, sizeof(out), &len),
			 RDMX_ERR_NOT_FOUND);
	assert_int_equal(rdmx_kv_get(kc, "k7", 2, out, sizeof(out), &len),
			 RDMX_OK);
	assert_true(val_check(out, len, 7, 0));
	rdmx_kv_server_stats(srv, &st);
	assert_int_equal(st.evicted, 4);
	assert_int_equal(st.refused_nomem, 0);
	rdmx_kv_close(kc);
	side_close(&c);
	rdmx_kv_server_destroy(srv);
	side_close(&s);
}

/* ---- many clients, and GETs racing PUTs --------------------------------- */

struct worker {
	const char *addr;
	int id;
	int bad;
	pthread_t t;
};

static void *many_run(void *arg)
{
	struct worker *w = arg;
	struct side s;
	struct rdmx_kv_client *kc;
	struct rdmx_kv_attr a = { .mask = RDMX_KV_ATTR_BUFFER_BYTES |
					  RDMX_KV_ATTR_TIMEOUT_MS,
				  .buffer_bytes = 1 << 20,
				  .timeout_ms = (uint32_t)T_TIMEOUT_MS };
	uint8_t in[5000], out[5000];
	rdmx_status st;

	side_open(&s);
	st = rdmx_kv_connect(s.ctx, w->addr, &a, &kc);
	if (st) {
		print_message("client %d: %s\n", w->id, rdmx_strerror(st));
		w->bad = 1;
		side_close(&s);
		return NULL;
	}
	for (int i = 0; i < 50 && !w->bad; i++) {
		char key[32];
		uint64_t len = 0, n = 100 + (uint64_t)(i * 97 + w->id) % 4900;

		snprintf(key, sizeof(key), "c%d-%d", w->id, i);
		val_fill(in, n, (uint32_t)w->id, (uint32_t)i);
		if (rdmx_kv_put(kc, key, strlen(key), in, n) ||
		    rdmx_kv_get(kc, key, strlen(key), out, sizeof(out), &len) ||
		    len != n ||
		    !val_check(out, n, (uint32_t)w->id, (uint32_t)i))
			w->bad = 2;
	}
	rdmx_kv_close(kc);
	side_close(&s);
	return NULL;
}

static void test_kv_32_clients_in_parallel(void **state)
{
	struct kvs k;
	struct worker w[32];

	(void)state;
	kvs_open(&k, 64 << 20);
	for (int i = 0; i < 32; i++) {
		w[i] = (struct worker){ k.addr, i, 0, 0 };
		pthread_create(&w[i].t, NULL, many_run, &w[i]);
	}
	for (int i = 0; i < 32; i++) {
		pthread_join(w[i].t, NULL);
		if (w[i].bad)
			fail_msg("client %d: %s", i,
				 w[i].bad == 1 ? "no connection"
					       : "a value came back wrong");
	}
	kvs_close(&k);
}

static uint64_t request_buffers(struct kvs *k)
{
	struct rdmx_kv_server_stats st;

	rdmx_kv_server_stats(k->srv, &st);
	return st.request_buffers;
}

/* The server's RECVs for requests, once they are no longer @n (within
 * the test's timeout): they change as the worker takes clients in. */
static uint64_t request_buffers_leave(struct kvs *k, uint64_t n)
{
	double end = now_s() + T_TIMEOUT_MS / 1e3;

	while (request_buffers(k) == n && now_s() < end)
		usleep(1000);
	return request_buffers(k);
}

/* Wait for the server's RECVs for requests to be @n: each round, a PUT
 * and a GET of a value checked on each of @kc[@from..@to). */
static void traffic_until(struct kvs *k, struct rdmx_kv_client **kc, int from,
			  int to, uint64_t n, int min_rounds)
{
	uint8_t in[600], out[600];
	double end = now_s() + T_TIMEOUT_MS / 1e3;

	for (int r = 0; r < min_rounds || request_buffers(k) != n; r++) {
		for (int i = from; i < to; i++) {
			char key[32];
			uint64_t len = 0, m = 1 + (uint64_t)(r * 37 + i) % 600;

			snprintf(key, sizeof(key), "g%d", i);
			val_fill(in, m, (uint32_t)i, (uint32_t)r);
			assert_int_equal(rdmx_kv_put(kc[i], key, strlen(key),
						     in, m),
					 RDMX_OK);
			assert_int_equal(rdmx_kv_get(kc[i], key, strlen(key),
						     out, sizeof(out), &len),
					 RDMX_OK);
			assert_int_equal(len, m);
			assert_true(
				val_check(out, m, (uint32_t)i, (uint32_t)r));
		}
		/* The deadline is for the count: min_rounds may take longer
		 * (40 clients' 30 rounds under TSan, four suites at once). */
		if (now_s() > end && request_buffers(k) != n)
			fail_msg("%llu RECVs for requests, not %llu",
				 (unsigned long long)request_buffers(k),
				 (unsigned long long)n);
	}
}

/*
 * A worker's RECVs for requests grow with its clients: 1024 for up to 32,
 * then 1024 more for each 32 (64 clients keeping 16 GETs in flight held
 * all of 1024, and waited for credits: half the GETs/s over tcp). The
 * RECVs of the new chunk carry requests as the first: every value is
 * checked, over more requests than both chunks hold. When clients leave,
 * the RECVs of the chunk not needed are not posted again (all in the
 * cache's way, 32 clients did 10% fewer GETs/s); when they come back,
 * they are.
 */
static void test_kv_request_buffers_grow_with_clients(void **state)
{
	enum { CLIENTS = 40, STAY = 10 };
	struct kvs k;
	struct side c;
	struct rdmx_kv_client *kc[CLIENTS];
	uint64_t first, now;

	(void)state;
	kvs_open_threads(&k, 64 << 20, 1);
	side_open(&c);
	first = request_buffers(&k);
	print_message("RECVs for requests: %llu with no client\n",
		      (unsigned long long)first);
	for (int i = 0; i < CLIENTS; i++)
		kc[i] = client(&c, k.addr, 1 << 20);
	if (!first) { /* no srq here (siw): each client has its own */
		traffic_until(&k, kc, 0, CLIENTS, 0, 30);
		goto out;
	}
	assert_int_equal(first, 1024);
	now = request_buffers_leave(&k, first);
	print_message("with %d clients: %llu\n", CLIENTS,
		      (unsigned long long)now);
	assert_int_equal(now, 2048);
	traffic_until(&k, kc, 0, CLIENTS, 2048, 30);
	for (int i = STAY; i < CLIENTS; i++)
		rdmx_kv_close(kc[i]);
	/* The second chunk's RECVs come back as requests take them. */
	traffic_until(&k, kc, 0, STAY, 1024, 1);
	print_message("with %d clients: %llu\n", STAY,
		      (unsigned long long)request_buffers(&k));
	for (int i = STAY; i < CLIENTS; i++)
		kc[i] = client(&c, k.addr, 1 << 20);
	now = request_buffers_leave(&k, 1024);
	print_message("with %d clients again: %llu\n", CLIENTS,
		      (unsigned long long)now);
	assert_int_equal(now, 2048);
	traffic_until(&k, kc, 0, CLIENTS, 2048, 30);
out:
	for (int i = 0; i < CLIENTS; i++)
		rdmx_kv_close(kc[i]);
	side_close(&c);
	kvs_close(&k);
}

/*
 * Without a srq (siw), each client gets 65 RECVs of its own when it
 * comes. A server whose connections take fewer refuses every client, and
 * says why: the client gets an error (it used to be closed with nothing
 * said, by the accepter, under the worker's feet).
 */
static void test_kv_client_without_room_for_its_recvs_refused(void **state)
{
	struct rdmx_kv_attr a = { .mask = RDMX_KV_ATTR_TIMEOUT_MS,
				  .timeout_ms = 2000 };
	struct rdmx_kv_client *kc = NULL;
	struct rdmx_kv_server_stats st;
	struct log_catch lc;
	struct kvs k;
	struct side c;
	char log[4096];
	rdmx_status ret;

	(void)state;
	/* Well under 65: a NIC may round a queue's depth up. */
	kvs_open_with(&k, 16 << 20, 1, "RDMX_CONN_MAX_RECV_WR", "16");
	if (request_buffers(&k)) {
		kvs_close(&k);
		suite_skip("a shared receive queue here: clients get no RECVs "
			   "of their own");
	}
	side_open(&c);
	log_catch_begin(&lc);
	ret = rdmx_kv_connect(c.ctx, k.addr, &a, &kc);
	st = clients_settled(&k, 1);
	/* Its hello may have been served by a RECV posted before the
	 * failure: then it is ended once its worker takes it in, and its
	 * first request fails (not hangs). */
	if (ret == RDMX_OK) {
		ret = rdmx_kv_put(kc, "k", 1, "v", 1);
		rdmx_kv_close(kc);
	}
	log_catch_end(&lc, log, sizeof(log));
	assert_int_not_equal(ret, RDMX_OK);
	assert_int_equal(st.clients_total, 1);
	assert_int_equal(st.clients_open, 0);
	assert_int_equal(st.clients_ejected, 1);
	assert_non_null(strstr(log, "posting its 65 RECVs"));
	side_close(&c);
	kvs_close(&k);
}

struct racer {
	const char *addr;
	atomic_bool *stop;
	int torn;
	atomic_int gets;
	pthread_t t;
};

#define RACE_LEN (64 << 10)

/* Every byte of a version-v value is the same: (v * 13) & 0xff. */
static void *racer_get(void *arg)
{
	struct racer *r = arg;
	struct side s;
	struct rdmx_kv_client *kc;
	struct rdmx_kv_value v;

	side_open(&s);
	kc = client(&s, r->addr, 0);
	while (!atomic_load(r->stop)) {
		if (rdmx_kv_get_ref(kc, "race", 4, &v))
			continue;
		atomic_fetch_add(&r->gets, 1);
		const uint8_t *p = v.data;

		for (uint64_t i = 1; i < v.len; i++)
			if (p[i] != p[0]) {
				r->torn++;
				break;
			}
		rdmx_kv_release(kc, &v);
	}
	rdmx_kv_close(kc);
	side_close(&s);
	return NULL;
}

static void test_kv_get_racing_put_never_torn(void **state)
{
	struct kvs k;
	struct side c;
	struct rdmx_kv_client *kc;
	atomic_bool stop = false;
	struct racer r[2];
	uint8_t *val = malloc(RACE_LEN);

	(void)state;
	kvs_open(&k, 8 << 20);
	side_open(&c);
	kc = client(&c, k.addr, 0);
	memset(val, 0, RACE_LEN);
	assert_int_equal(rdmx_kv_put(kc, "race", 4, val, RACE_LEN), RDMX_OK);
	for (int i = 0; i < 2; i++) {
		r[i] = (struct racer){ .addr = k.addr, .stop = &stop };
		pthread_create(&r[i].t, NULL, racer_get, &r[i]);
	}
	/* Until each reader has raced a few hundred PUTs (they connect
	 * while the first ones go by). */
	for (int v = 1; v < 100000; v++) {
		memset(val, (v * 13) & 0xff, RACE_LEN);
		assert_int_equal(rdmx_kv_put(kc, "race", 4, val, RACE_LEN),
				 RDMX_OK);
		if (v % 3 == 0) /* deletes race too */
			assert_int_equal(rdmx_kv_del(kc, "race", 4), RDMX_OK);
		if (v >= 300 && atomic_load(&r[0].gets) >= 200 &&
		    atomic_load(&r[1].gets) >= 200)
			break;
	}
	atomic_store(&stop, true);
	for (int i = 0; i < 2; i++) {
		pthread_join(r[i].t, NULL);
		print_message("reader %d: %d GETs, %d torn\n", i,
			      atomic_load(&r[i].gets), r[i].torn);
		assert_int_equal(r[i].torn, 0);
		assert_true(atomic_load(&r[i].gets) >= 200);
	}
	rdmx_kv_close(kc);
	side_close(&c);
	kvs_close(&k);
	free(val);
}

static void test_kv_async_pipeline(void **state)
{
	enum { N = 500 };
	struct kvs k;
	struct side c;
	struct rdmx_kv_client *kc;
	struct rdmx_kv_result res[16];
	uint8_t in[3000];
	int posted = 0, done = 0, got = 0;

	(void)state;
	kvs_open(&k, 16 << 20);
	side_open(&c);
	kc = client(&c, k.addr, 0);
	while (done < N) {
		while (posted < N) {
			char key[16];

			snprintf(key, sizeof(key), "a%d", posted);
			val_fill(in, sizeof(in), (uint32_t)posted, 2);
			rdmx_status st = rdmx_kv_post_put(kc, key, strlen(key),
							  in, sizeof(in),
							  (uint64_t)posted);

			if (st == RDMX_ERR_AGAIN)
				break;
			assert_int_equal(st, RDMX_OK);
			posted++;
		}
		int n = rdmx_kv_poll(kc, res, 16, T_TIMEOUT_MS);

		assert_true(n > 0);
		for (int i = 0; i < n; i++)
			assert_int_equal(res[i].status, RDMX_OK);
		done += n;
	}
	/* GETs in flight together, each value read where it landed. */
	for (posted = 0, done = 0; done < N;) {
		while (posted < N) {
			char key[16];

			snprintf(key, sizeof(key), "a%d", posted);
			if (rdmx_kv_post_get(kc, key, strlen(key), 4096,
					     (uint64_t)posted) ==
			    RDMX_ERR_AGAIN)
				break;
			posted++;
		}
		int n = rdmx_kv_poll(kc, res, 16, T_TIMEOUT_MS);

		assert_true(n > 0);
		for (int i = 0; i < n; i++) {
			assert_int_equal(res[i].status, RDMX_OK);
			assert_int_equal(res[i].op, RDMX_KV_GET);
			got += val_check(res[i].value.data, res[i].value.len,
					 (uint32_t)res[i].tag, 2) &&
			       res[i].value.len == sizeof(in);
			rdmx_kv_release(kc, &res[i].value);
		}
		done += n;
	}
	assert_int_equal(got, N);
	/*
	 * Over shm the server moved every value itself, PUTs pulled and GETs
	 * written, though its answers were in flight: this side's engine
	 * served none of its READs and WRITEs (RDMX_WR_UNORDERED; without
	 * it each waited behind the answers before it and went through the
	 * ring).
	 */
	if (conns_on(k.s.ctx, RDMX_TP_SHM)) {
		struct rdmx_stats st;
		int shm = stats_index(RDMX_TP_SHM);

		rdmx_ctx_stats(c.ctx, &st);
		assert_int_equal(st.served_ops[shm][RDMX_OP_READ], 0);
		assert_int_equal(st.served_ops[shm][RDMX_OP_WRITE], 0);
	}
	/*
	 * A batch posted together leaves at rdmx_kv_flush: the first at
	 * once, the rest then. After the flush and a pause, with no poll in
	 * between, every answer is back (without it, only the first's).
	 */
	for (posted = 0; posted < 8; posted++) {
		char key[16];

		snprintf(key, sizeof(key), "a%d", posted);
		assert_int_equal(rdmx_kv_post_get(kc, key, strlen(key), 4096,
						  (uint64_t)posted),
				 RDMX_OK);
	}
	rdmx_kv_flush(kc);
	usleep((useconds_t)(300000 * time_scale()));
	for (done = 0; done < 8;) {
		int n = rdmx_kv_poll(kc, res, 16, 0);

		if (n <= 0)
			break;
		for (int i = 0; i < n; i++)
			rdmx_kv_release(kc, &res[i].value);
		done += n;
	}
	assert_int_equal(done, 8);
	rdmx_kv_close(kc);
	side_close(&c);
	kvs_close(&k);
}

/*
 * Requests posted together are served in their order. Per key: GET, PUT
 * (a new value, inline), GET, DELETE, GET, posted as one train; the GETs
 * find the value before, the new one, and nothing. A server that looked
 * up a batch's GETs together, ahead of the writes among them, would give
 * the second and the third the value before (checked: 60 of 100 right).
 */
static void test_kv_batch_gets_see_writes_before_them(void **state)
{
	enum { ROUNDS = 20, LEN = 64, PER = 5 };
	struct kvs k;
	struct side c;
	struct rdmx_kv_attr a = { .mask = RDMX_KV_ATTR_TIMEOUT_MS |
					  RDMX_KV_ATTR_FLAGS,
				  .timeout_ms = (uint32_t)T_TIMEOUT_MS,
				  .flags = RDMX_KV_FLUSH_EXPLICIT };
	struct rdmx_kv_client *kc = NULL;
	struct rdmx_kv_result res[16];
	uint8_t v1[LEN], v2[LEN];
	int right = 0;

	(void)state;
	kvs_open_threads(&k, 8 << 20, 1);
	side_open(&c);
	assert_int_equal(rdmx_kv_connect(c.ctx, k.addr, &a, &kc), RDMX_OK);
	for (uint32_t r = 0; r < ROUNDS; r++) {
		char key[16];
		size_t kl = (size_t)snprintf(key, sizeof(key), "o%u", r);
		uint64_t tag = (uint64_t)r * PER;

		val_fill(v1, LEN, r, 1);
		val_fill(v2, LEN, r, 2);
		assert_int_equal(rdmx_kv_put(kc, key, kl, v1, LEN), RDMX_OK);
		assert_int_equal(rdmx_kv_post_get(kc, key, kl, LEN, tag),
				 RDMX_OK);
		assert_int_equal(rdmx_kv_post_put(kc, key, kl, v2, LEN,
						  tag + 1),
				 RDMX_OK);
		assert_int_equal(rdmx_kv_post_get(kc, key, kl, LEN, tag + 2),
				 RDMX_OK);
		assert_int_equal(rdmx_kv_post_del(kc, key, kl, tag + 3),
				 RDMX_OK);
		assert_int_equal(rdmx_kv_post_get(kc, key, kl, LEN, tag + 4),
				 RDMX_OK);
		rdmx_kv_flush(kc);
		take_results(kc, res, PER);
		for (int i = 0; i < PER; i++) {
			uint64_t t = res[i].tag - tag;
			const struct rdmx_kv_value *v = &res[i].value;

			if (t == 0 || t == 2)
				right += res[i].status == RDMX_OK &&
					 v->len == LEN &&
					 val_check(v->data, LEN, r, t ? 2 : 1);
			else if (t == 4)
				right += res[i].status == RDMX_ERR_NOT_FOUND;
			else
				right += res[i].status == RDMX_OK;
			if (res[i].op == RDMX_KV_GET &&
			    res[i].status == RDMX_OK)
				rdmx_kv_release(kc, &res[i].value);
		}
	}
	assert_int_equal(right, ROUNDS * PER);
	rdmx_kv_close(kc);
	side_close(&c);
	kvs_close(&k);
}

/*
 * A caller spinning on rdmx_kv_poll with timeout 0 is not made to read
 * the clock (~20 ns) at each call: it read it for a deadline it never
 * waited for, 4.5% of rdmx kv bench's samples over tcp. What the transport
 * reads now and then (the progress thread's stamp) stays well under.
 */
static void test_kv_poll_spins_without_clock(void **state)
{
	enum { POLLS = 10000 };
	struct kvs k;
	struct side c;
	struct rdmx_kv_client *kc;
	struct rdmx_kv_result res[16];
	uint8_t v[64] = { 1 };
	unsigned long before;

	(void)state;
	kvs_open(&k, 8 << 20);
	side_open(&c);
	kc = client(&c, k.addr, 0);
	assert_int_equal(rdmx_kv_put(kc, "c", 1, v, sizeof(v)), RDMX_OK);
	before = clock_reads;
	for (int i = 0; i < POLLS; i++)
		assert_int_equal(rdmx_kv_poll(kc, res, 16, 0), 0);
	print_message("%d polls read the clock %lu times\n", POLLS,
		      clock_reads - before);
	assert_true(clock_reads - before < POLLS / 4);
	rdmx_kv_close(kc);
	side_close(&c);
	kvs_close(&k);
}

/* Minor page faults of the calling thread so far. */
static long thread_faults(void)
{
	struct rusage ru;

	assert_int_equal(getrusage(RUSAGE_THREAD, &ru), 0);
	return ru.ru_minflt;
}

/*
 * A client's first requests touch no new page: the message buffers were
 * touched whole when it connected. Each 8 KiB request slot's first use
 * was a fault (~10 us on these VMs), inside the post: 32 clients of kv
 * bench posting their first 16 GETs took 230-380 us a client, 30-90
 * with the buffers touched. The server's RECV buffers are touched too;
 * that side's faults are the server's threads', not counted here.
 */
static void test_kv_first_posts_touch_no_new_page(void **state)
{
	struct kvs k;
	struct side c;
	struct rdmx_kv_client *kc;
	struct rdmx_kv_result res[16];
	uint8_t v[64] = { 7 };
	long before, faults;

	(void)state;
	kvs_open(&k, 1 << 20);
	side_open(&c);
	kc = client(&c, k.addr, 1 << 20);
	assert_int_equal(rdmx_kv_put(kc, "k", 1, v, sizeof(v)), RDMX_OK);
	before = thread_faults();
	for (uint64_t i = 0; i < 16; i++)
		assert_int_equal(rdmx_kv_post_get(kc, "k", 1, 64, i), RDMX_OK);
	rdmx_kv_flush(kc);
	faults = thread_faults() - before;
	print_message("16 GETs posted: %ld faults\n", faults);
#ifndef HARNESS_SANITIZED /* shadow memory faults of its own */
	/* verbs: the provider's queues fault on their first use */
	if (!conns_on(c.ctx, RDMX_TP_VERBS))
		assert_true(faults < 8);
#endif
	take_results(kc, res, 16);
	for (int i = 0; i < 16; i++) {
		assert_int_equal(res[i].status, RDMX_OK);
		rdmx_kv_release(kc, &res[i].value);
	}
	rdmx_kv_close(kc);
	side_close(&c);
	kvs_close(&k);
}

/* ---- a server killed under load ----------------------------------------- */

/*
 * The pool of a server in a child process: what its tests store, not the
 * default GiB, whose registration the guest's emulator took seconds to pin
 * (test_kv_aof_fsync_always_survives_kill9 starts three).
 */
#define KV_CHILD_MEMORY (16u << 20)

static int kv_server_child(int port, int flag)
{
	struct rdmx_kv_server_attr a = { .mask = RDMX_KV_SERVER_ATTR_MEMORY,
					 .memory = KV_CHILD_MEMORY };
	struct rdmx_ctx *ctx;
	struct rdmx_kv_server *srv;
	char addr[80];

	(void)flag;
	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(), port);
	if (rdmx_ctx_create(NULL, &ctx) ||
	    rdmx_kv_server_create(ctx, addr, &a, &srv))
		return 2;
	pause();
	return 0;
}

/* A client of the server at @addr, once it listens: within 10 s, times
 * the suite's scale (a child server's start in the guest's emulator took
 * longer than 10 s once, its vCPUs busy). */
static struct rdmx_kv_client *connect_retry(struct side *c, const char *addr)
{
	struct rdmx_kv_client *kc = NULL;
	rdmx_status st = RDMX_ERR_CONN_REFUSED;
	int tries = (int)(200 * time_scale());

	for (int i = 0; i < tries && st == RDMX_ERR_CONN_REFUSED; i++) {
		st = rdmx_kv_connect(c->ctx, addr, NULL, &kc);
		if (st == RDMX_ERR_CONN_REFUSED)
			usleep(50000);
	}
	assert_int_equal(st, RDMX_OK);
	return kc;
}

/* A client of the server a child process starts on @port. */
static struct rdmx_kv_client *child_client(struct side *c, int port)
{
	char addr[80];

	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(), port);
	return connect_retry(c, addr);
}

/* The SENDs @ctx has handed its transport (@in: RECVs completed). */
static uint64_t sends(struct rdmx_ctx *ctx, bool in)
{
	struct rdmx_stats st;

	rdmx_ctx_stats(ctx, &st);
	return in ? st.ops_in[RDMX_OP_RECV] : st.ops_out[RDMX_OP_SEND];
}

/*
 * A request posted while others are in flight waits for rdmx_kv_flush
 * (or a poll), even right after a poll: a pipelining caller's batch
 * leaves whole. The first after a poll left alone, which split every
 * batch of kv bench over tcp in two (0.66 sendmsg per GET at pipeline
 * 16). The server is stopped meanwhile, so nothing is answered; the
 * context's count of SENDs posted says what left the client. And a poll
 * takes every answer that came.
 */
static void test_kv_batches_leave_and_return_whole(void **state)
{
	int port = harness_free_port();
	pid_t pid = spawn("kv_server_child", port, 0);
	struct side c;
	struct rdmx_kv_client *kc, *kc2;
	struct rdmx_kv_attr attr = { 0 };
	struct rdmx_kv_result res[16];
	uint64_t before;
	char addr[80];
	int n;

	(void)state;
	side_open(&c);
	kc = child_client(&c, port);
	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(), port);
	assert_int_equal(rdmx_kv_put(kc, "k", 1, "v", 1), RDMX_OK);
	kill(pid, SIGSTOP);
	assert_int_equal(waitpid(pid, &n, WUNTRACED), pid); /* stopped */
	assert_true(WIFSTOPPED(n));
	/* The only one in flight leaves at once; those behind it wait. */
	before = sends(c.ctx, false);
	assert_int_equal(rdmx_kv_post_get(kc, "k", 1, 64, 0), RDMX_OK);
	assert_int_equal(sends(c.ctx, false), before + 1);
	for (uint64_t i = 1; i < 8; i++)
		assert_int_equal(rdmx_kv_post_get(kc, "k", 1, 64, i), RDMX_OK);
	assert_int_equal(sends(c.ctx, false), before + 1);
	assert_int_equal(rdmx_kv_poll(kc, res, 16, 0), 0); /* sends them */
	assert_int_equal(sends(c.ctx, false), before + 8);
	/* After a poll, with eight in flight: it waits too. */
	assert_int_equal(rdmx_kv_post_get(kc, "k", 1, 64, 8), RDMX_OK);
	assert_int_equal(sends(c.ctx, false), before + 8);
	rdmx_kv_flush(kc);
	assert_int_equal(sends(c.ctx, false), before + 9);
	/*
	 * Once all nine answers are in, one poll takes them all: it took
	 * 16 completions, each request's SEND's among them (8 results).
	 */
	before = sends(c.ctx, true);
	kill(pid, SIGCONT);
	for (int i = 0; sends(c.ctx, true) < before + 9; i++) {
		assert_true(i < T_TIMEOUT_MS / 10);
		usleep(10000);
	}
	n = rdmx_kv_poll(kc, res, 16, 0);
	assert_int_equal(n, 9);
	for (int i = 0; i < n; i++) {
		assert_int_equal(res[i].status, RDMX_OK);
		assert_int_equal(res[i].value.len, 1);
		rdmx_kv_release(kc, &res[i].value);
	}
	/*
	 * A client that flushes its batches itself: its first request
	 * waits too, for the flush. Flags it does not know are refused.
	 */
	attr.mask = RDMX_KV_ATTR_FLAGS;
	attr.flags = 1ull << 40;
	assert_int_equal(rdmx_kv_connect(c.ctx, addr, &attr, &kc2),
			 RDMX_ERR_INVALID);
	attr.flags = RDMX_KV_FLUSH_EXPLICIT;
	assert_int_equal(rdmx_kv_connect(c.ctx, addr, &attr, &kc2), RDMX_OK);
	before = sends(c.ctx, false);
	assert_int_equal(rdmx_kv_post_get(kc2, "k", 1, 64, 100), RDMX_OK);
	assert_int_equal(rdmx_kv_post_get(kc2, "k", 1, 64, 101), RDMX_OK);
	assert_int_equal(sends(c.ctx, false), before);
	rdmx_kv_flush(kc2);
	assert_int_equal(sends(c.ctx, false), before + 2);
	take_results(kc2, res, 2);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(res[i].status, RDMX_OK);
		assert_true(res[i].tag == 100 || res[i].tag == 101);
		rdmx_kv_release(kc2, &res[i].value);
	}
	assert_int_not_equal(res[0].tag, res[1].tag);
	rdmx_kv_close(kc2);
	rdmx_kv_close(kc);
	side_close(&c);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* rdmx_kv_server_stats, which takes the store's lock, on a thread. */
struct stats_call {
	struct rdmx_kv_server *srv;
	struct rdmx_kv_server_stats st;
	atomic_bool done;
};

static void *stats_run(void *arg)
{
	struct stats_call *sc = arg;

	rdmx_kv_server_stats(sc->srv, &sc->st);
	atomic_store(&sc->done, true);
	return NULL;
}

/*
 * A worker holds the store's lock across a batch of lookups and item
 * releases: once the batch is served it must let go, also when its
 * client then stays open and quiet. Else stats, the Redis port and the
 * other workers wait for that client's next request.
 */
static void test_kv_store_free_once_served(void **state)
{
	struct kvs k;
	struct side c;
	struct rdmx_kv_client *kc;
	struct rdmx_kv_result res[8];
	struct stats_call sc = { 0 };
	uint8_t in[4096], out[4096];
	uint64_t len = 0;
	pthread_t t;

	(void)state;
	kvs_open_threads(&k, 1 << 20, 1);
	side_open(&c);
	kc = client(&c, k.addr, 0);
	val_fill(in, sizeof(in), 1, 1);
	assert_int_equal(rdmx_kv_put(kc, "k", 1, in, sizeof(in)), RDMX_OK);
	/* A batch of hits and misses, then a lone hit: the paths that hold. */
	for (int i = 0; i < 8; i++)
		assert_int_equal(rdmx_kv_post_get(kc, i % 2 ? "k" : "no",
						  i % 2 ? 1 : 2, sizeof(in),
						  (uint64_t)i),
				 RDMX_OK);
	take_results(kc, res, 8);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(res[i].status,
				 res[i].tag % 2 ? RDMX_OK : RDMX_ERR_NOT_FOUND);
		rdmx_kv_release(kc, &res[i].value);
	}
	assert_int_equal(rdmx_kv_get(kc, "k", 1, out, sizeof(out), &len),
			 RDMX_OK);
	assert_true(len == sizeof(in) && val_check(out, len, 1, 1));
	sc.srv = k.srv;
	pthread_create(&t, NULL, stats_run, &sc);
	for (int ms = 0; ms < T_TIMEOUT_MS && !atomic_load(&sc.done); ms++)
		usleep(1000);
	if (!atomic_load(&sc.done))
		fail_msg("the store's lock is still held by the worker");
	pthread_join(t, NULL);
	assert_int_equal(sc.st.gets, 9);
	assert_int_equal(sc.st.hits, 5);
	rdmx_kv_close(kc);
	side_close(&c);
	kvs_close(&k);
}

/* Wait until the server's pool holds no value: true, or false after
 * T_TIMEOUT_MS. */
static bool pool_empties(struct rdmx_kv_server *srv)
{
	struct rdmx_kv_server_stats st;

	for (int ms = 0; ms < T_TIMEOUT_MS; ms++) {
		rdmx_kv_server_stats(srv, &st);
		if (!st.bytes_used)
			return true;
		usleep(1000);
	}
	print_message("%llu bytes still used\n",
		      (unsigned long long)st.bytes_used);
	return false;
}

/*
 * A GET's answer holds its item until the answer is known sent, so that
 * a PUT or DELETE cannot hand its block to another value under the WRITE.
 * Every answer gives it back: after a batch answered, and when the client
 * ends with its GETs in flight. A deleted value's block is free once no
 * answer holds it: the pool empties after each case.
 */
static void test_kv_answers_give_items_back(void **state)
{
	struct kvs k;
	struct side c;
	struct rdmx_kv_client *kc, *kg;
	struct rdmx_kv_result res[16];
	uint8_t in[4096];

	(void)state;
	kvs_open_threads(&k, 1 << 20, 1);
	side_open(&c);
	kc = client(&c, k.addr, 0);
	kg = client(&c, k.addr, 0);
	val_fill(in, sizeof(in), 2, 2);
	/* A batch of 16 GETs answered, then the key deleted. */
	assert_int_equal(rdmx_kv_put(kc, "k", 1, in, sizeof(in)), RDMX_OK);
	for (int i = 0; i < 16; i++)
		assert_int_equal(rdmx_kv_post_get(kg, "k", 1, sizeof(in),
						  (uint64_t)i),
				 RDMX_OK);
	take_results(kg, res, 16);
	for (int i = 0; i < 16; i++) {
		assert_int_equal(res[i].status, RDMX_OK);
		assert_true(
			val_check(res[i].value.data, res[i].value.len, 2, 2));
		rdmx_kv_release(kg, &res[i].value);
	}
	assert_int_equal(rdmx_kv_del(kc, "k", 1), RDMX_OK);
	assert_true(pool_empties(k.srv));
	/* 16 GETs in flight when their client ends. */
	assert_int_equal(rdmx_kv_put(kc, "k", 1, in, sizeof(in)), RDMX_OK);
	for (int i = 0; i < 16; i++)
		assert_int_equal(rdmx_kv_post_get(kg, "k", 1, sizeof(in),
						  (uint64_t)i),
				 RDMX_OK);
	rdmx_kv_close(kg);
	assert_int_equal(rdmx_kv_del(kc, "k", 1), RDMX_OK);
	assert_true(pool_empties(k.srv));
	rdmx_kv_close(kc);
	side_close(&c);
	kvs_close(&k);
}

/*
 * Clients that close with GETs in flight went of their own accord: the
 * server ends them without a word. It used to blame many of them ("its
 * answers do not fit the send queue", "a WRITE into its buffer failed")
 * for the posts their going made fail.
 */
static void test_kv_clients_gone_with_gets_in_flight_not_blamed(void **state)
{
	struct rdmx_kv_attr a = { .mask = RDMX_KV_ATTR_TIMEOUT_MS |
					  RDMX_KV_ATTR_BUFFER_BYTES,
				  .timeout_ms = (uint32_t)T_TIMEOUT_MS,
				  .buffer_bytes = 1 << 20 };
	struct rdmx_kv_server_stats st;
	struct rdmx_kv_client *kc;
	rdmx_status bad = RDMX_OK;
	struct log_catch lc;
	struct kvs k;
	struct side c;
	static char log[1 << 16];
	uint8_t in[4096];

	(void)state;
	kvs_open_threads(&k, 16 << 20, 1);
	side_open(&c);
	kc = client(&c, k.addr, 0);
	val_fill(in, sizeof(in), 3, 3);
	assert_int_equal(rdmx_kv_put(kc, "k", 1, in, sizeof(in)), RDMX_OK);
	rdmx_kv_close(kc);
	kc = NULL;
	/* No assertion while the log is caught: its message would be. */
	log_catch_begin(&lc);
	for (int round = 0; round < 40 && !bad; round++) {
		/* 1 MiB of buffer, not 64: 40 rounds of 64 MiB took 200 ms
		 * each beside other suites. (With 64 MiB, one run in three
		 * beside them once lost a hello: a new client got a closed
		 * one's address, test_conn_closed_named_until_polled.) */
		bad = rdmx_kv_connect(c.ctx, k.addr, &a, &kc);
		for (int i = 0; i < 16 && !bad; i++)
			bad = rdmx_kv_post_get(kc, "k", 1, sizeof(in),
					       (uint64_t)i);
		if (kc) {
			rdmx_kv_flush(kc);
			rdmx_kv_close(kc);
			kc = NULL;
		}
	}
	st = clients_settled(&k, 41);
	log_catch_end(&lc, log, sizeof(log));
	assert_int_equal(bad, RDMX_OK);
	assert_int_equal(st.clients_open, 0);
	assert_int_equal(st.clients_total, 41);
	assert_int_equal(st.clients_ejected, 0); /* they left */
	assert_null(strstr(log, " closed: "));
	/* And their GETs gave the value back. */
	kc = client(&c, k.addr, 0);
	assert_int_equal(rdmx_kv_del(kc, "k", 1), RDMX_OK);
	rdmx_kv_close(kc);
	assert_true(pool_empties(k.srv));
	side_close(&c);
	kvs_close(&k);
}

/*
 * Clients whose first message is garbage are each closed, and said in
 * moderation: by address, at most 10 lines a second in the process
 * (rdmx_log_peer), where each cost a line (~100 a second in a chaos run,
 * none naming the client). The server serves on.
 */
static void test_kv_garbage_clients_said_in_moderation(void **state)
{
	enum { N = 40 };
	struct rdmx_kv_server_stats st;
	struct rdmx_conn *conn[N];
	struct rdmx_kv_client *kc;
	struct rdmx_sge sg;
	struct log_catch lc;
	struct kvs k;
	struct side c;
	struct buf b;
	static char log[1 << 16];
	int said;
	char v[8], want[80];
	uint64_t vlen;
	double t0, secs;

	(void)state;
	kvs_open_threads(&k, 16 << 20, 1);
	side_open(&c);
	buf_alloc(&c, &b, 8, RDMX_ACCESS_LOCAL_WRITE);
	memset(b.p, 0xff, 8);
	sg = sge_of(&b, 0, 8);
	usleep(1100 * 1000); /* a second of its own, whatever came before */
	t0 = now_s();
	log_catch_begin(&lc);
	for (int i = 0; i < N; i++) {
		conn[i] = side_connect(&c, rdmx_kv_server_port(k.srv));
		if (rdmx_post_send(conn[i], &sg, (uint64_t)i))
			break;
	}
	st = clients_settled(&k, N);
	log_catch_end(&lc, log, sizeof(log));
	secs = now_s() - t0;
	said = log_count(log, " closed: ");
	assert_int_equal(st.clients_total, N);
	assert_int_equal(st.clients_open, 0);
	assert_int_equal(st.clients_ejected, N); /* all, said or not */
	/* Here, 40 in well under a second; under an emulator, seconds. */
	assert_true(said >= 1 && said <= 10 * ((int)secs + 2));
	snprintf(want, sizeof(want), "kv: client %s:", suite_addr());
	assert_non_null(strstr(log, want));
	assert_non_null(strstr(log, "closed: a malformed"));
	for (int i = 0; i < N; i++)
		rdmx_conn_close(conn[i]);
	while (rdmx_poll(c.cq, &(struct rdmx_completion){ 0 }, 1) > 0)
		;
	buf_free(&b);
	kc = client(&c, k.addr, 0);
	assert_int_equal(rdmx_kv_put(kc, "k", 1, "value", 5), RDMX_OK);
	assert_int_equal(rdmx_kv_get(kc, "k", 1, v, sizeof(v), &vlen), RDMX_OK);
	assert_int_equal(vlen, 5);
	rdmx_kv_close(kc);
	side_close(&c);
	kvs_close(&k);
}

static void test_kv_server_killed_errors_not_hangs(void **state)
{
	int port = harness_free_port();
	pid_t pid = spawn("kv_server_child", port, 0);
	struct side c;
	struct rdmx_kv_client *kc;
	struct rdmx_kv_result res[16];
	uint8_t in[4096] = { 0 };
	int lost = 0;

	(void)state;
	side_open(&c);
	kc = child_client(&c, port);
	for (int i = 0; i < 32; i++)
		assert_int_equal(rdmx_kv_post_put(kc, "k", 1, in, sizeof(in),
						  (uint64_t)i),
				 RDMX_OK);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* Whatever had not been answered fails; then every call fails. */
	for (int n; (n = rdmx_kv_poll(kc, res, 16, T_TIMEOUT_MS)) > 0;)
		for (int i = 0; i < n; i++)
			lost += res[i].status == RDMX_ERR_CONN_LOST;
	print_message("%d of 32 PUTs lost with the server\n", lost);
	assert_int_equal(rdmx_kv_get(kc, "k", 1, in, sizeof(in), NULL),
			 RDMX_ERR_CONN_LOST);
	rdmx_kv_close(kc);
	side_close(&c);
}

/* ---- the append-only file ---------------------------------------------- */

static void aof_path(char *buf, size_t len, int port)
{
	snprintf(buf, len, "%s/rdmx-kv-test-%d-%d.aof",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid(),
		 port);
}

/* A server logging every PUT with fsync always; flag: the port of the
 * parent's file name (the parent is the test, this the child). */
static int kv_aof_server_child(int port, int parent_port)
{
	struct rdmx_kv_server_attr a = { .mask = RDMX_KV_SERVER_ATTR_AOF |
						 RDMX_KV_SERVER_ATTR_MEMORY,
					 .memory = KV_CHILD_MEMORY,
					 .fsync = RDMX_KV_FSYNC_ALWAYS };
	struct rdmx_ctx *ctx;
	struct rdmx_kv_server *srv;
	char addr[80], path[256];

	snprintf(path, sizeof(path), "%s/rdmx-kv-test-%d-%d.aof",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getppid(),
		 parent_port);
	a.aof_path = path;
	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(), port);
	if (rdmx_ctx_create(NULL, &ctx) ||
	    rdmx_kv_server_create(ctx, addr, &a, &srv))
		return 2;
	pause();
	return 0;
}

static void test_kv_aof_fsync_always_survives_kill9(void **state)
{
	int port = harness_free_port();
	char addr[80], path[256];
	struct side c;
	struct rdmx_kv_client *kc;
	uint8_t in[20000], out[20000];
	uint64_t len;
	pid_t pid;
	FILE *f;

	(void)state;
	aof_path(path, sizeof(path), port);
	unlink(path);
	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(), port);
	side_open(&c);
	pid = spawn("kv_aof_server_child", port, port);
	kc = connect_retry(&c, addr);
	for (uint32_t i = 0; i < 40; i++) {
		char key[16];

		snprintf(key, sizeof(key), "d%u", i);
		val_fill(in, 100 + i * 400, i, 9); /* inline and READ both */
		assert_int_equal(rdmx_kv_put(kc, key, strlen(key), in,
					     100 + i * 400),
				 RDMX_OK);
	}
	assert_int_equal(rdmx_kv_del(kc, "d3", 2), RDMX_OK);
	kill(pid, SIGKILL); /* right after the last answer */
	waitpid(pid, NULL, 0);
	rdmx_kv_close(kc);
	/* A crash mid-append leaves a record cut short: replay stops
	 * before it. */
	f = fopen(path, "ab");
	assert_non_null(f);
	fwrite("P\0\3\0\0\0\0\0\0\1\0ab", 1, 13, f);
	fclose(f);
	pid = spawn("kv_aof_server_child", port, port);
	kc = connect_retry(&c, addr);
	for (uint32_t i = 0; i < 40; i++) {
		char key[16];

		snprintf(key, sizeof(key), "d%u", i);
		rdmx_status st = rdmx_kv_get(kc, key, strlen(key), out,
					     sizeof(out), &len);

		if (i == 3) {
			assert_int_equal(st, RDMX_ERR_NOT_FOUND);
			continue;
		}
		assert_int_equal(st, RDMX_OK);
		assert_int_equal(len, 100 + i * 400);
		assert_true(val_check(out, len, i, 9));
	}
	/* And it appends after what it kept. */
	assert_int_equal(rdmx_kv_put(kc, "after", 5, "x", 1), RDMX_OK);
	rdmx_kv_close(kc);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	pid = spawn("kv_aof_server_child", port, port);
	kc = connect_retry(&c, addr);
	assert_int_equal(rdmx_kv_get(kc, "after", 5, out, sizeof(out), &len),
			 RDMX_OK);
	assert_int_equal(rdmx_kv_get(kc, "d39", 3, out, sizeof(out), &len),
			 RDMX_OK);
	rdmx_kv_close(kc);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	side_close(&c);
	unlink(path);
}

static const struct child children[] = {
	{ "kv_server_child", kv_server_child },
	{ "kv_aof_server_child", kv_aof_server_child },
	{ NULL, NULL },
};

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kv_round_trips_0b_to_16m),
		cmocka_unit_test(test_kv_put_pulled_where_mapped),
		cmocka_unit_test(test_kv_buffer_mapped_at_hello),
		cmocka_unit_test(test_kv_room_too_small_says_size),
		cmocka_unit_test(test_kv_pool_full_says_out_of_memory),
		cmocka_unit_test(test_kv_freed_blocks_merge_again),
		cmocka_unit_test(test_kv_pool_full_evicts_lru),
		cmocka_unit_test(test_kv_32_clients_in_parallel),
		cmocka_unit_test(test_kv_request_buffers_grow_with_clients),
		cmocka_unit_test(
			test_kv_client_without_room_for_its_recvs_refused),
		cmocka_unit_test(test_kv_get_racing_put_never_torn),
		cmocka_unit_test(test_kv_async_pipeline),
		cmocka_unit_test(test_kv_batch_gets_see_writes_before_them),
		cmocka_unit_test(test_kv_poll_spins_without_clock),
		cmocka_unit_test(test_kv_batches_leave_and_return_whole),
		cmocka_unit_test(test_kv_first_posts_touch_no_new_page),
		cmocka_unit_test(test_kv_store_free_once_served),
		cmocka_unit_test(test_kv_answers_give_items_back),
		cmocka_unit_test(
			test_kv_clients_gone_with_gets_in_flight_not_blamed),
		cmocka_unit_test(test_kv_server_killed_errors_not_hangs),
		cmocka_unit_test(test_kv_aof_fsync_always_survives_kill9),
		/* Last: the lines it leaves unsaid would be others' too. */
		cmocka_unit_test(test_kv_garbage_clients_said_in_moderation),
	};

	harness_children(argc, argv, children);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
