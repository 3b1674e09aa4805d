/* SPDX-License-Identifier: MIT */
#include "verbs.h"

const struct rdmx_transport_ops rdmx_verbs_ops = {
	.name = "verbs",
	.id = RDMX_TRANSPORT_VERBS,
	.caps = RDMX_CAP_SEND | RDMX_CAP_WRITE | RDMX_CAP_WRITE_IMM |
		RDMX_CAP_READ | RDMX_CAP_ATOMIC,
	.open = rdmx_verbs_open,
	.close = rdmx_verbs_close,
	.usable = rdmx_verbs_usable,
	.reg_mr = rdmx_verbs_reg_mr,
	.dereg_mr = rdmx_verbs_dereg_mr,
	.conn_create = rdmx_verbs_conn_create,
	.conn_start = rdmx_verbs_conn_start,
	.conn_close = rdmx_verbs_conn_close,
	.conn_check = rdmx_verbs_conn_check,
	.post_send = rdmx_verbs_post_send,
	.post_list = rdmx_verbs_post_list,
	.post_recv = rdmx_verbs_post_recv,
	.srq = &rdmx_verbs_srq_ops,
	.progress = rdmx_verbs_progress,
	.progress_fd = rdmx_verbs_progress_fd,
};
