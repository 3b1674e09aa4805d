/* SPDX-License-Identifier: MIT */
/*
 * rdmx demo lambda [HOST][:PORT] - ship a function and its input; the server
 * runs it in lib/lambda's sandbox and RDMA-WRITEs the result straight into
 * the client's registered buffer.
 *
 * Per call the client SENDs one request: a 64-byte header (magic and kind,
 * code length, input length, the packed descriptor of its result buffer),
 * then the code (Lua source, or a native function's name) and the input.
 * The server WRITEs the result, then SENDs a reply (status, result length,
 * one line of why); RC ordering puts the bytes in place before the reply.
 * A header of kind 0 ends the session.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "lambda.h"

#define LAMBDA_MAGIC 0x524c4d42u /* "RLMB" */
#define LAMBDA_HDR 64
#define LAMBDA_MAX_REQUEST (1u << 20) /* code + input */
#define LAMBDA_MAX_RESULT (4u << 20)
#define LAMBDA_REPLY 256
#define LAMBDA_BYE 0

/* ---- server ------------------------------------------------------------- */

struct lambda_server {
	const char *addr, *config;
	bool once;
	struct lambda_limits lim;
	struct lambda_natives *nat;
};

struct lambda_session {
	struct cli_buf req, rep, res;
};

/* Run one request; the reply buffer gets the answer. */
static rdmx_status lambda_serve_call(struct cli_session *s,
				     struct lambda_server *srv,
				     struct lambda_session *ls, uint32_t kind,
				     const struct rdmx_completion *wc)
{
	uint64_t code_len = cli_get64(ls->req.p + 8);
	uint64_t input_len = cli_get64(ls->req.p + 16);
	struct lambda_call call = { .kind = (enum lambda_kind)kind };
	struct rdmx_remote rem;
	struct rdmx_sge sg = { ls->res.p, 0, ls->res.mr };
	enum lambda_status st;
	size_t out_len;
	char why[200];
	double t0 = cli_now_us();
	rdmx_status rst;

	if (code_len > LAMBDA_MAX_REQUEST || input_len > LAMBDA_MAX_REQUEST ||
	    wc->byte_len != LAMBDA_HDR + code_len + input_len ||
	    rdmx_remote_unpack(ls->req.p + 24, RDMX_REMOTE_PACKED_LEN, &rem))
		return RDMX_ERR_PROTOCOL;
	call.code = (const char *)ls->req.p + LAMBDA_HDR;
	call.code_len = code_len;
	call.input = ls->req.p + LAMBDA_HDR + code_len;
	call.input_len = input_len;
	call.out = ls->res.p;
	call.out_max = rem.length < ls->res.len ? rem.length : ls->res.len;
	st = lambda_run(&srv->lim, srv->nat, &call, &out_len, why, sizeof(why));
	if (st != LAMBDA_OK)
		printf("rdmx demo: lambda %s%.*s: %s%s%s (%.2f ms)\n",
		       kind == LAMBDA_NATIVE ? "native " : "lua",
		       kind == LAMBDA_NATIVE
			       ? (int)(code_len < 64 ? code_len : 64)
			       : 0,
		       call.code, lambda_status_str(st), *why ? ": " : "", why,
		       (cli_now_us() - t0) / 1000);
	fflush(stdout);
	/* The request buffer is free again: the next one may come. */
	sg.addr = ls->req.p;
	sg.length = (uint32_t)ls->req.len;
	sg.mr = ls->req.mr;
	rst = cli_post_recv(s, &sg, 1, 0);
	if (!rst && st == LAMBDA_OK && out_len) {
		struct rdmx_sge out = { ls->res.p, (uint32_t)out_len,
					ls->res.mr };
		struct rdmx_completion wwc;

		rst = rdmx_post_write(s->conn, &out, rem.addr, rem.rkey, 0);
		if (!rst)
			rst = cli_expect(s, RDMX_OP_WRITE, &wwc);
	}
	memset(ls->rep.p, 0, LAMBDA_REPLY);
	cli_put64(ls->rep.p, st);
	cli_put64(ls->rep.p + 8, out_len);
	snprintf((char *)ls->rep.p + 16, LAMBDA_REPLY - 16, "%s", why);
	return rst;
}

static rdmx_status lambda_serve_one(struct cli_session *s, void *arg)
{
	struct lambda_server *srv = arg;
	struct lambda_session ls = { 0 };
	struct rdmx_completion wc;
	struct rdmx_sge sg;
	unsigned calls = 0, ok = 0;
	rdmx_status st;

	st = cli_buf_alloc(s, &ls.req, LAMBDA_HDR + LAMBDA_MAX_REQUEST,
			   RDMX_ACCESS_LOCAL_WRITE);
	if (!st)
		st = cli_buf_alloc(s, &ls.rep, LAMBDA_REPLY, 0);
	if (!st)
		st = cli_buf_alloc(s, &ls.res, LAMBDA_MAX_RESULT, 0);
	sg = (struct rdmx_sge){ ls.req.p, (uint32_t)ls.req.len, ls.req.mr };
	if (!st)
		st = cli_post_recv(s, &sg, 1, 0);
	while (!st) {
		uint64_t w0;

		st = cli_expect(s, RDMX_OP_RECV, &wc);
		if (st)
			break;
		w0 = wc.byte_len >= LAMBDA_HDR ? cli_get64(ls.req.p) : 0;
		if (w0 >> 32 != LAMBDA_MAGIC) {
			st = RDMX_ERR_PROTOCOL;
			break;
		}
		if ((uint32_t)w0 == LAMBDA_BYE)
			break;
		if ((uint32_t)w0 != LAMBDA_LUA &&
		    (uint32_t)w0 != LAMBDA_NATIVE) {
			st = RDMX_ERR_PROTOCOL;
			break;
		}
		st = lambda_serve_call(s, srv, &ls, (uint32_t)w0, &wc);
		ok += cli_get64(ls.rep.p) == LAMBDA_OK;
		sg = (struct rdmx_sge){ ls.rep.p, LAMBDA_REPLY, ls.rep.mr };
		if (!st)
			st = rdmx_post_send(s->conn, &sg, 0);
		if (!st)
			st = cli_expect(s, RDMX_OP_SEND, &wc);
		calls++;
	}
	if (!st)
		printf("rdmx demo: lambda session done: %u calls, %u ok\n",
		       calls, ok);
	cli_buf_free(&ls.req);
	cli_buf_free(&ls.rep);
	cli_buf_free(&ls.res);
	return st;
}

/* A count or a time ("5000ms") of the context's configuration. */
static uint64_t lambda_key(const struct cli_session *s, const char *key)
{
	char v[64];

	/* The keys are the library's own: they are always there. */
	return rdmx_ctx_config(s->ctx, key, v, sizeof(v))
		       ? 0
		       : strtoull(v, NULL, 10);
}

static int lambda_server(struct lambda_server *srv)
{
	char why[512], dir[512] = "";
	struct cli_session s;
	rdmx_status st;
	int rc;

	st = cli_session_open(&s, srv->config);
	if (!st)
		st = rdmx_ctx_config(s.ctx, "lambda.native_dir", dir,
				     sizeof(dir));
	if (st) {
		cli_session_close(&s);
		return cli_fail("demo", "cannot start: %s", rdmx_strerror(st));
	}
	srv->lim = (struct lambda_limits){
		.instructions = lambda_key(&s, "lambda.instructions"),
		.memory = lambda_key(&s, "lambda.memory"),
		.time_ms = lambda_key(&s, "lambda.time_limit"),
	};
	if (*dir && lambda_natives_open(dir, &srv->nat, why, sizeof(why))) {
		cli_session_close(&s);
		return cli_fail("demo", "lambda.native_dir: %s", why);
	}
	printf("rdmx demo: lambda limits: %" PRIu64 " instructions, %" PRIu64
	       " bytes, %" PRIu64 " ms; %zu native libraries%s%s\n",
	       srv->lim.instructions, srv->lim.memory, srv->lim.time_ms,
	       lambda_natives_count(srv->nat), srv->nat ? " from " : "",
	       srv->nat ? dir : "");
	rc = cli_serve("demo", &s, srv->addr, srv->once, lambda_serve_one, srv);
	cli_session_close(&s);
	lambda_natives_close(srv->nat);
	return rc;
}

/* ---- client ------------------------------------------------------------- */

struct lambda_client {
	const char *addr, *config;
	enum lambda_kind kind;
	char *code, *input; /* owned */
	size_t code_len, input_len;
	uint64_t result_max, iters;
};

/* One call: request out, reply in; returns the reply's status. */
static rdmx_status lambda_call_once(struct cli_session *s, struct cli_buf *req,
				    struct cli_buf *rep, size_t req_len)
{
	struct rdmx_sge out = { req->p, (uint32_t)req_len, req->mr };
	struct rdmx_sge in = { rep->p, LAMBDA_REPLY, rep->mr };
	rdmx_status st;

	st = cli_post_recv(s, &in, 1, 0);
	if (!st)
		st = rdmx_post_send(s->conn, &out, 0);
	/* Our SEND and the reply may complete in either order. */
	return st ? st : cli_wait_ok(s->cq, 2, 60000);
}

static rdmx_status lambda_client_run(struct cli_session *s,
				     const struct lambda_client *o,
				     struct cli_buf *req, struct cli_buf *rep,
				     struct cli_buf *res, double *lat,
				     size_t *n_p)
{
	size_t req_len = LAMBDA_HDR + o->code_len + o->input_len;
	struct rdmx_remote rem;
	rdmx_status st;

	rdmx_mr_remote(res->mr, &rem);
	cli_put64(req->p, (uint64_t)LAMBDA_MAGIC << 32 | o->kind);
	cli_put64(req->p + 8, o->code_len);
	cli_put64(req->p + 16, o->input_len);
	rdmx_remote_pack(&rem, req->p + 24);
	memcpy(req->p + LAMBDA_HDR, o->code, o->code_len);
	if (o->input_len)
		memcpy(req->p + LAMBDA_HDR + o->code_len, o->input,
		       o->input_len);
	for (*n_p = 0; *n_p < o->iters && !cli_stop; (*n_p)++) {
		double t0 = cli_now_us();

		st = lambda_call_once(s, req, rep, req_len);
		if (st)
			return st;
		lat[*n_p] = cli_now_us() - t0;
		if (cli_get64(rep->p) != LAMBDA_OK)
			break;
	}
	/* Bye: a header of kind 0, no reply. */
	cli_put64(req->p, (uint64_t)LAMBDA_MAGIC << 32 | LAMBDA_BYE);
	cli_put64(req->p + 8, 0);
	cli_put64(req->p + 16, 0);
	{
		struct rdmx_sge bye = { req->p, LAMBDA_HDR, req->mr };
		struct rdmx_completion wc;

		st = rdmx_post_send(s->conn, &bye, 0);
		if (!st)
			st = cli_expect(s, RDMX_OP_SEND, &wc);
	}
	return st;
}

/* Print the result (or why not); returns the exit code. */
static int lambda_report(const struct lambda_client *o, const char *transport,
			 const struct cli_buf *rep, const struct cli_buf *res,
			 double *lat, size_t n)
{
	uint64_t status = cli_get64(rep->p), len = cli_get64(rep->p + 8);

	if (n > 1 || (n == 1 && o->iters > 1))
		fprintf(stderr,
			"rdmx demo: lambda: %zu calls over %s, p50 %.1f us, "
			"p99 %.1f us\n",
			n, transport, cli_quantile(lat, n, 0.5),
			cli_quantile(lat, n, 0.99));
	if (status != LAMBDA_OK) {
		rep->p[LAMBDA_REPLY - 1] = '\0';
		return cli_fail("demo", "lambda failed (%s): %s",
				lambda_status_str((enum lambda_status)status),
				(char *)rep->p + 16);
	}
	if (len > res->len)
		return cli_fail("demo", "server claims %" PRIu64 " bytes", len);
	fwrite(res->p, 1, len, stdout);
	if (len && res->p[len - 1] != '\n' && isatty(1))
		putchar('\n');
	return 0;
}

static int lambda_client(const struct lambda_client *o)
{
	struct rdmx_conn_info info = { .transport = "-" };
	struct cli_buf req = { 0 }, rep = { 0 }, res = { 0 };
	double *lat = calloc(o->iters, sizeof(double));
	struct cli_session s;
	size_t n = 0;
	rdmx_status st;
	int rc = 1;

	if (!lat)
		return cli_fail("demo", "out of memory");
	if (cli_client_open("demo", &s, o->config, o->addr)) {
		free(lat);
		return 1;
	}
	rdmx_conn_info(s.conn, &info);
	st = cli_buf_alloc(&s, &req, LAMBDA_HDR + o->code_len + o->input_len,
			   0);
	if (!st)
		st = cli_buf_alloc(&s, &rep, LAMBDA_REPLY,
				   RDMX_ACCESS_LOCAL_WRITE);
	if (!st)
		st = cli_buf_alloc(&s, &res, o->result_max,
				   RDMX_ACCESS_LOCAL_WRITE |
					   RDMX_ACCESS_REMOTE_WRITE);
	if (!st)
		st = lambda_client_run(&s, o, &req, &rep, &res, lat, &n);
	if (st)
		cli_fail("demo", "lambda over %s failed after %zu calls: %s",
			 info.transport, n, rdmx_strerror(st));
	else
		rc = lambda_report(o, info.transport, &rep, &res, lat, n);
	rdmx_conn_close(s.conn);
	s.conn = NULL;
	cli_buf_free(&req);
	cli_buf_free(&rep);
	cli_buf_free(&res);
	cli_session_close(&s);
	free(lat);
	return rc;
}

/* ---- options ------------------------------------------------------------ */

static void lambda_usage(FILE *f)
{
	fprintf(f,
		"usage: rdmx demo lambda [HOST][:PORT] [options]\n"
		"  Without HOST, serve on PORT (default 18515): run what clients\n"
		"  ship, within the limits of the config keys lambda.*.\n"
		"  With HOST, ship one function and its input; print the result.\n"
		"client options (one of -f, -e, --native):\n"
		"  -f, --file FILE.lua   Lua 5.4 chunk; gets the input as '...',\n"
		"                        returns a string or a number\n"
		"  -e, --eval CODE       the chunk on the command line\n"
		"      --native NAME     call rdmx_lambda_NAME from the server's\n"
		"                        lambda.native_dir\n"
		"  -i, --input TEXT      the input (default: empty)\n"
		"      --input-file FILE the input, from a file\n"
		"  -r, --result-size N   bytes of the result buffer (default 64k, "
		"max 4m)\n"
		"  -n, --iters N         call N times, print latency (default 1)\n"
		"common options:\n"
		"  -c, --config FILE     YAML configuration (default: $RDMX_CONFIG)\n"
		"      --once            server: exit after one client\n"
		"      --metrics [ADDR:]PORT  Prometheus /metrics, JSON /status\n"
		"                        (the loopback unless ADDR is named)\n"
		"  -h, --help            this text\n"
		"Examples: examples/lambda/*.lua, examples/native/*.c\n");
}

/* Read a whole file (at most LAMBDA_MAX_REQUEST bytes). */
static int lambda_slurp(const char *path, char **p, size_t *len)
{
	FILE *f = fopen(path, "rb");
	size_t n;

	if (!f)
		return cli_fail("demo", "cannot open %s: %s", path,
				strerror(errno));
	free(*p);
	*p = malloc(LAMBDA_MAX_REQUEST + 1);
	n = *p ? fread(*p, 1, LAMBDA_MAX_REQUEST + 1, f) : 0;
	fclose(f);
	if (!*p)
		return cli_fail("demo", "out of memory");
	if (n > LAMBDA_MAX_REQUEST)
		return cli_fail("demo", "%s is over %u bytes", path,
				LAMBDA_MAX_REQUEST);
	*len = n;
	return 0;
}

static int lambda_set(char **p, size_t *len, const char *s)
{
	free(*p);
	*p = strdup(s);
	*len = strlen(s);
	return *p ? 0 : cli_fail("demo", "out of memory");
}

static int lambda_parse(int argc, char **argv, struct lambda_client *o,
			struct lambda_server *srv)
{
	static const struct option lo[] = {
		{ "file", required_argument, NULL, 'f' },
		{ "eval", required_argument, NULL, 'e' },
		{ "native", required_argument, NULL, 1 },
		{ "input", required_argument, NULL, 'i' },
		{ "input-file", required_argument, NULL, 2 },
		{ "result-size", required_argument, NULL, 'r' },
		{ "iters", required_argument, NULL, 'n' },
		{ "config", required_argument, NULL, 'c' },
		{ "once", no_argument, NULL, 3 },
		{ "metrics", required_argument, NULL, 4 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, rc = 0, kinds = 0;

	optind = 2;
	while (!rc &&
	       (c = getopt_long(argc, argv, "f:e:i:r:n:c:h", lo, NULL)) != -1) {
		switch (c) {
		case 'f':
			o->kind = LAMBDA_LUA, kinds++;
			rc = lambda_slurp(optarg, &o->code, &o->code_len);
			break;
		case 'e':
			o->kind = LAMBDA_LUA, kinds++;
			rc = lambda_set(&o->code, &o->code_len, optarg);
			break;
		case 1:
			o->kind = LAMBDA_NATIVE, kinds++;
			rc = lambda_set(&o->code, &o->code_len, optarg);
			break;
		case 'i':
			rc = lambda_set(&o->input, &o->input_len, optarg);
			break;
		case 2:
			rc = lambda_slurp(optarg, &o->input, &o->input_len);
			break;
		case 'r':
			rc = !cli_size("demo", "--result-size", optarg,
				       &o->result_max);
			break;
		case 'n':
			rc = !cli_size("demo", "--iters", optarg, &o->iters);
			break;
		case 'c':
			o->config = srv->config = optarg;
			break;
		case 3:
			srv->once = true;
			break;
		case 4:
			rc = !cli_metrics_option("demo", optarg);
			break;
		case 'h':
			lambda_usage(stdout);
			return -1;
		default:
			return cli_fail("demo", "see rdmx demo lambda --help");
		}
	}
	if (rc || cli_take_addr("demo", argc, argv, &o->addr))
		return 1;
	srv->addr = o->addr;
	if (cli_is_server(o->addr))
		return kinds ? cli_fail("demo", "-f, -e and --native are for "
						"the client (give a HOST)")
			     : 0;
	if (kinds != 1)
		return cli_fail("demo", "give the function: one of -f FILE, "
					"-e CODE or --native NAME");
	if (o->code_len + o->input_len > LAMBDA_MAX_REQUEST)
		return cli_fail("demo", "code and input are over %u bytes",
				LAMBDA_MAX_REQUEST);
	if (!o->result_max || o->result_max > LAMBDA_MAX_RESULT)
		return cli_fail("demo", "--result-size must be 1 to %u",
				LAMBDA_MAX_RESULT);
	if (!o->iters)
		return cli_fail("demo", "--iters must be at least 1");
	return 0;
}

int cli_lambda(int argc, char **argv)
{
	struct lambda_client o = { .result_max = 64 << 10, .iters = 1 };
	struct lambda_server srv = { 0 };
	int rc = lambda_parse(argc, argv, &o, &srv);

	if (!rc)
		rc = cli_is_server(o.addr) ? lambda_server(&srv)
					   : lambda_client(&o);
	free(o.code);
	free(o.input);
	return rc < 0 ? 0 : rc;
}
