/* SPDX-License-Identifier: MIT */
/*
 * Description: shm takes the peer's identity from the kernel, not from
 * the peer. A process of another user that claims this one's host id (it
 * is made of public facts) is refused on both sides and the server goes
 * on; and what a peer hands over is checked before it is mapped: a ring
 * must be a memfd sealed against shrinking (a truncated ring used to kill
 * the mapping process with SIGBUS), a doorbell an eventfd.
 */
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "core.h"
#include "shm.h"

static struct side server;
static int server_port;

/* As user nobody, with the server's host id: try shm. */
static int impostor(void *arg)
{
	struct rdmx_ctx *ctx;
	struct rdmx_cq *cq;
	struct rdmx_conn_attr attr = { 0 };
	struct rdmx_conn *conn;
	char addr[32];
	rdmx_status st;

	(void)arg;
	if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
		return 2;
	if (rdmx_ctx_create(NULL, &ctx) || rdmx_cq_create(ctx, &cq))
		return 3;
	memcpy(ctx->host_id, server.ctx->host_id, sizeof(ctx->host_id));
	attr.cq = cq;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", server_port);
	st = rdmx_connect(ctx, addr, &attr, 3000, &conn);
	if (st != RDMX_ERR_NO_TRANSPORT) {
		fprintf(stderr, "impostor: connect returned %s\n",
			rdmx_strerror(st));
		return 1;
	}
	return 0;
}

static void test_shm_refuses_a_peer_of_another_user(void **state)
{
	struct rdmx_listener *lst;
	struct rdmx_conn_attr attr;
	struct rdmx_conn *conn;
	struct rdmx_conn_info info;
	struct pair p;
	pid_t pid;

	(void)state;
	if (geteuid() != 0)
		suite_skip("not root: cannot run a peer as another user");
	setenv("RDMX_TRANSPORT", "shm", 1);
	side_open(&server);
	attr = (struct rdmx_conn_attr){ .cq = server.cq };
	server_port = side_listen(&server, &lst);
	pid = spawn_fork(impostor, NULL);
	assert_int_equal(rdmx_accept(lst, &attr, 3000, &conn),
			 RDMX_ERR_TIMEOUT);
	reap_ok(pid);
	rdmx_listener_close(lst);
	side_close(&server);
	/* Between processes of one user, shm works as ever. */
	pair_open(&p);
	rdmx_conn_info(p.cconn, &info);
	assert_string_equal(info.transport, "shm");
	pair_close(&p);
}

static void test_shm_checks_what_a_peer_hands_over(void **state)
{
	int sealed = memfd_create("t", MFD_ALLOW_SEALING),
	    loose = memfd_create("t", 0), door = eventfd(0, 0), pfd[2];

	(void)state;
	assert_int_equal(pipe(pfd), 0);
	assert_int_equal(ftruncate(sealed, RDMX_SHM_RING_HDR + 4096), 0);
	assert_int_equal(ftruncate(loose, RDMX_SHM_RING_HDR + 4096), 0);
	/* Not sealed: the peer could shrink it under our mapping. */
	assert_int_equal(rdmx_shm_ring_check(loose, 4096), RDMX_ERR_PROTOCOL);
	assert_int_equal(fcntl(sealed, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	assert_int_equal(rdmx_shm_ring_check(sealed, 4096), RDMX_OK);
	/* Smaller than it says. */
	assert_int_equal(rdmx_shm_ring_check(sealed, 8192), RDMX_ERR_PROTOCOL);
	/* Not a memfd at all. */
	assert_int_equal(rdmx_shm_ring_check(pfd[0], 4096), RDMX_ERR_PROTOCOL);
	assert_int_equal(rdmx_shm_door_check(door), RDMX_OK);
	/* A pipe as doorbell could block our writes. */
	assert_int_equal(rdmx_shm_door_check(pfd[1]), RDMX_ERR_PROTOCOL);
	close(sealed);
	close(loose);
	close(door);
	close(pfd[0]);
	close(pfd[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shm_refuses_a_peer_of_another_user),
		cmocka_unit_test(test_shm_checks_what_a_peer_hands_over),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
