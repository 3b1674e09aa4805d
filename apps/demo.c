/* SPDX-License-Identifier: MIT */
/*
 * rdmx demo send|write|read [HOST][:PORT] - the communication modes people
 * learn RDMA with, as a server and a client.
 *
 * Session: the client SENDs a 64-byte hello (mode, size, iterations, read
 * window); the server answers with a 64-byte reply (status, the packed
 * descriptor of its buffer, a message). Then, per iteration:
 *   send:  client SENDs `size` bytes, server checks and echoes them back;
 *   write: client WRITE_IMMs `size` bytes, immediate = length; server checks
 *          the immediate and the bytes and SENDs an 8-byte acknowledgement;
 *   read:  client READs [offset, offset + length) of the server's buffer.
 * send and write latency is half the round trip, read the whole operation.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define DEMO_MAGIC 0x52444d4fu /* "RDMO" */
#define DEMO_MAX_SIZE (1ull << 30)

enum demo_mode { DEMO_SEND = 1, DEMO_WRITE, DEMO_READ };
static const char *const demo_names[] = { NULL, "send", "write", "read" };

struct demo_opts {
	enum demo_mode mode;
	const char *addr;
	const char *config;
	uint64_t size, iters, offset, length;
	uint64_t max_size; /* server: the most a client may ask for */
	bool once, header;
};

/* What the client asks for, as its hello says. */
struct demo_hello {
	uint32_t mode;
	uint64_t size, iters, offset, length;
};

static uint8_t demo_byte(uint64_t seed, uint64_t j)
{
	return (uint8_t)(seed * 31 + j * 7 + (j >> 8) + 13);
}

static void demo_fill(uint8_t *p, size_t len, uint64_t seed, uint64_t off)
{
	for (size_t j = 0; j < len; j++)
		p[j] = demo_byte(seed, off + j);
}

static bool demo_check(const uint8_t *p, size_t len, uint64_t seed,
		       uint64_t off)
{
	for (size_t j = 0; j < len; j++)
		if (p[j] != demo_byte(seed, off + j))
			return false;
	return true;
}

/* ---- server ------------------------------------------------------------- */

static const char *demo_validate(const struct demo_opts *o,
				 const struct demo_hello *h)
{
	static char why[48];

	if (h->mode != o->mode) {
		snprintf(why, sizeof(why), "this server runs the %s demo",
			 demo_names[o->mode]);
		return why;
	}
	if (h->size > DEMO_MAX_SIZE || h->offset > DEMO_MAX_SIZE ||
	    h->length > DEMO_MAX_SIZE || !h->iters)
		return "size, offset or length over 1 GiB, or no iterations";
	/* The client's word decides what we allocate: within our bound. */
	if (h->size > o->max_size || h->offset + h->length > o->max_size)
		return "over the server's --max-size";
	return NULL;
}

/* Answer the hello: status 0 and our buffer's descriptor, or 1 and why. */
static rdmx_status demo_reply(struct cli_session *s, const struct cli_buf *b,
			      const char *why)
{
	struct rdmx_remote rem = { 0 };

	memset(s->out, 0, CLI_MSG);
	s->out[0] = why ? 1 : 0;
	if (b->mr)
		rdmx_mr_remote(b->mr, &rem);
	rdmx_remote_pack(&rem, s->out + 8);
	if (why)
		snprintf((char *)s->out + 32, 32, "%s", why);
	return cli_send_ctl(s, CLI_MSG);
}

static rdmx_status demo_serve_echo(struct cli_session *s, struct cli_buf *b,
				   const struct demo_hello *h)
{
	size_t half = b->len / 2;
	struct rdmx_sge sg = { b->p, (uint32_t)h->size, b->mr };
	struct rdmx_completion wc;
	rdmx_status st;

	/* Two buffers: the next RECV is posted before this echo goes out,
	 * so the client's next SEND never waits for a credit. */
	st = cli_post_recv(s, &sg, 1, 0);
	for (uint64_t i = 0; !st && i < h->iters; i++) {
		uint8_t *cur = b->p + (i % 2) * half;

		st = cli_expect(s, RDMX_OP_RECV, &wc);
		if (st)
			break;
		if (wc.byte_len != h->size || !demo_check(cur, h->size, i, 0))
			return RDMX_ERR_PROTOCOL;
		if (i + 1 < h->iters) {
			sg.addr = b->p + ((i + 1) % 2) * half;
			st = cli_post_recv(s, &sg, 1, i + 1);
		}
		sg.addr = cur;
		if (!st)
			st = rdmx_post_send(s->conn, &sg, i);
		if (!st)
			st = cli_expect(s, RDMX_OP_SEND, &wc);
	}
	return st;
}

static rdmx_status demo_serve_write(struct cli_session *s,
				    const struct cli_buf *b,
				    const struct demo_hello *h)
{
	struct rdmx_sge ack = { s->out, 8, s->out_mr };
	struct rdmx_completion wc;
	rdmx_status st;

	st = cli_post_recv(s, NULL, 0, 0);
	for (uint64_t i = 0; !st && i < h->iters; i++) {
		st = cli_expect(s, RDMX_OP_RECV_IMM, &wc);
		if (st)
			break;
		/* The immediate carries the length; the bytes must match it. */
		if (wc.imm != h->size || wc.byte_len != h->size ||
		    !demo_check(b->p, h->size, i, 0))
			return RDMX_ERR_PROTOCOL;
		if (i + 1 < h->iters)
			st = cli_post_recv(s, NULL, 0, i + 1);
		cli_put64(s->out, i);
		if (!st)
			st = rdmx_post_send(s->conn, &ack, i);
		if (!st)
			st = cli_expect(s, RDMX_OP_SEND, &wc);
	}
	return st;
}

static rdmx_status demo_serve_mode(struct cli_session *s, struct cli_buf *b,
				   const struct demo_opts *o,
				   const struct demo_hello *h)
{
	struct rdmx_completion wc;
	rdmx_status st;

	switch (o->mode) {
	case DEMO_SEND:
		st = cli_buf_alloc(s, b, 2 * h->size, RDMX_ACCESS_LOCAL_WRITE);
		if (!st)
			st = demo_reply(s, b, NULL);
		return st ? st : demo_serve_echo(s, b, h);
	case DEMO_WRITE:
		st = cli_buf_alloc(s, b, h->size,
				   RDMX_ACCESS_LOCAL_WRITE |
					   RDMX_ACCESS_REMOTE_WRITE);
		if (!st)
			st = demo_reply(s, b, NULL);
		return st ? st : demo_serve_write(s, b, h);
	case DEMO_READ:
		st = cli_buf_alloc(s, b, h->offset + h->length,
				   RDMX_ACCESS_REMOTE_READ);
		if (st)
			return st;
		demo_fill(b->p, b->len, 0, 0);
		/* The client READs on its own; it SENDs "done" at the end. */
		st = cli_recv_ctl(s);
		if (!st)
			st = demo_reply(s, b, NULL);
		return st ? st : cli_expect(s, RDMX_OP_RECV, &wc);
	}
	return RDMX_ERR_INVALID;
}

/* One client, start to end. */
static rdmx_status demo_serve_one(struct cli_session *s, void *arg)
{
	const struct demo_opts *o = arg;
	struct cli_buf b = { 0 };
	struct demo_hello h;
	struct rdmx_completion wc;
	const char *why;
	rdmx_status st;

	st = cli_recv_ctl(s);
	if (!st)
		st = cli_expect(s, RDMX_OP_RECV, &wc);
	if (st)
		return st;
	if (cli_get64(s->in) >> 32 != DEMO_MAGIC)
		return RDMX_ERR_PROTOCOL;
	h.mode = (uint32_t)cli_get64(s->in);
	h.size = cli_get64(s->in + 8);
	h.iters = cli_get64(s->in + 16);
	h.offset = cli_get64(s->in + 24);
	h.length = cli_get64(s->in + 32);
	why = demo_validate(o, &h);
	if (why) {
		demo_reply(s, &b, why);
		fprintf(stderr, "rdmx demo: refused a client: %s\n", why);
		return RDMX_ERR_INVALID;
	}
	st = demo_serve_mode(s, &b, o, &h);
	if (!st)
		printf("rdmx demo: served %s: %" PRIu64 " x %" PRIu64
		       " B, all bytes verified\n",
		       demo_names[o->mode], h.iters,
		       o->mode == DEMO_READ ? h.length : h.size);
	cli_buf_free(&b);
	return st;
}

static int demo_server(const struct demo_opts *o)
{
	struct cli_session s;
	rdmx_status st;
	int rc;

	st = cli_session_open(&s, o->config);
	if (st) {
		cli_session_close(&s);
		return cli_fail("demo", "cannot start: %s", rdmx_strerror(st));
	}
	rc = cli_serve("demo", &s, o->addr, o->once, demo_serve_one, (void *)o);
	cli_session_close(&s);
	return rc;
}

/* ---- client ------------------------------------------------------------- */

/* One timed iteration; returns its latency in microseconds. */
static double demo_iter(struct cli_session *s, struct cli_buf *b,
			const struct demo_opts *o,
			const struct rdmx_remote *rem, uint64_t i,
			rdmx_status *st_p)
{
	size_t half = b->len / 2;
	struct rdmx_sge out = { b->p, (uint32_t)o->size, b->mr };
	struct rdmx_sge in = { b->p + half, (uint32_t)o->size, b->mr };
	struct rdmx_sge ack = { s->in, CLI_MSG, s->in_mr };
	struct rdmx_completion wc;
	rdmx_status st = RDMX_OK;
	double t0;

	if (o->mode == DEMO_READ) {
		in.length = (uint32_t)o->length;
		t0 = cli_now_us();
		st = rdmx_post_read(s->conn, &in, rem->addr + o->offset,
				    rem->rkey, i);
		if (!st)
			st = cli_expect(s, RDMX_OP_READ, &wc);
		t0 = cli_now_us() - t0; /* the check is not the operation */
		if (!st && !demo_check(in.addr, o->length, 0, o->offset))
			st = RDMX_ERR_PROTOCOL;
		*st_p = st;
		return t0;
	}
	demo_fill(out.addr, o->size, i, 0);
	st = cli_post_recv(s, o->mode == DEMO_SEND ? &in : &ack, 1, i);
	t0 = cli_now_us();
	if (!st && o->mode == DEMO_SEND)
		st = rdmx_post_send(s->conn, &out, i);
	else if (!st)
		st = rdmx_post_write_imm(s->conn, &out, rem->addr, rem->rkey,
					 (uint32_t)o->size, i);
	/* Our send side and the answer may complete in either order. */
	if (!st)
		st = cli_wait_ok(s->cq, 2, CLI_TIMEOUT_MS);
	t0 = cli_now_us() - t0;
	if (!st && o->mode == DEMO_SEND && !demo_check(in.addr, o->size, i, 0))
		st = RDMX_ERR_PROTOCOL;
	if (!st && o->mode == DEMO_WRITE && cli_get64(s->in) != i)
		st = RDMX_ERR_PROTOCOL;
	*st_p = st;
	return t0 / 2;
}

static rdmx_status demo_hello(struct cli_session *s, const struct demo_opts *o,
			      struct rdmx_remote *rem, char *why, size_t wlen)
{
	struct rdmx_completion wc;
	rdmx_status st;

	cli_put64(s->out, (uint64_t)DEMO_MAGIC << 32 | o->mode);
	cli_put64(s->out + 8, o->size);
	cli_put64(s->out + 16, o->iters);
	cli_put64(s->out + 24, o->offset);
	cli_put64(s->out + 32, o->length);
	st = cli_recv_ctl(s);
	if (!st)
		st = cli_send_ctl(s, CLI_MSG);
	if (!st)
		st = cli_expect(s, RDMX_OP_RECV, &wc);
	if (st)
		return st;
	if (s->in[0]) {
		snprintf(why, wlen, "server refused: %.31s",
			 (char *)s->in + 32);
		return RDMX_ERR_INVALID;
	}
	return rdmx_remote_unpack(s->in + 8, 24, rem);
}

static void demo_row(const struct demo_opts *o, const char *transport,
		     double *lat, size_t n, const char *result)
{
	double p50 = cli_quantile(lat, n, 0.5),
	       p99 = cli_quantile(lat, n, 0.99);

	if (o->header)
		printf("%-6s %10s %7s %10s %10s  %-9s %s\n", "mode", "bytes",
		       "iters", "p50_us", "p99_us", "transport", "result");
	printf("%-6s %10" PRIu64 " %7zu %10.2f %10.2f  %-9s %s\n",
	       demo_names[o->mode], o->mode == DEMO_READ ? o->length : o->size,
	       n, p50, p99, transport, result);
}

static int demo_client(const struct demo_opts *o)
{
	struct rdmx_conn_info info = { .transport = "-" };
	struct cli_buf b = { 0 };
	struct rdmx_remote rem;
	struct cli_session s;
	char why[128] = "";
	double *lat = calloc(o->iters, sizeof(double));
	size_t n = 0;
	rdmx_status st;

	if (!lat)
		return cli_fail("demo",
				"out of memory for %" PRIu64 " iterations",
				o->iters);
	if (cli_client_open("demo", &s, o->config, o->addr)) {
		free(lat);
		return 1;
	}
	rdmx_conn_info(s.conn, &info);
	st = demo_hello(&s, o, &rem, why, sizeof(why));
	if (!st)
		st = cli_buf_alloc(&s, &b,
				   2 * (o->mode == DEMO_READ ? o->length
							     : o->size),
				   RDMX_ACCESS_LOCAL_WRITE);
	while (!st && n < o->iters && !cli_stop)
		lat[n] = demo_iter(&s, &b, o, &rem, n, &st), n += !st;
	if (!st && o->mode == DEMO_READ)
		st = cli_send_ctl(&s, CLI_MSG); /* "done" */
	if (st && !*why)
		snprintf(why, sizeof(why), "FAILED after %zu: %s", n,
			 st == RDMX_ERR_PROTOCOL ? "bytes did not match"
						 : rdmx_strerror(st));
	demo_row(o, info.transport, lat, n, st ? why : "ok, bytes verified");
	rdmx_conn_close(s.conn);
	s.conn = NULL;
	cli_buf_free(&b);
	cli_session_close(&s);
	free(lat);
	return st ? 1 : 0;
}

/* ---- options ------------------------------------------------------------ */

static void demo_usage(FILE *f)
{
	fprintf(f,
		"usage: rdmx demo send|write|read|lambda [HOST][:PORT] [options]\n"
		"  Without HOST, serve on PORT (default 18515); with HOST, connect.\n"
		"  send   messages, echoed back by the server\n"
		"  write  WRITE-with-immediate; the immediate carries the length\n"
		"  read   READ of [offset, offset + length) of the server's buffer\n"
		"  lambda a function shipped to the server and run there, in a\n"
		"         sandbox (rdmx demo lambda --help)\n"
		"options:\n"
		"  -s, --size N      message size for send and write (default 4096)\n"
		"  -n, --iters N     iterations (default 1000)\n"
		"  -o, --offset N    read: offset into the server's buffer (default 0)\n"
		"  -l, --length N    read: bytes per READ (default: --size)\n"
		"  -c, --config FILE YAML configuration (default: $RDMX_CONFIG)\n"
		"      --once        server: exit after one client\n"
		"      --max-size N  server: the largest message or read window a\n"
		"                    client may ask for (default 64m)\n"
		"      --no-header   client: print the result row only\n"
		"      --metrics [ADDR:]PORT  serve Prometheus /metrics and JSON\n"
		"                    /status there: the loopback unless ADDR is\n"
		"                    named (0: any port, printed); 32\n"
		"                    connections, 8 per address, 5 s idle\n"
		"  -h, --help        this text\n");
}

static int demo_parse(int argc, char **argv, struct demo_opts *o)
{
	static const struct option lo[] = {
		{ "size", required_argument, NULL, 's' },
		{ "iters", required_argument, NULL, 'n' },
		{ "offset", required_argument, NULL, 'o' },
		{ "length", required_argument, NULL, 'l' },
		{ "config", required_argument, NULL, 'c' },
		{ "once", no_argument, NULL, 1 },
		{ "no-header", no_argument, NULL, 2 },
		{ "metrics", required_argument, NULL, 3 },
		{ "max-size", required_argument, NULL, 4 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool have_len = false;
	int c;

	*o = (struct demo_opts){ .size = 4096,
				 .iters = 1000,
				 .max_size = 64 << 20,
				 .header = true };
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		demo_usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 1 : -1;
	}
	for (int m = DEMO_SEND; m <= DEMO_READ; m++)
		if (!strcmp(argv[1], demo_names[m]))
			o->mode = (enum demo_mode)m;
	if (!o->mode)
		return cli_fail("demo",
				"unknown mode '%s' (expected send, write, "
				"read or lambda)",
				argv[1]);
	optind = 2;
	while ((c = getopt_long(argc, argv, "s:n:o:l:c:h", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			if (!cli_size("demo", "--size", optarg, &o->size))
				return 1;
			break;
		case 'n':
			if (!cli_size("demo", "--iters", optarg, &o->iters))
				return 1;
			break;
		case 'o':
			if (!cli_size("demo", "--offset", optarg, &o->offset))
				return 1;
			break;
		case 'l':
			if (!cli_size("demo", "--length", optarg, &o->length))
				return 1;
			have_len = true;
			break;
		case 'c':
			o->config = optarg;
			break;
		case 1:
			o->once = true;
			break;
		case 2:
			o->header = false;
			break;
		case 3:
			if (!cli_metrics_option("demo", optarg))
				return 1;
			break;
		case 4:
			if (!cli_size("demo", "--max-size", optarg,
				      &o->max_size))
				return 1;
			break;
		case 'h':
			demo_usage(stdout);
			return -1;
		default:
			return cli_fail("demo", "see rdmx demo --help");
		}
	}
	if (cli_take_addr("demo", argc, argv, &o->addr))
		return 1;
	if (!have_len)
		o->length = o->size;
	if (o->size > DEMO_MAX_SIZE || o->length > DEMO_MAX_SIZE ||
	    o->offset > DEMO_MAX_SIZE)
		return cli_fail("demo", "--size, --length and --offset are "
					"limited to 1g");
	if (!o->iters)
		return cli_fail("demo", "--iters must be at least 1");
	return 0;
}

int cli_demo(int argc, char **argv)
{
	struct demo_opts o;
	int rc;

	if (argc >= 2 && !strcmp(argv[1], "lambda"))
		return cli_lambda(argc, argv);
	rc = demo_parse(argc, argv, &o);

	if (rc)
		return rc < 0 ? 0 : rc;
	return cli_is_server(o.addr) ? demo_server(&o) : demo_client(&o);
}
