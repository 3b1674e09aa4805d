/* SPDX-License-Identifier: MIT */
/* Description: the handshake: pre-shared keys, and peers that are not rdmx. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "handshake.h"
#include "handshake_proto.h"
#include "sock.h"

static char files[16][64];
static int nfiles;

/* A context whose config names @key (NULL: no key). */
static struct side keyed(const char *key)
{
	struct rdmx_ctx_attr attr = { .mask = RDMX_CTX_ATTR_CONFIG_FILE };
	char *kf = files[nfiles++], *yf = files[nfiles++];
	struct side s;
	FILE *f;

	snprintf(kf, 64, "/tmp/rdmx-key-%d-%d", getpid(), nfiles);
	snprintf(yf, 64, "/tmp/rdmx-cfg-%d-%d.yaml", getpid(), nfiles);
	f = fopen(yf, "w");
	assert_non_null(f);
	if (key) {
		FILE *k = fopen(kf, "w");

		assert_non_null(k);
		fprintf(k, "%s\n", key);
		fclose(k);
		fprintf(f, "auth:\n  key_file: %s\n", kf);
	}
	fclose(f);
	attr.config_file = yf;
	assert_int_equal(rdmx_ctx_create(&attr, &s.ctx), RDMX_OK);
	assert_int_equal(rdmx_cq_create(s.ctx, &s.cq), RDMX_OK);
	return s;
}

static int cleanup(void **state)
{
	(void)state;
	for (int i = 0; i < nfiles; i++)
		unlink(files[i]);
	nfiles = 0;
	return 0;
}

/* Connect a client with @ckey to a server with @skey; returns the
 * client's status and sets *server_p to the server's. */
static rdmx_status try_keys(const char *skey, const char *ckey,
			    rdmx_status *server_p)
{
	struct side s = keyed(skey), c = keyed(ckey);
	struct rdmx_conn_attr attr = { .cq = c.cq };
	struct rdmx_conn *conn = NULL;
	struct acc a = { .s = &s, .timeout = 1000 };
	char addr[32];
	rdmx_status st;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", side_listen(&s, &a.lst));
	acc_start(&a);
	st = rdmx_connect(c.ctx, addr, &attr, 2000, &conn);
	/* A refused peer leaves accept waiting for a good one: timeout. */
	if (st)
		acc_stop(&a);
	else
		acc_join(&a);
	*server_p = a.st;
	rdmx_conn_close(conn);
	rdmx_conn_close(a.conn);
	rdmx_listener_close(a.lst);
	side_close(&c);
	side_close(&s);
	return st;
}

static void test_handshake_same_key(void **state)
{
	rdmx_status srv;

	(void)state;
	assert_int_equal(try_keys("correct horse battery staple",
				  "correct horse battery staple", &srv),
			 RDMX_OK);
	assert_int_equal(srv, RDMX_OK);
	assert_int_equal(try_keys(NULL, NULL, &srv), RDMX_OK);
	assert_int_equal(srv, RDMX_OK);
}

static void test_handshake_key_refused(void **state)
{
	rdmx_status srv;

	(void)state;
	assert_int_equal(try_keys("correct horse battery staple", NULL, &srv),
			 RDMX_ERR_AUTH);
	assert_int_equal(srv, RDMX_ERR_TIMEOUT);
	assert_int_equal(try_keys(NULL, "correct horse battery staple", &srv),
			 RDMX_ERR_AUTH);
	assert_int_equal(try_keys("correct horse battery staple",
				  "correct horse battery stapler", &srv),
			 RDMX_ERR_AUTH);
	assert_int_equal(srv, RDMX_ERR_TIMEOUT);
}

static void test_handshake_short_key_is_config_error(void **state)
{
	struct rdmx_ctx_attr attr = { .mask = RDMX_CTX_ATTR_CONFIG_FILE };
	struct rdmx_ctx *ctx = NULL;
	FILE *f;

	(void)state;
	snprintf(files[0], 64, "/tmp/rdmx-short-%d", getpid());
	snprintf(files[1], 64, "/tmp/rdmx-short-%d.yaml", getpid());
	nfiles = 2;
	f = fopen(files[0], "w");
	fputs("short\n", f);
	fclose(f);
	f = fopen(files[1], "w");
	fprintf(f, "auth.key_file: %s\n", files[0]);
	fclose(f);
	attr.config_file = files[1];
	assert_int_equal(rdmx_ctx_create(&attr, &ctx), RDMX_ERR_CONFIG);
	assert_null(ctx);
}

/*
 * With @a accepting: a real client @c connects and is served; then both
 * sides and the listener are closed.
 */
static void real_client_served(struct acc *a, struct side *c, struct side *s,
			       const char *addr)
{
	struct rdmx_conn_attr attr = { .cq = c->cq };
	struct rdmx_conn *conn = NULL;

	assert_int_equal(rdmx_connect(c->ctx, addr, &attr, 2000, &conn),
			 RDMX_OK);
	acc_join(a);
	assert_int_equal(a->st, RDMX_OK);
	rdmx_conn_close(conn);
	rdmx_conn_close(a->conn);
	rdmx_listener_close(a->lst);
	side_close(c);
	side_close(s);
}

/* A peer that is not rdmx: refused, and the next good peer still gets in. */
static void test_handshake_garbage_peer(void **state)
{
	struct side s = keyed(NULL), c = keyed(NULL);
	struct acc a = { .s = &s, .timeout = 5000 };
	char addr[32];
	int fd;

	(void)state;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", side_listen(&s, &a.lst));
	acc_start(&a);
	assert_int_equal(rdmx_sock_connect(addr, NULL, 1000, &fd), RDMX_OK);
	assert_int_equal(write(fd, "GET / HTTP/1.0\r\n\r\n", 18), 18);
	usleep(100 * 1000);
	close(fd);
	/* One that connects and says nothing is dropped after the timeout,
	 * but does not block the others forever either. */
	real_client_served(&a, &c, &s, addr);
}

#define KEY "0123456789abcdef0123456789abcdef"

/* One side of a handshake on a raw socket, in a thread. */
struct hs_side {
	struct side *s;
	int fd;
	bool server;
	rdmx_status st;
};

static void *hs_run(void *arg)
{
	struct hs_side *h = arg;
	struct rdmx_hs_result res;

	h->st = h->server ? rdmx_hs_server(h->s->ctx, h->fd, "client", ~0ull, 0,
					   &res)
			  : rdmx_hs_client(h->s->ctx, h->fd, "server", ~0ull, 0,
					   &res);
	shutdown(h->fd, SHUT_RDWR);
	return NULL;
}

/* Read exactly @len bytes from a blocking socket. */
static void read_all(int fd, uint8_t *b, size_t len)
{
	while (len) {
		ssize_t n = read(fd, b, len);

		assert_true(n > 0);
		b += n;
		len -= (size_t)n;
	}
}

/* Copy whatever comes from @from to @to; false once @from has closed. */
static bool pump(int from, int to)
{
	uint8_t b[256];
	ssize_t n = read(from, b, sizeof(b));

	if (n <= 0)
		return false;
	assert_int_equal(write(to, b, (size_t)n), n);
	return true;
}

/*
 * An attacker on the path with no key drops a transport from the client's
 * offer (a downgrade): the proofs cover every byte, so both sides refuse.
 */
static void test_handshake_downgrade_breaks_proofs(void **state)
{
	struct side s = keyed(KEY), c = keyed(KEY);
	struct hs_side hc = { .s = &c }, hsrv = { .s = &s, .server = true };
	uint8_t hello[RDMX_HS_HDR_LEN + 64];
	int a[2], b[2];
	pthread_t tc, ts;
	bool up_a = true, up_b = true;

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, a), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, b), 0);
	hc.fd = a[0];
	hsrv.fd = b[0];
	pthread_create(&tc, NULL, hs_run, &hc);
	pthread_create(&ts, NULL, hs_run, &hsrv);
	read_all(a[1], hello, sizeof(hello));
	/* The offer's low byte: take every transport but tcp away. */
	hello[RDMX_HS_HDR_LEN + 7] &= 1u << RDMX_TRANSPORT_TCP;
	assert_int_equal(write(b[1], hello, sizeof(hello)), sizeof(hello));
	while (up_a || up_b) {
		struct pollfd p[2] = {
			{ .fd = up_a ? a[1] : -1, .events = POLLIN },
			{ .fd = up_b ? b[1] : -1, .events = POLLIN }
		};

		assert_true(poll(p, 2, T_TIMEOUT_MS) > 0);
		if (p[0].revents)
			up_a = pump(a[1], b[1]);
		if (p[1].revents)
			up_b = pump(b[1], a[1]);
	}
	pthread_join(tc, NULL);
	pthread_join(ts, NULL);
	assert_int_equal(hsrv.st, RDMX_ERR_AUTH);
	assert_int_not_equal(hc.st, RDMX_OK);
	for (int i = 0; i < 2; i++) {
		close(a[i]);
		close(b[i]);
	}
	side_close(&c);
	side_close(&s);
}

/*
 * A stranger without the key connects: it must prove the key first, so it
 * never sees a proof of the server's to test guesses against offline.
 */
static void test_handshake_stranger_gets_no_proof(void **state)
{
	struct side s = keyed(KEY);
	struct hs_side hsrv = { .s = &s, .server = true };
	struct rdmx_hs_msg m = { .version = RDMX_HS_VERSION,
				 .type = RDMX_HS_HELLO,
				 .flags = RDMX_HS_F_HAS_KEY,
				 .transports = 1u << RDMX_TRANSPORT_TCP },
			   g;
	uint8_t buf[RDMX_HS_HDR_LEN + RDMX_HS_MAX_BODY], zero[RDMX_HS_MAC_LEN];
	size_t n, blen;
	pthread_t ts;
	int fds[2];

	(void)state;
	memset(zero, 0, sizeof(zero));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
	hsrv.fd = fds[0];
	pthread_create(&ts, NULL, hs_run, &hsrv);
	n = rdmx_hs_encode(&m, buf);
	assert_int_equal(write(fds[1], buf, n), (ssize_t)n);
	read_all(fds[1], buf, RDMX_HS_HDR_LEN);
	assert_int_equal(rdmx_hs_decode_hdr(buf, RDMX_HS_HDR_LEN, &g, &blen),
			 RDMX_OK);
	assert_int_equal(g.type, RDMX_HS_WELCOME);
	read_all(fds[1], buf, blen); /* nonce and offers: no proof */
	m = (struct rdmx_hs_msg){ .version = RDMX_HS_VERSION,
				  .type = RDMX_HS_AUTH };
	n = rdmx_hs_encode(&m, buf); /* a guess: all zeros */
	assert_int_equal(write(fds[1], buf, n), (ssize_t)n);
	read_all(fds[1], buf, RDMX_HS_HDR_LEN);
	assert_int_equal(rdmx_hs_decode_hdr(buf, RDMX_HS_HDR_LEN, &g, &blen),
			 RDMX_OK);
	assert_int_equal(g.type, RDMX_HS_RESULT);
	read_all(fds[1], buf + RDMX_HS_HDR_LEN, blen);
	assert_int_equal(rdmx_hs_decode_body(buf + RDMX_HS_HDR_LEN, blen, &g),
			 RDMX_OK);
	assert_int_equal(g.code, RDMX_HS_KEY_WRONG);
	assert_memory_equal(g.mac, zero, sizeof(zero));
	pthread_join(ts, NULL);
	assert_int_equal(hsrv.st, RDMX_ERR_AUTH);
	close(fds[0]);
	close(fds[1]);
	side_close(&s);
}

/* A TCP listener that accepts and never says a word. */
static int silent_server(int *port_p)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port_p = ntohs(a.sin_port);
	return fd;
}

/*
 * rdmx_connect's timeout bounds the whole call: against a server that
 * accepts and says nothing, 300 ms returns in about 300 ms (it took the
 * handshake's own 5 s), and a timeout longer than conn.handshake_timeout
 * is not cut to it.
 */
static void test_connect_timeout_bounds_the_call(void **state)
{
	struct side c;
	struct rdmx_conn_attr attr;
	struct rdmx_conn *conn = NULL;
	char addr[32];
	int port, lfd;

	(void)state;
	side_open_with(&c, "RDMX_CONN_HANDSHAKE_TIMEOUT", "1s");
	attr = (struct rdmx_conn_attr){ .cq = c.cq };
	lfd = silent_server(&port);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	for (int i = 0; i < 2; i++) {
		int ms = i ? 1800 : 300; /* under, then over handshake_timeout
					  */
		double t0 = now_s(), took;

		assert_int_equal(rdmx_connect(c.ctx, addr, &attr, ms, &conn),
				 RDMX_ERR_TIMEOUT);
		took = now_s() - t0;
		print_message("%d ms connect to a silent server, "
			      "handshake_timeout 1 s: %.0f ms\n",
			      ms, took * 1000);
		assert_true(took >= ms / 1000.0 - 0.01 &&
			    took < ms / 1000.0 - 0.01 + 0.5 * time_scale());
	}
	close(lfd);
	side_close(&c);
}

/*
 * A client that gives up after the server's last handshake message (its
 * connect timed out) is no connection on the server either: rdmx_accept
 * does not return one for it, and serves the next client.
 */
static void test_accept_needs_the_clients_confirmation(void **state)
{
	struct side s, c = keyed(NULL);
	struct acc a = { .s = &s, .timeout = 1500 };
	struct rdmx_hs_msg m = { .version = RDMX_HS_VERSION,
				 .type = RDMX_HS_HELLO,
				 .transports = 1u << RDMX_TRANSPORT_TCP },
			   g;
	uint8_t buf[RDMX_HS_HDR_LEN + RDMX_HS_MAX_BODY];
	char addr[32];
	size_t n, blen;
	int fd;

	(void)state;
	side_open(&s);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", side_listen(&s, &a.lst));
	acc_start(&a); /* handshakes run while someone accepts */
	assert_int_equal(rdmx_sock_connect(addr, "", 1000, &fd), RDMX_OK);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	n = rdmx_hs_encode(&m, buf);
	assert_int_equal(write(fd, buf, n), (ssize_t)n);
	read_all(fd, buf, RDMX_HS_HDR_LEN);
	assert_int_equal(rdmx_hs_decode_hdr(buf, RDMX_HS_HDR_LEN, &g, &blen),
			 RDMX_OK);
	assert_int_equal(g.type, RDMX_HS_WELCOME);
	read_all(fd, buf, blen);
	m = (struct rdmx_hs_msg){ .version = RDMX_HS_VERSION,
				  .type = RDMX_HS_AUTH };
	n = rdmx_hs_encode(&m, buf);
	assert_int_equal(write(fd, buf, n), (ssize_t)n);
	read_all(fd, buf, RDMX_HS_HDR_LEN);
	assert_int_equal(rdmx_hs_decode_hdr(buf, RDMX_HS_HDR_LEN, &g, &blen),
			 RDMX_OK);
	assert_int_equal(g.type, RDMX_HS_RESULT);
	read_all(fd, buf, blen);
	close(fd); /* gave up: no CONFIRM */
	acc_join(&a);
	assert_int_equal(a.st, RDMX_ERR_TIMEOUT);
	/* The next client is served. */
	a.timeout = 0;
	acc_start(&a);
	real_client_served(&a, &c, &s, addr);
}

/* auth.allowed_peers: a peer outside the list is closed before anything. */
static void test_listen_allowed_peers(void **state)
{
	const char *lists[] = { "10.0.0.0/8, fd00::/8",
				"10.1.2.3,127.0.0.0/8" };
	struct rdmx_ctx *ctx;

	(void)state;
	for (int i = 0; i < 2; i++) {
		struct side s, c = keyed(NULL);
		struct rdmx_conn_attr attr = { .cq = c.cq };
		struct rdmx_conn *conn = NULL;
		struct acc a = { .s = &s, .timeout = i ? 2000 : 300 };
		char addr[32];
		rdmx_status st;

		side_open_with(&s, "RDMX_AUTH_ALLOWED_PEERS", lists[i]);
		snprintf(addr, sizeof(addr), "127.0.0.1:%d",
			 side_listen(&s, &a.lst));
		acc_start(&a);
		st = rdmx_connect(c.ctx, addr, &attr, 2000, &conn);
		acc_join(&a);
		if (i) {
			assert_int_equal(st, RDMX_OK);
			assert_int_equal(a.st, RDMX_OK);
			rdmx_conn_close(conn);
			rdmx_conn_close(a.conn);
		} else { /* 127.0.0.1 is not in the list */
			assert_int_not_equal(st, RDMX_OK);
			assert_int_equal(a.st, RDMX_ERR_TIMEOUT);
		}
		rdmx_listener_close(a.lst);
		side_close(&c);
		side_close(&s);
	}
	setenv("RDMX_AUTH_ALLOWED_PEERS", "10.0.0.0/33", 1);
	assert_int_equal(rdmx_ctx_create(NULL, &ctx), RDMX_ERR_CONFIG);
	setenv("RDMX_AUTH_ALLOWED_PEERS", "localhost", 1);
	assert_int_equal(rdmx_ctx_create(NULL, &ctx), RDMX_ERR_CONFIG);
	unsetenv("RDMX_AUTH_ALLOWED_PEERS");
}

/*
 * A flood of peers that are not rdmx costs the server at most 10 lines a
 * second (rdmx_log_peer), where each used to cost one: the next line
 * said tells how many went unsaid, and a good peer still gets in.
 */
static void test_handshake_garbage_flood_said_in_moderation(void **state)
{
	struct side s = keyed(NULL), c = keyed(NULL);
	struct acc a = { .s = &s, .timeout = 10000 };
	static char log[1 << 16];
	struct log_catch lc;
	char addr[32];
	const char *unsaid;
	int fd, said, n = 0;
	double t0;

	(void)state;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", side_listen(&s, &a.lst));
	acc_start(&a);
	usleep(1100 * 1000); /* a second of its own, whatever came before */
	t0 = now_s();
	log_catch_begin(&lc);
	for (int i = 0; i < 60; i++) {
		if (rdmx_sock_connect(addr, NULL, 1000, &fd))
			continue;
		n += write(fd, "GET / HTTP/1.0\r\n\r\n", 18) == 18;
		close(fd);
		usleep(2000);
	}
	usleep(300 * 1000); /* their handshakes end */
	log_catch_end(&lc, log, sizeof(log));
	said = log_count(log, "rdmx: ");
	/* 10 a second, in each second the flood touched (well under one
	 * here; more under the sanitizers). */
	assert_true(n == 60);
	assert_true(said >= 1 && said <= 10 * ((int)(now_s() - t0) + 2));
	/* A second on, the next one tells what went unsaid. */
	usleep(1100 * 1000);
	log_catch_begin(&lc);
	assert_int_equal(rdmx_sock_connect(addr, NULL, 1000, &fd), RDMX_OK);
	assert_int_equal(write(fd, "GET / HTTP/1.0\r\n\r\n", 18), 18);
	usleep(300 * 1000);
	close(fd);
	log_catch_end(&lc, log, sizeof(log));
	unsaid = strstr(log, "rdmx: warn: ");
	assert_non_null(unsaid);
	assert_non_null(strstr(unsaid, " more lines about peers went unsaid"));
	assert_true(atoi(unsaid + strlen("rdmx: warn: ")) >= 1);
	assert_non_null(strstr(unsaid, "malformed message"));
	real_client_served(&a, &c, &s, addr);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_handshake_same_key, cleanup),
		cmocka_unit_test_teardown(test_handshake_key_refused, cleanup),
		cmocka_unit_test_teardown(
			test_handshake_short_key_is_config_error, cleanup),
		cmocka_unit_test_teardown(test_handshake_garbage_peer, cleanup),
		cmocka_unit_test_teardown(
			test_handshake_downgrade_breaks_proofs, cleanup),
		cmocka_unit_test_teardown(test_handshake_stranger_gets_no_proof,
					  cleanup),
		cmocka_unit_test_teardown(test_listen_allowed_peers, cleanup),
		cmocka_unit_test_teardown(test_connect_timeout_bounds_the_call,
					  cleanup),
		cmocka_unit_test_teardown(
			test_accept_needs_the_clients_confirmation, cleanup),
		/* Last: the lines it leaves unsaid would be others' too. */
		cmocka_unit_test_teardown(
			test_handshake_garbage_flood_said_in_moderation,
			cleanup),
	};

	return cmocka_run_group_tests_name("handshake", tests, NULL, NULL);
}
