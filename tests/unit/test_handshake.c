/* SPDX-License-Identifier: MIT */
/* Description: the handshake: pre-shared keys, and peers that are not rdmx. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
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

struct acc {
	struct side *s;
	struct rdmx_listener *lst;
	int timeout;
	rdmx_status st;
	struct rdmx_conn *conn;
};

static void *acceptor(void *arg)
{
	struct acc *a = arg;
	struct rdmx_conn_attr attr = { .cq = a->s->cq };

	a->st = rdmx_accept(a->lst, &attr, a->timeout, &a->conn);
	return NULL;
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
	pthread_t t;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", side_listen(&s, &a.lst));
	pthread_create(&t, NULL, acceptor, &a);
	st = rdmx_connect(c.ctx, addr, &attr, 2000, &conn);
	pthread_join(t, NULL);
	/* A refused peer leaves accept waiting for a good one: timeout. */
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

/* A peer that is not rdmx: refused, and the next good peer still gets in. */
static void test_handshake_garbage_peer(void **state)
{
	struct side s = keyed(NULL), c = keyed(NULL);
	struct rdmx_conn_attr attr = { .cq = c.cq };
	struct rdmx_conn *conn;
	struct acc a = { .s = &s, .timeout = 5000 };
	char addr[32];
	pthread_t t;
	int fd;

	(void)state;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", side_listen(&s, &a.lst));
	pthread_create(&t, NULL, acceptor, &a);
	assert_int_equal(rdmx_sock_connect(addr, NULL, 1000, &fd), RDMX_OK);
	assert_int_equal(write(fd, "GET / HTTP/1.0\r\n\r\n", 18), 18);
	usleep(100 * 1000);
	close(fd);
	/* One that connects and says nothing is dropped after the timeout,
	 * but does not block the others forever either. */
	assert_int_equal(rdmx_connect(c.ctx, addr, &attr, 2000, &conn),
			 RDMX_OK);
	pthread_join(t, NULL);
	assert_int_equal(a.st, RDMX_OK);
	rdmx_conn_close(conn);
	rdmx_conn_close(a.conn);
	rdmx_listener_close(a.lst);
	side_close(&c);
	side_close(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_handshake_same_key, cleanup),
		cmocka_unit_test_teardown(test_handshake_key_refused, cleanup),
		cmocka_unit_test_teardown(
			test_handshake_short_key_is_config_error, cleanup),
		cmocka_unit_test_teardown(test_handshake_garbage_peer, cleanup),
	};

	return cmocka_run_group_tests_name("handshake", tests, NULL, NULL);
}
