/* SPDX-License-Identifier: MIT */
/*
 * Description: silent and garbage-sending peers, and peers that stall in
 * their connection's setup after the handshake, do not stop rdmx_accept
 * from serving a real client (handshakes and setups run concurrently); a
 * peer over listen.max_pending_per_addr is closed at once; running out of
 * file descriptors is not the end of the accept loop. rdmx_accept used to
 * run each handshake in turn, 5 s per silent peer, and later each setup.
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

#include "handshake.h"
#include "harness.h"
#include "sock.h"

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

/*
 * A client driven by hand: its control socket to @port, then (hello) the
 * handshake over @transport and its private data @pd.
 */
static int hand_connect(int port)
{
	char addr[32];
	int fd;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	assert_int_equal(rdmx_sock_connect(addr, NULL, 3000, &fd), RDMX_OK);
	return fd;
}

static void hand_hello(struct side *c, int fd, unsigned transport,
		       const char *pd)
{
	struct rdmx_hs_result res;

	assert_int_equal(rdmx_hs_client(c->ctx, fd, "server", 1ull << transport,
					0, &res),
			 RDMX_OK);
	assert_int_equal(res.transport, transport);
	if (pd)
		assert_int_equal(rdmx_hs_private_send(c->ctx, fd, "server", pd,
						      strlen(pd),
						      rdmx_deadline(3000)),
				 RDMX_OK);
}

/*
 * Peers that pass the handshake and then stall: before their private data
 * (tcp), or in the shm setup after it. The setup's bound is 20 s here, so
 * an accept that ran setups itself could not serve the real client within
 * its 3 s.
 */
static void test_accept_beside_peers_stalled_in_setup(void **state)
{
	enum { N = 4 };
	struct side s, c;
	struct rdmx_listener *lst;
	struct rdmx_conn_attr attr;
	struct rdmx_conn *conn;
	int fd[2 * N];

	(void)state;
	side_open_with(&s, "RDMX_CONN_HANDSHAKE_TIMEOUT", "20s");
	side_open(&c);
	attr = (struct rdmx_conn_attr){ .cq = s.cq };

	assert_int_equal(rdmx_listen(s.ctx, "127.0.0.1:0", &lst), RDMX_OK);
	for (int i = 0; i < 2 * N; i++)
		fd[i] = hand_connect(rdmx_listener_port(lst));
	/* An accepting call admits them; their handshakes then go on. */
	assert_int_equal(rdmx_accept(lst, &attr, 100, &conn), RDMX_ERR_TIMEOUT);
	for (int i = 0; i < N; i++) {
		hand_hello(&c, fd[2 * i], RDMX_TRANSPORT_TCP, NULL);
		hand_hello(&c, fd[2 * i + 1], RDMX_TRANSPORT_SHM, "stall");
	}
	serve_one(&s, lst, 3000);
	for (int i = 0; i < 2 * N; i++)
		close(fd[i]);
	rdmx_listener_close(lst);
	side_close(&c);
	side_close(&s);
}

/*
 * A peer admitted by one rdmx_accept that timed out goes to the next call
 * with that call's private data, cq and user_ctx, not the first's.
 */
static void test_accept_gives_the_callers_attr(void **state)
{
	struct side s, c;
	struct rdmx_cq *cq2;
	struct rdmx_listener *lst;
	struct rdmx_conn *conn;
	struct rdmx_completion wc;
	struct rdmx_conn_attr a1, a2;
	uint8_t pd[RDMX_PRIVATE_DATA_MAX], word[8];
	uint16_t pd_len;
	struct rdmx_mr *mr;
	struct rdmx_sge sg;
	int fd, n = 0;

	(void)state;
	side_open(&s);
	side_open(&c);
	assert_int_equal(rdmx_cq_create(s.ctx, &cq2), RDMX_OK);
	a1 = (struct rdmx_conn_attr){ .mask = RDMX_CONN_ATTR_USER_CTX |
					      RDMX_CONN_ATTR_PRIVATE_DATA,
				      .cq = s.cq,
				      .user_ctx = &a1,
				      .private_data = "one",
				      .private_data_len = 3 };
	a2 = a1;
	a2.cq = cq2;
	a2.user_ctx = &a2;
	a2.private_data = "two";
	assert_int_equal(rdmx_listen(s.ctx, "127.0.0.1:0", &lst), RDMX_OK);
	fd = hand_connect(rdmx_listener_port(lst));
	/* Admitted here; the peer has said nothing yet. */
	assert_int_equal(rdmx_accept(lst, &a1, 100, &conn), RDMX_ERR_TIMEOUT);
	hand_hello(&c, fd, RDMX_TRANSPORT_TCP, "");
	assert_int_equal(rdmx_accept(lst, &a2, 3000, &conn), RDMX_OK);
	assert_ptr_equal(rdmx_conn_user_ctx(conn), &a2);
	assert_int_equal(rdmx_hs_private_recv(c.ctx, fd, "server",
					      rdmx_deadline(3000), pd, &pd_len),
			 RDMX_OK);
	assert_int_equal(pd_len, 3);
	assert_memory_equal(pd, "two", 3);
	/* Its completions go to the second call's cq. */
	assert_int_equal(rdmx_mr_reg(s.ctx, word, sizeof(word),
				     RDMX_ACCESS_LOCAL_WRITE, &mr),
			 RDMX_OK);
	sg = (struct rdmx_sge){ word, sizeof(word), mr };
	assert_int_equal(rdmx_post_recv(conn, &sg, 1, 7), RDMX_OK);
	rdmx_conn_close(conn);
	assert_int_equal(rdmx_poll(s.cq, &wc, 1), 0);
	while (!(n = rdmx_poll(cq2, &wc, 1)))
		;
	assert_int_equal(n, 1);
	assert_int_equal(wc.wr_id, 7);
	assert_int_equal(wc.status, RDMX_ERR_FLUSHED);
	rdmx_mr_dereg(mr);
	close(fd);
	rdmx_listener_close(lst);
	rdmx_cq_destroy(cq2);
	side_close(&c);
	side_close(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accept_beside_silent_and_garbage_peers),
		cmocka_unit_test(test_accept_refuses_past_per_addr_bound),
		cmocka_unit_test(test_accept_survives_fd_exhaustion),
		cmocka_unit_test(test_accept_beside_peers_stalled_in_setup),
		cmocka_unit_test(test_accept_gives_the_callers_attr),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
