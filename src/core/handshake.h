/* SPDX-License-Identifier: MIT */
#ifndef RDMX_HANDSHAKE_H
#define RDMX_HANDSHAKE_H

#include "core.h"

struct rdmx_hs_result {
	unsigned transport; /* enum rdmx_transport_id */
	char reason[128];
};

/*
 * Run the handshake on a connected control socket until @deadline
 * (rdmx_now_us() time; 0: conn.handshake_timeout from now). Both log the
 * failure with the peer's address and the fix, and return RDMX_ERR_AUTH,
 * RDMX_ERR_PROTOCOL, RDMX_ERR_NO_TRANSPORT, RDMX_ERR_TIMEOUT or
 * RDMX_ERR_CONN_LOST. Only transports in the bit mask @allow are offered
 * (~0: every one). The server succeeds only once the client has
 * confirmed; a client that has sent its confirmation succeeds.
 */
rdmx_status rdmx_hs_client(struct rdmx_ctx *ctx, int fd, const char *peer,
			   uint64_t allow, uint64_t deadline,
			   struct rdmx_hs_result *res);
rdmx_status rdmx_hs_server(struct rdmx_ctx *ctx, int fd, const char *peer,
			   uint64_t allow, uint64_t deadline,
			   struct rdmx_hs_result *res);

/*
 * After the handshake, each side's private data (@len <=
 * RDMX_PRIVATE_DATA_MAX bytes), one message each way. The client sends
 * its own before the transport's setup and reads the server's after it;
 * the server reads the client's before the setup and sends its own when
 * rdmx_accept hands the connection out, so a listener's workers can set
 * up a connection before the accepting call's attr is known. The receive
 * fills @theirs (RDMX_PRIVATE_DATA_MAX bytes) and *theirs_len_p. Logged
 * like the handshake's failures.
 */
rdmx_status rdmx_hs_private_send(struct rdmx_ctx *ctx, int fd, const char *peer,
				 const void *mine, size_t len,
				 uint64_t deadline);
rdmx_status rdmx_hs_private_recv(struct rdmx_ctx *ctx, int fd, const char *peer,
				 uint64_t deadline, uint8_t *theirs,
				 uint16_t *theirs_len_p);

#endif
