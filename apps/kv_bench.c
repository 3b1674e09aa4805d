// SPDX-License-Identifier: MIT
/*
 * rdmx kv bench HOST[:PORT] - load an rdmx kv server from client threads
 * on one context, each client with its own connection keeping --pipeline
 * requests in flight (the async API, spinning on completions), and report
 * ops/s, MB/s and latency per operation. Every value GET returns is
 * checked: it names its key and version, and its bytes follow from them.
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "rdmx_kv.h"

struct kvb_opts {
	const char *addr, *config;
	uint64_t ops, value_size, clients, keys, get_pct, pipeline;
	bool json, no_load;
	/* Post the pipeline's requests P at a time, the next P once all are
	 * answered (redis-benchmark -P's way), not one per answer. */
	bool batch;
	uint64_t threads; /* that serve the clients; 0: min(clients, cores) */
};

struct kvb_thread {
	const struct kvb_opts *o;
	/* Every thread's clients connected: then the clock starts, as
	 * redis-benchmark's does once its clients are. */
	pthread_barrier_t *connected;
	/* One for all: one progress thread. A context per thread measured
	 * the same (tcp, 32 clients, GETs of 4 KiB, 4 alternating runs). */
	struct rdmx_ctx *ctx;
	int id;
	uint64_t nthreads;
	pthread_t t;
	double *lat[2]; /* GET, PUT: µs per request */
	uint64_t n[2], bad, failed, missing;
	/* Requests answered, per client of this thread (its share). */
	double *shares;
	uint64_t nshares;
	/*
	 * Its requests none of its clients has posted yet: whichever client
	 * is ready posts the next, as redis-benchmark's clients share its
	 * -n. With a share each, a client that fell behind (a slow start)
	 * ended the run alone, with less in flight.
	 */
	uint64_t left;
	rdmx_status st;
};

/* "key:" and @k in 12 digits, zero-padded (what printf's "%012" gives, at
 * a tenth of the cost: snprintf was 1.6% of the host's time); its length. */
static size_t kvb_key(char *buf, uint64_t k)
{
	if (k >= 1000000000000ull)
		return (size_t)snprintf(buf, 32, "key:%" PRIu64, k);
	memcpy(buf, "key:", 4);
	for (int i = 15; i >= 4; i--, k /= 10)
		buf[i] = (char)('0' + k % 10);
	buf[16] = '\0';
	return 16;
}

/*
 * A value: key and version in its first 16 bytes, then byte i is
 * (key * 131 + version * 31 + i) mod 256: a run of kvb_ramp, so filling
 * and checking are a memcpy and a memcmp (libc's vector code; a byte loop
 * was a quarter of the client's time).
 */
static uint8_t *kvb_ramp; /* byte j is j mod 256; value_size + 256 long */
static uint64_t kvb_ramp_for; /* the value size it serves */

static bool kvb_ramp_make(uint64_t value_size)
{
	kvb_ramp_for = value_size;
	kvb_ramp = malloc(value_size + 256);
	for (uint64_t j = 0; kvb_ramp && j < value_size + 256; j++)
		kvb_ramp[j] = (uint8_t)j;
	return kvb_ramp != NULL;
}

static const uint8_t *kvb_pattern(uint64_t key, uint64_t ver)
{
	return kvb_ramp + (uint8_t)(key * 131 + ver * 31 + 16);
}

static void kvb_fill(uint8_t *p, uint64_t len, uint64_t key, uint64_t ver)
{
	uint64_t h[2] = { key, ver };

	memcpy(p, h, len < 16 ? len : 16);
	if (len > 16)
		memcpy(p + 16, kvb_pattern(key, ver), len - 16);
}

static bool kvb_check(const uint8_t *p, uint64_t len, uint64_t key)
{
	uint64_t h[2] = { 0, 0 };

	if (len < 16)
		return true; /* nothing to name them by */
	if (len > kvb_ramp_for)
		return false;
	memcpy(h, p, 16);
	return h[0] == key && !memcmp(p + 16, kvb_pattern(key, h[1]), len - 16);
}

static uint64_t kvb_rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* One client: a connection and its pipeline of requests. */
struct kvb_client {
	struct rdmx_kv_client *c;
	uint64_t posted, done, rng, ver;
	double *start; /* per tag slot */
	uint64_t *keyof;
};

static uint64_t kvb_slots(const struct kvb_opts *o)
{
	return o->pipeline * 2 + 64;
}

/* Keep @k's pipe full; tags index the start times. */
static rdmx_status kvb_post(struct kvb_thread *t, struct kvb_client *k,
			    uint8_t *val)
{
	const struct kvb_opts *o = t->o;
	char key[32];
	double now = 0;

	if (o->batch && k->posted != k->done)
		return RDMX_OK; /* the batch is still out */
	/*
	 * The clock starts before the posts, as redis-benchmark's does before
	 * its write: the requests leave together at the flush below (over
	 * tcp, the sendmsg and the loopback's delivery, 2-3 us here). One
	 * reading serves them all: two per request were 7% of the host's
	 * time in a run of 32 clients x 16 over shm.
	 */
	while (t->left && k->posted - k->done < o->pipeline) {
		uint64_t n = kvb_rnd(&k->rng) % o->keys,
			 slot = k->posted % kvb_slots(o);
		bool get = kvb_rnd(&k->rng) % 100 < o->get_pct;
		rdmx_status st;

		size_t klen = kvb_key(key, n);

		if (!get)
			kvb_fill(val, o->value_size, n, ++k->ver);
		if (!now)
			now = cli_now_us();
		k->start[slot] = now;
		st = get ? rdmx_kv_post_get(k->c, key, klen, o->value_size,
					    slot)
			 : rdmx_kv_post_put(k->c, key, klen, val, o->value_size,
					    slot | 1ull << 63);
		if (st == RDMX_ERR_AGAIN)
			break;
		if (st)
			return st;
		k->keyof[slot] = n;
		k->posted++;
		t->left--;
	}
	rdmx_kv_flush(k->c); /* the batch leaves together */
	return RDMX_OK;
}

/* Take @k's results: latency, and every GET's value checked. */
static rdmx_status kvb_take(struct kvb_thread *t, struct kvb_client *k)
{
	struct rdmx_kv_result res[32];
	int n = rdmx_kv_poll(k->c, res, 32, 0);
	double now;

	if (n <= 0)
		return n;
	/* Every result taken here was answered by now: one reading, before
	 * any value is checked (a check is not part of the request). */
	now = cli_now_us();
	for (int i = 0; i < n; i++) {
		uint64_t slot = res[i].tag & ~(1ull << 63);
		int kind = res[i].op == RDMX_KV_GET ? 0 : 1;

		t->lat[kind][t->n[kind]++] = now - k->start[slot];
		k->done++;
		if (res[i].status == RDMX_ERR_NOT_FOUND) {
			t->missing++;
		} else if (res[i].status) {
			t->failed++;
			if (res[i].status == RDMX_ERR_CONN_LOST)
				return res[i].status;
		} else if (kind == 0) {
			if (!kvb_check(res[i].value.data, res[i].value.len,
				       k->keyof[slot]) ||
			    res[i].value.len != t->o->value_size)
				t->bad++;
			rdmx_kv_release(k->c, &res[i].value);
		}
	}
	return RDMX_OK;
}

/*
 * One thread: the clients i with i % threads == id, served in turn,
 * spinning (as redis-benchmark serves all its clients from one loop).
 */
static void *kvb_run(void *arg)
{
	struct kvb_thread *t = arg;
	const struct kvb_opts *o = t->o;
	uint64_t nk = 0;
	/* kvb_post flushes what it posts: each batch leaves whole. */
	struct rdmx_kv_attr ka = {
		.mask = RDMX_KV_ATTR_BUFFER_BYTES | RDMX_KV_ATTR_FLAGS,
		.buffer_bytes =
			o->value_size * 2 * (o->pipeline + 1) + (1 << 20),
		.flags = RDMX_KV_FLUSH_EXPLICIT
	};
	struct kvb_client *k = calloc(o->clients, sizeof(*k));
	uint8_t *val = malloc(o->value_size ? o->value_size : 1);
	bool busy = true;

	for (uint64_t i = (uint64_t)t->id; i < o->clients && k;
	     i += t->nthreads, nk++) {
		t->left += o->ops / o->clients + (i < o->ops % o->clients);
		k[nk].rng = 0x9e3779b97f4a7c15ull * (i + 1);
		k[nk].ver = i << 40;
		k[nk].start = calloc(kvb_slots(o), sizeof(double));
		k[nk].keyof = calloc(kvb_slots(o), sizeof(uint64_t));
		if (!t->st)
			t->st = rdmx_kv_connect(t->ctx, o->addr, &ka, &k[nk].c);
	}
	t->lat[0] = malloc(t->left * sizeof(double) + 8);
	t->lat[1] = malloc(t->left * sizeof(double) + 8);
	pthread_barrier_wait(t->connected);
	while (!t->st && busy && !cli_stop) {
		busy = false;
		for (uint64_t j = 0; j < nk && !t->st; j++) {
			if (!t->left && k[j].done == k[j].posted)
				continue;
			busy = true;
			t->st = kvb_take(t, &k[j]);
			if (!t->st)
				t->st = kvb_post(t, &k[j], val);
		}
	}
	t->shares = malloc((nk ? nk : 1) * sizeof(double));
	for (uint64_t j = 0; j < nk && t->shares; j++)
		t->shares[t->nshares++] = (double)k[j].done;
	for (uint64_t j = 0; j < nk; j++) {
		rdmx_kv_close(k[j].c);
		free(k[j].start);
		free(k[j].keyof);
	}
	free(k);
	free(val);
	return NULL;
}

/* Store every key once, from one client, before the timed run. */
static rdmx_status kvb_load(const struct kvb_opts *o)
{
	struct rdmx_ctx *ctx = NULL;
	struct rdmx_kv_client *c = NULL;
	struct rdmx_kv_attr ka = { .mask = RDMX_KV_ATTR_BUFFER_BYTES,
				   .buffer_bytes =
					   o->value_size * 4 + (1 << 20) };
	uint8_t *val = malloc(o->value_size ? o->value_size : 1);
	char key[32];
	rdmx_status st;

	st = cli_ctx_create(o->config, &ctx);
	if (!st)
		st = rdmx_kv_connect(ctx, o->addr, &ka, &c);
	for (uint64_t k = 0; !st && k < o->keys; k++) {
		size_t klen = kvb_key(key, k);

		kvb_fill(val, o->value_size, k, 0);
		st = rdmx_kv_put(c, key, klen, val, o->value_size);
	}
	rdmx_kv_close(c);
	rdmx_ctx_destroy(ctx);
	free(val);
	return st;
}

static void kvb_report_op(const char *name, double *v, uint64_t n, double secs,
			  uint64_t value_size, bool json, bool first)
{
	double p50, p99, p999;

	if (!n)
		return;
	p50 = cli_quantile(v, n, 0.5);
	p99 = cli_quantile(v, n, 0.99);
	p999 = cli_quantile(v, n, 0.999);
	if (json) {
		printf("%s\"%s\":{\"ops\":%" PRIu64 ",\"ops_per_s\":%.0f,"
		       "\"mb_per_s\":%.1f,\"min_us\":%.1f,\"p50_us\":%.1f,"
		       "\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f}",
		       first ? "" : ",", name, n, n / secs,
		       n * (double)value_size / secs / 1e6, v[0], p50, p99,
		       p999, v[n - 1]);
		return;
	}
	printf("%-4s %10" PRIu64 " %10.0f %9.1f %8.1f %8.1f %8.1f %8.1f "
	       "%9.1f\n",
	       name, n, n / secs, n * (double)value_size / secs / 1e6, v[0],
	       p50, p99, p999, v[n - 1]);
}

static int kvb_main(const struct kvb_opts *o)
{
	struct kvb_thread *t = calloc(o->clients, sizeof(*t));
	double *all[2], t0, secs, *shares, share[3] = { 0, 0, 0 };
	uint64_t nshares = 0;
	uint64_t n[2] = { 0, 0 }, bad = 0, failed = 0, missing = 0;
	rdmx_status st = RDMX_OK;
	struct rdmx_ctx *ctx = NULL;
	pthread_barrier_t connected;

	if (!t)
		return cli_fail("kv", "no memory");
	st = cli_ctx_create(o->config, &ctx);
	if (st) {
		free(t);
		return cli_fail("kv", "bench: %s", rdmx_strerror(st));
	}
	if (!kvb_ramp_make(o->value_size)) {
		free(t);
		rdmx_ctx_destroy(ctx);
		return cli_fail("kv", "no memory");
	}
	cli_catch_signals();
	if (!o->no_load && (st = kvb_load(o))) {
		free(t);
		free(kvb_ramp);
		rdmx_ctx_destroy(ctx);
		return cli_fail("kv", "bench: loading %" PRIu64 " keys: %s",
				o->keys, rdmx_strerror(st));
	}
	pthread_barrier_init(&connected, NULL, (unsigned)o->threads + 1);
	for (uint64_t i = 0; i < o->threads; i++) {
		t[i] = (struct kvb_thread){ .o = o,
					    .connected = &connected,
					    .ctx = ctx,
					    .id = (int)i,
					    .nthreads = o->threads };
		pthread_create(&t[i].t, NULL, kvb_run, &t[i]);
	}
	pthread_barrier_wait(&connected);
	t0 = cli_now_us();
	for (uint64_t i = 0; i < o->threads; i++)
		pthread_join(t[i].t, NULL);
	secs = (cli_now_us() - t0) / 1e6;
	pthread_barrier_destroy(&connected);
	for (int k = 0; k < 2; k++) {
		for (uint64_t i = 0; i < o->threads; i++)
			n[k] += t[i].n[k];
		all[k] = malloc((n[k] + 1) * sizeof(double));
		n[k] = 0;
		for (uint64_t i = 0; i < o->threads; i++) {
			memcpy(all[k] + n[k], t[i].lat[k],
			       t[i].n[k] * sizeof(double));
			n[k] += t[i].n[k];
		}
	}
	shares = malloc((o->clients + 1) * sizeof(double));
	for (uint64_t i = 0; i < o->threads; i++) {
		bad += t[i].bad;
		failed += t[i].failed;
		missing += t[i].missing;
		if (t[i].st && !st)
			st = t[i].st;
		for (uint64_t j = 0; shares && j < t[i].nshares; j++)
			shares[nshares++] = t[i].shares[j];
		free(t[i].lat[0]);
		free(t[i].lat[1]);
		free(t[i].shares);
	}
	/* The clients' shares of the requests: one that waits more than
	 * the others (a server that serves some clients less often) shows
	 * here before it shows in the p99. */
	if (shares)
		for (int k = 0; k < 3; k++)
			share[k] = cli_quantile(shares, nshares, k * 0.5);
	if (st && !n[0] && !n[1]) {
		/* Nothing ran (no client connected): the error alone. */
	} else if (o->json) {
		printf("{\"addr\":\"%s\",\"clients\":%" PRIu64
		       ",\"pipeline\":%" PRIu64 ",\"value_size\":%" PRIu64
		       ",\"keys\":%" PRIu64 ",\"get_pct\":%" PRIu64
		       ",\"threads\":%" PRIu64 ",\"batch\":%s"
		       ",\"seconds\":%.3f,\"ops_per_s\":%.0f,\"wait\":\"spin\",",
		       o->addr, o->clients, o->pipeline, o->value_size, o->keys,
		       o->get_pct, o->threads, o->batch ? "true" : "false",
		       secs, (n[0] + n[1]) / secs);
		kvb_report_op("get", all[0], n[0], secs, o->value_size, true,
			      true);
		kvb_report_op("put", all[1], n[1], secs, o->value_size, true,
			      !n[0]);
		printf(",\"checked\":%" PRIu64 ",\"bad\":%" PRIu64
		       ",\"failed\":%" PRIu64 ",\"missing\":%" PRIu64
		       ",\"client_ops\":{\"min\":%.0f,\"median\":%.0f,"
		       "\"max\":%.0f}}\n",
		       n[0], bad, failed, missing, share[0], share[1],
		       share[2]);
	} else {
		printf("rdmx kv bench: %s, %" PRIu64
		       " clients x pipeline %" PRIu64 "%s, %" PRIu64
		       " B values, %" PRIu64 " keys, %" PRIu64
		       "%% GET; %.0f ops/s in %.2f s (%" PRIu64
		       " threads spin over the clients)\n",
		       o->addr, o->clients, o->pipeline,
		       o->batch ? " (batches)" : "", o->value_size, o->keys,
		       o->get_pct, (n[0] + n[1]) / secs, secs, o->threads);
		printf("%-4s %10s %10s %9s %8s %8s %8s %8s %9s\n", "op", "ops",
		       "ops/s", "MB/s", "min us", "p50", "p99", "p99.9", "max");
		kvb_report_op("get", all[0], n[0], secs, o->value_size, false,
			      true);
		kvb_report_op("put", all[1], n[1], secs, o->value_size, false,
			      true);
		printf("%" PRIu64 " values checked, %" PRIu64 " wrong, %" PRIu64
		       " failed, %" PRIu64 " missing\n",
		       n[0] - missing, bad, failed, missing);
		printf("requests answered per client: min %.0f, median %.0f, "
		       "max %.0f\n",
		       share[0], share[1], share[2]);
	}
	free(all[0]);
	free(all[1]);
	free(shares);
	free(t);
	free(kvb_ramp);
	rdmx_ctx_destroy(ctx);
	if (st)
		return cli_fail("kv", "bench: %s", rdmx_strerror(st));
	return bad || failed ? 1 : 0;
}

static void kvb_usage(FILE *f)
{
	fprintf(f,
		"usage: rdmx kv bench HOST[:PORT] [options]\n"
		"  -n, --ops N          requests in all (default 100000)\n"
		"  -s, --value-size S   bytes per value (default 4096)\n"
		"  -C, --clients C      clients, a connection each (default 1)\n"
		"  -k, --keys K         key space, loaded first (default 10000)\n"
		"  -g, --get-ratio PCT  share of GETs, the rest PUTs (default 90)\n"
		"  -P, --pipeline P     requests in flight per client (default 1,\n"
		"                       at most 64), one posted per answer\n"
		"      --batch          post the pipeline's P requests together\n"
		"                       and the next P once all are answered, as\n"
		"                       redis-benchmark -P does\n"
		"      --no-load        do not store the keys first\n"
		"  -T, --threads N      threads that serve the clients in turn,\n"
		"                       spinning (default half the cores)\n"
		"      --json           one JSON object on stdout\n"
		"  -c, --config FILE    YAML configuration\n"
		"      --transport T    auto, verbs, shm or tcp\n");
}

int cli_kv_bench(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "ops", required_argument, NULL, 'n' },
		{ "value-size", required_argument, NULL, 's' },
		{ "clients", required_argument, NULL, 'C' },
		{ "keys", required_argument, NULL, 'k' },
		{ "get-ratio", required_argument, NULL, 'g' },
		{ "pipeline", required_argument, NULL, 'P' },
		{ "json", no_argument, NULL, 1 },
		{ "no-load", no_argument, NULL, 2 },
		{ "transport", required_argument, NULL, 3 },
		{ "threads", required_argument, NULL, 'T' },
		{ "config", required_argument, NULL, 'c' },
		{ "batch", no_argument, NULL, 4 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct kvb_opts o = { .ops = 100000,
			      .value_size = 4096,
			      .clients = 1,
			      .keys = 10000,
			      .get_pct = 90,
			      .pipeline = 1 };
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "n:s:C:k:g:P:T:c:h", lo, NULL)) !=
	       -1) {
		uint64_t *v = NULL;
		const char *name = NULL;

		switch (c) {
		case 'n':
			v = &o.ops, name = "--ops";
			break;
		case 's':
			v = &o.value_size, name = "--value-size";
			break;
		case 'C':
			v = &o.clients, name = "--clients";
			break;
		case 'k':
			v = &o.keys, name = "--keys";
			break;
		case 'g':
			v = &o.get_pct, name = "--get-ratio";
			break;
		case 'P':
			v = &o.pipeline, name = "--pipeline";
			break;
		case 1:
			o.json = true;
			break;
		case 2:
			o.no_load = true;
			break;
		case 3:
			if (!cli_transport_option("kv", optarg))
				return 1;
			break;
		case 4:
			o.batch = true;
			break;
		case 'T':
			v = &o.threads, name = "--threads";
			break;
		case 'c':
			o.config = optarg;
			break;
		case 'h':
			kvb_usage(stdout);
			return 0;
		default:
			return cli_fail("kv", "see rdmx kv bench --help");
		}
		if (v && !cli_size("kv", name, optarg, v))
			return 1;
	}
	if (argc - optind != 1)
		return cli_fail("kv", "bench takes one HOST[:PORT]");
	o.addr = argv[optind];
	if (!o.threads) {
		long cores = sysconf(_SC_NPROCESSORS_ONLN);

		/* Half the cores: a server on this host needs the rest. */
		o.threads = (uint64_t)(cores > 1 ? cores / 2 : 1);
	}
	if (o.threads > o.clients)
		o.threads = o.clients;
	if (!o.ops || !o.clients || o.clients > 1024 || !o.keys ||
	    o.get_pct > 100 || !o.pipeline || o.pipeline > 64 ||
	    o.value_size > (64 << 20))
		return cli_fail("kv",
				"--ops, --clients (1..1024) and --keys at "
				"least 1, --get-ratio 0..100, --pipeline "
				"1..64, --value-size at most 64m");
	return kvb_main(&o);
}
