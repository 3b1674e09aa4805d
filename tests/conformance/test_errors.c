/* SPDX-License-Identifier: MIT */
/*
 * Description: the statuses and log lines rdmx.h documents are what the
 * calls do, on every transport: RDMX_ERR_INVALID comes with one line in
 * the log naming the call; a registration must be mapped memory; and the
 * table of what each call returns when provoked agrees with rdmx.h.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* Run @st = @expr with stderr caught; the log in @log (@len bytes). */
#define CAUGHT(st, expr, log, len)                                             \
	do {                                                                   \
		struct log_catch lc_;                                          \
                                                                               \
		log_catch_begin(&lc_);                                         \
		(st) = (expr);                                                 \
		log_catch_end(&lc_, (log), (len));                             \
	} while (0)

/* @expr is RDMX_ERR_INVALID, and the log has one line that names @call. */
#define EXPECT_INVALID(expr, call)                                             \
	do {                                                                   \
		char log_[1024];                                               \
		rdmx_status st_;                                               \
                                                                               \
		CAUGHT(st_, (expr), log_, sizeof(log_));                       \
		if (st_ != RDMX_ERR_INVALID || !strstr(log_, (call)))          \
			fail_msg("%s: %s, log '%s'", #expr,                    \
				 rdmx_strerror(st_), log_);                    \
	} while (0)

/*
 * The status table: what each call returned when provoked here, checked
 * against the call's contract in rdmx.h both ways. Every status returned
 * must be one the contract names, and every status a contract names must
 * be provoked here or have its reason in `elsewhere`.
 */
struct seen {
	const char *call;
	rdmx_status st;
};

static struct seen seen[96];
static int nseen;

static void seen_add(const char *call, rdmx_status st)
{
	assert_true(nseen < (int)(sizeof(seen) / sizeof(seen[0])));
	seen[nseen++] = (struct seen){ call, st };
}

/* @expr, a call of @call, returns @want; the row goes in the table. */
#define SEEN(call, expr, want)                                                 \
	do {                                                                   \
		rdmx_status st_ = (expr);                                      \
                                                                               \
		if (st_ != (want))                                             \
			fail_msg("%s: %s where %s was provoked", #expr,        \
				 rdmx_status_name(st_),                        \
				 rdmx_status_name(want));                      \
		seen_add((call), st_);                                         \
	} while (0)

/* EXPECT_INVALID of @call, and the row in the table. */
#define INVALID_ROW(call, expr)                                                \
	do {                                                                   \
		EXPECT_INVALID((expr), (call));                                \
		seen_add((call), RDMX_ERR_INVALID);                            \
	} while (0)

/* Named in a contract, provoked in another test or not on this host. */
static const struct {
	const char *call;
	rdmx_status st;
	const char *why;
} elsewhere[] = {
	{ "rdmx_ctx_create", RDMX_ERR_NOMEM, "needs the heap exhausted" },
	{ "rdmx_mr_reg", RDMX_ERR_NOMEM,
	  "needs the heap or ulimit -l exhausted" },
	{ "rdmx_mr_dereg", RDMX_ERR_FLUSHED,
	  "completes the requests it ends (regress.10-dereg-posted-region)" },
	{ "rdmx_mem_alloc", RDMX_ERR_NOMEM, "needs memory exhausted" },
	{ "rdmx_accept", RDMX_ERR_NOMEM, "needs the heap exhausted" },
	{ "rdmx_conn_check", RDMX_ERR_FLUSHED,
	  "provoked only where errors close a connection (rxe)" },
	{ "rdmx_post", RDMX_ERR_UNSUPPORTED,
	  "provoked only where a connection lacks RDMX_CONN_ATOMICS (siw)" },
	{ "rdmx_post_recv", RDMX_ERR_LOCAL_LENGTH,
	  "a completion status (test_sendrecv)" },
	{ "rdmx_post_recv", RDMX_ERR_REMOTE_INVALID,
	  "a completion status (test_sendrecv)" },
	{ "rdmx_srq_create", RDMX_ERR_UNSUPPORTED,
	  "provoked only where the device has no srqs (siw)" },
	{ "rdmx_srq_create", RDMX_ERR_NOMEM, "needs the heap exhausted" },
	{ "rdmx_srq_create", RDMX_ERR_NO_TRANSPORT,
	  "what rdmx_connect says to a peer without the srq's transports" },
	{ "rdmx_cq_create", RDMX_ERR_NOMEM, "needs the heap exhausted" },
	{ "rdmx_srq_destroy", RDMX_ERR_FLUSHED,
	  "completes the RECVs still posted (test_srq)" },
	{ "rdmx_srq_post_recv", RDMX_ERR_NOMEM, "needs the heap exhausted" },
};

/*
 * The contract of @call in @hdr (rdmx.h): the comment headed "@call -",
 * else the one that ends right above its prototype. Its text in @out.
 */
static void contract_of(const char *hdr, const char *call, char *out,
			size_t len)
{
	char key[96], *b, *e;
	const char *p;

	snprintf(key, sizeof(key), " %s - ", call);
	p = strstr(hdr, key);
	if (!p) {
		snprintf(key, sizeof(key), "\nrdmx_status %s(", call);
		p = strstr(hdr, key);
		if (!p) {
			snprintf(key, sizeof(key), "\nint %s(", call);
			p = strstr(hdr, key);
		}
		if (!p)
			fail_msg("rdmx.h declares no %s()", call);
		while (p > hdr && !(p[0] == '*' && p[1] == '/'))
			p--; /* the comment's end above the prototype */
		while (p > hdr && !(p[0] == '/' && p[1] == '*'))
			p--;
	}
	b = strstr(p, "*/");
	if (!b)
		fail_msg("%s: unterminated comment in rdmx.h", call);
	snprintf(out, len, "%.*s", (int)(b - p), p);
	for (e = out; (e = strchr(e, '\n'));)
		*e = ' ';
}

/* "RDMX_ERR_CONN_LOST" for RDMX_ERR_CONN_LOST, in @buf. */
static const char *status_macro(rdmx_status st, char *buf, size_t len)
{
	snprintf(buf, len, "RDMX_ERR_%s", rdmx_status_name(st));
	for (char *q = buf; *q; q++)
		*q = (char)toupper((unsigned char)*q);
	return buf;
}

/* Does @text name status @st? */
static bool names_status(const char *text, rdmx_status st)
{
	char want[48];
	const char *p;

	status_macro(st, want, sizeof(want));
	for (p = text; (p = strstr(p, want)); p += strlen(want))
		if (!isalnum((unsigned char)p[strlen(want)]) &&
		    p[strlen(want)] != '_')
			return true;
	return false;
}

/* Did a row provoke @st from @call, or does elsewhere[] say why not? */
static bool provoked(const char *call, rdmx_status st)
{
	for (int i = 0; i < nseen; i++)
		if (!strcmp(seen[i].call, call) && seen[i].st == st)
			return true;
	for (size_t i = 0; i < sizeof(elsewhere) / sizeof(elsewhere[0]); i++)
		if (!strcmp(elsewhere[i].call, call) && elsewhere[i].st == st) {
			print_message("%s %s, not provoked here: %s\n", call,
				      rdmx_status_name(st), elsewhere[i].why);
			return true;
		}
	return false;
}

/* Is row @i the first of its call? */
static bool first_row(int i)
{
	for (int j = 0; j < i; j++)
		if (!strcmp(seen[j].call, seen[i].call))
			return false;
	return true;
}

/* Every status @text, @call's contract, names is provoked; the misses. */
static int contract_covered(const char *call, const char *text)
{
	char name[48];
	int bad = 0;

	/* Every status there is: rdmx_status_name knows them. */
	for (rdmx_status st = RDMX_ERR_AGAIN; st > -64; st--) {
		if (!strcmp(rdmx_status_name(st), "unknown") ||
		    !names_status(text, st) || provoked(call, st))
			continue;
		print_error("%s: rdmx.h names %s, which no row provokes\n",
			    call, status_macro(st, name, sizeof(name)));
		bad++;
	}
	return bad;
}

/* Check the table against rdmx.h, both ways; returns the failures. */
static int table_check(void)
{
	static char hdr[64 * 1024];
	char text[4096], name[48];
	FILE *f = fopen(RDMX_HEADER, "r");
	size_t n;
	int bad = 0;

	assert_non_null(f);
	n = fread(hdr, 1, sizeof(hdr) - 1, f);
	fclose(f);
	assert_true(n > 0 && n < sizeof(hdr) - 1);
	hdr[n] = 0;
	for (int i = 0; i < nseen; i++) {
		contract_of(hdr, seen[i].call, text, sizeof(text));
		if (!names_status(text, seen[i].st)) {
			print_error("%s returned %s; its contract in rdmx.h "
				    "does not say so\n",
				    seen[i].call,
				    status_macro(seen[i].st, name,
						 sizeof(name)));
			bad++;
		}
		if (first_row(i))
			bad += contract_covered(seen[i].call, text);
	}
	return bad;
}

static void test_invalid_arguments_say_why(void **state)
{
	struct pair p;
	struct rdmx_mr *mr = NULL;
	struct rdmx_completion wc;
	struct rdmx_wr wr = { .opcode = RDMX_OP_WRITE };
	struct rdmx_remote rem;
	uint8_t buf[64];
	struct rdmx_cq *cq;

	(void)state;
	pair_open(&p);
	INVALID_ROW("rdmx_mr_reg", rdmx_mr_reg(NULL, buf, 64, 0, &mr));
	INVALID_ROW("rdmx_mr_reg", rdmx_mr_reg(p.c.ctx, NULL, 64, 0, &mr));
	INVALID_ROW("rdmx_mr_reg", rdmx_mr_reg(p.c.ctx, buf, 64, 1u << 9, &mr));
	INVALID_ROW("rdmx_mr_reg", rdmx_mr_reg(p.c.ctx, buf, 64, 0, NULL));
	INVALID_ROW("rdmx_post", rdmx_post(NULL, &wr));
	INVALID_ROW("rdmx_post", rdmx_post(p.cconn, NULL));
	INVALID_ROW("rdmx_post_list", rdmx_post_list(NULL, &wr, 1, NULL));
	INVALID_ROW("rdmx_post_recv", rdmx_post_recv(NULL, NULL, 0, 0));
	INVALID_ROW("rdmx_poll", rdmx_poll(NULL, &wc, 1));
	INVALID_ROW("rdmx_cq_wait", rdmx_cq_wait(NULL, 0));
	INVALID_ROW("rdmx_cq_create", rdmx_cq_create(NULL, &cq));
	INVALID_ROW("rdmx_conn_check", rdmx_conn_check(NULL));
	INVALID_ROW("rdmx_remote_unpack", rdmx_remote_unpack(buf, 3, &rem));
	INVALID_ROW("rdmx_connect", rdmx_connect(p.c.ctx, NULL, NULL, 0, NULL));
	assert_null(mr);
	pair_close(&p);
}

/*
 * A registration is of mapped memory, with one status everywhere: 1 PiB
 * over an 8 KiB buffer was accepted on tcp and shm and refused on verbs
 * as NOMEM; a range with a hole in it likewise.
 */
static void test_mr_reg_needs_mapped_memory(void **state)
{
	struct side s;
	struct rdmx_mr *mr = NULL;
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *m = mmap(NULL, (size_t)pg * 3, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	(void)state;
	assert_true(m != MAP_FAILED);
	side_open(&s);
	EXPECT_INVALID(rdmx_mr_reg(s.ctx, m, 1ull << 50,
				   RDMX_ACCESS_LOCAL_WRITE, &mr),
		       "not all mapped memory");
	munmap(m + pg, (size_t)pg); /* a hole in the middle */
	EXPECT_INVALID(rdmx_mr_reg(s.ctx, m, (size_t)pg * 3,
				   RDMX_ACCESS_LOCAL_WRITE, &mr),
		       "not all mapped memory");
	/* Either side of the hole is fine, unaligned too. */
	assert_int_equal(rdmx_mr_reg(s.ctx, m + 8, (size_t)pg - 8,
				     RDMX_ACCESS_LOCAL_WRITE, &mr),
			 RDMX_OK);
	assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	side_close(&s);
	munmap(m, (size_t)pg);
	munmap(m + 2 * pg, (size_t)pg);
}

static void ignore_key(void *arg, const struct rdmx_config_key *key)
{
	(void)arg, (void)key;
}

/*
 * A srq of 2 RECVs on @s, and a connection on it through @lst: the rows of
 * the srq calls and of a RECV posted to that connection. Where the device
 * has no srqs (siw), rdmx_srq_create's UNSUPPORTED is the row.
 */
static void srq_rows(struct side *s, struct rdmx_listener *lst)
{
	struct rdmx_srq_attr sa = { .mask = RDMX_SRQ_ATTR_MAX_WR,
				    .cq = s->cq,
				    .max_wr = 2 };
	struct acc a = { .s = s, .lst = lst };
	struct rdmx_sge sg, wild;
	struct rdmx_srq *srq = NULL;
	struct rdmx_conn *conn;
	rdmx_status st;
	struct side t;
	struct buf b;

	SEEN("rdmx_srq_create",
	     rdmx_srq_create(s->ctx, &(struct rdmx_srq_attr){ .cq = NULL },
			     &srq),
	     RDMX_ERR_INVALID);
	st = rdmx_srq_create(s->ctx, &sa, &srq);
	if (st == RDMX_ERR_UNSUPPORTED) {
		seen_add("rdmx_srq_create", st);
		return;
	}
	assert_int_equal(st, RDMX_OK);
	buf_alloc(s, &b, 64, RDMX_ACCESS_LOCAL_WRITE);
	sg = wild = sge_of(&b, 0, 64);
	wild.length = 65;
	SEEN("rdmx_srq_post_recv", rdmx_srq_post_recv(srq, &wild, 1, 0),
	     RDMX_ERR_INVALID);
	assert_int_equal(rdmx_srq_post_recv(srq, &sg, 1, 1), RDMX_OK);
	assert_int_equal(rdmx_srq_post_recv(srq, &sg, 1, 2), RDMX_OK);
	SEEN("rdmx_srq_post_recv", rdmx_srq_post_recv(srq, &sg, 1, 3),
	     RDMX_ERR_AGAIN);
	a.attr = (struct rdmx_conn_attr){ .mask = RDMX_CONN_ATTR_SRQ,
					  .cq = s->cq,
					  .srq = srq };
	side_open(&t);
	acc_start(&a);
	conn = side_connect(&t, rdmx_listener_port(lst));
	acc_join(&a);
	assert_int_equal(a.st, RDMX_OK);
	SEEN("rdmx_post_recv", rdmx_post_recv(a.conn, &sg, 1, 4),
	     RDMX_ERR_INVALID);
	SEEN("rdmx_srq_destroy", rdmx_srq_destroy(srq), RDMX_ERR_BUSY);
	rdmx_conn_close(a.conn);
	rdmx_conn_close(conn);
	side_close(&t);
	assert_int_equal(rdmx_srq_destroy(srq), RDMX_OK);
	while (rdmx_poll(s->cq, (struct rdmx_completion[4]){ 0 }, 4) > 0)
		; /* the srq's flushed RECVs */
	buf_free(&b);
}

/* Calls on one context: configuration, memory, cqs, listeners, srqs. */
static void test_statuses_local(void **state)
{
	struct side s;
	struct rdmx_ctx *ctx = NULL;
	struct rdmx_mr *mr = NULL;
	struct rdmx_listener *lst = NULL, *lst2 = NULL;
	struct rdmx_conn *conn = NULL;
	char v[64], host[8], port[8], addr[64];
	uint8_t raw[64];
	void *m = NULL;

	(void)state;
	setenv("RDMX_CONN_MAX_SEND_WR", "many", 1);
	SEEN("rdmx_ctx_create", rdmx_ctx_create(NULL, &ctx), RDMX_ERR_CONFIG);
	unsetenv("RDMX_CONN_MAX_SEND_WR");
	SEEN("rdmx_ctx_create", rdmx_ctx_create(NULL, NULL), RDMX_ERR_INVALID);
	assert_null(ctx);
	SEEN("rdmx_config_table",
	     rdmx_config_table("/nonexistent/rdmx.yaml", ignore_key, NULL),
	     RDMX_ERR_CONFIG);
	SEEN("rdmx_config_table", rdmx_config_table(NULL, NULL, NULL),
	     RDMX_ERR_INVALID);
	SEEN("rdmx_addr_split",
	     rdmx_addr_split("bad:port:x", host, sizeof(host), port,
			     sizeof(port)),
	     RDMX_ERR_INVALID);

	side_open(&s);
	SEEN("rdmx_ctx_destroy", rdmx_ctx_destroy(s.ctx), RDMX_ERR_BUSY);
	SEEN("rdmx_ctx_config",
	     rdmx_ctx_config(s.ctx, "no.such_key", v, sizeof(v)),
	     RDMX_ERR_NOT_FOUND);
	SEEN("rdmx_ctx_config",
	     rdmx_ctx_config(s.ctx, "conn.max_send_wr", v, 2),
	     RDMX_ERR_INVALID);
	SEEN("rdmx_mem_alloc", rdmx_mem_alloc(s.ctx, 0, 0, &m),
	     RDMX_ERR_INVALID);
	assert_int_equal(rdmx_mem_alloc(s.ctx, 4096, 0, &m), RDMX_OK);
	assert_int_equal(rdmx_mr_reg(s.ctx, m, 4096, RDMX_ACCESS_LOCAL_WRITE,
				     &mr),
			 RDMX_OK);
	SEEN("rdmx_mem_free", rdmx_mem_free(s.ctx, m), RDMX_ERR_BUSY);
	assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	SEEN("rdmx_mem_free", rdmx_mem_free(s.ctx, raw), RDMX_ERR_INVALID);
	assert_int_equal(rdmx_mem_free(s.ctx, m), RDMX_OK);
	SEEN("rdmx_cq_wait", rdmx_cq_wait(s.cq, 1), RDMX_ERR_TIMEOUT);

	SEEN("rdmx_listen", rdmx_listen(s.ctx, "bad:port:x", &lst2),
	     RDMX_ERR_INVALID);
	SEEN("rdmx_listen", rdmx_listen(s.ctx, "no-such-host.invalid:0", &lst2),
	     RDMX_ERR_UNREACHABLE);
	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(),
		 side_listen(&s, &lst));
	SEEN("rdmx_listen", rdmx_listen(s.ctx, addr, &lst2), RDMX_ERR_SYSTEM);
	assert_null(lst2);
	SEEN("rdmx_accept",
	     rdmx_accept(lst, &(struct rdmx_conn_attr){ .cq = s.cq }, 1, &conn),
	     RDMX_ERR_TIMEOUT);
	SEEN("rdmx_accept",
	     rdmx_accept(lst, &(struct rdmx_conn_attr){ 0 }, 1, &conn),
	     RDMX_ERR_INVALID);
	assert_null(conn);

	srq_rows(&s, lst);
	rdmx_listener_close(lst);
	side_close(&s);
}

static rdmx_status resolve_nobody(void *arg, const char *name, char *addr,
				  size_t len)
{
	(void)arg, (void)name, (void)addr, (void)len;
	return RDMX_ERR_NOT_FOUND;
}

/* A TCP listener on 127.0.0.1 that is no rdmx server; its address in @addr. */
static int plain_listener(char *addr, size_t len)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t sl = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 4), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
	snprintf(addr, len, "127.0.0.1:%d", ntohs(a.sin_port));
	return fd;
}

/*
 * A child that takes one connection on @lfd, writes @junk bytes of junk
 * (0: nothing), holds it @hold_s seconds and closes it.
 */
static pid_t fake_server(int lfd, size_t junk, unsigned hold_s)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		char bytes[512];
		int fd = accept(lfd, NULL, NULL);

		memset(bytes, 'x', sizeof(bytes));
		if (fd < 0 || (junk && write(fd, bytes, junk) < 0))
			_exit(1);
		sleep(hold_s);
		_exit(0);
	}
	return pid;
}

/* rdmx_connect against each kind of server that makes it fail. */
static void test_statuses_connect(void **state)
{
	struct side s, c;
	struct rdmx_conn *conn = NULL;
	struct rdmx_conn_attr attr;
	char addr[64], kf[64];
	int lfd;
	pid_t pid;
	FILE *f;

	(void)state;
	side_open(&c);
	attr = (struct rdmx_conn_attr){ .cq = c.cq };
	EXPECT_INVALID(rdmx_connect(c.ctx, "127.0.0.1:notaport", &attr, 1000,
				    &conn),
		       "notaport");
	SEEN("rdmx_connect",
	     rdmx_connect(c.ctx, "bad:port:x", &attr, 1000, &conn),
	     RDMX_ERR_INVALID);
	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(),
		 harness_free_port());
	SEEN("rdmx_connect", rdmx_connect(c.ctx, addr, &attr, 1000, &conn),
	     RDMX_ERR_CONN_REFUSED);
	SEEN("rdmx_connect",
	     rdmx_connect(c.ctx, "no-such-host.invalid:1", &attr, 1000, &conn),
	     RDMX_ERR_UNREACHABLE);
	rdmx_ctx_set_resolver(c.ctx, resolve_nobody, NULL);
	SEEN("rdmx_connect", rdmx_connect(c.ctx, "@nobody", &attr, 1000, &conn),
	     RDMX_ERR_NOT_FOUND);

	/* Silent, closing and babbling servers. */
	lfd = plain_listener(addr, sizeof(addr));
	pid = fake_server(lfd, 0, 1);
	SEEN("rdmx_connect", rdmx_connect(c.ctx, addr, &attr, 200, &conn),
	     RDMX_ERR_TIMEOUT);
	reap_ok(pid);
	pid = fake_server(lfd, 0, 0);
	SEEN("rdmx_connect",
	     rdmx_connect(c.ctx, addr, &attr, T_TIMEOUT_MS, &conn),
	     RDMX_ERR_CONN_LOST);
	reap_ok(pid);
	pid = fake_server(lfd, 512, 5);
	SEEN("rdmx_connect",
	     rdmx_connect(c.ctx, addr, &attr, T_TIMEOUT_MS, &conn),
	     RDMX_ERR_PROTOCOL);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(lfd);
	assert_null(conn);
	side_close(&c);

	/* A server with a pre-shared key; a client without. */
	snprintf(kf, sizeof(kf), "/tmp/rdmx-errors-key-%d", getpid());
	f = fopen(kf, "w");
	assert_non_null(f);
	fputs("the server's secret\n", f);
	fclose(f);
	side_open_with(&s, "RDMX_AUTH_KEY_FILE", kf);
	side_open(&c);
	attr = (struct rdmx_conn_attr){ .cq = c.cq };
	{
		struct acc a = { .s = &s };

		snprintf(addr, sizeof(addr), "%s:%d", suite_addr(),
			 side_listen(&s, &a.lst));
		acc_start(&a);
		SEEN("rdmx_connect",
		     rdmx_connect(c.ctx, addr, &attr, T_TIMEOUT_MS, &conn),
		     RDMX_ERR_AUTH);
		acc_stop(&a);
		assert_int_equal(a.st, RDMX_ERR_TIMEOUT);
		rdmx_listener_close(a.lst);
	}
	unlink(kf);
	side_close(&c);
	side_close(&s);

	/* A server that takes tcp only, a client that asks for shm only. */
	side_open_with(&s, "RDMX_TRANSPORT", "auto");
	side_open_with(&c, "RDMX_TRANSPORT", "auto");
	{
		struct acc a = { .s = &s,
				 .attr = { .mask = RDMX_CONN_ATTR_TRANSPORTS,
					   .cq = s.cq,
					   .transports = RDMX_TP_TCP } };

		snprintf(addr, sizeof(addr), "%s:%d", suite_addr(),
			 side_listen(&s, &a.lst));
		attr = (struct rdmx_conn_attr){
			.mask = RDMX_CONN_ATTR_TRANSPORTS,
			.cq = c.cq,
			.transports = RDMX_TP_SHM
		};
		acc_start(&a);
		SEEN("rdmx_connect",
		     rdmx_connect(c.ctx, addr, &attr, T_TIMEOUT_MS, &conn),
		     RDMX_ERR_NO_TRANSPORT);
		acc_stop(&a);
		assert_int_equal(a.st, RDMX_ERR_TIMEOUT);
		rdmx_listener_close(a.lst);
	}
	assert_null(conn);
	side_close(&c);
	side_close(&s);
}

/* Posts on a connection whose send queue holds 4, then after its end. */
static void test_statuses_posts(void **state)
{
	struct pair p;
	struct buf b;
	struct rdmx_sge sg, wild;
	struct rdmx_wr wr = { 0 }, list[2];
	struct buf ro;
	int posted = -1, n;

	(void)state;
	pair_open_with(&p, "RDMX_CONN_MAX_SEND_WR", "4");
	SEEN("rdmx_cq_destroy", rdmx_cq_destroy(p.c.cq), RDMX_ERR_BUSY);
	buf_alloc(&p.c, &b, 64, RDMX_ACCESS_LOCAL_WRITE);
	sg = sge_of(&b, 0, 8);
	wr = (struct rdmx_wr){ .opcode = RDMX_OP_SEND,
			       .sg_list = &sg,
			       .num_sge = 1 };
	list[0] = wr;
	list[1] = wr;
	list[1].opcode = (enum rdmx_opcode)99;
	SEEN("rdmx_post_list", rdmx_post_list(p.cconn, list, 2, &posted),
	     RDMX_ERR_INVALID);
	assert_int_equal(posted, 1);
	SEEN("rdmx_post", rdmx_post(p.cconn, &list[1]), RDMX_ERR_INVALID);
	list[1] = wr;
	/* Local sges: past their registration, into one without
	 * LOCAL_WRITE, more of them than conn.max_sge; nothing posted. */
	wild = sge_of(&b, 0, 64);
	wild.length = 65;
	EXPECT_INVALID(rdmx_post_send(p.cconn, &wild, 1), "post: sge 0 (");
	buf_alloc(&p.c, &ro, 8, 0);
	wild = sge_of(&ro, 0, 8);
	EXPECT_INVALID(rdmx_post_read(p.cconn, &wild, 0, 0, 1),
		       "lacks RDMX_ACCESS_LOCAL_WRITE");
	buf_free(&ro);
	list[1].num_sge = 1 << 20;
	EXPECT_INVALID(rdmx_post(p.cconn, &list[1]), "out of range");
	list[1] = wr;
	/* The peer posts no RECV: the SENDs wait and fill the queue; a list
	 * that reaches its end posts its head and says AGAIN for the rest. */
	for (n = 1; n < 3; n++)
		assert_int_equal(rdmx_post(p.cconn, &wr), RDMX_OK);
	SEEN("rdmx_post_list", rdmx_post_list(p.cconn, list, 2, &posted),
	     RDMX_ERR_AGAIN);
	assert_int_equal(posted, 1);
	SEEN("rdmx_post", rdmx_post(p.cconn, &wr), RDMX_ERR_AGAIN);
	SEEN("rdmx_post_list", rdmx_post_list(p.cconn, list, 2, &posted),
	     RDMX_ERR_AGAIN);
	assert_int_equal(posted, 0);
	if (!conn_has(p.cconn, RDMX_CONN_ATOMICS)) {
		struct rdmx_sge r8 = sge_of(&b, 8, 8);

		SEEN("rdmx_post", rdmx_post_fetch_add(p.cconn, &r8, 0, 0, 1, 9),
		     RDMX_ERR_UNSUPPORTED);
	}
	/* The peer goes: the connection ends, and posts say so. */
	rdmx_conn_close(p.sconn);
	p.sconn = NULL;
	for (double end = now_s() + T_FLUSH_S;
	     rdmx_conn_check(p.cconn) == RDMX_OK && now_s() < end;)
		rdmx_poll(p.c.cq, (struct rdmx_completion[4]){ 0 }, 4);
	SEEN("rdmx_conn_check", rdmx_conn_check(p.cconn), RDMX_ERR_CONN_LOST);
	SEEN("rdmx_post", rdmx_post(p.cconn, &wr), RDMX_ERR_CONN_LOST);
	while (rdmx_poll(p.c.cq, (struct rdmx_completion[4]){ 0 }, 4) > 0)
		;
	buf_free(&b);
	pair_close(&p);
}

/*
 * Where an error completion ends the connection and the refusal comes back
 * as one (rxe), rdmx_conn_check says FLUSHED after it.
 */
static void test_statuses_after_error_completion(void **state)
{
	struct pair p;
	struct buf b;
	struct rdmx_sge sg;

	(void)state;
	pair_open(&p);
	if (!errors_close(p.cconn) ||
	    conn_has(p.cconn, RDMX_CONN_COMPLETES_LOCALLY) || suite_lossy()) {
		pair_close(&p);
		skip(); /* elsewhere[] says why */
	}
	buf_alloc(&p.c, &b, 8, RDMX_ACCESS_LOCAL_WRITE);
	sg = sge_of(&b, 0, 8);
	assert_int_equal(rdmx_post_write(p.cconn, &sg, 0, 1, 1), RDMX_OK);
	expect_wc(p.c.cq, RDMX_ERR_REMOTE_ACCESS, RDMX_OP_WRITE);
	SEEN("rdmx_conn_check", rdmx_conn_check(p.cconn), RDMX_ERR_FLUSHED);
	buf_free(&b);
	pair_close(&p);
}

/*
 * Verbs forced, both sides, toward @host: our device does not own it, so
 * the connection is refused and the log says why (@why).
 */
static void forced_verbs_refused(const char *host, const char *why)
{
	struct side s, c;
	struct acc a = { .s = &s };
	struct rdmx_conn_attr attr;
	struct rdmx_conn *conn = NULL;
	char addr[80], log[4096];
	rdmx_status st;

	side_open(&s);
	side_open(&c);
	snprintf(addr, sizeof(addr), "%s:0", host);
	assert_int_equal(rdmx_listen(s.ctx, addr, &a.lst), RDMX_OK);
	snprintf(addr, sizeof(addr), "%s:%d", host, rdmx_listener_port(a.lst));
	attr = (struct rdmx_conn_attr){ .cq = c.cq };
	acc_start(&a);
	CAUGHT(st, rdmx_connect(c.ctx, addr, &attr, T_TIMEOUT_MS, &conn), log,
	       sizeof(log));
	acc_stop(&a);
	assert_int_equal(a.st, RDMX_ERR_TIMEOUT);
	if (st != RDMX_ERR_NO_TRANSPORT || !strstr(log, why) ||
	    !strstr(log, host))
		fail_msg("verbs toward %s: %s, log '%s'", host,
			 rdmx_status_name(st), log);
	assert_null(conn);
	rdmx_listener_close(a.lst);
	side_close(&c);
	side_close(&s);
}

/*
 * With verbs forced, an address our device does not own is refused with
 * the reason: the device that owns it, or that none does. In the guest,
 * where RDMX_RXE_ADDR and RDMX_SIW_ADDR are rxe0's and siw0's addresses.
 */
static void test_connect_forced_verbs_says_why(void **state)
{
	const char *rxe = getenv("RDMX_RXE_ADDR"),
		   *siw = getenv("RDMX_SIW_ADDR");
	const char *other = rxe && strcmp(suite_addr(), rxe) ? rxe : siw;

	(void)state;
	if (strcmp(suite_transport(), "verbs") || !rxe)
		skip(); /* verbs is forced only in the guest's suite */
	forced_verbs_refused("127.0.0.1", "belongs to no RDMA device");
	if (other && strcmp(other, suite_addr()))
		forced_verbs_refused(other, "RDMX_VERBS_DEVICE=");
}

/* The table of what the calls returned against their contracts. */
static void test_statuses_match_header(void **state)
{
	(void)state;
	assert_true(nseen > 40);
	assert_int_equal(table_check(), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_invalid_arguments_say_why),
		cmocka_unit_test(test_mr_reg_needs_mapped_memory),
		cmocka_unit_test(test_statuses_local),
		cmocka_unit_test(test_statuses_connect),
		cmocka_unit_test(test_statuses_posts),
		cmocka_unit_test(test_statuses_after_error_completion),
		cmocka_unit_test(test_connect_forced_verbs_says_why),
		cmocka_unit_test(test_statuses_match_header),
	};

	return cmocka_run_group_tests_name(suite_transport(), tests, NULL,
					   NULL);
}
