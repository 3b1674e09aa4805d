/* SPDX-License-Identifier: MIT */
/*
 * Statistics: per-context counters, updated with relaxed atomic adds from
 * whichever thread posts or completes, and (metrics.latency: on) a
 * per-connection FIFO of post times. Initiator requests complete in post
 * order on a connection, so the oldest stamp belongs to the next
 * successful completion; unsignaled requests get no stamp. After an error
 * completion the rest is a flush: the stamps are dropped.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.h"

static const double rdmx_bucket_us[RDMX_STATS_BUCKETS - 1] = {
	1,   2,	   5,	 10,   20,    50,     100,     200,
	500, 1000, 2000, 5000, 10000, 100000, 1000000,
};

/* enum rdmx_refusal, as metrics labels. */
static const char *const rdmx_refusal_names[RDMX_STATS_REFUSALS] = {
	"rkey", "bounds", "access", "align", "fault",
};

struct rdmx_lat {
	pthread_mutex_t lock;
	uint64_t *stamp; /* ns; a ring of cap entries */
	uint32_t cap, head, count;
	bool broken; /* overflowed once: no more samples on this conn */
};

static void rdmx_add(uint64_t *counter, uint64_t v)
{
	__atomic_fetch_add(counter, v, __ATOMIC_RELAXED);
}

/*
 * The counters of every message (ops and bytes, out and in) live in
 * per-thread shards: a thread adds to its own with a relaxed load and
 * store, where one shared counter took a locked add (~5 ns here, four per
 * message on a ping-pong's each side). rdmx_ctx_stats sums them. A shard
 * is a (thread, context)'s: found in the thread's small cache keyed by the
 * context's id (never reused), else in the context's list by the thread's
 * id (a thread's shard outlives it, and one with its id later takes it
 * over), else made. They go with the context.
 */
struct rdmx_stats_shard {
	uint64_t ops_out[RDMX_STATS_OPS], bytes_out[RDMX_STATS_OPS];
	uint64_t ops_in[RDMX_STATS_OPS], bytes_in[RDMX_STATS_OPS];
	pthread_t owner;
	struct rdmx_stats_shard *next;
};

/*
 * This thread's last few shards, most recently used first: a post or a
 * received message finds its context's in the first entry, inline, where
 * a call and a loop over them all were ~5 ns of each (rdmx_count: 7% of a
 * single-thread shm SEND ping-pong).
 */
#define RDMX_SHARD_CACHE 4
static _Thread_local RDMX_TLS_FAST struct rdmx_shard_entry {
	uint64_t ctx_id;
	struct rdmx_stats_shard *shard;
} rdmx_shard_cache[RDMX_SHARD_CACHE];
static _Atomic uint64_t rdmx_ctx_ids;

/* Only the owner writes: no locked add. */
static void rdmx_shard_add(uint64_t *counter, uint64_t v)
{
	__atomic_store_n(counter,
			 __atomic_load_n(counter, __ATOMIC_RELAXED) + v,
			 __ATOMIC_RELAXED);
}

/* rdmx_shard, past the first entry: @ctx's shard moves to the front. */
static __attribute__((noinline)) struct rdmx_stats_shard *
rdmx_shard_slow(struct rdmx_ctx *ctx)
{
	struct rdmx_shard_entry e = { ctx->id, NULL };
	unsigned i;

	for (i = 1; i < RDMX_SHARD_CACHE; i++)
		if (rdmx_shard_cache[i].ctx_id == ctx->id)
			break;
	if (i < RDMX_SHARD_CACHE) {
		e.shard = rdmx_shard_cache[i].shard;
	} else {
		pthread_t self = pthread_self();

		i = RDMX_SHARD_CACHE - 1; /* the least recent goes */
		pthread_mutex_lock(&ctx->shards_lock);
		for (e.shard = atomic_load(&ctx->shards); e.shard;
		     e.shard = e.shard->next)
			if (pthread_equal(e.shard->owner, self))
				break;
		if (!e.shard && (e.shard = calloc(1, sizeof(*e.shard)))) {
			e.shard->owner = self;
			e.shard->next = atomic_load(&ctx->shards);
			atomic_store(&ctx->shards, e.shard);
		}
		pthread_mutex_unlock(&ctx->shards_lock);
		if (!e.shard)
			return NULL;
	}
	for (; i > 0; i--)
		rdmx_shard_cache[i] = rdmx_shard_cache[i - 1];
	rdmx_shard_cache[0] = e;
	return e.shard;
}

/* This thread's shard of @ctx, or NULL when none can be made. */
static inline struct rdmx_stats_shard *rdmx_shard(struct rdmx_ctx *ctx)
{
	if (rdmx_shard_cache[0].ctx_id == ctx->id)
		return rdmx_shard_cache[0].shard;
	return rdmx_shard_slow(ctx);
}

void rdmx_stats_init(struct rdmx_ctx *ctx)
{
	ctx->id = atomic_fetch_add(&rdmx_ctx_ids, 1) + 1; /* 0: no entry */
	pthread_mutex_init(&ctx->shards_lock, NULL);
	atomic_store(&ctx->shards, NULL);
}

void rdmx_stats_fini(struct rdmx_ctx *ctx)
{
	struct rdmx_stats_shard *sh = atomic_load(&ctx->shards), *next;

	for (; sh; sh = next) {
		next = sh->next;
		free(sh);
	}
	pthread_mutex_destroy(&ctx->shards_lock);
}

/* Count @n ops of @bytes into this thread's shard, else the shared one. */
static inline void rdmx_count(struct rdmx_ctx *ctx, bool out,
			      enum rdmx_opcode op, uint64_t n, uint64_t bytes)
{
	struct rdmx_stats_shard *sh = rdmx_shard(ctx);
	struct rdmx_stats *s = &ctx->stats;

	if (!sh) {
		rdmx_add(out ? &s->ops_out[op] : &s->ops_in[op], n);
		rdmx_add(out ? &s->bytes_out[op] : &s->bytes_in[op], bytes);
		return;
	}
	rdmx_shard_add(out ? &sh->ops_out[op] : &sh->ops_in[op], n);
	rdmx_shard_add(out ? &sh->bytes_out[op] : &sh->bytes_in[op], bytes);
}

static uint64_t rdmx_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double rdmx_stats_bucket_us(int i)
{
	if (i < 0 || i >= RDMX_STATS_BUCKETS - 1)
		return 1.0 / 0.0;
	return rdmx_bucket_us[i];
}

const char *rdmx_opcode_name(enum rdmx_opcode op)
{
	static const char *const names[RDMX_STATS_OPS] = {
		[RDMX_OP_SEND] = "send",
		[RDMX_OP_WRITE] = "write",
		[RDMX_OP_WRITE_IMM] = "write_imm",
		[RDMX_OP_READ] = "read",
		[RDMX_OP_FETCH_ADD] = "fetch_add",
		[RDMX_OP_CMP_SWAP] = "cmp_swap",
		[RDMX_OP_RECV] = "recv",
		[RDMX_OP_RECV_IMM] = "recv_imm",
	};

	return (unsigned)op < RDMX_STATS_OPS && names[op] ? names[op]
							  : "unknown";
}

const char *rdmx_transport_name(int transport)
{
	static const char *const names[RDMX_STATS_TRANSPORTS] = {
		[RDMX_TRANSPORT_TCP] = "tcp",
		[RDMX_TRANSPORT_SHM] = "shm",
		[RDMX_TRANSPORT_VERBS] = "verbs",
	};

	return (unsigned)transport < RDMX_STATS_TRANSPORTS ? names[transport]
							   : "unknown";
}

static bool rdmx_is_initiator(enum rdmx_opcode op)
{
	return op >= RDMX_OP_SEND && op <= RDMX_OP_CMP_SWAP;
}

/* ---- counting ----------------------------------------------------------- */

void rdmx_stats_posted(struct rdmx_conn *conn, enum rdmx_opcode op,
		       uint64_t bytes)
{
	rdmx_count(conn->ctx, true, op, 1, bytes);
}

void rdmx_stats_unposted(struct rdmx_stats_tally *t, const struct rdmx_wr *wr)
{
	t->ops[wr->opcode]--;
	for (int k = 0; k < wr->num_sge; k++)
		t->bytes[wr->opcode] -= wr->sg_list[k].length;
}

void rdmx_stats_posted_tally(struct rdmx_conn *conn,
			     const struct rdmx_stats_tally *t)
{
	for (int op = RDMX_OP_SEND; op <= RDMX_OP_CMP_SWAP; op++)
		if (t->ops[op])
			rdmx_count(conn->ctx, true, op, t->ops[op],
				   t->bytes[op]);
}

static void rdmx_lat_sample(struct rdmx_stats *s, enum rdmx_opcode op,
			    uint64_t ns)
{
	double us = (double)ns / 1000;
	int b = 0;

	while (b < RDMX_STATS_BUCKETS - 1 && us > rdmx_bucket_us[b])
		b++;
	rdmx_add(&s->lat_bucket[op][b], 1);
	rdmx_add(&s->lat_count[op], 1);
	rdmx_add(&s->lat_sum_ns[op], ns);
}

void rdmx_stats_completed(struct rdmx_ctx *ctx,
			  const struct rdmx_completion *wc)
{
	struct rdmx_stats *s = &ctx->stats;
	/* The progress thread may complete a peer's SEND on a connection
	 * whose creator has not yet attached the latency table. */
	struct rdmx_lat *lat = wc->conn ? rdmx_lat_of(wc->conn) : NULL;

	if (wc->status) {
		if (-wc->status < RDMX_STATS_STATUSES)
			rdmx_add(&s->errors[-wc->status], 1);
	} else if (wc->opcode == RDMX_OP_RECV ||
		   wc->opcode == RDMX_OP_RECV_IMM) {
		rdmx_count(ctx, false, wc->opcode, 1, wc->byte_len);
	}
	if (!lat || !rdmx_is_initiator(wc->opcode))
		return;
	pthread_mutex_lock(&lat->lock);
	if (wc->status) {
		lat->count = 0;
	} else if (lat->count) {
		uint64_t t = lat->stamp[lat->head];

		lat->head = (lat->head + 1) & (lat->cap - 1);
		lat->count--;
		rdmx_lat_sample(s, wc->opcode, rdmx_now_ns() - t);
	}
	pthread_mutex_unlock(&lat->lock);
}

void rdmx_stats_refused(struct rdmx_ctx *ctx, bool cut, enum rdmx_refusal why)
{
	rdmx_add(&ctx->stats.refused, 1);
	if ((unsigned)why < RDMX_STATS_REFUSALS)
		rdmx_add(&ctx->stats.refused_by[why], 1);
	if (cut)
		rdmx_add(&ctx->stats.peers_cut, 1);
}

void rdmx_stats_served(struct rdmx_ctx *ctx, unsigned tp, enum rdmx_opcode op,
		       uint64_t bytes)
{
	if (tp >= RDMX_STATS_TRANSPORTS || !rdmx_is_initiator(op))
		return;
	rdmx_add(&ctx->stats.served_ops[tp][op], 1);
	rdmx_add(&ctx->stats.served_bytes[tp][op], bytes);
}

void rdmx_stats_conn(struct rdmx_conn *conn, int delta)
{
	struct rdmx_stats *s = &conn->ctx->stats;
	unsigned t = conn->ops->id;

	if (t >= RDMX_STATS_TRANSPORTS)
		return;
	rdmx_add(&s->conns_open[t], (uint64_t)(int64_t)delta);
	if (delta > 0)
		rdmx_add(&s->conns_total[t], 1);
}

void rdmx_ctx_stats(struct rdmx_ctx *ctx, struct rdmx_stats *stats_p)
{
	const uint64_t *src = (const uint64_t *)&ctx->stats;
	uint64_t *dst = (uint64_t *)stats_p;
	const struct rdmx_stats_shard *sh;

	for (size_t i = 0; i < sizeof(*stats_p) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
	/* Pushed with seq_cst under shards_lock: each one whole. */
	for (sh = atomic_load(&ctx->shards); sh; sh = sh->next)
		for (int op = 0; op < RDMX_STATS_OPS; op++) {
			stats_p->ops_out[op] += __atomic_load_n(
				&sh->ops_out[op], __ATOMIC_RELAXED);
			stats_p->bytes_out[op] += __atomic_load_n(
				&sh->bytes_out[op], __ATOMIC_RELAXED);
			stats_p->ops_in[op] += __atomic_load_n(
				&sh->ops_in[op], __ATOMIC_RELAXED);
			stats_p->bytes_in[op] += __atomic_load_n(
				&sh->bytes_in[op], __ATOMIC_RELAXED);
		}
}

/* ---- latency stamps ----------------------------------------------------- */

rdmx_status rdmx_lat_create(struct rdmx_conn *conn)
{
	struct rdmx_lat *lat;
	uint32_t cap = 16;

	if (!conn->ctx->cfg.metrics_latency)
		return RDMX_OK;
	while (cap < 2 * conn->ctx->cfg.conn_max_send_wr)
		cap *= 2;
	lat = calloc(1, sizeof(*lat));
	if (!lat || !(lat->stamp = calloc(cap, sizeof(uint64_t)))) {
		free(lat);
		return RDMX_ERR_NOMEM;
	}
	pthread_mutex_init(&lat->lock, NULL);
	lat->cap = cap;
	__atomic_store_n(&conn->lat, lat, __ATOMIC_RELEASE);
	return RDMX_OK;
}

void rdmx_lat_destroy(struct rdmx_lat *lat)
{
	if (!lat)
		return;
	pthread_mutex_destroy(&lat->lock);
	free(lat->stamp);
	free(lat);
}

void rdmx_lat_stamp_on(struct rdmx_conn *conn, const struct rdmx_wr *wrs, int n)
{
	struct rdmx_lat *lat = rdmx_lat_of(conn);
	uint64_t now;

	if (!lat)
		return;
	now = rdmx_now_ns();
	pthread_mutex_lock(&lat->lock);
	for (int i = 0; i < n && !lat->broken; i++) {
		if (wrs[i].flags & RDMX_WR_UNSIGNALED)
			continue;
		if (lat->count == lat->cap) {
			lat->broken = true; /* cannot pair them any more */
			lat->count = 0;
			break;
		}
		lat->stamp[(lat->head + lat->count++) & (lat->cap - 1)] = now;
	}
	pthread_mutex_unlock(&lat->lock);
}

void rdmx_lat_unstamp(struct rdmx_conn *conn, const struct rdmx_wr *wrs, int n)
{
	struct rdmx_lat *lat = rdmx_lat_of(conn);

	if (!lat)
		return;
	pthread_mutex_lock(&lat->lock);
	for (int i = 0; i < n && lat->count; i++)
		if (!(wrs[i].flags & RDMX_WR_UNSIGNALED))
			lat->count--;
	pthread_mutex_unlock(&lat->lock);
}

/* ---- Prometheus text ---------------------------------------------------- */

struct rdmx_out {
	char *buf;
	size_t len, need;
};

static __attribute__((format(printf, 2, 3))) void rdmx_out(struct rdmx_out *o,
							   const char *fmt, ...)
{
	size_t room = o->need < o->len ? o->len - o->need : 0;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(room ? o->buf + o->need : NULL, room, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->need += (size_t)n;
}

/* A counter by op and direction: @out for initiator ops, @in for RECVs. */
static void rdmx_prom_dir(struct rdmx_out *o, const char *metric,
			  const char *help, const uint64_t *out,
			  const uint64_t *in)
{
	rdmx_out(o, "# HELP %s %s\n# TYPE %s counter\n", metric, help, metric);
	for (int op = 1; op < RDMX_STATS_OPS; op++) {
		bool is_in = !rdmx_is_initiator(op);

		rdmx_out(o, "%s{op=\"%s\",dir=\"%s\"} %llu\n", metric,
			 rdmx_opcode_name(op), is_in ? "in" : "out",
			 (unsigned long long)(is_in ? in[op] : out[op]));
	}
}

/* A metric by transport. */
static void rdmx_prom_transports(struct rdmx_out *o, const char *metric,
				 const char *type, const char *help,
				 const uint64_t *v)
{
	rdmx_out(o, "# HELP %s %s\n# TYPE %s %s\n", metric, help, metric, type);
	for (int t = 0; t < RDMX_STATS_TRANSPORTS; t++)
		rdmx_out(o, "%s{transport=\"%s\"} %llu\n", metric,
			 rdmx_transport_name(t), (unsigned long long)v[t]);
}

/* A target-side counter by transport and one-sided op. */
static void rdmx_prom_served(struct rdmx_out *o, const char *metric,
			     const char *help,
			     const uint64_t (*v)[RDMX_STATS_OPS])
{
	rdmx_out(o, "# HELP %s %s\n# TYPE %s counter\n", metric, help, metric);
	for (int t = 0; t < RDMX_STATS_TRANSPORTS; t++)
		for (int op = RDMX_OP_WRITE; op <= RDMX_OP_CMP_SWAP; op++)
			rdmx_out(o, "%s{transport=\"%s\",op=\"%s\"} %llu\n",
				 metric, rdmx_transport_name(t),
				 rdmx_opcode_name(op),
				 (unsigned long long)v[t][op]);
}

static void rdmx_prom_latency(struct rdmx_out *o, const struct rdmx_stats *s)
{
	rdmx_out(o, "# HELP rdmx_op_latency_seconds From post to completion, "
		    "signaled requests (metrics.latency: on).\n"
		    "# TYPE rdmx_op_latency_seconds histogram\n");
	for (int op = 1; op <= RDMX_OP_CMP_SWAP; op++) {
		uint64_t cum = 0;

		for (int b = 0; b < RDMX_STATS_BUCKETS; b++) {
			cum += s->lat_bucket[op][b];
			if (b < RDMX_STATS_BUCKETS - 1)
				rdmx_out(o,
					 "rdmx_op_latency_seconds_bucket{op="
					 "\"%s\",le=\"%g\"} %llu\n",
					 rdmx_opcode_name(op),
					 rdmx_bucket_us[b] / 1e6,
					 (unsigned long long)cum);
			else
				rdmx_out(o,
					 "rdmx_op_latency_seconds_bucket{op="
					 "\"%s\",le=\"+Inf\"} %llu\n",
					 rdmx_opcode_name(op),
					 (unsigned long long)cum);
		}
		rdmx_out(o, "rdmx_op_latency_seconds_sum{op=\"%s\"} %.9f\n",
			 rdmx_opcode_name(op), (double)s->lat_sum_ns[op] / 1e9);
		rdmx_out(o, "rdmx_op_latency_seconds_count{op=\"%s\"} %llu\n",
			 rdmx_opcode_name(op),
			 (unsigned long long)s->lat_count[op]);
	}
}

size_t rdmx_stats_prometheus(const struct rdmx_stats *s, char *buf, size_t len)
{
	struct rdmx_out o = { buf, len, 0 };

	if (buf && len)
		buf[0] = '\0';
	rdmx_prom_dir(&o, "rdmx_ops_total",
		      "Work requests posted (out) and messages received (in).",
		      s->ops_out, s->ops_in);
	rdmx_prom_dir(&o, "rdmx_bytes_total",
		      "Payload bytes posted (out) and received (in).",
		      s->bytes_out, s->bytes_in);
	rdmx_prom_latency(&o, s);
	rdmx_out(&o, "# HELP rdmx_errors_total Completions with an error, by "
		     "status.\n# TYPE rdmx_errors_total counter\n");
	for (int i = 1; i < RDMX_STATS_STATUSES; i++)
		if (s->errors[i] || strcmp(rdmx_status_name(-i), "unknown"))
			rdmx_out(&o, "rdmx_errors_total{status=\"%s\"} %llu\n",
				 rdmx_status_name(-i),
				 (unsigned long long)s->errors[i]);
	rdmx_prom_transports(&o, "rdmx_connections", "gauge",
			     "Open connections, by transport.", s->conns_open);
	rdmx_prom_transports(&o, "rdmx_connections_total", "counter",
			     "Connections established, by transport.",
			     s->conns_total);
	rdmx_prom_served(&o, "rdmx_served_ops_total",
			 "One-sided requests of peers served here (tcp, shm; "
			 "on verbs the NIC serves them unseen).",
			 s->served_ops);
	rdmx_prom_served(&o, "rdmx_served_bytes_total",
			 "Payload bytes of the one-sided requests of peers "
			 "served here.",
			 s->served_bytes);
	rdmx_out(&o, "# HELP rdmx_refused_total One-sided requests of peers "
		     "refused here, by reason.\n"
		     "# TYPE rdmx_refused_total counter\n");
	for (int r = 0; r < RDMX_STATS_REFUSALS; r++)
		rdmx_out(&o, "rdmx_refused_total{reason=\"%s\"} %llu\n",
			 rdmx_refusal_names[r],
			 (unsigned long long)s->refused_by[r]);
	rdmx_out(&o,
		 "# HELP rdmx_peers_cut_total Peers cut off for too many "
		 "refused requests (conn.max_access_errors).\n"
		 "# TYPE rdmx_peers_cut_total counter\n"
		 "rdmx_peers_cut_total %llu\n",
		 (unsigned long long)s->peers_cut);
	return o.need;
}
