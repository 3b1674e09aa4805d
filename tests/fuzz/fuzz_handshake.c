/* SPDX-License-Identifier: MIT */
/*
 * Description: libFuzzer target for the connection handshake: the decoder,
 * then the server and the client side reading the fuzzer's bytes as their
 * peer's messages (the first byte picks the side and whether a key is set).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core.h"
#include "handshake.h"
#include "handshake_proto.h"

static struct rdmx_ctx *plain, *keyed;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct rdmx_ctx_attr attr = { .mask = RDMX_CTX_ATTR_CONFIG_FILE };
	char kf[64], yf[64];
	FILE *f;

	(void)argc;
	(void)argv;
	setenv("RDMX_LOG_LEVEL", "off", 1);
	setenv("RDMX_CONN_HANDSHAKE_TIMEOUT", "50ms", 1);
	snprintf(kf, sizeof(kf), "/tmp/rdmx-fuzz-key-%d", getpid());
	snprintf(yf, sizeof(yf), "/tmp/rdmx-fuzz-%d.yaml", getpid());
	f = fopen(kf, "w");
	fputs("0123456789abcdef0123456789abcdef\n", f);
	fclose(f);
	f = fopen(yf, "w");
	fprintf(f, "auth:\n  key_file: %s\n", kf);
	fclose(f);
	attr.config_file = yf;
	if (rdmx_ctx_create(NULL, &plain) || rdmx_ctx_create(&attr, &keyed))
		abort();
	unlink(kf);
	unlink(yf);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rdmx_hs_result res;
	struct rdmx_hs_msg msg;
	struct rdmx_ctx *ctx;
	size_t blen;
	int fds[2];

	if (size < 1 || size > 4096)
		return 0;
	if (!rdmx_hs_decode_hdr(data + 1, size - 1, &msg, &blen) &&
	    size - 1 - RDMX_HS_HDR_LEN >= blen)
		rdmx_hs_decode_body(data + 1 + RDMX_HS_HDR_LEN, blen, &msg);

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds))
		return 0;
	ctx = data[0] & 2 ? keyed : plain;
	if (write(fds[1], data + 1, size - 1) != (ssize_t)(size - 1))
		abort();
	shutdown(fds[1], SHUT_WR);
	if (data[0] & 1)
		rdmx_hs_server(ctx, fds[0], "fuzz", ~0ull, 0, &res);
	else
		rdmx_hs_client(ctx, fds[0], "fuzz", ~0ull, 0, &res);
	close(fds[0]);
	close(fds[1]);
	return 0;
}
