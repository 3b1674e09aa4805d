/* SPDX-License-Identifier: MIT */
/* Description: address parsing, listening and connection failures. */
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "sock.h"

static void split_ok(const char *in, const char *host, const char *port)
{
	char h[64], p[16];

	assert_int_equal(rdmx_addr_split(in, h, sizeof(h), p, sizeof(p)),
			 RDMX_OK);
	assert_string_equal(h, host);
	assert_string_equal(p, port);
}

static void test_addr_split(void **state)
{
	char h[64], p[16];

	(void)state;
	split_ok("host:7000", "host", "7000");
	split_ok(":7000", "", "7000");
	split_ok("7000", "", "7000");
	split_ok("host", "host", "18515");
	split_ok("[::1]:9", "::1", "9");
	split_ok("[::1]", "::1", "18515");
	split_ok("10.0.0.1:", "10.0.0.1", "18515");
	assert_int_equal(rdmx_addr_split("h:99999", h, sizeof(h), p, sizeof(p)),
			 RDMX_ERR_INVALID);
	assert_int_equal(rdmx_addr_split("h:12x", h, sizeof(h), p, sizeof(p)),
			 RDMX_ERR_INVALID);
	assert_int_equal(rdmx_addr_split("::1:5", h, sizeof(h), p, sizeof(p)),
			 RDMX_ERR_INVALID);
	assert_int_equal(rdmx_addr_split("[::1", h, sizeof(h), p, sizeof(p)),
			 RDMX_ERR_INVALID);
	assert_int_equal(rdmx_addr_split(NULL, h, sizeof(h), p, sizeof(p)),
			 RDMX_ERR_INVALID);
	assert_int_equal(rdmx_addr_split("h:1", NULL, 0, p, sizeof(p)),
			 RDMX_ERR_INVALID);
	assert_int_equal(rdmx_addr_split("h:1", h, sizeof(h), NULL, 0),
			 RDMX_ERR_INVALID);
	assert_int_equal(rdmx_addr_split("host:1", h, 3, p, sizeof(p)),
			 RDMX_ERR_INVALID); /* too small for "host" */
}

static void test_conn_errors(void **state)
{
	struct side s, c;
	struct rdmx_listener *lst, *lst2;
	struct rdmx_conn *conn = NULL;
	struct rdmx_conn_attr attr;
	char addr[32];
	int port;

	(void)state;
	side_open(&s);
	side_open(&c);
	attr = (struct rdmx_conn_attr){ .cq = c.cq };
	port = side_listen(&s, &lst);
	/* The port is taken. */
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	assert_int_equal(rdmx_listen(s.ctx, addr, &lst2), RDMX_ERR_SYSTEM);
	rdmx_listener_close(lst);
	/* Nobody listens there any more. */
	assert_int_equal(rdmx_connect(c.ctx, addr, &attr, 2000, &conn),
			 RDMX_ERR_CONN_REFUSED);
	assert_int_equal(rdmx_connect(c.ctx, "no-such-host.invalid:1", &attr,
				      2000, &conn),
			 RDMX_ERR_UNREACHABLE);
	assert_int_equal(rdmx_connect(c.ctx, "bad:port:x", &attr, 2000, &conn),
			 RDMX_ERR_INVALID);
	attr.cq = NULL;
	assert_int_equal(rdmx_connect(c.ctx, addr, &attr, 2000, &conn),
			 RDMX_ERR_INVALID);
	/* Nobody connects: accept times out. */
	port = side_listen(&s, &lst);
	attr.cq = s.cq;
	assert_int_equal(rdmx_accept(lst, &attr, 100, &conn), RDMX_ERR_TIMEOUT);
	assert_null(conn);
	/* A parent with children refuses to go. */
	assert_int_equal(rdmx_ctx_destroy(s.ctx), RDMX_ERR_BUSY);
	rdmx_listener_close(lst);
	side_close(&s);
	side_close(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_addr_split),
		cmocka_unit_test(test_conn_errors),
	};

	return cmocka_run_group_tests_name("addr", tests, NULL, NULL);
}
