/* SPDX-License-Identifier: MIT */
#ifndef RDMX_HANDSHAKE_H
#define RDMX_HANDSHAKE_H

#include "core.h"

struct rdmx_hs_result {
	unsigned transport; /* enum rdmx_transport_id */
	char reason[128];
};

/*
 * Run the handshake on a connected control socket, within
 * conn.handshake_timeout. Both log the failure with the peer's address and
 * the fix, and return RDMX_ERR_AUTH, RDMX_ERR_PROTOCOL,
 * RDMX_ERR_NO_TRANSPORT, RDMX_ERR_TIMEOUT or RDMX_ERR_CONN_LOST. Only
 * transports in the bit mask @allow are offered (~0: every one).
 */
rdmx_status rdmx_hs_client(struct rdmx_ctx *ctx, int fd, const char *peer,
			   uint64_t allow, struct rdmx_hs_result *res);
rdmx_status rdmx_hs_server(struct rdmx_ctx *ctx, int fd, const char *peer,
			   uint64_t allow, struct rdmx_hs_result *res);

#endif
