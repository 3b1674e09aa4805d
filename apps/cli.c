/* SPDX-License-Identifier: MIT */
#include <getopt.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

volatile sig_atomic_t cli_stop;

static void cli_on_signal(int sig)
{
	(void)sig;
	cli_stop = 1;
}

void cli_catch_signals(void)
{
	struct sigaction sa = { .sa_handler = cli_on_signal };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

int cli_fail(const char *cmd, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "rdmx %s: %s\n", cmd, msg);
	return 1;
}

bool cli_size(const char *cmd, const char *opt, const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	if (!s || !*s || *s == '-')
		goto bad;
	v = strtoull(s, &end, 10);
	if (end == s)
		goto bad;
	if (!strcasecmp(end, "k") || !strcasecmp(end, "kb"))
		mult = 1ull << 10;
	else if (!strcasecmp(end, "m") || !strcasecmp(end, "mb"))
		mult = 1ull << 20;
	else if (!strcasecmp(end, "g") || !strcasecmp(end, "gb"))
		mult = 1ull << 30;
	else if (*end)
		goto bad;
	if (v > UINT64_MAX / mult)
		goto bad;
	*out = v * mult;
	return true;
bad:
	cli_fail(cmd, "%s expects a size like 4096, 64k or 1m, not '%s'", opt,
		 s ? s : "");
	return false;
}

bool cli_addr_ok(const char *addr)
{
	char host[256], port[16];

	/* "@NAME": the registry's to check, when it is asked. */
	if (addr && addr[0] == '@' && addr[1])
		return true;
	/* The library's own parser; it logs the one line that explains. */
	return !addr ||
	       !rdmx_addr_split(addr, host, sizeof(host), port, sizeof(port));
}

int cli_take_addr(const char *cmd, int argc, char **argv, const char **addr_p)
{
	if (optind < argc)
		*addr_p = argv[optind++];
	if (optind < argc)
		return cli_fail(cmd, "unexpected argument '%s'", argv[optind]);
	return cli_addr_ok(*addr_p) ? 0 : 1;
}

bool cli_transport_option(const char *cmd, const char *t)
{
	if (strcmp(t, "auto") && strcmp(t, "tcp") && strcmp(t, "shm") &&
	    strcmp(t, "verbs")) {
		cli_fail(cmd,
			 "--transport is auto, verbs, shm or tcp, not '%s'", t);
		return false;
	}
	setenv("RDMX_TRANSPORT", t, 1);
	return true;
}

bool cli_is_server(const char *arg)
{
	if (!arg || !*arg || *arg == ':')
		return true;
	return strspn(arg, "0123456789") == strlen(arg);
}

static int cli_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double cli_quantile(double *v, size_t n, double q)
{
	size_t i;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cli_cmp_double);
	i = (size_t)(q * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

enum cli_wait_how cli_wait_how = CLI_WAIT_SPIN;

rdmx_status cli_wait(struct rdmx_cq *cq, struct rdmx_completion *wc,
		     int timeout_ms)
{
	double deadline = 0, left;
	struct pollfd pfd = { .events = POLLIN };
	int n;

	/* Spin by default, as perftest does: waking a sleeping thread costs
	 * more than the operation on these machines. */
	for (unsigned empty = 1;; empty++) {
		n = rdmx_poll(cq, wc, 1);
		if (n < 0)
			return (rdmx_status)n;
		if (n == 1)
			return RDMX_OK;
		if (cli_stop)
			return RDMX_ERR_TIMEOUT;
		/* A spinner reads the clock one empty poll in 256: it costs
		 * ~17 ns here, as much as the poll, and a slower loop sees
		 * its completion later. */
		if (cli_wait_how == CLI_WAIT_SPIN && empty % 256)
			continue;
		if (!deadline)
			deadline = cli_now_us() + timeout_ms * 1e3;
		left = deadline - cli_now_us();
		if (left < 0)
			return RDMX_ERR_TIMEOUT;
		if (cli_wait_how == CLI_WAIT_SLEEP) {
			rdmx_cq_wait(cq, (int)(left / 1e3) + 1);
		} else if (cli_wait_how == CLI_WAIT_FD) {
			pfd.fd = rdmx_cq_fd(cq);
			poll(&pfd, 1, (int)(left / 1e3) + 1);
		}
	}
}

rdmx_status cli_wait_ok(struct rdmx_cq *cq, int n, int timeout_ms)
{
	struct rdmx_completion wc;
	rdmx_status st = RDMX_OK;

	while (!st && n-- > 0) {
		st = cli_wait(cq, &wc, timeout_ms);
		if (!st)
			st = wc.status;
	}
	return st;
}

/* ---- sessions ------------------------------------------------------------ */

rdmx_status cli_session_open(struct cli_session *s, const char *config)
{
	rdmx_status st;

	memset(s, 0, sizeof(*s));
	st = cli_ctx_create(config, &s->ctx);
	if (!st)
		st = cli_metrics_start(s->ctx, &s->metrics);
	if (!st)
		st = rdmx_cq_create(s->ctx, &s->cq);
	if (!st)
		st = rdmx_mr_reg(s->ctx, s->out, CLI_MSG, 0, &s->out_mr);
	if (!st)
		st = rdmx_mr_reg(s->ctx, s->in, CLI_MSG,
				 RDMX_ACCESS_LOCAL_WRITE, &s->in_mr);
	if (!st) {
		char on[8];

		/* The context read it already: this cannot fail now. */
		if (!rdmx_ctx_config(s->ctx, "conn.use_srq", on, sizeof(on)))
			s->use_srq = !strcmp(on, "on");
	}
	return st;
}

void cli_session_close(struct cli_session *s)
{
	rdmx_conn_close(s->conn);
	s->conn = NULL;
	cli_metrics_stop(s->metrics); /* it reads the context */
	s->metrics = NULL;
	rdmx_mr_dereg(s->in_mr);
	rdmx_mr_dereg(s->out_mr);
	rdmx_cq_destroy(s->cq);
	rdmx_ctx_destroy(s->ctx);
}

int cli_connect_timeout_ms(struct rdmx_ctx *ctx)
{
	char v[32];
	long ms;

	/* "5000ms" */
	if (rdmx_ctx_config(ctx, "conn.handshake_timeout", v, sizeof(v)) ||
	    (ms = strtol(v, NULL, 10)) <= 0 || ms > INT_MAX / 2)
		return 10000;
	return (int)(2 * ms);
}

rdmx_status cli_connect(struct cli_session *s, const char *addr)
{
	struct rdmx_conn_attr attr = { .cq = s->cq };

	return rdmx_connect(s->ctx, addr, &attr, cli_connect_timeout_ms(s->ctx),
			    &s->conn);
}

int cli_client_open(const char *cmd, struct cli_session *s, const char *config,
		    const char *addr)
{
	rdmx_status st = cli_session_open(s, config);

	if (!st)
		st = cli_connect(s, addr);
	if (st) {
		cli_session_close(s);
		return cli_fail(cmd, "cannot connect to %s: %s", addr,
				rdmx_strerror(st));
	}
	cli_catch_signals();
	return 0;
}

bool cli_buf_mapped;

rdmx_status cli_buf_alloc(struct cli_session *s, struct cli_buf *b, size_t len,
			  unsigned access)
{
	void *p = NULL;
	rdmx_status st;

	b->len = len < 8 ? 8 : len;
	b->mr = NULL;
	b->mem = NULL;
	if (cli_buf_mapped) {
		st = rdmx_mem_alloc(s->ctx, b->len, 0, &p);
		if (st)
			return st;
		b->mem = s->ctx;
	} else {
		p = aligned_alloc(64, (b->len + 63) & ~(size_t)63);
		if (!p)
			return RDMX_ERR_NOMEM;
		memset(p, 0, b->len);
	}
	b->p = p;
	return rdmx_mr_reg(s->ctx, b->p, b->len, access, &b->mr);
}

void cli_buf_free(struct cli_buf *b)
{
	rdmx_mr_dereg(b->mr);
	if (b->mem)
		rdmx_mem_free(b->mem, b->p);
	else
		free(b->p);
	memset(b, 0, sizeof(*b));
}

rdmx_status cli_post_recv(struct cli_session *s, const struct rdmx_sge *sg,
			  int num_sge, uint64_t wr_id)
{
	if (s->srq)
		return rdmx_srq_post_recv(s->srq, sg, num_sge, wr_id);
	return rdmx_post_recv(s->conn, sg, num_sge, wr_id);
}

rdmx_status cli_recv_ctl(struct cli_session *s)
{
	struct rdmx_sge sg = { s->in, CLI_MSG, s->in_mr };

	return cli_post_recv(s, &sg, 1, 0);
}

rdmx_status cli_send_ctl(struct cli_session *s, uint32_t len)
{
	struct rdmx_sge sg = { s->out, len, s->out_mr };
	struct rdmx_completion wc;
	rdmx_status st;

	st = rdmx_post_send(s->conn, &sg, 1);
	return st ? st : cli_expect(s, RDMX_OP_SEND, &wc);
}

/*
 * cli_wait for the session's connection. With a srq its end completes
 * nothing (the RECVs stay in the srq), so look at it while waiting.
 */
static rdmx_status cli_session_wait(struct cli_session *s,
				    struct rdmx_completion *wc)
{
	rdmx_status st = RDMX_ERR_TIMEOUT;

	if (!s->srq)
		return cli_wait(s->cq, wc, CLI_TIMEOUT_MS);
	for (int waited = 0; waited < CLI_TIMEOUT_MS && !cli_stop;
	     waited += 100) {
		st = cli_wait(s->cq, wc, 100);
		if (st != RDMX_ERR_TIMEOUT)
			return st;
		st = rdmx_conn_check(s->conn);
		if (st)
			return st;
		st = RDMX_ERR_TIMEOUT;
	}
	return st;
}

rdmx_status cli_next(struct cli_session *s, struct rdmx_completion *wc)
{
	if (s->has_early) {
		*wc = s->early;
		s->has_early = false;
		return RDMX_OK;
	}
	return cli_session_wait(s, wc);
}

rdmx_status cli_expect(struct cli_session *s, enum rdmx_opcode op,
		       struct rdmx_completion *wc)
{
	if (s->has_early && s->early.opcode == op) {
		*wc = s->early;
		s->has_early = false;
		return RDMX_OK;
	}
	for (;;) {
		rdmx_status st = cli_session_wait(s, wc);

		if (st)
			return st;
		if (wc->status)
			return wc->status;
		if (wc->opcode == op)
			return RDMX_OK;
		if (s->has_early)
			return RDMX_ERR_PROTOCOL;
		s->early = *wc;
		s->has_early = true;
	}
}

/*
 * With conn.use_srq, a srq for the next client. It lives for one session:
 * RECVs a session leaves in it point into that session's buffers.
 */
static rdmx_status cli_srq_open(struct cli_session *s)
{
	struct rdmx_srq_attr sa = { .cq = s->cq };

	if (!s->use_srq || s->srq)
		return RDMX_OK;
	return rdmx_srq_create(s->ctx, &sa, &s->srq);
}

/*
 * Drop what the cq holds once a session's connection (and its shared
 * receive queue) are gone: the flushes of its work, which reach the cq
 * before rdmx_conn_close returns. Kept, the next client's session took
 * them for its own and failed, and so did every one after it.
 */
static void cli_cq_drain(struct cli_session *s)
{
	struct rdmx_completion wc[16];

	while (rdmx_poll(s->cq, wc, 16) > 0)
		;
}

/* After the session's connection closed: its RECVs flush, then go. */
static void cli_srq_close(struct cli_session *s)
{
	if (!s->srq)
		return;
	rdmx_srq_destroy(s->srq);
	s->srq = NULL;
}

int cli_serve(const char *cmd, struct cli_session *s, const char *addr,
	      bool once, cli_serve_fn fn, void *arg)
{
	struct rdmx_conn_attr attr = { .cq = s->cq };
	struct rdmx_listener *lst;
	struct cli_counts *n = &cli_counts;
	rdmx_status st;

	addr = addr ? addr : ":18515";
	st = rdmx_listen(s->ctx, addr, &lst);
	if (st)
		return cli_fail(cmd, "cannot serve on %s: %s", addr,
				rdmx_strerror(st));
	/* Before the line that says we serve (as rdmx kv serve). */
	cli_catch_signals();
	printf("rdmx %s: server listening on port %d\n", cmd,
	       rdmx_listener_port(lst));
	fflush(stdout);
	while (!cli_stop) {
		st = cli_srq_open(s);
		if (st) {
			rdmx_listener_close(lst);
			return cli_fail(cmd,
					"cannot make a shared receive "
					"queue (conn.use_srq): %s",
					rdmx_strerror(st));
		}
		attr.mask = s->srq ? RDMX_CONN_ATTR_SRQ : 0;
		attr.srq = s->srq;
		st = rdmx_accept(lst, &attr, 200, &s->conn);
		if (st == RDMX_ERR_TIMEOUT)
			continue;
		if (st == RDMX_ERR_INVALID)
			break;
		if (st) { /* out of memory for one peer: not the server's end */
			fprintf(stderr, "rdmx %s: accept: %s; going on\n", cmd,
				rdmx_strerror(st));
			continue;
		}
		if (s->srq)
			printf("rdmx %s: client's RECVs come from a shared "
			       "receive queue\n",
			       cmd);
		s->has_early = false;
		st = fn(s, arg);
		if (!st) {
			__atomic_add_fetch(&n->ok, 1, __ATOMIC_RELAXED);
		} else if (cli_stop) { /* cut short by SIGINT/SIGTERM */
			__atomic_add_fetch(&n->stopped, 1, __ATOMIC_RELAXED);
		} else {
			__atomic_add_fetch(&n->failed, 1, __ATOMIC_RELAXED);
			if (st != RDMX_ERR_INVALID)
				fprintf(stderr,
					"rdmx %s: client session failed: %s\n",
					cmd, rdmx_strerror(st));
		}
		/* Outstanding work flushes; the client sees the end. */
		rdmx_conn_close(s->conn);
		s->conn = NULL;
		cli_srq_close(s);
		cli_cq_drain(s);
		fflush(stdout);
		if (once)
			break;
	}
	cli_srq_close(s);
	rdmx_listener_close(lst);
	printf("rdmx %s: server done: %u sessions ok, %u failed, %u stopped by "
	       "a signal\n",
	       cmd, n->ok, n->failed, n->stopped);
	return n->failed ? 1 : 0;
}
