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
#include <endian.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define DEMO_MAGIC 0x52444d4fu /* "RDMO" */
#define DEMO_MSG 64
#define DEMO_MAX_SIZE (1ull << 30)
#define DEMO_TIMEOUT_MS 10000

enum demo_mode { DEMO_SEND = 1, DEMO_WRITE, DEMO_READ };
static const char *const demo_names[] = { NULL, "send", "write", "read" };

struct demo_opts {
	enum demo_mode mode;
	const char *addr;
	const char *config;
	uint64_t size, iters, offset, length;
	bool once, header;
};

/* One side's objects; torn down in reverse by demo_close(). */
struct demo {
	struct rdmx_ctx *ctx;
	struct rdmx_cq *cq;
	struct rdmx_conn *conn;
	uint8_t ctl_out[DEMO_MSG], ctl_in[DEMO_MSG];
	struct rdmx_mr *ctl_out_mr, *ctl_in_mr;
	uint8_t *data;
	size_t data_len;
	struct rdmx_mr *data_mr;
};

/* The hello, and the reply, as they travel. */
struct demo_hello {
	uint32_t mode;
	uint64_t size, iters, offset, length;
};

static void demo_put64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, 8);
}

static uint64_t demo_get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return be64toh(v);
}

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

/* ---- shared setup ------------------------------------------------------- */

static rdmx_status demo_open(struct demo *d, const struct demo_opts *o)
{
	struct rdmx_ctx_attr attr = {
		.mask = o->config ? RDMX_CTX_ATTR_CONFIG_FILE : 0,
		.config_file = o->config
	};
	rdmx_status st;

	memset(d, 0, sizeof(*d));
	st = rdmx_ctx_create(&attr, &d->ctx);
	if (!st)
		st = rdmx_cq_create(d->ctx, &d->cq);
	if (!st)
		st = rdmx_mr_reg(d->ctx, d->ctl_out, DEMO_MSG, 0,
				 &d->ctl_out_mr);
	if (!st)
		st = rdmx_mr_reg(d->ctx, d->ctl_in, DEMO_MSG,
				 RDMX_ACCESS_LOCAL_WRITE, &d->ctl_in_mr);
	return st;
}

static void demo_data_free(struct demo *d)
{
	rdmx_mr_dereg(d->data_mr);
	free(d->data);
	d->data_mr = NULL;
	d->data = NULL;
}

static rdmx_status demo_data_alloc(struct demo *d, size_t len, unsigned access)
{
	d->data_len = len;
	d->data = calloc(1, len ? len : 1);
	if (!d->data)
		return RDMX_ERR_NOMEM;
	return rdmx_mr_reg(d->ctx, d->data, len, access, &d->data_mr);
}

static void demo_close(struct demo *d)
{
	rdmx_conn_close(d->conn);
	d->conn = NULL;
	demo_data_free(d);
	rdmx_mr_dereg(d->ctl_in_mr);
	rdmx_mr_dereg(d->ctl_out_mr);
	rdmx_cq_destroy(d->cq);
	rdmx_ctx_destroy(d->ctx);
}

static rdmx_status demo_post_ctl_recv(struct demo *d)
{
	struct rdmx_sge sg = { d->ctl_in, DEMO_MSG, d->ctl_in_mr };

	return rdmx_post_recv(d->conn, &sg, 1, 0);
}

/* SEND the control message and wait for its completion. */
static rdmx_status demo_send_ctl(struct demo *d)
{
	struct rdmx_sge sg = { d->ctl_out, DEMO_MSG, d->ctl_out_mr };
	struct rdmx_completion wc;
	rdmx_status st;

	st = rdmx_post_send(d->conn, &sg, 1);
	if (!st)
		st = cli_wait(d->cq, &wc, DEMO_TIMEOUT_MS);
	return st ? st : wc.status;
}

/* Wait for the next completion of @op; any error ends the session. */
static rdmx_status demo_expect(struct demo *d, enum rdmx_opcode op,
			       struct rdmx_completion *wc)
{
	rdmx_status st = cli_wait(d->cq, wc, DEMO_TIMEOUT_MS);

	if (st)
		return st;
	if (wc->status)
		return wc->status;
	return wc->opcode == op ? RDMX_OK : RDMX_ERR_PROTOCOL;
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
	return NULL;
}

/* Answer the hello: status 0 and our buffer's descriptor, or 1 and why. */
static rdmx_status demo_reply(struct demo *d, const char *why)
{
	struct rdmx_remote rem = { 0 };

	memset(d->ctl_out, 0, DEMO_MSG);
	d->ctl_out[0] = why ? 1 : 0;
	if (d->data_mr)
		rdmx_mr_remote(d->data_mr, &rem);
	rdmx_remote_pack(&rem, d->ctl_out + 8);
	if (why)
		snprintf((char *)d->ctl_out + 32, 32, "%s", why);
	return demo_send_ctl(d);
}

static rdmx_status demo_serve_echo(struct demo *d, const struct demo_hello *h)
{
	size_t half = d->data_len / 2;
	struct rdmx_completion wc;
	rdmx_status st;

	/* Two buffers: the next RECV is posted before this echo goes out,
	 * so the client's next SEND never waits for a credit. */
	struct rdmx_sge sg = { d->data, (uint32_t)h->size, d->data_mr };

	st = rdmx_post_recv(d->conn, &sg, 1, 0);
	for (uint64_t i = 0; !st && i < h->iters; i++) {
		uint8_t *cur = d->data + (i % 2) * half;

		st = demo_expect(d, RDMX_OP_RECV, &wc);
		if (st)
			break;
		if (wc.byte_len != h->size || !demo_check(cur, h->size, i, 0))
			return RDMX_ERR_PROTOCOL;
		if (i + 1 < h->iters) {
			sg.addr = d->data + ((i + 1) % 2) * half;
			st = rdmx_post_recv(d->conn, &sg, 1, i + 1);
		}
		sg.addr = cur;
		if (!st)
			st = rdmx_post_send(d->conn, &sg, i);
		if (!st)
			st = demo_expect(d, RDMX_OP_SEND, &wc);
	}
	return st;
}

static rdmx_status demo_serve_write(struct demo *d, const struct demo_hello *h)
{
	struct rdmx_sge ack = { d->ctl_out, 8, d->ctl_out_mr };
	struct rdmx_completion wc;
	rdmx_status st;

	st = rdmx_post_recv(d->conn, NULL, 0, 0);
	for (uint64_t i = 0; !st && i < h->iters; i++) {
		st = demo_expect(d, RDMX_OP_RECV_IMM, &wc);
		if (st)
			break;
		/* The immediate carries the length; the bytes must match it. */
		if (wc.imm != h->size || wc.byte_len != h->size ||
		    !demo_check(d->data, h->size, i, 0))
			return RDMX_ERR_PROTOCOL;
		if (i + 1 < h->iters)
			st = rdmx_post_recv(d->conn, NULL, 0, i + 1);
		demo_put64(d->ctl_out, i);
		if (!st)
			st = rdmx_post_send(d->conn, &ack, i);
		if (!st)
			st = demo_expect(d, RDMX_OP_SEND, &wc);
	}
	return st;
}

/* One client, start to end. */
static rdmx_status demo_serve_one(struct demo *d, const struct demo_opts *o)
{
	struct demo_hello h;
	struct rdmx_completion wc;
	const char *why;
	rdmx_status st;

	st = demo_post_ctl_recv(d);
	if (!st)
		st = demo_expect(d, RDMX_OP_RECV, &wc);
	if (st)
		return st;
	if (demo_get64(d->ctl_in) >> 32 != DEMO_MAGIC)
		return RDMX_ERR_PROTOCOL;
	h.mode = (uint32_t)demo_get64(d->ctl_in);
	h.size = demo_get64(d->ctl_in + 8);
	h.iters = demo_get64(d->ctl_in + 16);
	h.offset = demo_get64(d->ctl_in + 24);
	h.length = demo_get64(d->ctl_in + 32);
	why = demo_validate(o, &h);
	if (why) {
		demo_reply(d, why);
		fprintf(stderr, "rdmx demo: refused a client: %s\n", why);
		return RDMX_ERR_INVALID;
	}
	switch (o->mode) {
	case DEMO_SEND:
		st = demo_data_alloc(d, 2 * h.size, RDMX_ACCESS_LOCAL_WRITE);
		break;
	case DEMO_WRITE:
		st = demo_data_alloc(d, h.size,
				     RDMX_ACCESS_LOCAL_WRITE |
					     RDMX_ACCESS_REMOTE_WRITE);
		break;
	case DEMO_READ:
		st = demo_data_alloc(d, h.offset + h.length,
				     RDMX_ACCESS_REMOTE_READ);
		if (!st)
			demo_fill(d->data, d->data_len, 0, 0);
		break;
	}
	if (!st && o->mode == DEMO_READ)
		st = demo_post_ctl_recv(d); /* for the client's "done" */
	if (!st)
		st = demo_reply(d, NULL);
	if (!st && o->mode == DEMO_SEND)
		st = demo_serve_echo(d, &h);
	else if (!st && o->mode == DEMO_WRITE)
		st = demo_serve_write(d, &h);
	else if (!st)
		st = demo_expect(d, RDMX_OP_RECV, &wc);
	if (!st)
		printf("rdmx demo: served %s: %" PRIu64 " x %" PRIu64
		       " B, all bytes verified\n",
		       demo_names[o->mode], h.iters,
		       o->mode == DEMO_READ ? h.length : h.size);
	return st;
}

static int demo_server(const struct demo_opts *o)
{
	struct rdmx_conn_attr attr;
	struct rdmx_listener *lst;
	struct demo d;
	unsigned served = 0, failed = 0;
	rdmx_status st;

	st = demo_open(&d, o);
	if (!st)
		st = rdmx_listen(d.ctx, o->addr ? o->addr : ":18515", &lst);
	if (st) {
		demo_close(&d);
		return cli_fail("demo", "cannot serve on %s: %s",
				o->addr ? o->addr : ":18515",
				rdmx_strerror(st));
	}
	printf("rdmx demo: %s server listening on port %d\n",
	       demo_names[o->mode], rdmx_listener_port(lst));
	fflush(stdout);
	cli_catch_signals();
	attr = (struct rdmx_conn_attr){ .cq = d.cq };
	while (!cli_stop) {
		st = rdmx_accept(lst, &attr, 200, &d.conn);
		if (st == RDMX_ERR_TIMEOUT)
			continue;
		if (st)
			break;
		st = demo_serve_one(&d, o);
		if (st && st != RDMX_ERR_INVALID)
			fprintf(stderr,
				"rdmx demo: client session failed: %s\n",
				rdmx_strerror(st));
		st ? failed++ : served++;
		rdmx_conn_close(d.conn);
		d.conn = NULL;
		demo_data_free(&d);
		fflush(stdout);
		if (o->once)
			break;
	}
	rdmx_listener_close(lst);
	demo_close(&d);
	printf("rdmx demo: server done: %u sessions ok, %u failed\n", served,
	       failed);
	return failed ? 1 : 0;
}

/* ---- client ------------------------------------------------------------- */

/* One timed iteration; returns its latency in microseconds, or < 0. */
static double demo_iter(struct demo *d, const struct demo_opts *o,
			const struct rdmx_remote *rem, uint64_t i,
			rdmx_status *st_p)
{
	size_t half = d->data_len / 2;
	struct rdmx_sge out = { d->data, (uint32_t)o->size, d->data_mr };
	struct rdmx_sge in = { d->data + half, (uint32_t)o->size, d->data_mr };
	struct rdmx_sge ack = { d->ctl_in, DEMO_MSG, d->ctl_in_mr };
	struct rdmx_completion wc;
	rdmx_status st = RDMX_OK;
	double t0;

	if (o->mode == DEMO_READ) {
		in.length = (uint32_t)o->length;
		t0 = cli_now_us();
		st = rdmx_post_read(d->conn, &in, rem->addr + o->offset,
				    rem->rkey, i);
		if (!st)
			st = demo_expect(d, RDMX_OP_READ, &wc);
		if (!st && !demo_check(in.addr, o->length, 0, o->offset))
			st = RDMX_ERR_PROTOCOL;
		*st_p = st;
		return cli_now_us() - t0;
	}
	demo_fill(out.addr, o->size, i, 0);
	st = rdmx_post_recv(d->conn, o->mode == DEMO_SEND ? &in : &ack, 1, i);
	t0 = cli_now_us();
	if (!st && o->mode == DEMO_SEND)
		st = rdmx_post_send(d->conn, &out, i);
	else if (!st)
		st = rdmx_post_write_imm(d->conn, &out, rem->addr, rem->rkey,
					 (uint32_t)o->size, i);
	/* Our send side and the answer may complete in either order. */
	for (int n = 0; !st && n < 2; n++) {
		st = cli_wait(d->cq, &wc, DEMO_TIMEOUT_MS);
		if (!st)
			st = wc.status;
	}
	t0 = cli_now_us() - t0;
	if (!st && o->mode == DEMO_SEND && !demo_check(in.addr, o->size, i, 0))
		st = RDMX_ERR_PROTOCOL;
	if (!st && o->mode == DEMO_WRITE && demo_get64(d->ctl_in) != i)
		st = RDMX_ERR_PROTOCOL;
	*st_p = st;
	return t0 / 2;
}

static rdmx_status demo_hello(struct demo *d, const struct demo_opts *o,
			      struct rdmx_remote *rem, char *why, size_t wlen)
{
	struct rdmx_completion wc;
	rdmx_status st;

	demo_put64(d->ctl_out, (uint64_t)DEMO_MAGIC << 32 | o->mode);
	demo_put64(d->ctl_out + 8, o->size);
	demo_put64(d->ctl_out + 16, o->iters);
	demo_put64(d->ctl_out + 24, o->offset);
	demo_put64(d->ctl_out + 32, o->length);
	st = demo_post_ctl_recv(d);
	if (!st)
		st = demo_send_ctl(d);
	if (!st)
		st = demo_expect(d, RDMX_OP_RECV, &wc);
	if (st)
		return st;
	if (d->ctl_in[0]) {
		snprintf(why, wlen, "server refused: %.31s",
			 (char *)d->ctl_in + 32);
		return RDMX_ERR_INVALID;
	}
	return rdmx_remote_unpack(d->ctl_in + 8, 24, rem);
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
	struct rdmx_conn_attr attr;
	struct rdmx_conn_info info = { .transport = "-" };
	struct rdmx_remote rem;
	struct demo d;
	char why[128] = "";
	double *lat = calloc(o->iters, sizeof(double));
	size_t n = 0;
	rdmx_status st;

	if (!lat)
		return cli_fail("demo",
				"out of memory for %" PRIu64 " iterations",
				o->iters);
	st = demo_open(&d, o);
	attr = (struct rdmx_conn_attr){ .cq = d.cq };
	if (!st)
		st = rdmx_connect(d.ctx, o->addr, &attr, 5000, &d.conn);
	if (st) {
		demo_close(&d);
		free(lat);
		return cli_fail("demo", "cannot connect to %s: %s", o->addr,
				rdmx_strerror(st));
	}
	rdmx_conn_info(d.conn, &info);
	cli_catch_signals();
	st = demo_hello(&d, o, &rem, why, sizeof(why));
	if (!st)
		st = demo_data_alloc(
			&d, 2 * (o->mode == DEMO_READ ? o->length : o->size),
			RDMX_ACCESS_LOCAL_WRITE);
	while (!st && n < o->iters && !cli_stop)
		lat[n] = demo_iter(&d, o, &rem, n, &st), n += !st;
	if (!st && o->mode == DEMO_READ)
		st = demo_send_ctl(&d); /* "done" */
	if (st && !*why)
		snprintf(why, sizeof(why), "FAILED after %zu: %s", n,
			 st == RDMX_ERR_PROTOCOL ? "bytes did not match"
						 : rdmx_strerror(st));
	demo_row(o, info.transport, lat, n, st ? why : "ok, bytes verified");
	demo_close(&d);
	free(lat);
	return st ? 1 : 0;
}

/* ---- options ------------------------------------------------------------ */

static void demo_usage(FILE *f)
{
	fprintf(f,
		"usage: rdmx demo send|write|read [HOST][:PORT] [options]\n"
		"  Without HOST, serve on PORT (default 18515); with HOST, connect.\n"
		"  send   messages, echoed back by the server\n"
		"  write  WRITE-with-immediate; the immediate carries the length\n"
		"  read   READ of [offset, offset + length) of the server's buffer\n"
		"options:\n"
		"  -s, --size N      message size for send and write (default 4096)\n"
		"  -n, --iters N     iterations (default 1000)\n"
		"  -o, --offset N    read: offset into the server's buffer (default 0)\n"
		"  -l, --length N    read: bytes per READ (default: --size)\n"
		"  -c, --config FILE YAML configuration (default: $RDMX_CONFIG)\n"
		"      --once        server: exit after one client\n"
		"      --no-header   client: print the result row only\n"
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
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	bool have_len = false;
	int c;

	*o = (struct demo_opts){ .size = 4096, .iters = 1000, .header = true };
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		demo_usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 1 : -1;
	}
	for (int m = DEMO_SEND; m <= DEMO_READ; m++)
		if (!strcmp(argv[1], demo_names[m]))
			o->mode = (enum demo_mode)m;
	if (!o->mode)
		return cli_fail("demo",
				"unknown mode '%s' (expected send, write "
				"or read; lambda comes later)",
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
		case 'h':
			demo_usage(stdout);
			return -1;
		default:
			return cli_fail("demo", "see rdmx demo --help");
		}
	}
	if (optind < argc)
		o->addr = argv[optind++];
	if (optind < argc)
		return cli_fail("demo", "unexpected argument '%s'",
				argv[optind]);
	if (!cli_addr_ok(o->addr))
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
	int rc = demo_parse(argc, argv, &o);

	if (rc)
		return rc < 0 ? 0 : rc;
	return cli_is_server(o.addr) ? demo_server(&o) : demo_client(&o);
}
