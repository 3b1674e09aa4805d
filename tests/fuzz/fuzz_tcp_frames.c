/* SPDX-License-Identifier: MIT */
/*
 * Description: libFuzzer target for the tcp transport's receive path. The
 * input is the byte stream a peer sends on a live connection: headers,
 * payloads, answers to our own requests, truncated frames. The connection
 * must refuse what is malformed and never touch memory outside its
 * registrations.
 *
 * So the fuzzer can reach the accepting paths, the input may name the test
 * registration symbolically: the bytes "RKEYRKEY" stand for its rkey and
 * "ADDRADDR" for its address (the seed corpus uses them).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bytes.h"
#include "core.h"
#include "fuzz_rig.h"
#include "sw.h"

static struct fuzz_rig rig;
static void *tcp;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fuzz_rig_init(&rig);
	if (rdmx_ctx_transport(rig.ctx, RDMX_TRANSPORT_TCP, &tcp))
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rdmx_conn_attr attr = { .cq = rig.cq };
	struct rdmx_completion wc[16];
	struct rdmx_conn *conn;
	uint8_t *b, sink[4096], limit[RDMX_SW_HDR_LEN];
	size_t n;
	int fds[2], idle = 0;

	if (size > 60000 || socketpair(AF_UNIX, SOCK_STREAM, 0, fds))
		return 0;
	if (rdmx_tcp_ops.conn_create(tcp, fds[0], false, &attr, 0, &conn) ||
	    rdmx_tcp_ops.conn_start(conn))
		abort();
	fuzz_rig_post(&rig, &rdmx_tcp_ops, conn);
	/* The peer's limit first, so our requests go out and answers match. */
	n = rdmx_sw_hdr_pack(&(struct rdmx_sw_hdr){ .type = RDMX_SW_CREDIT,
						    .op = RDMX_SW_CREDIT_LIMIT,
						    .arg0 = 64 },
			     limit);
	if (write(fds[1], limit, n) != (ssize_t)n)
		abort();
	b = malloc(size ? size : 1);
	memcpy(b, data, size);
	fuzz_rig_resolve(&rig, b, size);
	if (write(fds[1], b, size) != (ssize_t)size)
		abort();
	free(b);
	shutdown(fds[1], SHUT_WR);
	/* Until the stream is consumed and the connection has died of EOF. */
	while (idle < 3) {
		idle = rdmx_tcp_ops.progress(tcp, false) ? 0 : idle + 1;
		while (recv(fds[1], sink, sizeof(sink), MSG_DONTWAIT) > 0)
			;
	}
	rdmx_tcp_ops.conn_close(conn);
	while (rdmx_poll(rig.cq, wc, 16) > 0)
		;
	close(fds[1]);
	return 0;
}
