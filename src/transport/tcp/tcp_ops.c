/* SPDX-License-Identifier: MIT */
#include "tcp.h"

const struct rdmx_transport_ops rdmx_tcp_ops = {
	.name = "tcp",
	.id = RDMX_TRANSPORT_TCP,
	.caps = RDMX_CAP_SEND | RDMX_CAP_WRITE | RDMX_CAP_WRITE_IMM |
		RDMX_CAP_READ | RDMX_CAP_ATOMIC,
	.open = rdmx_tcp_open,
	.close = rdmx_tcp_close,
	.conn_create = rdmx_tcp_conn_create,
	.conn_close = rdmx_tcp_conn_close,
	.post_send = rdmx_tcp_post_send,
	.post_recv = rdmx_tcp_post_recv,
	.progress = rdmx_tcp_progress,
	.progress_fd = rdmx_tcp_progress_fd,
};
