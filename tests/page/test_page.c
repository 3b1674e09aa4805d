// SPDX-License-Identifier: MIT
/*
 * Description: lib/page over the transport the suite runs on: the explicit
 * calls between two nodes, the userfaultfd mapping (threads, cache bound,
 * read-ahead, write-back, coherence), a server killed under load, and the
 * errors a user meets.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "rdmx_page.h"

#define PG 4096u

/* ---- the server's pattern ----------------------------------------------- */

static uint64_t pat(uint64_t off, uint64_t seed)
{
	return (off / 8 + 1) * 0x9e3779b97f4a7c15ull ^ seed;
}

static void pat_fill(void *p, uint64_t len, uint64_t off, uint64_t seed)
{
	uint64_t *w = p;

	for (uint64_t i = 0; i < len / 8; i++)
		w[i] = pat(off + i * 8, seed);
}

/* Offset of the first word that differs, or UINT64_MAX. */
static uint64_t pat_diff(const void *p, uint64_t len, uint64_t off,
			 uint64_t seed)
{
	const volatile uint64_t *w = p;

	for (uint64_t i = 0; i < len / 8; i++)
		if (w[i] != pat(off + i * 8, seed))
			return off + i * 8;
	return UINT64_MAX;
}

/*
 * @len bytes at @p hold the pattern of @seed from offset @off; if not, the
 * failure says where, what is there, and whose pattern that is.
 */
#define assert_pat(p, len, off, seed)                                          \
	do {                                                                   \
		const volatile uint64_t *w_ = (const void *)(p);               \
		uint64_t at_ =                                                 \
			pat_diff((const void *)w_, (len), (off), (seed));      \
                                                                               \
		if (at_ != UINT64_MAX)                                         \
			fail_msg("offset 0x%llx holds 0x%016llx, not seed "    \
				 "%llu's 0x%016llx (seed 0's: 0x%016llx)",     \
				 (unsigned long long)at_,                      \
				 (unsigned long long)w_[(at_ - (off)) / 8],    \
				 (unsigned long long)(seed),                   \
				 (unsigned long long)pat(at_, (seed)),         \
				 (unsigned long long)pat(at_, 0));             \
	} while (0)

/* ---- a memory server in this process ------------------------------------ */

struct srv {
	struct side s;
	struct rdmx_page_server *ps;
	uint8_t *mem;
	uint64_t len;
	char url[128];
};

static void srv_open(struct srv *v, uint64_t len)
{
	char addr[80];

	side_open(&v->s);
	v->len = len;
	v->mem = mmap(NULL, len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(v->mem != MAP_FAILED);
	pat_fill(v->mem, len, 0, 0);
	snprintf(addr, sizeof(addr), "%s:0", suite_addr());
	assert_int_equal(rdmx_page_server_create(v->s.ctx, addr, &v->ps),
			 RDMX_OK);
	assert_int_equal(rdmx_page_server_export(v->ps, "mem", v->mem, len),
			 RDMX_OK);
	snprintf(v->url, sizeof(v->url), "%s:%d/mem", suite_addr(),
		 rdmx_page_server_port(v->ps));
}

static void srv_close(struct srv *v)
{
	rdmx_page_server_destroy(v->ps);
	side_close(&v->s);
	munmap(v->mem, v->len);
}

static struct rdmx_page_map *map_open(struct side *c, const char *url,
				      uint64_t cache)
{
	struct rdmx_page_attr a = { .mask = RDMX_PAGE_ATTR_CACHE_BYTES,
				    .cache_bytes = cache };
	struct rdmx_page_map *map = NULL;

	assert_int_equal(rdmx_page_map(c->ctx, url, cache ? &a : NULL, &map),
			 RDMX_OK);
	return map;
}

static uint8_t *mapping(struct rdmx_page_map *map)
{
	void *addr = NULL;
	rdmx_status st = rdmx_page_mmap(map, &addr);

	if (st == RDMX_ERR_UNSUPPORTED)
		suite_skip("no userfaultfd for this user here");
	assert_int_equal(st, RDMX_OK);
	return addr;
}

/* ---- the two-node case -------------------------------------------------- */

/* Node 1: write a pattern (seed 7) into the page at offset 0x1000. */
static int node1_store(int port, int flag)
{
	struct rdmx_page_map *map;
	struct rdmx_ctx *ctx;
	char url[128];
	uint8_t page[PG];
	rdmx_status st;

	(void)flag;
	snprintf(url, sizeof(url), "%s:%d/mem", suite_addr(), port);
	st = rdmx_ctx_create(NULL, &ctx);
	if (st == RDMX_OK)
		st = rdmx_page_map(ctx, url, NULL, &map);
	if (st != RDMX_OK) {
		fprintf(stderr, "node1_store: map %s: %s\n", url,
			rdmx_strerror(st));
		return 2;
	}
	pat_fill(page, PG, 0x1000, 7);
	st = rdmx_page_store(map, 0x1000 / PG, page);
	if (st != RDMX_OK) {
		fprintf(stderr, "node1_store: store: %s\n", rdmx_strerror(st));
		return 3;
	}
	rdmx_page_unmap(map);
	rdmx_ctx_destroy(ctx);
	return 0;
}

static void test_page_two_nodes_explicit_and_mapped(void **state)
{
	struct srv v;
	struct side c;
	struct rdmx_page_map *map;
	uint8_t page[PG], *mem;

	(void)state;
	srv_open(&v, 1 << 20);
	reap_ok(spawn("node1_store", rdmx_page_server_port(v.ps), 0));
	side_open(&c);
	map = map_open(&c, v.url, 0);
	assert_int_equal(rdmx_page_length(map), 1 << 20);
	assert_int_equal(rdmx_page_fetch(map, 1, page), RDMX_OK);
	assert_pat(page, PG, 0x1000, 7);
	assert_int_equal(rdmx_page_fetch(map, 2, page), RDMX_OK);
	assert_pat(page, PG, 0x2000, 0);
	mem = mapping(map);
	assert_pat(mem + 0x1000, PG, 0x1000, 7);
	assert_pat(mem, PG, 0, 0);
	assert_int_equal(rdmx_page_unmap(map), RDMX_OK);
	side_close(&c);
	srv_close(&v);
}

static uint64_t reads_posted(struct side *c)
{
	struct rdmx_stats st;

	rdmx_ctx_stats(c->ctx, &st);
	return st.ops_out[RDMX_OP_READ];
}

/*
 * Where a WRITE completes once sent (iWARP), a store, and a sync that
 * wrote pages back, end with one READ that the server answers only after
 * the WRITEs are placed: another client sees them once the call returns.
 * Elsewhere a WRITE completes once placed, and nothing is added.
 */
static void test_page_store_and_sync_wait_for_placement(void **state)
{
	struct rdmx_page_attr a = { .mask = RDMX_PAGE_ATTR_READAHEAD,
				    .readahead = 0 };
	struct srv v;
	struct side c;
	struct rdmx_page_map *map;
	struct rdmx_conn_info info;
	uint64_t idx[5] = { 2, 4, 6, 8, 10 }, r0;
	uint8_t page[PG], pages[5][PG], *mem;
	void *bufs[5];
	int settle;

	(void)state;
	srv_open(&v, 1 << 20);
	side_open(&c);
	assert_int_equal(rdmx_page_map(c.ctx, v.url, &a, &map), RDMX_OK);
	rdmx_page_conn_info(map, &info);
	settle = info.flags & RDMX_CONN_COMPLETES_LOCALLY ? 1 : 0;
	print_message("%s: WRITEs complete once %s\n", info.transport,
		      settle ? "sent" : "placed");
	r0 = reads_posted(&c);
	pat_fill(page, PG, 3 * PG, 5);
	assert_int_equal(rdmx_page_store(map, 3, page), RDMX_OK);
	assert_int_equal(reads_posted(&c) - r0, settle);
	assert_pat(v.mem + 3 * PG, PG, 3 * PG, 5);
	for (int i = 0; i < 5; i++) {
		bufs[i] = pages[i];
		pat_fill(pages[i], PG, idx[i] * PG, 6);
	}
	r0 = reads_posted(&c);
	assert_int_equal(rdmx_page_storev(map, idx, (const void *const *)bufs,
					  5),
			 RDMX_OK);
	assert_int_equal(reads_posted(&c) - r0, settle); /* one a batch */
	/* The mapping: a page written, then synced. */
	mem = mapping(map);
	pat_fill(mem + 7 * PG, PG, 7 * PG, 8);
	r0 = reads_posted(&c);
	assert_int_equal(rdmx_page_sync(map, mem + 7 * PG, PG), RDMX_OK);
	assert_int_equal(reads_posted(&c) - r0, settle);
	assert_pat(v.mem + 7 * PG, PG, 7 * PG, 8);
	/* Nothing written since: nothing to confirm. */
	r0 = reads_posted(&c);
	assert_int_equal(rdmx_page_sync(map, mem, 1 << 20), RDMX_OK);
	assert_int_equal(reads_posted(&c) - r0, 0);
	assert_int_equal(rdmx_page_unmap(map), RDMX_OK);
	side_close(&c);
	srv_close(&v);
}

/*
 * Many lookups in a row. The client read the reply's length from the
 * lookup's SEND completion when that came after the reply (siw: 2 in 600
 * lookups), and refused a good reply as one of another version.
 */
static void test_page_many_lookups(void **state)
{
	struct srv v;
	struct side c;

	(void)state;
	srv_open(&v, 1 << 20);
	side_open(&c);
	for (int i = 0; i < 200; i++) {
		struct rdmx_page_map *map = NULL;
		rdmx_status st = rdmx_page_map(c.ctx, v.url, NULL, &map);

		if (st != RDMX_OK)
			fail_msg("lookup %d of 200: %s", i, rdmx_strerror(st));
		assert_int_equal(rdmx_page_unmap(map), RDMX_OK);
	}
	side_close(&c);
	srv_close(&v);
}

static void test_page_fetchv_storev_batched(void **state)
{
	enum { N = 200 };
	struct srv v;
	struct side c;
	struct rdmx_page_map *map;
	uint64_t idx[N];
	void *bufs[N];
	uint8_t *area = malloc((size_t)N * PG);

	(void)state;
	srv_open(&v, 4 << 20);
	side_open(&c);
	map = map_open(&c, v.url, 0);
	for (int i = 0; i < N; i++) {
		idx[i] = (uint64_t)(i * 5) % (v.len / PG);
		bufs[i] = area + (size_t)i * PG;
		pat_fill(bufs[i], PG, idx[i] * PG, 9);
	}
	assert_int_equal(rdmx_page_storev(map, idx, (const void *const *)bufs,
					  N),
			 RDMX_OK);
	memset(area, 0, (size_t)N * PG);
	assert_int_equal(rdmx_page_fetchv(map, idx, bufs, N), RDMX_OK);
	for (int i = 0; i < N; i++)
		assert_pat(bufs[i], PG, idx[i] * PG, 9);
	/* And the server's memory holds them. */
	assert_pat(v.mem + idx[7] * PG, PG, idx[7] * PG, 9);
	rdmx_page_unmap(map);
	free(area);
	side_close(&c);
	srv_close(&v);
}

/* One lookup by hand: @len bytes of @msg out, the reply's status back. */
static int raw_lookup(struct side *c, struct rdmx_conn *conn, struct buf *b,
		      const uint8_t *msg, uint32_t len)
{
	struct rdmx_sge in = sge_of(b, 128, 128), out = sge_of(b, 0, len);
	struct rdmx_completion wc;
	int got = 0;

	memcpy(b->p, msg, len);
	assert_int_equal(rdmx_post_recv(conn, &in, 1, 1), RDMX_OK);
	assert_int_equal(rdmx_post_send(conn, &out, 2), RDMX_OK);
	while (got != 3) { /* the SEND's completion may come second */
		wc = wait_wc(c->cq);
		assert_int_equal(wc.status, RDMX_OK);
		got |= (int)wc.wr_id;
		if (wc.wr_id == 1)
			assert_int_equal(wc.byte_len, 40);
	}
	return b->p[128 + 6] << 8 | b->p[128 + 7]; /* big-endian status */
}

/* A lookup as the wire format (lib/page/page_proto.h) lays it out. */
static void lookup_msg(uint8_t msg[72], uint32_t magic, const char *name)
{
	memset(msg, 0, 72);
	for (int i = 0; i < 4; i++)
		msg[i] = (uint8_t)(magic >> (24 - 8 * i));
	msg[5] = 1; /* version */
	msg[7] = 1; /* op: lookup */
	msg[8] = (uint8_t)strlen(name);
	memcpy(msg + 9, name, strlen(name));
}

/*
 * A client that sends what is no lookup is answered "bad request", and
 * the server says why in its log, once per client; the connection and
 * the server go on serving.
 */
static void test_page_server_refuses_malformed_lookups(void **state)
{
	struct srv v;
	struct side c;
	struct buf b;
	struct rdmx_conn *conn;
	struct rdmx_page_server_stats st;
	struct rdmx_page_map *map;
	uint8_t msg[72];
	char log[4096];
	struct log_catch lc;

	(void)state;
	srv_open(&v, 1 << 20);
	side_open(&c);
	buf_alloc(&c, &b, 256, RDMX_ACCESS_LOCAL_WRITE);
	conn = side_connect(&c, rdmx_page_server_port(v.ps));
	log_catch_begin(&lc);
	lookup_msg(msg, 0x52504148u, "mem"); /* one bit off the magic */
	assert_int_equal(raw_lookup(&c, conn, &b, msg, 72), 2);
	lookup_msg(msg, 0x52504147u, "a/b"); /* a name with a '/' */
	assert_int_equal(raw_lookup(&c, conn, &b, msg, 72), 2);
	lookup_msg(msg, 0x52504147u, "mem"); /* too short */
	assert_int_equal(raw_lookup(&c, conn, &b, msg, 40), 2);
	lookup_msg(msg, 0x52504147u, "mem"); /* and now a good one */
	assert_int_equal(raw_lookup(&c, conn, &b, msg, 72), 0);
	log_catch_end(&lc, log, sizeof(log));
	assert_non_null(strstr(log, "refused: not the page service's magic "
				    "(72 bytes, magic 0x52504148, version 1, "
				    "op 1, name length 3)"));
	assert_null(strstr(log, "malformed region name"));
	assert_null(strstr(log, "not the length"));
	rdmx_page_server_stats(v.ps, &st);
	assert_int_equal(st.lookups, 4);
	assert_int_equal(st.lookups_failed, 3);
	/* The server goes on serving others. */
	map = map_open(&c, v.url, 0);
	rdmx_page_unmap(map);
	rdmx_conn_close(conn);
	buf_free(&b);
	side_close(&c);
	srv_close(&v);
}

/* A server that answers a lookup with 40 bytes that are no reply. */
struct liar {
	struct side s;
	struct rdmx_listener *lst;
	struct buf b;
	pthread_t t;
};

static void *liar_run(void *arg)
{
	struct liar *l = arg;
	struct rdmx_conn_attr ca = { .cq = l->s.cq };
	struct rdmx_conn *conn;
	struct rdmx_sge in = sge_of(&l->b, 0, 128),
			out = sge_of(&l->b, 128, 40);

	assert_int_equal(rdmx_accept(l->lst, &ca, T_TIMEOUT_MS, &conn),
			 RDMX_OK);
	assert_int_equal(rdmx_post_recv(conn, &in, 1, 1), RDMX_OK);
	assert_int_equal(wait_wc(l->s.cq).status, RDMX_OK);
	memset(l->b.p + 128, 0, 40);
	memcpy(l->b.p + 128, "\xde\xad\xbe\xef\x00\x01", 6);
	assert_int_equal(rdmx_post_send(conn, &out, 2), RDMX_OK);
	assert_int_equal(wait_wc(l->s.cq).status, RDMX_OK);
	rdmx_conn_close(conn);
	return NULL;
}

/* The client says what it got instead of a reply. */
static void test_page_map_names_a_bad_reply(void **state)
{
	struct liar l;
	struct side c;
	struct rdmx_page_map *map = NULL;
	struct log_catch lc;
	char url[128], log[4096];
	rdmx_status st;

	(void)state;
	side_open(&l.s);
	buf_alloc(&l.s, &l.b, 256, RDMX_ACCESS_LOCAL_WRITE);
	snprintf(url, sizeof(url), "%s:%d/mem", suite_addr(),
		 side_listen(&l.s, &l.lst));
	pthread_create(&l.t, NULL, liar_run, &l);
	side_open(&c);
	log_catch_begin(&lc);
	st = rdmx_page_map(c.ctx, url, NULL, &map);
	log_catch_end(&lc, log, sizeof(log));
	pthread_join(l.t, NULL);
	assert_int_equal(st, RDMX_ERR_PROTOCOL);
	assert_null(map);
	assert_non_null(strstr(log, "does not answer as a memory server of "
				    "this version (40 bytes, magic "
				    "0xdeadbeef, version 1, status 0"));
	side_close(&c);
	rdmx_listener_close(l.lst);
	buf_free(&l.b);
	side_close(&l.s);
}

static void test_page_map_errors(void **state)
{
	struct srv v;
	struct side c;
	struct rdmx_page_map *map = NULL;
	struct rdmx_page_attr a = { 0 };
	struct rdmx_remote rem;
	char url[160];
	uint8_t page[PG];

	(void)state;
	srv_open(&v, 1 << 20);
	side_open(&c);
	/* The descriptor a server publishes: the region's own. */
	assert_int_equal(rdmx_page_server_region(v.ps, "mem", &rem), RDMX_OK);
	assert_int_equal(rem.addr, (uintptr_t)v.mem);
	assert_int_equal(rem.length, 1 << 20);
	assert_int_equal(rdmx_page_server_region(v.ps, "nosuch", &rem),
			 RDMX_ERR_NOT_FOUND);
	snprintf(url, sizeof(url), "%s:%d/nosuch", suite_addr(),
		 rdmx_page_server_port(v.ps));
	assert_int_equal(rdmx_page_map(c.ctx, url, NULL, &map),
			 RDMX_ERR_NOT_FOUND);
	assert_int_equal(rdmx_page_map(c.ctx, "127.0.0.1:1", NULL, &map),
			 RDMX_ERR_INVALID); /* no /NAME */
	a.mask = RDMX_PAGE_ATTR_SIZE;
	a.size = (2 << 20);
	assert_int_equal(rdmx_page_map(c.ctx, v.url, &a, &map),
			 RDMX_ERR_INVALID);
	a.mask = RDMX_PAGE_ATTR_CACHE_BYTES;
	a.cache_bytes = PG - 1;
	assert_int_equal(rdmx_page_map(c.ctx, v.url, &a, &map),
			 RDMX_ERR_INVALID);
	assert_null(map);
	/* A smaller map is fine, and its end is enforced. */
	a.mask = RDMX_PAGE_ATTR_SIZE;
	a.size = 64 * PG;
	assert_int_equal(rdmx_page_map(c.ctx, v.url, &a, &map), RDMX_OK);
	assert_int_equal(rdmx_page_fetch(map, 64, page), RDMX_ERR_INVALID);
	assert_int_equal(rdmx_page_fetch(map, 63, page), RDMX_OK);
	assert_int_equal(rdmx_page_sync(map, page, 1), RDMX_ERR_INVALID);
	rdmx_page_unmap(map);
	/* The server went on serving the others. */
	map = map_open(&c, v.url, 0);
	rdmx_page_unmap(map);
	side_close(&c);
	srv_close(&v);
}

/* ---- the mapping: threads, a small cache, writes ------------------------ */

struct toucher {
	uint8_t *mem;
	uint64_t len;
	int id;
	uint64_t bad;
	pthread_t t;
};

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/*
 * Touch random pages and check every byte against the server's pattern.
 * Pages p with p % 3 == 0 belong to thread p % 8, the only one that writes
 * them (seed id + 1) and checks them (either pattern).
 */
static void *toucher_run(void *arg)
{
	struct toucher *t = arg;
	uint64_t s = 0x1234567ull + (uint64_t)t->id * 77, pages = t->len / PG;

	for (int i = 0; i < 3000 && t->bad == UINT64_MAX; i++) {
		uint64_t p = rnd(&s) % pages, off = p * PG;
		uint64_t own = (uint64_t)t->id + 1;

		if (p % 3) {
			t->bad = pat_diff(t->mem + off, PG, off, 0);
		} else if (p % 8 != (uint64_t)t->id) {
			continue; /* its owner's: reading it would race */
		} else if (i % 2) {
			pat_fill(t->mem + off, PG, off, own);
		} else if (pat_diff(t->mem + off, PG, off, 0) != UINT64_MAX) {
			t->bad = pat_diff(t->mem + off, PG, off, own);
		}
	}
	return NULL;
}

static void test_page_mmap_threads_through_small_cache(void **state)
{
	const uint64_t len = 16 << 20, cache = 4 << 20;
	struct srv v;
	struct side c;
	struct rdmx_page_map *map, *other;
	struct toucher t[8];
	struct rdmx_page_stats ps;
	uint8_t *mem, page[PG];
	int written = 0;

	(void)state;
	srv_open(&v, len);
	side_open(&c);
	map = map_open(&c, v.url, cache);
	mem = mapping(map);
	for (int i = 0; i < 8; i++) {
		t[i] = (struct toucher){ mem, len, i, UINT64_MAX, 0 };
		pthread_create(&t[i].t, NULL, toucher_run, &t[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i].t, NULL);
		if (t[i].bad != UINT64_MAX)
			fail_msg("thread %d read a wrong byte at 0x%llx", i,
				 (unsigned long long)t[i].bad);
	}
	assert_int_equal(rdmx_page_sync(map, mem, len), RDMX_OK);
	rdmx_page_stats(map, &ps);
	print_message("faults %llu, evicted %llu, written back %llu, "
		      "resident %llu\n",
		      (unsigned long long)ps.faults,
		      (unsigned long long)ps.evicted,
		      (unsigned long long)ps.written_back,
		      (unsigned long long)ps.resident);
	assert_true(ps.resident <= cache / PG);
	assert_true(ps.evicted > 0);
	assert_true(ps.written_back > 0);
	/* A second client sees each page as its owner left it. */
	other = map_open(&c, v.url, 0);
	for (uint64_t p = 0; p < len / PG; p++) {
		uint64_t owner = p % 8 + 1;

		assert_int_equal(rdmx_page_fetch(other, p, page), RDMX_OK);
		if (pat_diff(page, PG, p * PG, 0) == UINT64_MAX)
			continue;
		written++;
		if (p % 3 || pat_diff(page, PG, p * PG, owner) != UINT64_MAX)
			fail_msg("page %llu holds neither the pattern nor its "
				 "owner's write",
				 (unsigned long long)p);
	}
	assert_true(written > 0);
	rdmx_page_unmap(other);
	assert_int_equal(rdmx_page_unmap(map), RDMX_OK);
	side_close(&c);
	srv_close(&v);
}

/*
 * A send queue shorter than a chunk of write-backs (64 pages): a full
 * queue waits for room. It lost the link before (SIGBUS on the next fault,
 * sync CONN_LOST), and siw met it with the default queue once a chunk's
 * write-backs wait for a READ behind them.
 */
static void test_page_short_send_queue(void **state)
{
	enum { N = 100 };
	const uint64_t len = 4 << 20;
	static uint8_t pages[N * PG];
	uint64_t idx[N];
	void *bufs[N];
	struct srv v;
	struct side c;
	struct rdmx_page_map *map;
	struct rdmx_page_stats ps;
	uint8_t *mem;

	(void)state;
	srv_open(&v, len);
	side_open_with(&c, "RDMX_CONN_MAX_SEND_WR", "16");
	map = map_open(&c, v.url, 64 * PG);
	mem = mapping(map);
	for (uint64_t off = 0; off < len; off += PG)
		pat_fill(mem + off, PG, off, 4); /* through a 64-page cache */
	assert_int_equal(rdmx_page_sync(map, mem, len), RDMX_OK);
	rdmx_page_stats(map, &ps);
	assert_true(ps.written_back >= len / PG);
	for (uint64_t off = 0; off < len; off += PG)
		assert_pat(v.mem + off, PG, off, 4);
	/* The explicit calls: 64 pages in flight by default, too. */
	for (uint64_t i = 0; i < N; i++) {
		idx[i] = i * 3;
		bufs[i] = pages + i * PG;
		pat_fill(bufs[i], PG, idx[i] * PG, 11);
	}
	assert_int_equal(rdmx_page_storev(map, idx, (const void *const *)bufs,
					  N),
			 RDMX_OK);
	memset(pages, 0, sizeof(pages));
	assert_int_equal(rdmx_page_fetchv(map, idx, bufs, N), RDMX_OK);
	for (uint64_t i = 0; i < N; i++)
		assert_pat(bufs[i], PG, idx[i] * PG, 11);
	assert_int_equal(rdmx_page_unmap(map), RDMX_OK);
	side_close(&c);
	srv_close(&v);
}

/* Resident set of this process, and of the mapping at @base, in bytes. */
static uint64_t rss_of(const void *base)
{
	char line[256];
	uint64_t kb = 0;
	bool in = base == NULL;
	FILE *f = fopen(base ? "/proc/self/smaps" : "/proc/self/status", "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (!base) {
			if (sscanf(line, "VmRSS: %lu", &lo) == 1)
				kb = lo;
			continue;
		}
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) /* a vma */
			in = lo == (uintptr_t)base;
		else if (in && sscanf(line, "Rss: %lu", &lo) == 1)
			kb = lo;
	}
	fclose(f);
	return kb * 1024;
}

static void test_page_mmap_rss_stays_within_cache(void **state)
{
	const uint64_t len = 16 << 20, cache = 4 << 20;
	struct srv v;
	struct side c;
	struct rdmx_page_map *map;
	uint64_t before, after, in_map;
	uint8_t *mem;

	(void)state;
	srv_open(&v, len);
	side_open(&c);
	map = map_open(&c, v.url, cache);
	mem = mapping(map);
	before = rss_of(NULL);
	for (uint64_t off = 0; off < 4 * cache; off += PG)
		(void)*(volatile uint64_t *)(mem + off);
	for (uint64_t off = 0; off < 4 * cache; off += PG)
		mem[off] = 1; /* dirty: evicted by write-back */
	after = rss_of(NULL);
	in_map = rss_of(mem);
	print_message("touched %llu MiB through a %llu MiB cache: mapping "
		      "holds %llu KiB, process grew %llu KiB\n",
		      (unsigned long long)(8 * cache >> 20),
		      (unsigned long long)(cache >> 20),
		      (unsigned long long)(in_map >> 10),
		      (unsigned long long)((after - before) >> 10));
	assert_true(in_map <= cache);
	/*
	 * The stated overhead: staging (16 chunks of 64 pages: 4 MiB, all of
	 * it touched once read-ahead or write-back has used every chunk),
	 * per-page state, the connection's buffers: under 6 MiB. A
	 * sanitizer's shadow of the touched memory comes on top, so not
	 * there.
	 */
#ifndef HARNESS_SANITIZED
	assert_true(after <= before + cache + (6 << 20));
#endif
	assert_int_equal(rdmx_page_unmap(map), RDMX_OK);
	side_close(&c);
	srv_close(&v);
}

static void test_page_mmap_readahead_sequential_only(void **state)
{
	const uint64_t len = 8 << 20;
	struct srv v;
	struct side c;
	struct rdmx_page_map *map;
	struct rdmx_page_stats ps, ps2;
	uint64_t s = 99;
	uint8_t *mem;

	(void)state;
	srv_open(&v, len);
	side_open(&c);
	map = map_open(&c, v.url, 0);
	mem = mapping(map);
	/* Random touches in the second half fetch only what they touch. */
	for (int i = 0; i < 200; i++) {
		uint64_t off = len / 2 + rnd(&s) % (len / 2 / PG) * PG;

		assert_pat(mem + off, 8, off, 0);
	}
	rdmx_page_stats(map, &ps);
	assert_true(ps.readahead <= 8);
	/* Sequential ones in the first half are fetched ahead, in few READs. */
	for (uint64_t off = 0; off < len / 2; off += PG)
		assert_pat(mem + off, 8, off, 0);
	rdmx_page_stats(map, &ps2);
	print_message("random: %llu read ahead; sequential: %llu faults, "
		      "%llu fetches for %llu pages\n",
		      (unsigned long long)ps.readahead,
		      (unsigned long long)(ps2.faults - ps.faults),
		      (unsigned long long)(ps2.fetches - ps.fetches),
		      (unsigned long long)(len / 2 / PG));
	assert_true(ps2.readahead - ps.readahead > len / 4 / PG);
	assert_true((ps2.fetches - ps.fetches) * 4 < len / 2 / PG);
	rdmx_page_unmap(map);
	side_close(&c);
	srv_close(&v);
}

static void test_page_mmap_drop_sees_others_writes(void **state)
{
	struct srv v;
	struct side c;
	struct rdmx_page_map *a, *b;
	uint8_t *ma, *mb, page[PG];

	(void)state;
	srv_open(&v, 1 << 20);
	side_open(&c);
	a = map_open(&c, v.url, 0);
	b = map_open(&c, v.url, 0);
	ma = mapping(a);
	mb = mapping(b);
	assert_pat(mb + 5 * PG, PG, 5 * PG, 0);
	pat_fill(ma + 5 * PG, PG, 5 * PG, 3); /* a writes page 5 */
	/* Not yet synced: the server still has the old page. */
	assert_int_equal(rdmx_page_fetch(b, 5, page), RDMX_OK);
	assert_pat(page, PG, 5 * PG, 0);
	assert_int_equal(rdmx_page_sync(a, ma + 5 * PG + 100, 10), RDMX_OK);
	/* b still holds its copy; after a drop it fetches a's write. */
	assert_pat(mb + 5 * PG, PG, 5 * PG, 0);
	assert_int_equal(rdmx_page_drop(b, mb, 1 << 20), RDMX_OK);
	assert_pat(mb + 5 * PG, PG, 5 * PG, 3);
	/* A dropped dirty page is written back, never lost. */
	mb[9 * PG] ^= 0xff;
	assert_int_equal(rdmx_page_drop(b, mb + 9 * PG, PG), RDMX_OK);
	assert_int_equal(v.mem[9 * PG], (uint8_t)(pat(9 * PG, 0) ^ 0xff));
	rdmx_page_unmap(a);
	rdmx_page_unmap(b);
	side_close(&c);
	srv_close(&v);
}

static void test_page_map_local_evicts_and_writes_back(void **state)
{
	const uint64_t len = 2 << 20;
	struct rdmx_page_attr a = { .mask = RDMX_PAGE_ATTR_CACHE_BYTES,
				    .cache_bytes = 64 * PG };
	struct rdmx_page_map *map;
	struct rdmx_page_stats ps;
	uint8_t *src = aligned_alloc(PG, len), *mem;

	(void)state;
	pat_fill(src, len, 0, 0);
	assert_int_equal(rdmx_page_map_local(src, len, &a, &map), RDMX_OK);
	mem = mapping(map);
	for (uint64_t off = 0; off < len; off += PG)
		mem[off + 8] = 0x5a;
	assert_int_equal(rdmx_page_unmap(map), RDMX_OK);
	for (uint64_t off = 0; off < len; off += PG) {
		assert_int_equal(src[off + 8], 0x5a);
		assert_pat(src + off + 16, PG - 16, off + 16, 0);
	}
	assert_int_equal(rdmx_page_map_local(src, len, &a, &map), RDMX_OK);
	mem = mapping(map);
	assert_int_equal(mem[len - PG + 8], 0x5a);
	rdmx_page_stats(map, &ps);
	assert_int_equal(ps.faults, 1);
	rdmx_page_unmap(map);
	free(src);
}

struct same_page {
	uint8_t *mem;
	pthread_barrier_t *go;
	uint64_t word;
};

static void *same_page_touch(void *arg)
{
	struct same_page *sp = arg;

	pthread_barrier_wait(sp->go);
	sp->word = *(volatile uint64_t *)(sp->mem + 3 * PG + 64);
	return NULL;
}

static void test_page_mmap_threads_on_one_page_fetch_once(void **state)
{
	struct rdmx_page_attr a = { .mask = RDMX_PAGE_ATTR_READAHEAD,
				    .readahead = 0 };
	struct srv v;
	struct side c;
	struct rdmx_page_map *map;
	struct rdmx_page_stats ps;
	pthread_barrier_t go;
	struct same_page sp[4];
	pthread_t t[4];

	(void)state;
	srv_open(&v, 1 << 20);
	side_open(&c);
	assert_int_equal(rdmx_page_map(c.ctx, v.url, &a, &map), RDMX_OK);
	pthread_barrier_init(&go, NULL, 4);
	for (int r = 0; r < 20; r++) {
		uint8_t *mem = mapping(map);

		for (int i = 0; i < 4; i++) {
			sp[i] = (struct same_page){ mem, &go, 0 };
			pthread_create(&t[i], NULL, same_page_touch, &sp[i]);
		}
		for (int i = 0; i < 4; i++) {
			pthread_join(t[i], NULL);
			assert_true(sp[i].word == pat(3 * PG + 64, 0));
		}
		rdmx_page_stats(map, &ps);
		/* Four threads, one page: one READ, every round. */
		assert_int_equal(ps.fetches, r + 1);
		assert_int_equal(ps.pages_fetched, r + 1);
		assert_int_equal(rdmx_page_drop(map, mem, 1 << 20), RDMX_OK);
	}
	pthread_barrier_destroy(&go);
	rdmx_page_unmap(map);
	side_close(&c);
	srv_close(&v);
}

/* ---- a server killed under load ----------------------------------------- */

static int page_server_child(int port, int flag)
{
	struct rdmx_ctx *ctx;
	struct rdmx_page_server *ps;
	char addr[80];
	uint64_t len = 64 << 20;
	uint8_t *mem = aligned_alloc(PG, len);

	(void)flag;
	pat_fill(mem, len, 0, 0);
	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(), port);
	if (rdmx_ctx_create(NULL, &ctx) ||
	    rdmx_page_server_create(ctx, addr, &ps) ||
	    rdmx_page_server_export(ps, "mem", mem, len))
		return 2;
	pause(); /* until killed */
	return 0;
}

static __thread sigjmp_buf bus_jmp;
static _Atomic double bus_at;
static atomic_int buses;

static void on_sigbus(int sig)
{
	(void)sig;
	if (!atomic_fetch_add(&buses, 1))
		bus_at = now_s();
	siglongjmp(bus_jmp, 1);
}

struct loader {
	uint8_t *mem;
	uint64_t len;
	atomic_bool stop;
	atomic_ulong touched;
	int got_bus;
};

static void *loader_run(void *arg)
{
	struct loader *l = arg;
	uint64_t s = 5;

	if (sigsetjmp(bus_jmp, 1)) {
		l->got_bus = 1;
		return NULL;
	}
	while (!atomic_load(&l->stop)) {
		(void)*(volatile uint64_t *)(l->mem +
					     rnd(&s) % (l->len / PG) * PG);
		atomic_fetch_add(&l->touched, 1);
	}
	return NULL;
}

/* Start page_server_child, and map its region once it listens. */
static struct rdmx_page_map *
map_child_server(struct side *c, const struct rdmx_page_attr *a, pid_t *pid_p)
{
	struct rdmx_page_map *map = NULL;
	char url[128];
	int port = harness_free_port();
	rdmx_status st = RDMX_ERR_CONN_REFUSED;

	*pid_p = spawn("page_server_child", port, 0);
	snprintf(url, sizeof(url), "%s:%d/mem", suite_addr(), port);
	for (int i = 0; i < 200 && st == RDMX_ERR_CONN_REFUSED; i++) {
		st = rdmx_page_map(c->ctx, url, a, &map);
		if (st == RDMX_ERR_CONN_REFUSED)
			usleep(50000);
	}
	assert_int_equal(st, RDMX_OK);
	return map;
}

static void test_page_mmap_server_killed_sigbus(void **state)
{
	struct sigaction sa = { .sa_handler = on_sigbus }, old;
	struct rdmx_page_attr a = { .mask = RDMX_PAGE_ATTR_CACHE_BYTES |
					    RDMX_PAGE_ATTR_TIMEOUT_MS,
				    .cache_bytes = 4 << 20,
				    .timeout_ms = 2000 };
	struct side c;
	struct rdmx_page_map *map;
	struct loader l = { 0 };
	struct rdmx_page_stats ps;
	pid_t pid;
	pthread_t t;
	double killed, bound = 2.0 + T_FLUSH_S;
	struct log_catch lc;
	char log[4096];

	(void)state;
	side_open(&c);
	map = map_child_server(&c, &a, &pid);
	l.mem = mapping(map);
	l.len = rdmx_page_length(map);
	sigaction(SIGBUS, &sa, &old);
	pthread_create(&t, NULL, loader_run, &l);
	while (atomic_load(&l.touched) < 2000)
		usleep(1000);
	log_catch_begin(&lc);
	kill(pid, SIGKILL);
	killed = now_s();
	waitpid(pid, NULL, 0);
	pthread_join(t, NULL); /* returns only through SIGBUS */
	log_catch_end(&lc, log, sizeof(log));
	sigaction(SIGBUS, &old, NULL);
	/* Said once, and as it was: no queue was full. */
	assert_non_null(strstr(log, "page: memory server lost: "));
	assert_null(strstr(log, "queue full"));
	print_message("SIGBUS %.1f ms after the kill, %lu touches before\n",
		      (bus_at - killed) * 1e3, atomic_load(&l.touched));
	assert_true(l.got_bus);
	assert_true(bus_at - killed < bound);
	rdmx_page_stats(map, &ps);
	assert_true(ps.sigbus >= 1);
	/* The explicit calls fail cleanly too, and unmap returns. */
	uint8_t page[PG];

	assert_int_not_equal(rdmx_page_fetch(map, 0, page), RDMX_OK);
	rdmx_page_unmap(map);
	side_close(&c);
}

/*
 * The server dies while nothing is in flight: the next fault cannot even
 * post its READ. It gets SIGBUS, and the log says the connection ended,
 * not that a queue was full.
 */
static void test_page_mmap_server_gone_before_fault(void **state)
{
	struct sigaction sa = { .sa_handler = on_sigbus }, old;
	struct rdmx_page_attr a = { .mask = RDMX_PAGE_ATTR_READAHEAD |
					    RDMX_PAGE_ATTR_TIMEOUT_MS,
				    .readahead = 0,
				    .timeout_ms = 2000 };
	struct side c;
	struct rdmx_page_map *map;
	struct log_catch lc;
	char log[4096];
	uint8_t page[PG], *mem;
	volatile uint64_t word = 0;
	double until;
	pid_t pid;

	(void)state;
	side_open(&c);
	map = map_child_server(&c, &a, &pid);
	mem = mapping(map);
	assert_pat(mem, PG, 0, 0); /* one page in: the fault path works */
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* The explicit calls' connection fails first; the fault handler's
	 * ends with it, and is given the time to be seen ended. */
	until = now_s() + T_FLUSH_S;
	while (rdmx_page_fetch(map, 1, page) == RDMX_OK && now_s() < until)
		usleep(10000);
	usleep((useconds_t)(200000 * time_scale()));
	atomic_store(&buses, 0);
	sigaction(SIGBUS, &sa, &old);
	log_catch_begin(&lc);
	if (!sigsetjmp(bus_jmp, 1))
		word = *(volatile uint64_t *)(mem + 5 * PG);
	log_catch_end(&lc, log, sizeof(log));
	sigaction(SIGBUS, &old, NULL);
	(void)word;
	assert_int_equal(atomic_load(&buses), 1);
	assert_non_null(strstr(log, "page: memory server lost: "));
	assert_null(strstr(log, "queue full"));
	rdmx_page_unmap(map);
	side_close(&c);
}

static const struct child children[] = {
	{ "node1_store", node1_store },
	{ "page_server_child", page_server_child },
	{ NULL, NULL },
};

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_page_two_nodes_explicit_and_mapped),
		cmocka_unit_test(test_page_many_lookups),
		cmocka_unit_test(test_page_fetchv_storev_batched),
		cmocka_unit_test(test_page_store_and_sync_wait_for_placement),
		cmocka_unit_test(test_page_map_errors),
		cmocka_unit_test(test_page_map_names_a_bad_reply),
		cmocka_unit_test(test_page_server_refuses_malformed_lookups),
		cmocka_unit_test(test_page_map_local_evicts_and_writes_back),
		cmocka_unit_test(test_page_mmap_threads_through_small_cache),
		cmocka_unit_test(test_page_mmap_rss_stays_within_cache),
		cmocka_unit_test(test_page_short_send_queue),
		cmocka_unit_test(test_page_mmap_readahead_sequential_only),
		cmocka_unit_test(test_page_mmap_drop_sees_others_writes),
		cmocka_unit_test(test_page_mmap_threads_on_one_page_fetch_once),
		cmocka_unit_test(test_page_mmap_server_killed_sigbus),
		cmocka_unit_test(test_page_mmap_server_gone_before_fault),
	};

	harness_children(argc, argv, children);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
