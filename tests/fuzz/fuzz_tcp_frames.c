/* SPDX-License-Identifier: MIT */
/*
 * Description: libFuzzer target for the tcp transport's receive path. The
 * input is the byte stream a peer sends on a live connection: headers,
 * payloads, answers to our own requests, truncated frames. The connection
 * must refuse what is malformed and never touch memory outside its
 * registrations.
 *
 * So the fuzzer can reach the accepting paths, the input may name the test
 * registration symbolically: the bytes "RKEY" stand for its rkey and
 * "ADDRADDR" for its address (the seed corpus uses them).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bytes.h"
#include "core.h"
#include "sw.h"

#define REGION 4096

static struct rdmx_ctx *ctx;
static struct rdmx_cq *cq;
static void *tcp;
static uint8_t *region, *local;
static struct rdmx_mr *region_mr, *local_mr;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	setenv("RDMX_PROGRESS_THREAD", "off", 1);
	setenv("RDMX_LOG_LEVEL", "off", 1);
	if (rdmx_ctx_create(NULL, &ctx) || rdmx_cq_create(ctx, &cq) ||
	    rdmx_ctx_transport(ctx, RDMX_TRANSPORT_TCP, &tcp))
		abort();
	region = aligned_alloc(64, REGION);
	local = aligned_alloc(64, REGION);
	if (rdmx_mr_reg(ctx, region, REGION, 0xf, &region_mr) ||
	    rdmx_mr_reg(ctx, local, REGION, RDMX_ACCESS_LOCAL_WRITE, &local_mr))
		abort();
	return 0;
}

/* Replace the symbolic rkey and address with the live ones. */
static uint8_t *resolve(const uint8_t *data, size_t size)
{
	uint8_t *b = malloc(size ? size : 1);

	memcpy(b, data, size);
	for (size_t i = 0; i + 4 <= size; i++) {
		if (i + 8 <= size && !memcmp(b + i, "ADDRADDR", 8))
			rdmx_put_be(b + i, (uintptr_t)region + 64, 8);
		else if (!memcmp(b + i, "RKEY", 4))
			rdmx_put_be(b + i, region_mr->rkey, 4);
	}
	return b;
}

/* Our own outstanding requests, so that answers have something to match. */
static void post_requests(struct rdmx_conn *conn)
{
	struct rdmx_sge s = { local, 64, local_mr },
			a = { local + 64, 8, local_mr };
	struct rdmx_sge r = { local + 128, 256, local_mr };

	rdmx_tcp_ops.post_recv(conn, &r, 1, 100);
	rdmx_tcp_ops.post_recv(conn, &r, 1, 101);
	rdmx_tcp_ops.post_send(conn, &(struct rdmx_wr){ .opcode = RDMX_OP_WRITE,
							.sg_list = &s,
							.num_sge = 1,
							.remote_addr = 64,
							.rkey = 1 });
	rdmx_tcp_ops.post_send(conn, &(struct rdmx_wr){ .opcode = RDMX_OP_READ,
							.sg_list = &s,
							.num_sge = 1,
							.remote_addr = 64,
							.rkey = 1 });
	rdmx_tcp_ops.post_send(conn,
			       &(struct rdmx_wr){ .opcode = RDMX_OP_FETCH_ADD,
						  .sg_list = &a,
						  .num_sge = 1 });
	rdmx_tcp_ops.post_send(conn, &(struct rdmx_wr){ .opcode = RDMX_OP_SEND,
							.sg_list = &s,
							.num_sge = 1 });
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rdmx_conn_attr attr = { .cq = cq };
	struct rdmx_completion wc[16];
	struct rdmx_conn *conn;
	uint8_t *b, sink[4096], limit[RDMX_SW_HDR_LEN];
	int fds[2], idle = 0;

	if (size > 60000 || socketpair(AF_UNIX, SOCK_STREAM, 0, fds))
		return 0;
	if (rdmx_tcp_ops.conn_create(tcp, fds[0], false, &attr, &conn))
		abort();
	post_requests(conn);
	/* The peer's limit first, so our requests go out and answers match. */
	rdmx_sw_hdr_pack(&(struct rdmx_sw_hdr){ .type = RDMX_SW_CREDIT,
						.op = RDMX_SW_CREDIT_LIMIT,
						.arg0 = 64 },
			 limit);
	if (write(fds[1], limit, sizeof(limit)) != (ssize_t)sizeof(limit))
		abort();
	b = resolve(data, size);
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
	while (rdmx_poll(cq, wc, 16) > 0)
		;
	close(fds[1]);
	return 0;
}
