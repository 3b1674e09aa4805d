/* SPDX-License-Identifier: MIT */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "tcp.h"

static const struct rdmx_sw_transport rdmx_tcp_transport = {
	.ops = &rdmx_tcp_ops,
	.pipe = &rdmx_tcp_pipe,
};

static rdmx_status rdmx_tcp_open(struct rdmx_ctx *ctx, void **priv_p)
{
	return rdmx_sw_open(ctx, &rdmx_tcp_transport, priv_p);
}

/* The control socket, past its handshake, is the data path. */
static rdmx_status rdmx_tcp_conn_create(void *priv, int fd, bool accepting,
					const struct rdmx_conn_attr *attr,
					uint64_t deadline,
					struct rdmx_conn **conn_p)
{
	const struct rdmx_config *cfg = &((struct rdmx_sw_ctx *)priv)->ctx->cfg;
	int snd = (int)cfg->tcp_send_buffer, rcv = (int)cfg->tcp_recv_buffer;
	unsigned stall = (unsigned)cfg->conn_stall_timeout_ms + 1000;

	(void)accepting;
	(void)deadline; /* nothing to wait for: the socket is the path */
	if (snd && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd)))
		rdmx_warn("tcp: SO_SNDBUF %d: %m", snd);
	if (rcv && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv)))
		rdmx_warn("tcp: SO_RCVBUF %d: %m", rcv);
	/*
	 * A shut window is slowness: the engine's watchdog finds dead hosts
	 * (tcp_pipe.c) and ends stalls itself, with their own status; the
	 * kernel's bound, a second later, is a backstop.
	 */
	rdmx_sock_user_timeout(fd, stall);
	return rdmx_sw_conn_create(priv, fd, -1, NULL, attr, conn_p);
}

const struct rdmx_transport_ops rdmx_tcp_ops = {
	.name = "tcp",
	.id = RDMX_TRANSPORT_TCP,
	.caps = RDMX_CAP_SEND | RDMX_CAP_WRITE | RDMX_CAP_WRITE_IMM |
		RDMX_CAP_READ | RDMX_CAP_ATOMIC,
	.open = rdmx_tcp_open,
	.close = rdmx_sw_close,
	.conn_create = rdmx_tcp_conn_create,
	.conn_start = rdmx_sw_conn_start,
	.conn_close = rdmx_sw_conn_close,
	.conn_check = rdmx_sw_conn_check,
	.post_send = rdmx_sw_post_send,
	.post_list = rdmx_sw_post_list,
	.post_recv = rdmx_sw_post_recv,
	.mr_revoke = rdmx_sw_mr_revoke,
	.srq = &rdmx_sw_srq_ops,
	.progress = rdmx_sw_progress,
	.idle = rdmx_sw_idle,
	.polled = rdmx_sw_polled,
	.served = rdmx_sw_caller_serves,
	.progress_fd = rdmx_sw_progress_fd,
};
