/* SPDX-License-Identifier: MIT */
/*
 * rdmx bench [HOST][:PORT] - latency and bandwidth, as perftest measures
 * them, over whichever transport the connection picked.
 *
 * Latency: send is a ping-pong of SENDs and write a ping-pong of WRITEs in
 * which each side spins on the last byte of its buffer (as ib_write_lat):
 * both report half the round trip. read and atomic report the whole
 * operation. Bandwidth: `depth` operations in flight, messages/s and GB/s.
 *
 * Session: the client SENDs a 64-byte hello (op, mode, size, iterations,
 * depth, its buffer's descriptor); the server answers with its own
 * descriptor and serves. A completion already means "placed", so nothing
 * else is needed for timing; for one-sided ops the client SENDs 8 bytes of
 * "finished" at the end, since the server saw none of them.
 *
 * Buffers: for send bandwidth `depth` slots of `size` bytes (a RECV
 * each); for one-sided bandwidth one slot that every request uses, as
 * perftest and ucx_perftest do; for write latency two slots, [0] that
 * the peer writes into and [1] that we write from.
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define BENCH_MAGIC 0x52444d42u /* "RDMB" */
#define BENCH_MAX_BUF (1ull << 30) /* a side's buffer: size x slots */
#define BENCH_ALL_MIN 2 /* -a: 2 B .. 8 MiB, as perftest */
#define BENCH_ALL_MAX (8u << 20)

enum bench_op { B_SEND = 1, B_WRITE, B_READ, B_ATOMIC, B_REG };
static const char *const bench_ops[] = { NULL,	 "send",   "write",
					 "read", "atomic", "reg" };

struct bench_opts {
	const char *addr, *config, *plot;
	enum bench_op op;
	bool bw, json, once, all;
	uint64_t size, iters, depth;
	uint64_t duration_s; /* -D: about this long instead of --iters */
	int cpu; /* --cpu: the CPU this thread runs on, or -1 */
	enum cli_wait_how wait; /* --wait: how completions are waited for */
	uint64_t last; /* --last: also the quantiles of the last N samples */
};

static const char *const bench_waits[] = { "spin", "sleep", "fd" };

#define BENCH_LAST_USE                                                         \
	"--last N: N samples of a latency run, at least 1; not with --bw"

/*
 * --cpu: pin the calling thread, after rdmx_ctx_create so that the
 * context's progress threads keep the CPUs it could use (progress.cpu
 * places those).
 */
static rdmx_status bench_pin(const struct bench_opts *o)
{
	cpu_set_t set;

	if (o->cpu < 0)
		return RDMX_OK;
	CPU_ZERO(&set);
	CPU_SET(o->cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set)) {
		cli_fail("bench", "--cpu %d: %m", o->cpu);
		return RDMX_ERR_INVALID;
	}
	return RDMX_OK;
}

static rdmx_status bench_buf_alloc(struct cli_session *s, struct cli_buf *b,
				   size_t len)
{
	return cli_buf_alloc(
		s, b, len,
		RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE |
			RDMX_ACCESS_REMOTE_READ | RDMX_ACCESS_REMOTE_ATOMIC);
}

static void bench_pack(struct cli_session *s, const struct bench_opts *o,
		       const struct cli_buf *b)
{
	struct rdmx_remote rem;

	memset(s->out, 0, CLI_MSG);
	cli_put64(s->out, (uint64_t)BENCH_MAGIC << 32 | o->op << 8 | o->bw);
	cli_put64(s->out + 8, o->size);
	cli_put64(s->out + 16, o->iters);
	cli_put64(s->out + 24, o->depth);
	rdmx_mr_remote(b->mr, &rem);
	rdmx_remote_pack(&rem, s->out + 32);
}

/*
 * Spin until the last byte of @p reads @v, driving progress. This is how
 * RDMA write latency is measured (ib_write_lat): the byte is written by the
 * transport, or by a NIC, with no synchronization the C memory model knows
 * of, so the read races by design; ThreadSanitizer is told so.
 */
__attribute__((no_sanitize("thread"))) static rdmx_status
bench_spin_byte(struct cli_session *s, volatile const uint8_t *p, uint8_t v)
{
	struct rdmx_completion wc[16];
	double deadline = 0;

	for (unsigned spins = 1; *p != v; spins++) {
		int n = rdmx_poll(s->cq, wc, 16);

		for (int i = 0; i < n; i++)
			if (wc[i].status)
				return wc[i].status;
		if (cli_stop)
			return RDMX_ERR_TIMEOUT;
		/* The clock one spin in 256, as cli_wait reads it: at each,
		 * it made the spin 17 ns longer, and the byte seen later. */
		if (spins % 256)
			continue;
		if (!deadline)
			deadline = cli_now_us() + CLI_TIMEOUT_MS * 1e3;
		else if (cli_now_us() > deadline)
			return RDMX_ERR_TIMEOUT;
	}
	return RDMX_OK;
}

/* ---- server ------------------------------------------------------------- */

/* send: take every message; in latency mode answer each with one. */
static rdmx_status bench_serve_send(struct cli_session *s, struct cli_buf *b,
				    const struct bench_opts *o)
{
	uint64_t slots = o->bw ? o->depth : 1, posted = 0;
	struct rdmx_completion wc;
	rdmx_status st = RDMX_OK;

	for (; posted < slots && posted < o->iters && !st; posted++) {
		struct rdmx_sge r = { b->p + (posted % slots) * o->size,
				      (uint32_t)o->size, b->mr };

		st = cli_post_recv(s, &r, 1, posted);
	}
	for (uint64_t i = 0; i < o->iters && !st; i++) {
		struct rdmx_sge r = { b->p + (i % slots) * o->size,
				      (uint32_t)o->size, b->mr };

		st = cli_expect(s, RDMX_OP_RECV, &wc);
		if (!st && posted < o->iters)
			st = cli_post_recv(s, &r, 1, posted++);
		if (!st && !o->bw) {
			st = rdmx_post_send(s->conn, &r, i);
			if (!st)
				st = cli_expect(s, RDMX_OP_SEND, &wc);
		}
	}
	return st;
}

/* write latency: answer each WRITE with one, once its last byte lands. */
static rdmx_status bench_serve_write_lat(struct cli_session *s,
					 struct cli_buf *b,
					 const struct bench_opts *o,
					 const struct rdmx_remote *peer)
{
	struct rdmx_sge sg = { b->p + o->size, (uint32_t)o->size, b->mr };
	rdmx_status st = RDMX_OK;

	for (uint64_t i = 0; i < o->iters && !st; i++) {
		uint8_t v = (uint8_t)(i + 1);

		st = bench_spin_byte(s, b->p + o->size - 1, v);
		b->p[2 * o->size - 1] = v;
		if (!st)
			st = rdmx_post_write(s->conn, &sg, peer->addr,
					     peer->rkey, i);
	}
	return st;
}

/* The number of slots a side needs. */
static uint64_t bench_slots(const struct bench_opts *o)
{
	if (o->bw)
		return o->op == B_SEND ? o->depth : 1;
	return 2;
}

/* Serve the run whose header (the client's message) is in s->in. */
static rdmx_status bench_serve_run(struct cli_session *s,
				   const struct bench_opts *defaults)
{
	struct bench_opts o = *defaults;
	struct rdmx_completion wc;
	struct rdmx_remote peer;
	struct cli_buf b = { 0 };
	uint64_t w0;
	rdmx_status st;

	w0 = cli_get64(s->in);
	if (w0 >> 32 != BENCH_MAGIC)
		return RDMX_ERR_PROTOCOL;
	o.op = (enum bench_op)(w0 >> 8 & 0xff);
	o.bw = w0 & 1;
	o.size = cli_get64(s->in + 8);
	o.iters = cli_get64(s->in + 16);
	o.depth = cli_get64(s->in + 24);
	if (o.op < B_SEND || o.op > B_ATOMIC || o.size > (1u << 30) ||
	    !o.depth || o.depth > 4096 ||
	    o.size * bench_slots(&o) > BENCH_MAX_BUF ||
	    rdmx_remote_unpack(s->in + 32, 24, &peer))
		return RDMX_ERR_PROTOCOL;
	st = bench_buf_alloc(s, &b, o.size * bench_slots(&o));
	if (!st && o.op != B_SEND)
		st = cli_recv_ctl(s); /* the client's "finished" */
	if (!st) {
		bench_pack(s, &o, &b);
		st = cli_send_ctl(s, CLI_MSG);
	}
	if (!st && o.op == B_SEND)
		st = bench_serve_send(s, &b, &o);
	else if (!st && o.op == B_WRITE && !o.bw)
		st = bench_serve_write_lat(s, &b, &o, &peer);
	/* One-sided ops need nothing from us but progress, until "finished". */
	if (!st && o.op != B_SEND)
		while (!(st = cli_next(s, &wc)) && wc.opcode != RDMX_OP_RECV)
			if (wc.status)
				st = wc.status;
	cli_buf_free(&b);
	return st;
}

/* A client's session: runs (one per size with -a) until it closes. */
static rdmx_status bench_serve_one(struct cli_session *s, void *arg)
{
	struct rdmx_completion wc;
	rdmx_status st;

	for (unsigned runs = 0;; runs++) {
		st = cli_recv_ctl(s);
		if (!st)
			st = cli_expect(s, RDMX_OP_RECV, &wc);
		if (runs &&
		    (st == RDMX_ERR_CONN_LOST || st == RDMX_ERR_FLUSHED))
			return RDMX_OK; /* the client is done */
		if (!st)
			st = bench_serve_run(s, (struct bench_opts *)arg);
		if (st)
			return st;
	}
}

/* ---- client ------------------------------------------------------------- */

static rdmx_status bench_post(struct cli_session *s, const struct bench_opts *o,
			      struct cli_buf *b, const struct rdmx_remote *rem,
			      uint64_t i)
{
	uint64_t slot = o->bw ? i % bench_slots(o) : 0;
	struct rdmx_sge sg = { b->p + slot * o->size, (uint32_t)o->size,
			       b->mr };
	uint64_t raddr = rem->addr + slot * o->size;

	if (!o->bw && o->op == B_WRITE) /* from our slot 1 into its slot 0 */
		sg.addr = b->p + o->size, raddr = rem->addr;

	switch (o->op) {
	case B_SEND:
		return rdmx_post_send(s->conn, &sg, i);
	case B_WRITE:
		return rdmx_post_write(s->conn, &sg, raddr, rem->rkey, i);
	case B_READ:
		return rdmx_post_read(s->conn, &sg, raddr, rem->rkey, i);
	case B_ATOMIC:
		sg.length = 8;
		return rdmx_post_fetch_add(s->conn, &sg, rem->addr & ~7ull,
					   rem->rkey, 1, i);
	case B_REG: /* local: bench_reg */
		break;
	}
	return RDMX_ERR_INVALID;
}

/* A measurement's progress bar. */
struct bench_bar {
	double t0; /* the measurement's start */
	double end; /* with -D, its planned end; else 0 */
	double last; /* when last drawn */
	bool shown;
};

/*
 * A progress bar on stderr, when it is a terminal and the measurement has
 * taken more than 2 s: iterations done of @total, or with -D (@bar->end)
 * seconds passed of the duration.
 */
static void bench_progress(struct bench_bar *bar, uint64_t done, uint64_t total)
{
	double now = cli_now_us(), frac;
	int w = 40, fill;

	if (now - bar->t0 < 2e6 || now - bar->last < 1e5)
		return;
	bar->last = now; /* isatty, a system call, ten times a second */
	if (!isatty(STDERR_FILENO))
		return;
	frac = bar->end ? (now - bar->t0) / (bar->end - bar->t0)
			: (double)done / (double)(total ? total : 1);
	frac = frac < 1 ? frac : 1;
	fill = (int)(w * frac);
	bar->shown = true;
	fprintf(stderr, "\r[%.*s%*s] %3d%% ", fill,
		"########################################", w - fill, "",
		(int)(100 * frac));
	if (bar->end)
		fprintf(stderr, "%.0f/%.0f s", (now - bar->t0) / 1e6,
			(bar->end - bar->t0) / 1e6);
	else
		fprintf(stderr, "%" PRIu64 "/%" PRIu64, done, total);
}

/* Clears the bar, if it was drawn. */
static void bench_progress_end(struct bench_bar *bar)
{
	if (bar->shown)
		fputs("\r\033[K", stderr);
	bar->shown = false;
}

/*
 * Latency of iteration @i in microseconds, or < 0 on failure (st_p): the
 * time from the end of the iteration before (*@mark), as perftest and
 * ucx_perftest take it: one clock read per sample, and what a loop of
 * operations does besides them (a send's RECV, the sample's store) is in
 * its figure, as in theirs.
 */
static double bench_lat_iter(struct cli_session *s, const struct bench_opts *o,
			     struct cli_buf *b, const struct rdmx_remote *rem,
			     uint64_t i, uint64_t *mark, rdmx_status *st_p)
{
	struct rdmx_sge in = { b->p, (uint32_t)o->size, b->mr };
	uint8_t v = (uint8_t)(i + 1);
	rdmx_status st = RDMX_OK;
	double us;

	if (o->op == B_SEND)
		st = cli_post_recv(s, &in, 1, i);
	if (o->op == B_WRITE)
		b->p[2 * o->size - 1] = v;
	if (!st)
		st = bench_post(s, o, b, rem, i);
	/* Our op's own completion, and for send the echo too. */
	if (!st)
		st = cli_wait_ok(s->cq, o->op == B_SEND ? 2 : 1,
				 CLI_TIMEOUT_MS);
	if (!st && o->op == B_WRITE) /* the server's WRITE back */
		st = bench_spin_byte(s, b->p + o->size - 1, v);
	us = cli_lap_us(mark);
	*st_p = st;
	return o->op == B_SEND || o->op == B_WRITE ? us / 2 : us;
}

/*
 * Bandwidth: keep `depth` in flight over @warm and then o->iters requests;
 * returns the microseconds o->iters of them took. The clock starts once
 * @warm completed, as ucx_perftest's starts after its warm-up (10000
 * iterations by default): first uses cost what no later one does (over shm
 * the first request maps the peer's region). A 1 MiB shm WRITE run of 300
 * measured 35 GB/s with them and 49 without; one of 10000, 45.
 */
static double bench_bw(struct cli_session *s, const struct bench_opts *o,
		       uint64_t warm, struct cli_buf *b,
		       const struct rdmx_remote *rem, struct bench_bar *bar,
		       rdmx_status *st_p)
{
	struct rdmx_completion wc[64];
	uint64_t posted = 0, done = 0, all = o->iters + warm, from = 0;
	rdmx_status st = RDMX_OK;
	double t0 = cli_now_us();

	for (uint64_t spins = 0; done < all && !st && !cli_stop; spins++) {
		if (!(spins & 255)) /* off the measured path, mostly */
			bench_progress(bar, done, all);
		if (warm && !from && done >= warm) {
			from = done;
			t0 = cli_now_us();
		}
		while (posted < all && posted - done < o->depth) {
			st = bench_post(s, o, b, rem, posted);
			if (st == RDMX_ERR_AGAIN) {
				st = RDMX_OK;
				break;
			}
			if (st)
				break;
			posted++;
		}
		int n = rdmx_poll(s->cq, wc, 64);

		for (int i = 0; i < n; i++)
			if (wc[i].status)
				st = wc[i].status;
		done += n > 0 ? (uint64_t)n : 0;
	}
	*st_p = st;
	/* Completions come in batches: scale to exactly o->iters. */
	return done > from ? (cli_now_us() - t0) * (double)o->iters /
				     (double)(done - from)
			   : cli_now_us() - t0;
}

static void bench_report(const struct bench_opts *o, const char *transport,
			 double *lat, size_t n, double us)
{
	const char *mode = o->bw ? "bw" : "lat";

	if (o->bw) {
		double mps = (double)o->iters / (us / 1e6);
		double gbps = mps * (double)o->size / 1e9;

		if (o->json)
			printf("{\"transport\":\"%s\",\"op\":\"%s\",\"mode\":\"%s\","
			       "\"size\":%" PRIu64 ",\"iters\":%" PRIu64
			       ",\"depth\":%" PRIu64 ",\"msg_per_s\":%.0f,"
			       "\"gb_per_s\":%.4f}\n",
			       transport, bench_ops[o->op], mode, o->size,
			       o->iters, o->depth, mps, gbps);
		else
			printf(" %-7s %-6s %10" PRIu64 " %8" PRIu64 " %6" PRIu64
			       " %12.0f %10.3f\n",
			       transport, bench_ops[o->op], o->size, o->iters,
			       o->depth, mps, gbps);
		return;
	}
	/*
	 * --last: the samples in the order taken, before the sort below. The
	 * last N alone are what ucx_perftest's percentiles (-R) are taken
	 * from (its timing queue: the last 2048), so a ratio to its figure
	 * compares like with like.
	 */
	size_t k = o->last && o->last < n ? (size_t)o->last : n;
	double w[3] = { 0 };

	if (o->last) {
		double *tail = malloc(k * sizeof(*tail));

		if (tail) {
			memcpy(tail, lat + (n - k), k * sizeof(*tail));
			w[0] = cli_quantile(tail, k, 0.5);
			w[1] = cli_quantile(tail, k, 0.99);
			w[2] = cli_quantile(tail, k, 0.999);
			free(tail);
		}
	}
	double q[6] = { cli_quantile(lat, n, 0),     cli_quantile(lat, n, 0.5),
			cli_quantile(lat, n, 0.9),   cli_quantile(lat, n, 0.99),
			cli_quantile(lat, n, 0.999), cli_quantile(lat, n, 1) };

	if (o->json) {
		printf("{\"transport\":\"%s\",\"op\":\"%s\",\"mode\":\"%s\","
		       "\"size\":%" PRIu64 ",\"iters\":%zu,\"lat_us\":{"
		       "\"min\":%.3f,\"median\":%.3f,\"p90\":%.3f,\"p99\":%.3f,"
		       "\"p99_9\":%.3f,\"max\":%.3f},",
		       transport, bench_ops[o->op], mode, o->size, n, q[0],
		       q[1], q[2], q[3], q[4], q[5]);
		if (o->last)
			printf("\"last\":{\"samples\":%zu,\"median\":%.3f,"
			       "\"p99\":%.3f,\"p99_9\":%.3f},",
			       k, w[0], w[1], w[2]);
		printf("\"wait\":\"%s\"}\n", bench_waits[o->wait]);
	} else {
		printf(" %-7s %-6s %10" PRIu64 " %8zu %9.2f %9.2f %9.2f %9.2f "
		       "%9.2f %9.2f\n",
		       transport, bench_ops[o->op], o->size, n, q[0], q[1],
		       q[2], q[3], q[4], q[5]);
		if (o->last)
			printf(" %-7s %-6s %10s %8zu %9s %9.2f %9s %9.2f "
			       "%9.2f   (the last %zu)\n",
			       "", "", "", k, "", w[0], "", w[1], w[2], k);
	}
}

/*
 * --plot: the latency distribution as an SVG cumulative plot, latency on a
 * log axis (the tail is where the story is). @lat is sorted.
 */
static rdmx_status bench_plot(const struct bench_opts *o, const char *transport,
			      const double *lat, size_t n)
{
	enum { W = 720, H = 440, L = 70, R = 30, T = 50, B = 60, PTS = 1000 };
	double lo = log10(lat[0] > 1e-3 ? lat[0] : 1e-3);
	double hi = log10(lat[n - 1] > lat[0] ? lat[n - 1] : lat[0] * 1.01);
	double span = hi > lo ? hi - lo : 1;
	FILE *f = fopen(o->plot, "w");

	if (!f) {
		cli_fail("bench", "cannot write %s: %m", o->plot);
		return RDMX_ERR_SYSTEM;
	}
#define BX(v) (L + (log10(v) - lo) / span * (W - L - R))
#define BY(q) (T + (1 - (q)) * (H - T - B))
	fprintf(f,
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
		"height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n"
		"<title>rdmx bench: %s %" PRIu64 " B over %s, %zu "
		"iterations</title>\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
		"<text x=\"%d\" y=\"25\" font-size=\"15\">rdmx bench: %s "
		"%" PRIu64 " B over %s, %zu iterations: latency "
		"distribution</text>\n",
		W, H, bench_ops[o->op], o->size, transport, n, L,
		bench_ops[o->op], o->size, transport, n);
	/* Axes, decade ticks on x, quarter ticks on y. */
	fprintf(f,
		"<path d=\"M%d %d V%d H%d\" stroke=\"black\" "
		"fill=\"none\"/>\n",
		L, T, H - B, W - R);
	for (int e = (int)floor(lo); e <= (int)ceil(hi); e++) {
		double v = pow(10, e), x;

		if (log10(v) < lo - 1e-9 || log10(v) > hi + 1e-9)
			continue;
		x = BX(v);
		fprintf(f,
			"<path d=\"M%.1f %d V%d\" stroke=\"#ccc\"/>"
			"<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%g"
			"</text>\n",
			x, T, H - B, x, H - B + 16, v);
	}
	for (int k = 0; k <= 4; k++)
		fprintf(f,
			"<path d=\"M%d %.1f H%d\" stroke=\"#ccc\"/>"
			"<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.2f"
			"</text>\n",
			L, BY(k / 4.0), W - R, L - 6, BY(k / 4.0) + 4, k / 4.0);
	fprintf(f,
		"<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">latency "
		"(us, log scale)</text>\n"
		"<text x=\"16\" y=\"%d\" transform=\"rotate(-90 16 %d)\" "
		"text-anchor=\"middle\">fraction of operations at or "
		"below</text>\n",
		(L + W - R) / 2, H - 20, (T + H - B) / 2, (T + H - B) / 2);
	/* The curve: at most PTS points, the last (the max) always in. */
	fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" "
		   "stroke-width=\"2\" points=\"");
	for (size_t k = 0, m = n < PTS ? n : PTS; k < m; k++) {
		size_t i = m > 1 ? k * (n - 1) / (m - 1) : 0;

		fprintf(f, "%.1f,%.1f ", BX(lat[i] > 1e-3 ? lat[i] : 1e-3),
			BY((double)(i + 1) / (double)n));
	}
	fprintf(f, "\"/>\n</svg>\n");
#undef BX
#undef BY
	if (ferror(f) | fclose(f)) {
		cli_fail("bench", "cannot write %s: %m", o->plot);
		return RDMX_ERR_SYSTEM;
	}
	return RDMX_OK;
}

/* What runs measured: latencies, or bandwidth time and iterations. */
struct bench_result {
	double *lat;
	size_t n;
	double us;
	uint64_t iters;
	struct bench_bar bar;
};

/* One run of @o on the connection, its figures added to @r. */
static rdmx_status bench_run_once(struct cli_session *s,
				  const struct bench_opts *o, bool *armed,
				  struct bench_result *r)
{
	struct cli_buf b = { 0 };
	struct rdmx_completion wc;
	struct rdmx_remote rem;
	uint64_t warm = o->iters / 10;
	rdmx_status st;

	st = bench_buf_alloc(s, &b, o->size * bench_slots(o));
	if (!st) {
		struct bench_opts h = *o;

		h.iters = o->iters + warm; /* the server counts warm-up too */
		bench_pack(s, &h, &b);
		st = cli_recv_ctl(s);
	}
	if (!st)
		st = cli_send_ctl(s, CLI_MSG);
	if (!st)
		st = cli_expect(s, RDMX_OP_RECV, &wc);
	if (!st)
		st = rdmx_remote_unpack(s->in + 32, 24, &rem);
	/*
	 * One-sided runs get nothing from the server: a RECV kept posted
	 * turns its end (a signal, a crash) into a completion we see, not a
	 * timeout. The next run's answer lands in it; its own RECV takes over.
	 */
	if (!st && o->op != B_SEND && !*armed) {
		st = cli_recv_ctl(s);
		*armed = !st;
	}
	if (!st && !o->bw) {
		double *lat = realloc(r->lat, (r->n + o->iters) * sizeof(*lat));
		uint64_t mark;

		st = lat ? RDMX_OK : RDMX_ERR_NOMEM;
		if (lat) {
			r->lat = lat;
			/* Touched before the clock runs: a first touch in
			 * the loop faults (~2 us here), once in 512 samples,
			 * and lands in a lap: the p99.9. */
			memset(lat + r->n, 0, o->iters * sizeof(*lat));
		}
		mark = cli_ticks();
		for (uint64_t i = 0; !st && i < o->iters + warm; i++) {
			double t =
				bench_lat_iter(s, o, &b, &rem, i, &mark, &st);

			if (!st && i >= warm)
				r->lat[r->n++] = t;
			if (!(i & 255))
				bench_progress(&r->bar, i, o->iters + warm);
		}
	} else if (!st) {
		r->us += bench_bw(s, o, warm, &b, &rem, &r->bar, &st);
	}
	if (!st && o->op != B_SEND)
		st = cli_send_ctl(s, 8); /* "finished" */
	if (!st)
		r->iters += o->iters;
	cli_buf_free(&b);
	return st;
}

/*
 * One measurement: one run of @o, or with -D runs of --iters each until
 * about duration_s seconds have passed, reported as one.
 */
static rdmx_status bench_run(struct cli_session *s, const struct bench_opts *o,
			     const char *transport, bool *armed)
{
	double t0 = cli_now_us(), end = t0 + (double)o->duration_s * 1e6;
	struct bench_result r = { .bar = { t0, o->duration_s ? end : 0 } };
	struct bench_opts all = *o;
	rdmx_status st;

	do
		st = bench_run_once(s, o, armed, &r);
	while (!st && o->duration_s && !cli_stop && cli_now_us() < end);
	bench_progress_end(&r.bar);
	all.iters = r.iters;
	if (!st)
		bench_report(&all, transport, r.lat, r.n, r.us); /* sorts */
	if (!st && o->plot && r.n)
		st = bench_plot(&all, transport, r.lat, r.n);
	free(r.lat);
	return st;
}

/*
 * --op reg: rdmx_mr_reg and rdmx_mr_dereg of one buffer, per size: what it
 * costs to register per request rather than keep a pool. Where a verbs
 * device is usable the figure includes ibv_reg_mr. Local: no peer.
 */
static rdmx_status bench_reg_run(struct cli_session *s,
				 const struct bench_opts *o, const char *where)
{
	uint64_t warm = o->iters / 10, len = (o->size + 4095) & ~4095ull;
	uint8_t *buf = aligned_alloc(4096, len);
	double *lat = calloc(o->iters, sizeof(*lat));
	rdmx_status st = buf && lat ? RDMX_OK : RDMX_ERR_NOMEM;
	size_t n = 0;

	if (buf) /* mapped and touched: registration, not page faults */
		memset(buf, 0x5a, len);
	for (uint64_t i = 0; !st && !cli_stop && i < o->iters + warm; i++) {
		double t = cli_now_us();
		struct rdmx_mr *mr;

		st = rdmx_mr_reg(s->ctx, buf, o->size,
				 RDMX_ACCESS_LOCAL_WRITE |
					 RDMX_ACCESS_REMOTE_WRITE |
					 RDMX_ACCESS_REMOTE_READ,
				 &mr);
		if (!st)
			st = rdmx_mr_dereg(mr);
		if (!st && i >= warm)
			lat[n++] = cli_now_us() - t;
	}
	if (!st && n)
		bench_report(o, where, lat, n, 0);
	free(lat);
	free(buf);
	return st;
}

/*
 * The header, then one run of @o, or with -a one per size on the same
 * session: --op reg here, the others against the server.
 */
static rdmx_status bench_measure(struct cli_session *s,
				 const struct bench_opts *o,
				 const char *transport)
{
	struct bench_opts one = *o;
	bool armed = false;
	rdmx_status st = RDMX_OK;

	cli_ticks_init();
	if (!o->json && o->bw)
		printf(" %-7s %-6s %10s %8s %6s %12s %10s\n", "transp", "op",
		       "bytes", "iters", "depth", "msg/s", "GB/s");
	else if (!o->json)
		printf(" %-7s %-6s %10s %8s %9s %9s %9s %9s %9s %9s\n",
		       "transp", "op", "bytes", "iters", "min_us", "median",
		       "p90", "p99", "p99.9", "max");
	fflush(stdout); /* connected: the header says so before the run */
	if (o->all && o->op != B_ATOMIC) /* atomics: 8 bytes only */
		one.size = BENCH_ALL_MIN;
	do {
		st = o->op == B_REG ? bench_reg_run(s, &one, transport)
				    : bench_run(s, &one, transport, &armed);
		fflush(stdout);
		one.size *= 2;
	} while (!st && !cli_stop && o->all && o->op != B_ATOMIC &&
		 one.size <= BENCH_ALL_MAX);
	return st;
}

static int bench_reg(const struct bench_opts *o)
{
	struct cli_session s;
	rdmx_status st;

	st = cli_session_open(&s, o->config);
	if (!st)
		st = bench_pin(o);
	if (!st) /* ibv_reg_mr too where verbs is usable */
		st = bench_measure(&s, o, "local");
	cli_session_close(&s);
	if (st)
		return cli_fail("bench", "registration failed: %s",
				rdmx_strerror(st));
	return 0;
}

static int bench_client(const struct bench_opts *o)
{
	struct rdmx_conn_info info;
	struct cli_session s;
	rdmx_status st;

	if (cli_client_open("bench", &s, o->config, o->addr))
		return 1;
	if (bench_pin(o)) {
		cli_session_close(&s);
		return 1;
	}
	rdmx_conn_info(s.conn, &info);
	st = bench_measure(&s, o, info.transport);
	cli_session_close(&s);
	if (st)
		return cli_fail("bench", "%s %s failed: %s", bench_ops[o->op],
				o->bw ? "bandwidth" : "latency",
				rdmx_strerror(st));
	return 0;
}

/* ---- options ------------------------------------------------------------ */

static void bench_usage(FILE *f)
{
	fprintf(f,
		"usage: rdmx bench [HOST][:PORT] [options]\n"
		"  Without HOST, serve on PORT (default 18515); with HOST, measure.\n"
		"options (client):\n"
		"      --op OP       send, write, read or atomic (default send);\n"
		"                    reg: rdmx_mr_reg + rdmx_mr_dereg of -s bytes,\n"
		"                    on this host, no HOST\n"
		"  -s, --size N      message size (default 8; atomic: 8)\n"
		"  -a, --all         every size from 2 B to 8 MiB, doubling\n"
		"  -n, --iters N     iterations (default 10000)\n"
		"  -D, --duration S  run about S seconds: runs of --iters (default\n"
		"                    1000 then) until the time is up, one report\n"
		"      --bw          bandwidth instead of latency\n"
		"  -t, --tx-depth N  operations in flight for --bw (default 64)\n"
		"      --json        one JSON object on stdout\n"
		"      --last N      also the median, p99 and p99.9 of the last\n"
		"                    N samples (\"last\" in JSON): ucx_perftest\n"
		"                    takes its percentiles from its last 2048\n"
		"      --plot FILE   the latency distribution as SVG\n"
		"      --wait HOW    spin (default) on rdmx_poll; sleep in\n"
		"                    rdmx_cq_wait (it spins progress.wait_spin\n"
		"                    first); or fd: poll(2) on rdmx_cq_fd.\n"
		"                    Not for write (its latency is seen in the\n"
		"                    buffer)\n"
		"options (both):\n"
		"  -c, --config FILE YAML configuration (default: $RDMX_CONFIG)\n"
		"      --transport T auto, verbs, shm or tcp (as RDMX_TRANSPORT)\n"
		"      --cpu N       run on CPU N (progress.cpu places rdmx's\n"
		"                    progress threads)\n"
		"      --mem HOW     mapped (default): buffers from\n"
		"                    rdmx_mem_alloc, which a shm peer maps and\n"
		"                    serves one-sided requests on itself;\n"
		"                    malloc: the heap, served by the target\n"
		"      --metrics [ADDR:]PORT  serve Prometheus /metrics and JSON\n"
		"                    /status there: the loopback unless ADDR is\n"
		"                    named (0: any port, printed); 32\n"
		"                    connections, 8 per address, 5 s idle\n"
		"options (server):\n"
		"      --once        exit after one client\n"
		"      --use_srq     each client's RECVs from a shared receive\n"
		"                    queue (as RDMX_CONN_USE_SRQ=on)\n"
		"Latency is half the round trip for send and write, the whole\n"
		"operation for read and atomic; both sides spin, as perftest.\n");
}

static int bench_parse(int argc, char **argv, struct bench_opts *o)
{
	static const struct option lo[] = {
		{ "op", required_argument, NULL, 1 },
		{ "size", required_argument, NULL, 's' },
		{ "all", no_argument, NULL, 'a' },
		{ "iters", required_argument, NULL, 'n' },
		{ "bw", no_argument, NULL, 2 },
		{ "tx-depth", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 3 },
		{ "config", required_argument, NULL, 'c' },
		{ "once", no_argument, NULL, 4 },
		{ "plot", required_argument, NULL, 5 },
		{ "metrics", required_argument, NULL, 6 },
		{ "transport", required_argument, NULL, 7 },
		{ "duration", required_argument, NULL, 'D' },
		{ "use_srq", no_argument, NULL, 8 },
		{ "cpu", required_argument, NULL, 9 },
		{ "wait", required_argument, NULL, 10 },
		{ "mem", required_argument, NULL, 11 },
		{ "last", required_argument, NULL, 12 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool have_iters = false;
	int c;

	*o = (struct bench_opts){
		.op = B_SEND, .size = 8, .iters = 10000, .depth = 64, .cpu = -1
	};
	cli_buf_mapped = true;
	optind = 1;
	while ((c = getopt_long(argc, argv, "s:n:t:c:D:ah", lo, NULL)) != -1) {
		switch (c) {
		case 1:
			o->op = 0;
			for (int i = B_SEND; i <= B_REG; i++)
				if (!strcmp(optarg, bench_ops[i]))
					o->op = (enum bench_op)i;
			if (!o->op)
				return cli_fail(
					"bench",
					"unknown --op '%s' "
					"(send, write, read, atomic or reg)",
					optarg);
			break;
		case 's':
			if (!cli_size("bench", "--size", optarg, &o->size))
				return 1;
			break;
		case 'n':
			if (!cli_size("bench", "--iters", optarg, &o->iters))
				return 1;
			have_iters = true;
			break;
		case 'D':
			if (!cli_size("bench", "--duration", optarg,
				      &o->duration_s))
				return 1;
			break;
		case 't':
			if (!cli_size("bench", "--tx-depth", optarg, &o->depth))
				return 1;
			break;
		case 'a':
			o->all = true;
			break;
		case 2:
			o->bw = true;
			break;
		case 3:
			o->json = true;
			break;
		case 'c':
			o->config = optarg;
			break;
		case 4:
			o->once = true;
			break;
		case 5:
			o->plot = optarg;
			break;
		case 6:
			if (!cli_metrics_option("bench", optarg))
				return 1;
			break;
		case 7:
			if (!cli_transport_option("bench", optarg))
				return 1;
			break;
		case 8: /* perftest's name for it */
			setenv("RDMX_CONN_USE_SRQ", "on", 1);
			break;
		case 9: {
			uint64_t cpu;
			cpu_set_t may;

			if (!cli_size("bench", "--cpu", optarg, &cpu))
				return 1;
			if (sched_getaffinity(0, sizeof(may), &may) ||
			    cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &may))
				return cli_fail("bench",
						"--cpu %s: not a CPU this "
						"process may run on",
						optarg);
			o->cpu = (int)cpu;
			break;
		}
		case 10:
			for (o->wait = CLI_WAIT_SPIN;
			     o->wait <= CLI_WAIT_FD &&
			     strcmp(optarg, bench_waits[o->wait]);
			     o->wait++)
				;
			if (o->wait > CLI_WAIT_FD)
				return cli_fail("bench",
						"unknown --wait '%s' (spin, "
						"sleep or fd)",
						optarg);
			break;
		case 11:
			if (strcmp(optarg, "mapped") &&
			    strcmp(optarg, "malloc"))
				return cli_fail("bench",
						"unknown --mem '%s' (mapped "
						"or malloc)",
						optarg);
			cli_buf_mapped = !strcmp(optarg, "mapped");
			break;
		case 12:
			if (!cli_size("bench", "--last", optarg, &o->last))
				return 1;
			if (!o->last)
				return cli_fail("bench", BENCH_LAST_USE);
			break;
		case 'h':
			bench_usage(stdout);
			return -1;
		default:
			return cli_fail("bench", "see rdmx bench --help");
		}
	}
	if (cli_take_addr("bench", argc, argv, &o->addr))
		return 1;
	if (o->plot && (o->bw || o->all))
		return cli_fail("bench", "--plot draws one latency run: not "
					 "with --bw or -a");
	if (o->last && o->bw)
		return cli_fail("bench", BENCH_LAST_USE);
	if (o->plot) { /* a bad path fails now, not after the run */
		FILE *f = fopen(o->plot, "w");

		if (!f)
			return cli_fail("bench", "cannot write %s: %m",
					o->plot);
		fclose(f);
	}
	if (o->op == B_ATOMIC)
		o->size = 8;
	if (o->wait != CLI_WAIT_SPIN && (o->op == B_WRITE || o->op == B_REG))
		return cli_fail("bench",
				"--wait %s: write latency is seen by "
				"spinning on the buffer, and reg "
				"waits for nothing",
				bench_waits[o->wait]);
	cli_wait_how = o->wait;
	if (o->op == B_REG && (o->addr || o->bw || o->plot || o->duration_s))
		return cli_fail("bench", "--op reg measures this host: no "
					 "HOST, --bw, --plot or --duration");
	if (!o->size || o->size > (1u << 30))
		return cli_fail("bench", "--size must be 1..1g");
	if (o->duration_s && (o->all || o->duration_s > 3600))
		return cli_fail("bench", "--duration is 1..3600 seconds, and "
					 "not with -a");
	if (o->duration_s && !have_iters) /* each run's length */
		o->iters = o->bw ? 10000 : 1000;
	if (!o->iters || !o->depth || o->depth > 4096)
		return cli_fail("bench", "--iters must be at least 1 and "
					 "--tx-depth 1..4096");
	if ((o->all ? BENCH_ALL_MAX : o->size) * bench_slots(o) > BENCH_MAX_BUF)
		return cli_fail("bench", "--size x --tx-depth must stay within "
					 "1g (the buffer each side registers)");
	return 0;
}

int cli_bench(int argc, char **argv)
{
	struct bench_opts o;
	struct cli_session s;
	int rc = bench_parse(argc, argv, &o);
	rdmx_status st;

	if (rc)
		return rc < 0 ? 0 : rc;
	if (o.op == B_REG)
		return bench_reg(&o);
	if (!cli_is_server(o.addr))
		return bench_client(&o);
	st = cli_session_open(&s, o.config);
	if (!st)
		st = bench_pin(&o);
	if (st) {
		cli_session_close(&s);
		return cli_fail("bench", "cannot start: %s", rdmx_strerror(st));
	}
	rc = cli_serve("bench", &s, o.addr, o.once, bench_serve_one, &o);
	cli_session_close(&s);
	return rc;
}
