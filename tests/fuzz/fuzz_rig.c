/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "fuzz_rig.h"

#define REGION 4096

void fuzz_rig_init(struct fuzz_rig *r)
{
	setenv("RDMX_PROGRESS_THREAD", "off", 1);
	setenv("RDMX_LOG_LEVEL", "off", 1);
	if (rdmx_ctx_create(NULL, &r->ctx) || rdmx_cq_create(r->ctx, &r->cq))
		abort();
	r->region = aligned_alloc(64, REGION);
	r->local = aligned_alloc(64, REGION);
	if (!r->region || !r->local ||
	    rdmx_mr_reg(r->ctx, r->region, REGION, 0xf, &r->region_mr) ||
	    rdmx_mr_reg(r->ctx, r->local, REGION, RDMX_ACCESS_LOCAL_WRITE,
			&r->local_mr))
		abort();
}

void fuzz_rig_resolve(const struct fuzz_rig *r, uint8_t *b, size_t size)
{
	for (size_t i = 0; i + 8 <= size; i++) {
		if (!memcmp(b + i, "ADDRADDR", 8))
			rdmx_put_be(b + i, (uintptr_t)r->region + 64, 8);
		else if (!memcmp(b + i, "RKEYRKEY", 8))
			rdmx_put_be(b + i, r->region_mr->rkey, 8);
	}
}

void fuzz_rig_post(const struct fuzz_rig *r,
		   const struct rdmx_transport_ops *ops, struct rdmx_conn *conn)
{
	struct rdmx_sge s = { r->local, 64, r->local_mr },
			a = { r->local + 64, 8, r->local_mr },
			v = { r->local + 128, 256, r->local_mr };
	const struct rdmx_wr wrs[] = {
		{ .opcode = RDMX_OP_WRITE,
		  .sg_list = &s,
		  .num_sge = 1,
		  .remote_addr = 64,
		  .rkey = 1 },
		{ .opcode = RDMX_OP_READ,
		  .sg_list = &s,
		  .num_sge = 1,
		  .remote_addr = 64,
		  .rkey = 1 },
		{ .opcode = RDMX_OP_FETCH_ADD, .sg_list = &a, .num_sge = 1 },
		{ .opcode = RDMX_OP_SEND, .sg_list = &s, .num_sge = 1 },
	};

	ops->post_recv(conn, &v, 1, 100);
	ops->post_recv(conn, &v, 1, 101);
	for (size_t i = 0; i < sizeof(wrs) / sizeof(wrs[0]); i++)
		ops->post_send(conn, &wrs[i]);
}
