// SPDX-License-Identifier: MIT
/*
 * rdmx kv serve|put|get|del - the KV store from the command line (lib/kv).
 *
 *   serve [:PORT] [--memory-mb N] [--threads N]   until SIGINT/SIGTERM
 *   put HOST[:PORT] KEY [VALUE | -f FILE]          no VALUE: stdin
 *   get HOST[:PORT] KEY [-o FILE]                  the bytes to stdout
 *   del HOST[:PORT] KEY
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "rdmx_kv.h"
#include "rdmx_registry.h"

struct kv_opts {
	const char *config, *file, *out, *aof, *resp, *name, *cluster;
	enum rdmx_kv_fsync fsync;
	uint64_t memory_mb, threads, buffer_mb;
	bool evict_lru;
};

static void kv_usage(FILE *f)
{
	fprintf(f,
		"usage: rdmx kv serve [:PORT] [options]\n"
		"       rdmx kv put SERVER KEY [VALUE | -f FILE]\n"
		"       rdmx kv get SERVER KEY [-o FILE]\n"
		"       rdmx kv del SERVER KEY\n"
		"  SERVER: HOST[:PORT], @NAME, or @cluster:NAME (the member that\n"
		"  holds KEY).\n"
		"       rdmx kv bench HOST[:PORT] [options] (see --help there)\n"
		"  A key-value store whose server RDMA-writes each value into\n"
		"  the client's buffer (port %d when none is given).\n"
		"options (serve):\n"
		"      --memory-mb N   the value pool (default 1024)\n"
		"      --threads N     workers (default: half the cores)\n"
		"      --evict P       noeviction (a full pool refuses PUTs, the\n"
		"                      default) or lru (the least recently used\n"
		"                      values go)\n"
		"      --aof FILE      append every PUT and DELETE there, and\n"
		"                      replay it at start (default: none)\n"
		"      --fsync WHEN    always, everysec or no (default everysec)\n"
		"      --resp-port [IP:]PORT  also serve the Redis protocol there\n"
		"                      (redis-cli, redis-benchmark)\n"
		"      --metrics [ADDR:]PORT  Prometheus /metrics and JSON /status\n"
		"                      (the loopback unless ADDR is named)\n"
		"      --name NAME     publish the server as @NAME in the registry\n"
		"                      (registry.url; rdmx_registry(7))\n"
		"      --cluster NAME  join cluster NAME (as member --name, else\n"
		"                      HOST-PORT): clients of @cluster:NAME\n"
		"                      spread their keys over its members\n"
		"options (clients):\n"
		"  -f, --file FILE     put: the value is this file's bytes\n"
		"  -o, --output FILE   get: write the value there, not stdout\n"
		"      --buffer-mb N   the client's registered buffer (default 64)\n"
		"options (all):\n"
		"  -c, --config FILE   YAML configuration (default: $RDMX_CONFIG)\n"
		"      --transport T   auto, verbs, shm or tcp\n",
		RDMX_KV_PORT);
}

/* ---- serve -------------------------------------------------------------- */

/* The store's counters for --metrics (/metrics and /status). */
static int kv_metrics(void *arg, char *buf, size_t len, bool json)
{
	struct rdmx_kv_server_stats st;
	unsigned long long misses;

	rdmx_kv_server_stats(arg, &st);
	misses = (unsigned long long)(st.gets - st.hits);
	if (json)
		return snprintf(buf, len,
				"\"kv\":{\"keys\":%llu,\"bytes_used\":%llu,"
				"\"pool_bytes\":%llu,\"ops\":{\"get\":%llu,"
				"\"put\":%llu,\"del\":%llu},\"hits\":%llu,"
				"\"misses\":%llu,\"hit_ratio\":%.4f,"
				"\"evicted\":%llu,\"out_of_memory\":%llu,"
				"\"clients\":{\"open\":%llu,\"total\":%llu,"
				"\"ejected\":%llu}}",
				(unsigned long long)st.keys,
				(unsigned long long)st.bytes_used,
				(unsigned long long)st.pool_bytes,
				(unsigned long long)st.gets,
				(unsigned long long)st.puts,
				(unsigned long long)st.dels,
				(unsigned long long)st.hits, misses,
				st.gets ? (double)st.hits / st.gets : 0.0,
				(unsigned long long)st.evicted,
				(unsigned long long)st.refused_nomem,
				(unsigned long long)st.clients_open,
				(unsigned long long)st.clients_total,
				(unsigned long long)st.clients_ejected);
	return snprintf(
		buf, len,
		"# HELP rdmx_kv_keys Keys in the store.\n"
		"# TYPE rdmx_kv_keys gauge\nrdmx_kv_keys %llu\n"
		"# HELP rdmx_kv_bytes Pool bytes in use, and in all.\n"
		"# TYPE rdmx_kv_bytes gauge\n"
		"rdmx_kv_bytes{kind=\"used\"} %llu\n"
		"rdmx_kv_bytes{kind=\"pool\"} %llu\n"
		"# HELP rdmx_kv_ops_total Requests served, by kind.\n"
		"# TYPE rdmx_kv_ops_total counter\n"
		"rdmx_kv_ops_total{op=\"get\"} %llu\n"
		"rdmx_kv_ops_total{op=\"put\"} %llu\n"
		"rdmx_kv_ops_total{op=\"del\"} %llu\n"
		"# HELP rdmx_kv_gets_total GETs, by whether the key was there.\n"
		"# TYPE rdmx_kv_gets_total counter\n"
		"rdmx_kv_gets_total{result=\"hit\"} %llu\n"
		"rdmx_kv_gets_total{result=\"miss\"} %llu\n"
		"# HELP rdmx_kv_evicted_total Values evicted (--evict lru).\n"
		"# TYPE rdmx_kv_evicted_total counter\n"
		"rdmx_kv_evicted_total %llu\n"
		"# HELP rdmx_kv_out_of_memory_total PUTs refused: pool full.\n"
		"# TYPE rdmx_kv_out_of_memory_total counter\n"
		"rdmx_kv_out_of_memory_total %llu\n"
		"# HELP rdmx_kv_clients Clients connected now.\n"
		"# TYPE rdmx_kv_clients gauge\nrdmx_kv_clients %llu\n"
		"# HELP rdmx_kv_clients_total Clients, by how they ended: "
		"all, and those the server closed for a reason it logged.\n"
		"# TYPE rdmx_kv_clients_total counter\n"
		"rdmx_kv_clients_total{kind=\"all\"} %llu\n"
		"rdmx_kv_clients_total{kind=\"ejected\"} %llu\n",
		(unsigned long long)st.keys, (unsigned long long)st.bytes_used,
		(unsigned long long)st.pool_bytes, (unsigned long long)st.gets,
		(unsigned long long)st.puts, (unsigned long long)st.dels,
		(unsigned long long)st.hits, misses,
		(unsigned long long)st.evicted,
		(unsigned long long)st.refused_nomem,
		(unsigned long long)st.clients_open,
		(unsigned long long)st.clients_total,
		(unsigned long long)st.clients_ejected);
}

static int kv_serve(const struct kv_opts *o, const char *addr)
{
	struct rdmx_kv_server_attr sa = { .mask = RDMX_KV_SERVER_ATTR_MEMORY,
					  .memory = o->memory_mb << 20 };
	struct rdmx_ctx *ctx = NULL;
	struct cli_metrics *metrics = NULL;
	struct rdmx_kv_server *srv = NULL;
	struct rdmx_kv_server_stats st;
	char a[128], member[RDMX_REGISTRY_NAME_MAX] = "";
	rdmx_status s;

	if (o->aof) {
		sa.mask |= RDMX_KV_SERVER_ATTR_AOF;
		sa.aof_path = o->aof;
		sa.fsync = o->fsync;
	}
	if (o->resp) {
		sa.mask |= RDMX_KV_SERVER_ATTR_RESP;
		sa.resp_addr = o->resp;
	}
	if (o->evict_lru) {
		sa.mask |= RDMX_KV_SERVER_ATTR_EVICT;
		sa.evict = RDMX_KV_EVICT_LRU;
	}
	if (o->threads) {
		sa.mask |= RDMX_KV_SERVER_ATTR_THREADS;
		sa.threads = (uint32_t)o->threads;
	}
	if (addr)
		snprintf(a, sizeof(a), "%s", addr);
	else
		snprintf(a, sizeof(a), ":%d", RDMX_KV_PORT);
	s = cli_ctx_create(o->config, &ctx);
	if (!s)
		s = cli_metrics_start(ctx, &metrics);
	if (!s)
		s = rdmx_kv_server_create(ctx, a, &sa, &srv);
	if (s) {
		cli_metrics_stop(metrics);
		rdmx_ctx_destroy(ctx);
		return cli_fail("kv", "cannot serve on %s: %s", a,
				rdmx_strerror(s));
	}
	cli_metrics_extra(metrics, kv_metrics, srv);
	rdmx_kv_server_stats(srv, &st);
	/* Before the line that says we serve: a SIGTERM right after it (a
	 * supervisor, a test) ends us cleanly, not by the default action. */
	cli_catch_signals();
	printf("rdmx kv: server listening on port %d: a pool of %" PRIu64
	       " MiB, %s",
	       rdmx_kv_server_port(srv), o->memory_mb,
	       o->evict_lru ? "evicting the least recently used"
			    : "no eviction");
	if (o->aof)
		printf(", %" PRIu64 " keys from %s (%" PRIu64 " records)",
		       st.keys, o->aof, st.aof_records);
	if (o->resp)
		printf(", Redis protocol on port %d",
		       rdmx_kv_server_resp_port(srv));
	printf("\n");
	fflush(stdout);
	if (o->cluster) { /* as kv/cluster/NAME/MEMBER */
		char host[64] = "host";

		gethostname(host, sizeof(host));
		host[sizeof(host) - 1] = 0;
		if (o->name)
			snprintf(member, sizeof(member), "%s%s/%s",
				 RDMX_KV_CLUSTER_PREFIX, o->cluster, o->name);
		else
			snprintf(member, sizeof(member), "%s%s/%s-%d",
				 RDMX_KV_CLUSTER_PREFIX, o->cluster, host,
				 rdmx_kv_server_port(srv));
	} else if (o->name) {
		snprintf(member, sizeof(member), "%s", o->name);
	}
	if (*member)
		cli_publish(ctx, "kv", member, a, rdmx_kv_server_port(srv),
			    "kv", 2);
	while (!cli_stop)
		usleep(100000);
	if (*member)
		cli_unpublish(member);
	rdmx_kv_server_stats(srv, &st);
	printf("rdmx kv: server done: %" PRIu64 " clients; %" PRIu64
	       " keys, %" PRIu64 " bytes used; %" PRIu64 " gets (%" PRIu64
	       " hits), %" PRIu64 " puts (%" PRIu64 " out of memory), %" PRIu64
	       " deletes, %" PRIu64 " evicted\n",
	       st.clients_total, st.keys, st.bytes_used, st.gets, st.hits,
	       st.puts, st.refused_nomem, st.dels, st.evicted);
	cli_metrics_stop(metrics); /* it reads the server */
	rdmx_kv_server_destroy(srv);
	rdmx_ctx_destroy(ctx);
	return 0;
}

/* ---- clients ------------------------------------------------------------ */

/* All of @f into a buffer (*len_p bytes); NULL and a message on error. */
static uint8_t *kv_slurp(FILE *f, const char *name, uint64_t *len_p)
{
	size_t cap = 1 << 16, len = 0, n;
	uint8_t *p = malloc(cap);

	while (p && (n = fread(p + len, 1, cap - len, f)) > 0) {
		len += n;
		if (len == cap) {
			uint8_t *q = realloc(p, cap *= 2);

			if (!q) {
				free(p);
				p = NULL;
			}
			p = q;
		}
	}
	if (!p || ferror(f)) {
		cli_fail("kv", "cannot read %s", name);
		free(p);
		return NULL;
	}
	*len_p = len;
	return p;
}

/*
 * The value a put stores: @value itself, else -f FILE or stdin read whole
 * (*@buf_p, to free). Returns false after saying why.
 */
static bool kv_put_value(const struct kv_opts *o, const char *value,
			 const uint8_t **val_p, uint64_t *len_p,
			 uint8_t **buf_p)
{
	FILE *f;

	*buf_p = NULL;
	if (value) {
		*val_p = (const uint8_t *)value;
		*len_p = strlen(value);
		return true;
	}
	f = o->file ? fopen(o->file, "rb") : stdin;
	if (!f) {
		cli_fail("kv", "cannot open %s: %m", o->file);
		return false;
	}
	*buf_p = kv_slurp(f, o->file ? o->file : "stdin", len_p);
	if (o->file)
		fclose(f);
	*val_p = *buf_p;
	return *buf_p != NULL;
}

static int kv_put_cmd(struct rdmx_kv_client *c, const char *key,
		      const uint8_t *val, uint64_t len)
{
	rdmx_status st = rdmx_kv_put(c, key, strlen(key), val, len);

	if (st == RDMX_ERR_NOMEM)
		return cli_fail("kv",
				"put %s: out of memory: the server's pool "
				"is full",
				key);
	if (st)
		return cli_fail("kv", "put %s: %s", key, rdmx_strerror(st));
	return 0;
}

/* Write @v to -o FILE or stdout. */
static int kv_get_out(const struct kv_opts *o, const struct rdmx_kv_value *v)
{
	FILE *f = o->out ? fopen(o->out, "wb") : stdout;
	int rc = 0;

	if (!f)
		rc = cli_fail("kv", "cannot write %s: %m", o->out);
	else if (fwrite(v->data, 1, v->len, f) != v->len || fflush(f))
		rc = cli_fail("kv", "cannot write %s: %m",
			      o->out ? o->out : "stdout");
	if (f && o->out)
		fclose(f);
	return rc;
}

/*
 * "@cluster:NAME": the address of the member of cluster NAME that holds
 * @key now, into @at. One key per command: the cluster client places it,
 * the usual client does the rest.
 */
static rdmx_status kv_cluster_member(struct rdmx_ctx *ctx, const char *cluster,
				     const char *key, char *at, size_t len)
{
	struct rdmx_registry *reg = cli_registry(ctx);
	struct rdmx_kv_cluster *cl;
	char member[RDMX_REGISTRY_NAME_MAX];
	rdmx_status st;

	if (!reg)
		return RDMX_ERR_INVALID;
	st = rdmx_kv_cluster_open(ctx, reg, cluster, NULL, &cl);
	if (!st) {
		st = rdmx_kv_cluster_owner(cl, key, strlen(key), member,
					   sizeof(member), at, len);
		rdmx_kv_cluster_close(cl);
	}
	if (st == RDMX_ERR_UNREACHABLE)
		rdmx_log(RDMX_LOG_ERROR,
			 "kv: no live member of cluster %s in %s", cluster,
			 rdmx_registry_url(reg));
	return st;
}

/* Bytes of buffer a value of @len needs: whole MiB, at least @min. */
static uint64_t kv_buffer_for(uint64_t len, uint64_t min)
{
	uint64_t b = (len + (1 << 20) - 1) & ~(uint64_t)((1 << 20) - 1);

	return b > min ? b : min;
}

static int kv_client_cmd(const char *what, const struct kv_opts *o, int argc,
			 char **argv)
{
	struct rdmx_kv_attr ka = { .mask = RDMX_KV_ATTR_BUFFER_BYTES,
				   .buffer_bytes = o->buffer_mb << 20 };
	int want = !strcmp(what, "put") ? 3 : 2;
	struct rdmx_ctx *ctx = NULL;
	struct rdmx_kv_client *c = NULL;
	char at[RDMX_REGISTRY_ADDR_MAX] = "";
	const char *key = argv[1];
	const uint8_t *val = NULL;
	uint8_t *vbuf = NULL;
	uint64_t vlen = 0;
	struct rdmx_kv_value v;
	rdmx_status st;
	int rc;

	if (argc < 2 || argc > want || (argc == 3 && o->file))
		return cli_fail("kv", "%s takes HOST[:PORT] KEY%s", what,
				want == 3 ? " [VALUE | -f FILE]" : "");
	if (!*key || strlen(key) > RDMX_KV_KEY_MAX)
		return cli_fail("kv", "a key is 1 to %d bytes",
				RDMX_KV_KEY_MAX);
	/* A put's buffer holds its value, whatever --buffer-mb says. */
	if (!strcmp(what, "put")) {
		if (!kv_put_value(o, argc == 3 ? argv[2] : NULL, &val, &vlen,
				  &vbuf))
			return 1;
		ka.buffer_bytes = kv_buffer_for(vlen, ka.buffer_bytes);
	}
	st = cli_ctx_create(o->config, &ctx);
	if (!st && !strncmp(argv[0], "@cluster:", 9))
		st = kv_cluster_member(ctx, argv[0] + 9, key, at, sizeof(at));
	if (!st)
		st = rdmx_kv_connect(ctx, *at ? at : argv[0], &ka, &c);
	/*
	 * A get whose value is larger than the buffer learns its size: once
	 * more, with a buffer that holds it (the value may have grown since:
	 * then it fails as before).
	 */
	if (!st && !strcmp(what, "get") &&
	    (st = rdmx_kv_get_ref(c, key, strlen(key), &v)) ==
		    RDMX_ERR_LOCAL_LENGTH) {
		rdmx_kv_close(c);
		c = NULL;
		ka.buffer_bytes = kv_buffer_for(v.len, ka.buffer_bytes);
		st = rdmx_kv_connect(ctx, *at ? at : argv[0], &ka, &c);
		if (!st)
			st = rdmx_kv_get_ref(c, key, strlen(key), &v);
	}
	if (!c) {
		free(vbuf);
		rdmx_ctx_destroy(ctx);
		return cli_fail("kv", "cannot reach %s: %s", argv[0],
				rdmx_strerror(st));
	}
	if (!strcmp(what, "put")) {
		rc = kv_put_cmd(c, key, val, vlen);
	} else if (!strcmp(what, "get")) {
		if (st == RDMX_ERR_NOT_FOUND)
			rc = cli_fail("kv", "get %s: no such key", key);
		else if (st == RDMX_ERR_LOCAL_LENGTH)
			rc = cli_fail("kv",
				      "get %s: the value is %" PRIu64
				      " bytes, more than the buffer",
				      key, v.len);
		else if (st)
			rc = cli_fail("kv", "get %s: %s", key,
				      rdmx_strerror(st));
		else
			rc = kv_get_out(o, &v);
		if (!st)
			rdmx_kv_release(c, &v);
	} else if ((st = rdmx_kv_del(c, key, strlen(key)))) {
		rc = cli_fail("kv", "del %s: %s", key,
			      st == RDMX_ERR_NOT_FOUND ? "no such key"
						       : rdmx_strerror(st));
	} else {
		rc = 0;
	}
	free(vbuf);
	rdmx_kv_close(c);
	rdmx_ctx_destroy(ctx);
	return rc;
}

/* ---- options ------------------------------------------------------------ */

static int kv_parse(int argc, char **argv, struct kv_opts *o)
{
	static const struct option lo[] = {
		{ "memory-mb", required_argument, NULL, 1 },
		{ "threads", required_argument, NULL, 2 },
		{ "metrics", required_argument, NULL, 3 },
		{ "buffer-mb", required_argument, NULL, 4 },
		{ "transport", required_argument, NULL, 5 },
		{ "evict", required_argument, NULL, 6 },
		{ "aof", required_argument, NULL, 7 },
		{ "fsync", required_argument, NULL, 8 },
		{ "resp-port", required_argument, NULL, 9 },
		{ "name", required_argument, NULL, 10 },
		{ "cluster", required_argument, NULL, 11 },
		{ "file", required_argument, NULL, 'f' },
		{ "output", required_argument, NULL, 'o' },
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct kv_opts){ .memory_mb = 1024,
			       .buffer_mb = 64,
			       .fsync = RDMX_KV_FSYNC_EVERYSEC };
	optind = 1;
	while ((c = getopt_long(argc, argv, "f:o:c:h", lo, NULL)) != -1) {
		switch (c) {
		case 1:
			if (!cli_size("kv", "--memory-mb", optarg,
				      &o->memory_mb))
				return 1;
			break;
		case 2:
			if (!cli_size("kv", "--threads", optarg, &o->threads))
				return 1;
			break;
		case 3:
			if (!cli_metrics_option("kv", optarg))
				return 1;
			break;
		case 4:
			if (!cli_size("kv", "--buffer-mb", optarg,
				      &o->buffer_mb))
				return 1;
			break;
		case 5:
			if (!cli_transport_option("kv", optarg))
				return 1;
			break;
		case 6:
			if (strcmp(optarg, "lru") &&
			    strcmp(optarg, "noeviction"))
				return cli_fail("kv",
						"--evict is noeviction or "
						"lru, not '%s'",
						optarg);
			o->evict_lru = !strcmp(optarg, "lru");
			break;
		case 7:
			o->aof = optarg;
			break;
		case 9:
			o->resp = optarg;
			break;
		case 10:
			o->name = optarg;
			break;
		case 11:
			o->cluster = optarg;
			break;
		case 8:
			if (!strcmp(optarg, "always"))
				o->fsync = RDMX_KV_FSYNC_ALWAYS;
			else if (!strcmp(optarg, "everysec"))
				o->fsync = RDMX_KV_FSYNC_EVERYSEC;
			else if (!strcmp(optarg, "no"))
				o->fsync = RDMX_KV_FSYNC_NO;
			else
				return cli_fail("kv",
						"--fsync is always, "
						"everysec or no, not '%s'",
						optarg);
			break;
		case 'f':
			o->file = optarg;
			break;
		case 'o':
			o->out = optarg;
			break;
		case 'c':
			o->config = optarg;
			break;
		case 'h':
			kv_usage(stdout);
			return -1;
		default:
			return cli_fail("kv", "see rdmx kv --help");
		}
	}
	if (!o->memory_mb || o->memory_mb > (1u << 20) || o->threads > 256 ||
	    !o->buffer_mb || o->buffer_mb > 65536)
		return cli_fail("kv", "--memory-mb is 1..1048576, --threads "
				      "0..256, --buffer-mb 1..65536");
	return 0;
}

int cli_kv(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : NULL;
	struct kv_opts o;
	int rc;

	if (what && (!strcmp(what, "--help") || !strcmp(what, "-h"))) {
		kv_usage(stdout);
		return 0;
	}
	if (what && !strcmp(what, "bench"))
		return cli_kv_bench(argc - 1, argv + 1);
	if (!what || (strcmp(what, "serve") && strcmp(what, "put") &&
		      strcmp(what, "get") && strcmp(what, "del"))) {
		kv_usage(stderr);
		return 1;
	}
	rc = kv_parse(argc - 1, argv + 1, &o);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (!strcmp(what, "serve")) {
		const char *addr = NULL;

		if (cli_take_addr("kv", argc - 1, argv + 1, &addr))
			return 1;
		if (addr && !cli_is_server(addr))
			return cli_fail("kv",
					"serve takes [:PORT], not a host "
					"('%s')",
					addr);
		return kv_serve(&o, addr);
	}
	return kv_client_cmd(what, &o, argc - 1 - optind, argv + 1 + optind);
}
