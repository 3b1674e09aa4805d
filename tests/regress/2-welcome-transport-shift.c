/* SPDX-License-Identifier: MIT */
/*
 * Description: a server's WELCOME naming transport 200 is refused as a
 * protocol error. The client used to shift 1 by that byte before checking
 * its range (undefined behaviour; found by fuzz_handshake). Fails under the
 * UBSan build without the fix.
 */
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "handshake.h"
#include "handshake_proto.h"

static void test_handshake_welcome_transport_out_of_range(void **state)
{
	struct rdmx_hs_msg w = { .version = RDMX_HS_VERSION,
				 .type = RDMX_HS_WELCOME,
				 .transport = 200,
				 .transports = 1 };
	uint8_t buf[RDMX_HS_HDR_LEN + RDMX_HS_MAX_BODY];
	struct rdmx_hs_result res;
	struct rdmx_ctx *ctx;
	size_t n;
	int fds[2];

	(void)state;
	assert_int_equal(rdmx_ctx_create(NULL, &ctx), RDMX_OK);
	assert_int_equal(
		socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
	n = rdmx_hs_encode(&w, buf);
	assert_int_equal(write(fds[1], buf, n), (ssize_t)n);
	assert_int_equal(rdmx_hs_client(ctx, fds[0], "evil", ~0ull, 0, &res),
			 RDMX_ERR_PROTOCOL);
	close(fds[0]);
	close(fds[1]);
	assert_int_equal(rdmx_ctx_destroy(ctx), RDMX_OK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_handshake_welcome_transport_out_of_range),
	};

	return cmocka_run_group_tests_name("regress", tests, NULL, NULL);
}
