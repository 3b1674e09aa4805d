/* SPDX-License-Identifier: MIT */
/*
 * Description: silent and garbage-sending peers do not stop rdmx_accept
 * from serving a real client (handshakes run concurrently); a peer over
 * listen.max_pending_per_addr is closed at once; running out of file
 * descriptors is not the end of the accept loop. rdmx_accept used to run
 * each handshake in turn, 5 s per silent peer.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

/* A raw TCP connection to 127.0.0.1:@port that says what it is told. */
static int raw_connect(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

struct client {
	int port;
	rdmx_status st;
};

static void *client_main(void *arg)
{
	struct client *cl = arg;
	struct side c;
	struct rdmx_conn_attr attr = { 0 };
	struct rdmx_conn *conn;
	char addr[32];

	side_open(&c);
	attr.cq = c.cq;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", cl->port);
	cl->st = rdmx_connect(c.ctx, addr, &attr, 3000, &conn);
	if (!cl->st)
		rdmx_conn_close(conn);
	side_close(&c);
	return NULL;
}

/* A real client connects; the server must take it within @ms. */
static void serve_one(struct side *s, struct rdmx_listener *lst, int ms)
{
	struct client cl = { .port = rdmx_listener_port(lst) };
	struct rdmx_conn_attr attr = { .cq = s->cq };
	struct rdmx_conn *conn = NULL;
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, client_main, &cl), 0);
	assert_int_equal(rdmx_accept(lst, &attr, ms, &conn), RDMX_OK);
	pthread_join(t, NULL);
	assert_int_equal(cl.st, RDMX_OK);
	rdmx_conn_close(conn);
}

static void test_accept_beside_silent_and_garbage_peers(void **state)
{
	enum { N = 20 };
	struct side s;
	struct rdmx_listener *lst;
	int idle[N], junk[N];

	(void)state;
	/* The handshake bound stays 5 s: a serial accept could not answer
	 * within the 3 s below. */
	side_open_with(&s, "RDMX_LISTEN_MAX_PENDING_PER_ADDR", "64");
	assert_int_equal(rdmx_listen(s.ctx, "127.0.0.1:0", &lst), RDMX_OK);
	for (int i = 0; i < N; i++) {
		idle[i] = raw_connect(rdmx_listener_port(lst));
		junk[i] = raw_connect(rdmx_listener_port(lst));
		/* Part of a header, then silence. */
		assert_int_equal(write(junk[i], "RDMX\0\0", 6), 6);
	}
	serve_one(&s, lst, 3000);
	for (int i = 0; i < N; i++) {
		close(idle[i]);
		close(junk[i]);
	}
	rdmx_listener_close(lst);
	side_close(&s);
}

static void test_accept_refuses_past_per_addr_bound(void **state)
{
	enum { MAX = 4 };
	struct side s;
	struct rdmx_listener *lst;
	struct rdmx_conn_attr attr;
	struct rdmx_conn *conn;
	int fd[MAX + 1], closed = 0;

	(void)state;
	side_open_with(&s, "RDMX_LISTEN_MAX_PENDING_PER_ADDR", "4");
	attr = (struct rdmx_conn_attr){ .cq = s.cq };
	assert_int_equal(rdmx_listen(s.ctx, "127.0.0.1:0", &lst), RDMX_OK);
	for (int i = 0; i <= MAX; i++)
		fd[i] = raw_connect(rdmx_listener_port(lst));
	assert_int_equal(rdmx_accept(lst, &attr, 300, &conn), RDMX_ERR_TIMEOUT);
	for (int i = 0; i <= MAX; i++) {
		struct pollfd p = { .fd = fd[i], .events = POLLIN };
		char b;

		if (poll(&p, 1, 0) == 1 && read(fd[i], &b, 1) <= 0)
			closed++;
	}
	assert_int_equal(closed, 1); /* the one past the bound, at once */
	for (int i = 0; i <= MAX; i++)
		close(fd[i]);
	rdmx_listener_close(lst);
	side_close(&s);
}

static void test_accept_survives_fd_exhaustion(void **state)
{
	struct side s;
	struct rdmx_listener *lst;
	struct rdmx_conn_attr attr;
	struct rdmx_conn *conn;
	struct rlimit old, low;
	int fd, top;

	(void)state;
	side_open(&s);
	attr = (struct rdmx_conn_attr){ .cq = s.cq };
	assert_int_equal(rdmx_listen(s.ctx, "127.0.0.1:0", &lst), RDMX_OK);
	fd = raw_connect(rdmx_listener_port(lst));
	/* No descriptor left for accept4(). */
	top = dup(0);
	close(top);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = (rlim_t)top;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	assert_int_equal(rdmx_accept(lst, &attr, 300, &conn), RDMX_ERR_TIMEOUT);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	/* The listener goes on: the queued peer is taken, a real one served. */
	serve_one(&s, lst, 3000);
	close(fd);
	rdmx_listener_close(lst);
	side_close(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accept_beside_silent_and_garbage_peers),
		cmocka_unit_test(test_accept_refuses_past_per_addr_bound),
		cmocka_unit_test(test_accept_survives_fd_exhaustion),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
