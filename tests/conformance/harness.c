/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/*
 * RDMX_TEST_FILTER=PATTERN runs only the cases whose names match it
 * (cmocka's * and ? wildcards): one case of a long file, in the guest
 * say, where the variable is passed in as every RDMX_* one is.
 */
__attribute__((constructor)) static void harness_filter(void)
{
	const char *f = getenv("RDMX_TEST_FILTER");

	if (f && *f)
		cmocka_set_test_filter(f);
}

const char *suite_transport(void)
{
	const char *t = getenv("RDMX_TRANSPORT");

	return t && *t ? t : "tcp";
}

void side_open(struct side *side)
{
	assert_int_equal(rdmx_ctx_create(NULL, &side->ctx), RDMX_OK);
	assert_int_equal(rdmx_cq_create(side->ctx, &side->cq), RDMX_OK);
}

/* Set @var to @value; returns what it was, to give env_restore(). */
static char *env_set(const char *var, const char *value)
{
	const char *was = getenv(var);
	char *saved = was ? strdup(was) : NULL;

	assert_true(!was || saved);
	setenv(var, value, 1);
	return saved;
}

static void env_restore(const char *var, char *saved)
{
	if (saved)
		setenv(var, saved, 1);
	else
		unsetenv(var);
	free(saved);
}

void side_open_with(struct side *side, const char *var, const char *value)
{
	char *saved;

	if (!var) {
		side_open(side);
		return;
	}
	saved = env_set(var, value);

	side_open(side);
	env_restore(var, saved);
}

void side_close(struct side *side)
{
	assert_int_equal(rdmx_cq_destroy(side->cq), RDMX_OK);
	assert_int_equal(rdmx_ctx_destroy(side->ctx), RDMX_OK);
}

double time_scale(void)
{
	const char *s = getenv("RDMX_TEST_TIME_SCALE");
	double v = s ? atof(s) : 1.0;

	return v >= 1.0 ? v : 1.0;
}

int transport_index(const struct rdmx_conn *conn)
{
	struct rdmx_conn_info info;

	rdmx_conn_info(conn, &info);
	for (int t = 0; t < RDMX_STATS_TRANSPORTS; t++)
		if (!strcmp(info.transport, rdmx_transport_name(t)))
			return t;
	fail_msg("unknown transport %s", info.transport);
	return -1;
}

bool conn_has(const struct rdmx_conn *conn, unsigned flags)
{
	struct rdmx_conn_info info;

	rdmx_conn_info(conn, &info);
	return (info.flags & flags) == flags;
}

bool errors_close(const struct rdmx_conn *conn)
{
	return conn_has(conn, RDMX_CONN_ERRORS_CLOSE);
}

bool suite_lossy(void)
{
	const char *l = getenv("RDMX_TEST_LOSSY");

	return l && *l && strcmp(l, "0");
}

/* @got is what a lossy link made of the refusal @want: the NAK was lost,
 * and the peer's QP, in error since it refused, answers no retry. */
static bool refusal_lost(rdmx_status want, rdmx_status got)
{
	if (got != RDMX_ERR_CONN_LOST || !suite_lossy() ||
	    strcmp(suite_transport(), "verbs") != 0 ||
	    (want != RDMX_ERR_REMOTE_ACCESS && want != RDMX_ERR_REMOTE_INVALID))
		return false;
	print_message("note: the refusal was lost with the link's packets: "
		      "the connection ended instead\n");
	return true;
}

void assert_refused(const struct rdmx_conn *conn, rdmx_status st)
{
	if (st == RDMX_ERR_CONN_LOST &&
	    conn_has(conn, RDMX_CONN_COMPLETES_LOCALLY))
		return;
	if (refusal_lost(RDMX_ERR_REMOTE_ACCESS, st))
		return;
	assert_int_equal(st, RDMX_ERR_REMOTE_ACCESS);
}

bool write_refusal_reported(const struct rdmx_conn *conn)
{
	if (!conn_has(conn, RDMX_CONN_COMPLETES_LOCALLY))
		return true;
	print_message("%s: a WRITE completes once sent; its refusal is not "
		      "observable on it\n",
		      suite_transport());
	return false;
}

const char *suite_addr(void)
{
	const char *a = getenv("RDMX_TEST_ADDR");

	return a && *a ? a : "127.0.0.1";
}

int side_listen(struct side *side, struct rdmx_listener **lst_p)
{
	char addr[64];

	snprintf(addr, sizeof(addr), "%s:0", suite_addr());
	assert_int_equal(rdmx_listen(side->ctx, addr, lst_p), RDMX_OK);
	return rdmx_listener_port(*lst_p);
}

struct rdmx_conn *side_connect(struct side *side, int port)
{
	struct rdmx_conn_attr attr = { .cq = side->cq };
	struct rdmx_conn *conn;
	char addr[32];

	rdmx_status st;

	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(), port);
	st = rdmx_connect(side->ctx, addr, &attr, T_TIMEOUT_MS, &conn);
	if (st) /* a child process's cmocka would fail without a word */
		fprintf(stderr, "side_connect %s: %s\n", addr,
			rdmx_strerror(st));
	assert_int_equal(st, RDMX_OK);
	return conn;
}

static void *acc_main(void *arg)
{
	struct acc *a = arg;
	struct rdmx_conn_attr attr =
		a->attr.cq ? a->attr
			   : (struct rdmx_conn_attr){ .cq = a->s->cq };
	double end = now_s() + (a->timeout ? a->timeout : T_TIMEOUT_MS) / 1e3;

	/* In 0.1 s slices, to see acc_stop; a slice's end loses no peer (the
	 * listener keeps its handshakes until the next accept). */
	do
		a->st = rdmx_accept(a->lst, &attr, 100, &a->conn);
	while (a->st == RDMX_ERR_TIMEOUT && now_s() < end &&
	       !__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE));
	return NULL;
}

void acc_start(struct acc *a)
{
	a->stop = 0;
	assert_int_equal(pthread_create(&a->thread, NULL, acc_main, a), 0);
}

void acc_join(struct acc *a)
{
	pthread_join(a->thread, NULL);
}

void acc_stop(struct acc *a)
{
	__atomic_store_n(&a->stop, 1, __ATOMIC_RELEASE);
	pthread_join(a->thread, NULL);
}

void side_pair_connect(struct side *s, struct rdmx_listener *lst,
		       struct side *c, struct rdmx_conn **sconn_p,
		       struct rdmx_conn **cconn_p)
{
	struct acc a = { .s = s, .lst = lst };

	acc_start(&a);
	*cconn_p = side_connect(c, rdmx_listener_port(lst));
	acc_join(&a);
	assert_int_equal(a.st, RDMX_OK);
	*sconn_p = a.conn;
}

static void *pair_accept(void *arg)
{
	struct pair *p = arg;
	struct rdmx_conn_attr attr = { .cq = p->s.cq };

	if (rdmx_accept(p->lst, &attr, T_TIMEOUT_MS, &p->sconn))
		p->sconn = NULL;
	return NULL;
}

/*
 * The client side of a pair: across a link when RDMX_TEST_PEER_ADDR names
 * this host's other end of it (its device in RDMX_TEST_PEER_DEVICE), so
 * the pair's traffic crosses whatever the link does (tests/vm: netem).
 */
static void client_open(struct side *side)
{
	const char *addr = getenv("RDMX_TEST_PEER_ADDR");
	const char *dev = getenv("RDMX_TEST_PEER_DEVICE");
	char *keep = getenv("RDMX_VERBS_DEVICE");

	if (!addr || !*addr) {
		side_open(side);
		return;
	}
	keep = keep ? strdup(keep) : NULL;
	setenv("RDMX_CONN_SOURCE_ADDR", addr, 1);
	if (dev && *dev)
		setenv("RDMX_VERBS_DEVICE", dev, 1);
	side_open(side);
	unsetenv("RDMX_CONN_SOURCE_ADDR");
	if (keep)
		setenv("RDMX_VERBS_DEVICE", keep, 1);
	else
		unsetenv("RDMX_VERBS_DEVICE");
	free(keep);
}

void pair_open(struct pair *p)
{
	const char *peer = getenv("RDMX_TEST_PEER_ADDR");
	struct rdmx_conn_info info;
	pthread_t t;
	int port;

	memset(p, 0, sizeof(*p));
	side_open(&p->s);
	client_open(&p->c);
	port = side_listen(&p->s, &p->lst);
	assert_int_equal(pthread_create(&t, NULL, pair_accept, p), 0);
	p->cconn = side_connect(&p->c, port);
	pthread_join(t, NULL);
	assert_non_null(p->sconn);
	rdmx_conn_info(p->cconn, &info);
	assert_string_equal(info.transport, suite_transport());
	if (peer && *peer) { /* the server sees the client at the far end */
		rdmx_conn_info(p->sconn, &info);
		assert_memory_equal(info.peer_addr, peer, strlen(peer));
		assert_int_equal(info.peer_addr[strlen(peer)], ':');
	}
}

void pair_open_with(struct pair *p, const char *var, const char *value)
{
	char *saved = env_set(var, value);

	pair_open(p);
	env_restore(var, saved);
}

void pair_close(struct pair *p)
{
	rdmx_conn_close(p->cconn);
	rdmx_conn_close(p->sconn);
	rdmx_listener_close(p->lst);
	side_close(&p->c);
	side_close(&p->s);
}

bool suite_mem_mapped(void)
{
	const char *m = getenv("RDMX_TEST_MEM");

	return m && !strcmp(m, "mapped");
}

void buf_alloc(struct side *side, struct buf *b, size_t len, unsigned access)
{
	buf_alloc_from(side, b, len, access, suite_mem_mapped());
}

void buf_alloc_from(struct side *side, struct buf *b, size_t len,
		    unsigned access, bool mapped)
{
	void *p = NULL;

	b->len = len;
	b->mem = NULL;
	if (mapped) {
		assert_int_equal(rdmx_mem_alloc(side->ctx, len ? len : 1, 0,
						&p),
				 RDMX_OK);
		b->mem = side->ctx;
	} else {
		p = malloc(len ? len : 1);
		assert_non_null(p);
	}
	b->p = p;
	memset(b->p, 0, len);
	assert_int_equal(rdmx_mr_reg(side->ctx, b->p, len, access, &b->mr),
			 RDMX_OK);
}

void buf_free(struct buf *b)
{
	assert_int_equal(rdmx_mr_dereg(b->mr), RDMX_OK);
	if (b->mem)
		assert_int_equal(rdmx_mem_free(b->mem, b->p), RDMX_OK);
	else
		free(b->p);
}

static uint8_t pattern_at(uint8_t seed, size_t i)
{
	return (uint8_t)(seed + i * 7 + (i >> 8));
}

void buf_fill(struct buf *b, uint8_t seed)
{
	for (size_t i = 0; i < b->len; i++)
		b->p[i] = pattern_at(seed, i);
}

void assert_pattern(const uint8_t *p, size_t len, uint8_t seed, size_t off)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != pattern_at(seed, off + i))
			fail_msg("byte %zu is 0x%02x, expected 0x%02x", i, p[i],
				 pattern_at(seed, off + i));
}

struct rdmx_sge sge_of(struct buf *b, size_t off, size_t len)
{
	return (struct rdmx_sge){ .addr = b->p + off,
				  .length = (uint32_t)len,
				  .mr = b->mr };
}

double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct rdmx_completion wait_wc(struct rdmx_cq *cq)
{
	struct rdmx_completion wc;
	int n;

	for (;;) {
		n = rdmx_poll(cq, &wc, 1);
		assert_true(n >= 0);
		if (n == 1)
			return wc;
		if (rdmx_cq_wait(cq, T_TIMEOUT_MS) == RDMX_ERR_TIMEOUT)
			fail_msg("no completion within %d ms", T_TIMEOUT_MS);
	}
}

struct rdmx_completion expect_wc(struct rdmx_cq *cq, rdmx_status st,
				 enum rdmx_opcode op)
{
	struct rdmx_completion wc = wait_wc(cq);

	if (wc.status != st && !refusal_lost(st, wc.status))
		fail_msg("completion of wr_id %llu: status %d (%s), expected "
			 "%d (%s)",
			 (unsigned long long)wc.wr_id, wc.status,
			 rdmx_strerror(wc.status), st, rdmx_strerror(st));
	assert_int_equal(wc.opcode, op);
	return wc;
}

void spin_wc(struct rdmx_cq *cq, struct rdmx_cq *other, enum rdmx_opcode op,
	     bool other_idle)
{
	struct rdmx_completion wc;
	double end = now_s() + T_TIMEOUT_MS / 1e3;

	while (rdmx_poll(cq, &wc, 1) != 1) {
		assert_true(now_s() < end);
		assert_int_equal(rdmx_poll(other, &wc, other_idle ? 1 : 0), 0);
	}
	assert_int_equal(wc.status, RDMX_OK);
	assert_int_equal(wc.opcode, op);
}

struct rdmx_remote share_remote(struct pair *p, struct buf *b)
{
	struct buf sb, rb;
	struct rdmx_sge s, r;
	struct rdmx_remote rem, got;

	buf_alloc(&p->s, &sb, RDMX_REMOTE_PACKED_LEN, 0);
	buf_alloc(&p->c, &rb, RDMX_REMOTE_PACKED_LEN, RDMX_ACCESS_LOCAL_WRITE);
	rdmx_mr_remote(b->mr, &rem);
	rdmx_remote_pack(&rem, sb.p);
	r = sge_of(&rb, 0, rb.len);
	s = sge_of(&sb, 0, sb.len);
	assert_int_equal(rdmx_post_recv(p->cconn, &r, 1, 1), RDMX_OK);
	assert_int_equal(rdmx_post_send(p->sconn, &s, 2), RDMX_OK);
	expect_wc(p->c.cq, RDMX_OK, RDMX_OP_RECV);
	expect_wc(p->s.cq, RDMX_OK, RDMX_OP_SEND);
	assert_int_equal(rdmx_remote_unpack(rb.p, rb.len, &got), RDMX_OK);
	assert_int_equal(got.addr, rem.addr);
	assert_int_equal(got.length, rem.length);
	assert_int_equal(got.rkey, rem.rkey);
	buf_free(&sb);
	buf_free(&rb);
	return got;
}

void harness_children(int argc, char **argv, const struct child *table)
{
	if (argc != 5 || strcmp(argv[1], "--rdmx-child"))
		return;
	for (; table && table->name; table++)
		if (!strcmp(table->name, argv[2]))
			exit(table->fn(atoi(argv[3]), atoi(argv[4])));
	fprintf(stderr, "no child named %s\n", argv[2]);
	exit(126);
}

/*
 * The child dies with the test process. A test that failed, or that ctest
 * killed at its timeout (SIGKILL: no handler runs), left its children
 * running, still holding ports and CPU for the tests after it. The
 * signal comes when the forking thread ends: tests fork from their main
 * thread. A parent that exited before the prctl is seen after it, and the
 * child then dies as the signal would have killed it: the same end in
 * either order (unit.harness, under load, saw exit 127 in one run of 60).
 */
pid_t harness_fork(void)
{
	pid_t pid, parent = getpid();

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0 &&
	    (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)) {
		kill(getpid(), SIGKILL);
		_exit(127);
	}
	return pid;
}

pid_t spawn(const char *name, int port, int flag)
{
	char p[16], f[16];
	pid_t pid;

	snprintf(p, sizeof(p), "%d", port);
	snprintf(f, sizeof(f), "%d", flag);
	pid = harness_fork();
	if (pid == 0) {
		execl("/proc/self/exe", "child", "--rdmx-child", name, p, f,
		      (char *)NULL);
		_exit(127);
	}
	return pid;
}

pid_t spawn_fork(int (*fn)(void *), void *arg)
{
	pid_t pid = harness_fork();

	if (pid == 0)
		_exit(fn(arg));
	return pid;
}

void reap_ok(pid_t pid)
{
	int status;

	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		fail_msg("child %d ended with status 0x%x", pid, status);
}

void log_catch_begin(struct log_catch *lc)
{
	lc->f = tmpfile();
	assert_non_null(lc->f);
	fflush(stderr);
	lc->saved = dup(2);
	assert_true(lc->saved >= 0);
	dup2(fileno(lc->f), 2);
}

void log_catch_end(struct log_catch *lc, char *log, size_t size)
{
	size_t n;

	fflush(stderr);
	dup2(lc->saved, 2);
	close(lc->saved);
	rewind(lc->f);
	n = fread(log, 1, size - 1, lc->f);
	log[n] = '\0';
	fclose(lc->f);
	fputs(log, stderr);
}

int log_count(const char *log, const char *what)
{
	int n = 0;

	for (const char *p = log; (p = strstr(p, what)); p += strlen(what))
		n++;
	return n;
}

int harness_free_port(void)
{
	/* The kernel may pick a port twice (etcd's rig asks for six). */
	static _Atomic int given[1024];
	static _Atomic unsigned n_given;
	struct sockaddr_in a = { .sin_family = AF_INET };
	int port;

	for (int tries = 0;; tries++) {
		socklen_t l = sizeof(a);
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		bool seen = false;
		unsigned n = atomic_load(&n_given);

		assert_true(fd >= 0 && tries < 100);
		a.sin_port = 0;
		inet_pton(AF_INET, suite_addr(), &a.sin_addr);
		assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
		assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &l), 0);
		port = ntohs(a.sin_port);
		close(fd);
		for (unsigned i = 0; i < n && i < 1024; i++)
			seen |= atomic_load(&given[i]) == port;
		if (!seen)
			break;
	}
	atomic_store(&given[atomic_fetch_add(&n_given, 1) % 1024], port);
	return port;
}

int harness_maps(const char *name, long *size, long *rss, int max)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	bool named = false;
	int n = 0;
	long kb;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		if (strchr(line, '-') && strchr(line, ' ') &&
		    strchr(line, '-') < strchr(line, ' ')) {
			/* A mapping's first line: its range, then its name. */
			named = strstr(line, name) != NULL;
		} else if (named && n < max &&
			   sscanf(line, "Size: %ld kB", &kb) == 1) {
			size[n] = kb;
		} else if (named && n < max &&
			   sscanf(line, "Rss: %ld kB", &kb) == 1) {
			rss[n++] = kb;
		}
	}
	fclose(f);
	return n;
}

void harness_usage(long *fds, long *rss)
{
	long pages = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &res) != 2)
			res = 0;
		fclose(f);
	}
	*rss = res * sysconf(_SC_PAGESIZE);
	*fds = -1; /* the directory's own descriptor */
	while (d && (e = readdir(d)))
		*fds += e->d_name[0] != '.';
	if (d)
		closedir(d);
}

long harness_syscw(void)
{
	FILE *f = fopen("/proc/self/io", "r");
	char line[128];
	long v = -1;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "syscw: %ld", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}
