/* SPDX-License-Identifier: MIT */
/*
 * Description: a process whose kernel refuses pidfd_open (older than
 * Linux 5.3, a seccomp filter, valgrind 3.19) offers no shm, and says
 * why once. Its same-host peers then agree on tcp and work, where the
 * shm setup used to fail the connection as "the peer process is gone";
 * and forcing shm there fails at once with RDMX_ERR_NO_TRANSPORT.
 */
#include <errno.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static struct side server;
static struct rdmx_listener *lst;
static int server_port;

/* From here on this process's kernel has no pidfd_open, as an old one. */
static int refuse_pidfd_open(void)
{
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
	int rc;

	if (!f)
		return -1;
	rc = seccomp_rule_add(f, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(pidfd_open),
			      0);
	if (!rc)
		rc = seccomp_load(f);
	seccomp_release(f);
	return rc;
}

/*
 * In a child: refuse pidfd_open, force @transport (NULL: auto), and
 * connect to the server. The connect's status; its log in @log.
 */
static rdmx_status filtered_connect(const char *transport,
				    struct rdmx_ctx **ctx_p,
				    struct rdmx_cq **cq_p,
				    struct rdmx_conn **conn_p, char *log,
				    size_t size)
{
	struct rdmx_conn_attr attr = { 0 };
	struct log_catch lc;
	char addr[32];
	rdmx_status st;

	if (refuse_pidfd_open())
		_exit(2);
	if (transport)
		setenv("RDMX_TRANSPORT", transport, 1);
	log_catch_begin(&lc);
	if (rdmx_ctx_create(NULL, ctx_p) || rdmx_cq_create(*ctx_p, cq_p))
		_exit(3);
	attr.cq = *cq_p;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", server_port);
	st = rdmx_connect(*ctx_p, addr, &attr, 5000, conn_p);
	log_catch_end(&lc, log, size);
	return st;
}

/* A client whose kernel refuses pidfd_open: one SEND, over tcp. */
static int client_auto(void *arg)
{
	struct rdmx_ctx *ctx;
	struct rdmx_cq *cq;
	struct rdmx_conn *conn;
	struct rdmx_conn_info info;
	struct rdmx_completion wc;
	struct rdmx_mr *mr;
	static char msg[8] = "pidfd";
	char log[4096];
	rdmx_status st;

	(void)arg;
	st = filtered_connect(NULL, &ctx, &cq, &conn, log, sizeof(log));
	if (st) {
		fprintf(stderr, "client: connect: %s\n", rdmx_strerror(st));
		return 4;
	}
	rdmx_conn_info(conn, &info);
	if (strcmp(info.transport, "tcp") || !strstr(log, "pidfd_open")) {
		fprintf(stderr, "client: transport %s, log '%s'\n",
			info.transport, log);
		return 5;
	}
	if (rdmx_mr_reg(ctx, msg, sizeof(msg), RDMX_ACCESS_LOCAL_WRITE, &mr) ||
	    rdmx_post_send(conn, &(struct rdmx_sge){ msg, sizeof(msg), mr }, 1))
		return 6;
	wc = wait_wc(cq);
	if (wc.status || wc.wr_id != 1)
		return 7;
	rdmx_conn_close(conn);
	rdmx_mr_dereg(mr);
	rdmx_cq_destroy(cq);
	rdmx_ctx_destroy(ctx);
	return 0;
}

/* The same client, with shm forced: refused at once, saying why. */
static int client_forced(void *arg)
{
	struct rdmx_ctx *ctx;
	struct rdmx_cq *cq;
	struct rdmx_conn *conn;
	char log[4096];
	rdmx_status st;

	(void)arg;
	st = filtered_connect("shm", &ctx, &cq, &conn, log, sizeof(log));
	if (st != RDMX_ERR_NO_TRANSPORT || !strstr(log, "pidfd_open")) {
		fprintf(stderr, "client: connect: %s, log '%s'\n",
			rdmx_strerror(st), log);
		return 4;
	}
	rdmx_cq_destroy(cq);
	rdmx_ctx_destroy(ctx);
	return 0;
}

static int setup(void **state)
{
	(void)state;
	unsetenv("RDMX_TRANSPORT");
	side_open(&server);
	server_port = side_listen(&server, &lst);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	rdmx_listener_close(lst);
	side_close(&server);
	return 0;
}

static void test_shm_pidfd_refused_peers_use_tcp(void **state)
{
	struct rdmx_conn_attr attr = { .cq = server.cq };
	struct rdmx_conn *conn;
	struct rdmx_conn_info info;
	struct rdmx_completion wc;
	struct buf b;
	pid_t pid;

	(void)state;
	buf_alloc(&server, &b, 8, RDMX_ACCESS_LOCAL_WRITE);
	pid = spawn_fork(client_auto, NULL);
	assert_int_equal(rdmx_accept(lst, &attr, 5000, &conn), RDMX_OK);
	rdmx_conn_info(conn, &info);
	assert_string_equal(info.transport, "tcp");
	assert_int_equal(
		rdmx_post_recv(conn, &(struct rdmx_sge){ b.p, 8, b.mr }, 1, 9),
		RDMX_OK);
	wc = wait_wc(server.cq);
	assert_int_equal(wc.status, RDMX_OK);
	assert_int_equal(wc.byte_len, 8);
	assert_string_equal((char *)b.p, "pidfd");
	reap_ok(pid);
	rdmx_conn_close(conn);
	buf_free(&b);
}

static void test_shm_pidfd_refused_forced_fails_at_once(void **state)
{
	struct rdmx_conn_attr attr = { .cq = server.cq };
	struct rdmx_conn *conn;

	pid_t pid;

	(void)state;
	pid = spawn_fork(client_forced, NULL);
	/* The client offers nothing: refused on both sides, and the server
	 * waits on for a client it can take (the next case, on the same
	 * listener). */
	assert_int_equal(rdmx_accept(lst, &attr, 2000, &conn),
			 RDMX_ERR_TIMEOUT);
	reap_ok(pid);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shm_pidfd_refused_forced_fails_at_once),
		cmocka_unit_test(test_shm_pidfd_refused_peers_use_tcp),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
