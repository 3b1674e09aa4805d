/* SPDX-License-Identifier: MIT */
/*
 * --metrics [ADDR:]PORT: an HTTP endpoint (libmicrohttpd, its own thread)
 * serving the session context's counters as Prometheus text on /metrics
 * and as JSON on /status. The loopback unless an address is named; few
 * connections, each timed out, so that it cannot hurt the server.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct cli_metrics {
	struct MHD_Daemon *d;
	struct rdmx_ctx *ctx;
	double start_us;
	/* A subcommand's own counters (set once, read by the MHD thread). */
	cli_metrics_extra_fn extra;
	void *extra_arg;
};

void cli_metrics_extra(struct cli_metrics *m, cli_metrics_extra_fn fn,
		       void *arg)
{
	if (!m)
		return;
	m->extra_arg = arg;
	__atomic_store_n(&m->extra, fn, __ATOMIC_RELEASE);
}

/* Set by the option, for the next session. */
static const char *cli_metrics_addr, *cli_metrics_cmd;
static struct sockaddr_in cli_metrics_sa;
struct cli_counts cli_counts;

/* A growing text buffer. */
struct cli_text {
	char *p;
	size_t len, cap;
};

static __attribute__((format(printf, 2, 3))) void
cli_text_add(struct cli_text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->p ? t->p + t->len : NULL,
			      t->p ? t->cap - t->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if (t->p && t->len + (size_t)n < t->cap) {
			t->len += (size_t)n;
			return;
		}
		{
			size_t cap = (t->cap + (size_t)n + 1) * 2;
			char *p = realloc(t->p, cap);

			if (!p)
				return; /* the text so far stays */
			t->p = p;
			t->cap = cap;
		}
	}
}

/* The extra counters as @json or Prometheus text, appended to @t. */
static void cli_metrics_add_extra(struct cli_metrics *m, struct cli_text *t,
				  bool json)
{
	cli_metrics_extra_fn fn = __atomic_load_n(&m->extra, __ATOMIC_ACQUIRE);
	char b[4096];

	if (fn && fn(m->extra_arg, b, sizeof(b), json) < (int)sizeof(b))
		cli_text_add(t, json ? ",%s" : "%s", b);
}

static unsigned cli_count(unsigned *c)
{
	return __atomic_load_n(c, __ATOMIC_RELAXED);
}

static void cli_metrics_prom(struct cli_metrics *m, struct cli_text *t)
{
	struct rdmx_stats s;
	size_t need;

	rdmx_ctx_stats(m->ctx, &s);
	need = rdmx_stats_prometheus(&s, NULL, 0) + 1;
	t->cap = need + 1024;
	t->p = malloc(t->cap);
	if (!t->p)
		return;
	t->len = rdmx_stats_prometheus(&s, t->p, need);
	cli_text_add(
		t,
		"# HELP rdmx_cli_sessions_total Client sessions this "
		"server ended, by result.\n"
		"# TYPE rdmx_cli_sessions_total counter\n"
		"rdmx_cli_sessions_total{command=\"%s\",result=\"ok\"} %u\n"
		"rdmx_cli_sessions_total{command=\"%s\",result=\"failed\"} "
		"%u\n"
		"rdmx_cli_sessions_total{command=\"%s\",result=\"stopped\"} "
		"%u\n",
		cli_metrics_cmd, cli_count(&cli_counts.ok), cli_metrics_cmd,
		cli_count(&cli_counts.failed), cli_metrics_cmd,
		cli_count(&cli_counts.stopped));
	cli_metrics_add_extra(m, t, false);
}

/* A JSON object of the nonzero entries of @v, named by @name. */
static void cli_json_map(struct cli_text *t, const char *key, const uint64_t *v,
			 int n, const char *(*name)(int), bool last)
{
	bool first = true;

	cli_text_add(t, "\"%s\":{", key);
	for (int i = 0; i < n; i++) {
		if (!v[i])
			continue;
		cli_text_add(t, "%s\"%s\":%llu", first ? "" : ",", name(i),
			     (unsigned long long)v[i]);
		first = false;
	}
	cli_text_add(t, "}%s", last ? "" : ",");
}

static const char *cli_op_name(int i)
{
	return rdmx_opcode_name((enum rdmx_opcode)i);
}

static const char *cli_status_name(int i)
{
	return rdmx_status_name(-i);
}

static void cli_metrics_status(struct cli_metrics *m, struct cli_text *t)
{
	struct rdmx_stats s;

	rdmx_ctx_stats(m->ctx, &s);
	cli_text_add(t,
		     "{\"command\":\"%s\",\"version\":\"%d.%d\","
		     "\"uptime_s\":%.3f,\"sessions\":{\"ok\":%u,\"failed\":%u,"
		     "\"stopped\":%u},",
		     cli_metrics_cmd, RDMX_VERSION_MAJOR, RDMX_VERSION_MINOR,
		     (cli_now_us() - m->start_us) / 1e6,
		     cli_count(&cli_counts.ok), cli_count(&cli_counts.failed),
		     cli_count(&cli_counts.stopped));
	cli_json_map(t, "connections", s.conns_open, RDMX_STATS_TRANSPORTS,
		     rdmx_transport_name, false);
	cli_json_map(t, "connections_total", s.conns_total,
		     RDMX_STATS_TRANSPORTS, rdmx_transport_name, false);
	cli_json_map(t, "ops_out", s.ops_out, RDMX_STATS_OPS, cli_op_name,
		     false);
	cli_json_map(t, "ops_in", s.ops_in, RDMX_STATS_OPS, cli_op_name, false);
	cli_json_map(t, "bytes_out", s.bytes_out, RDMX_STATS_OPS, cli_op_name,
		     false);
	cli_json_map(t, "bytes_in", s.bytes_in, RDMX_STATS_OPS, cli_op_name,
		     false);
	cli_json_map(t, "errors", s.errors, RDMX_STATS_STATUSES,
		     cli_status_name, true);
	cli_metrics_add_extra(m, t, true);
	cli_text_add(t, "}\n");
}

static enum MHD_Result cli_metrics_answer(void *cls, struct MHD_Connection *c,
					  const char *url, const char *method,
					  const char *version,
					  const char *upload,
					  size_t *upload_len, void **con_cls)
{
	struct cli_metrics *m = cls;
	struct cli_text t = { 0 };
	const char *type = "text/plain; version=0.0.4; charset=utf-8";
	unsigned code = MHD_HTTP_OK;
	struct MHD_Response *r;
	enum MHD_Result ret;

	(void)version, (void)upload, (void)upload_len, (void)con_cls;
	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		code = MHD_HTTP_METHOD_NOT_ALLOWED;
		cli_text_add(&t, "only GET\n");
	} else if (!strcmp(url, "/metrics")) {
		cli_metrics_prom(m, &t);
	} else if (!strcmp(url, "/status")) {
		cli_metrics_status(m, &t);
		type = "application/json";
	} else {
		code = MHD_HTTP_NOT_FOUND;
		cli_text_add(&t, "not found: try /metrics or /status\n");
	}
	if (!t.p)
		return MHD_NO;
	r = MHD_create_response_from_buffer(t.len, t.p, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(t.p);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return ret;
}

/*
 * "HOST:PORT" into an IPv4 address, split by the library's parser; "PORT"
 * or ":PORT" is the loopback: to listen wider, name the address
 * ("0.0.0.0:9100"). The port is required: the default one is the server's.
 */
static bool cli_metrics_parse(const char *arg, struct sockaddr_in *sa)
{
	struct addrinfo hints = { .ai_family = AF_INET }, *res;
	char host[256], port[16];
	bool digits = *arg && strspn(arg, "0123456789") == strlen(arg);

	if ((!digits && !strchr(arg, ':')) ||
	    rdmx_addr_split(arg, host, sizeof(host), port, sizeof(port)) ||
	    getaddrinfo(*host ? host : "127.0.0.1", port, &hints, &res))
		return false;
	memcpy(sa, res->ai_addr, sizeof(*sa));
	freeaddrinfo(res);
	return true;
}

/* The endpoint's bounds (rdmx(1) says them). */
#define CLI_METRICS_MAX_CONNS 32
#define CLI_METRICS_MAX_PER_IP 8
#define CLI_METRICS_TIMEOUT_S 5

bool cli_metrics_option(const char *cmd, const char *arg)
{
	if (!cli_metrics_parse(arg, &cli_metrics_sa)) {
		cli_fail(cmd,
			 "--metrics expects PORT (loopback) or ADDR:PORT, not "
			 "'%s'",
			 arg);
		return false;
	}
	cli_metrics_addr = arg;
	cli_metrics_cmd = cmd;
	/* Histograms need post stamps; an explicit setting still wins. */
	setenv("RDMX_METRICS_LATENCY", "on", 0);
	return true;
}

rdmx_status cli_metrics_start(struct rdmx_ctx *ctx, struct cli_metrics **m_p)
{
	const struct sockaddr_in *sa = &cli_metrics_sa;
	const union MHD_DaemonInfo *info;
	struct cli_metrics *m;

	*m_p = NULL;
	if (!cli_metrics_addr)
		return RDMX_OK;
	m = calloc(1, sizeof(*m));
	if (!m)
		return RDMX_ERR_NOMEM;
	m->ctx = ctx;
	m->start_us = cli_now_us();
	/*
	 * Bounded, so that scrapers (or a slowloris) cannot take the fds or
	 * the threads the rdmx server needs: a few connections, a few per
	 * address, each ended after CLI_METRICS_TIMEOUT_S of silence. One
	 * polling thread serves them all.
	 */
	m->d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL,
		cli_metrics_answer, m, MHD_OPTION_SOCK_ADDR,
		(const struct sockaddr *)sa, MHD_OPTION_CONNECTION_LIMIT,
		(unsigned)CLI_METRICS_MAX_CONNS,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT,
		(unsigned)CLI_METRICS_MAX_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT,
		(unsigned)CLI_METRICS_TIMEOUT_S,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(32 * 1024),
		MHD_OPTION_END);
	if (!m->d) {
		free(m);
		cli_fail(cli_metrics_cmd,
			 "cannot serve metrics on %s (port taken?)",
			 cli_metrics_addr);
		return RDMX_ERR_SYSTEM;
	}
	info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
	printf("rdmx %s: metrics on http://%s:%u/metrics and /status\n",
	       cli_metrics_cmd, inet_ntoa(sa->sin_addr),
	       info ? info->port : ntohs(sa->sin_port));
	fflush(stdout);
	*m_p = m;
	return RDMX_OK;
}

void cli_metrics_stop(struct cli_metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->d);
	free(m);
}
