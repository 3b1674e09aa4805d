/* SPDX-License-Identifier: MIT */
#include "shm.h"

static const struct rdmx_sw_transport rdmx_shm_transport = {
	.ops = &rdmx_shm_ops,
	.pipe = &rdmx_shm_pipe,
};

static rdmx_status rdmx_shm_open(struct rdmx_ctx *ctx, void **priv_p)
{
	rdmx_status st = rdmx_sw_open(ctx, &rdmx_shm_transport, priv_p);

	if (!st)
		((struct rdmx_sw_ctx *)*priv_p)->byref_min =
			ctx->cfg.shm_single_copy_min;
	return st;
}

/* Map both rings over the control socket, which stays as liveness. */
static rdmx_status rdmx_shm_conn_create(void *priv, int fd, bool accepting,
					const struct rdmx_conn_attr *attr,
					uint64_t deadline,
					struct rdmx_conn **conn_p)
{
	struct rdmx_sw_ctx *e = priv;
	struct rdmx_shm_pipe *p;
	rdmx_status st;

	st = rdmx_shm_pipe_setup(e->ctx, fd, accepting, deadline, &p);
	if (st)
		return st;
	st = rdmx_sw_conn_create(e, p->door, p->ctl, p, attr, conn_p);
	if (!st && rdmx_shm_map_peer(p))
		(*conn_p)->info.flags |= RDMX_CONN_MAPPED;
	return st;
}

const struct rdmx_transport_ops rdmx_shm_ops = {
	.name = "shm",
	.id = RDMX_TRANSPORT_SHM,
	.caps = RDMX_CAP_SEND | RDMX_CAP_WRITE | RDMX_CAP_WRITE_IMM |
		RDMX_CAP_READ | RDMX_CAP_ATOMIC | RDMX_CAP_SAME_HOST,
	.open = rdmx_shm_open,
	.usable = rdmx_shm_usable,
	.close = rdmx_sw_close,
	.conn_create = rdmx_shm_conn_create,
	.conn_start = rdmx_sw_conn_start,
	.conn_close = rdmx_sw_conn_close,
	.conn_check = rdmx_sw_conn_check,
	.post_send = rdmx_sw_post_send,
	.post_list = rdmx_sw_post_list,
	.post_recv = rdmx_sw_post_recv,
	.mr_revoke = rdmx_shm_mr_revoke,
	.srq = &rdmx_sw_srq_ops,
	.progress = rdmx_sw_progress,
	.idle = rdmx_sw_idle,
	.polled = rdmx_sw_polled,
	.progress_fd = rdmx_sw_progress_fd,
	.remote_attach = rdmx_shm_remote_attach,
};
