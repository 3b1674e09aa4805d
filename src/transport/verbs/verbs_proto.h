/* SPDX-License-Identifier: MIT */
/*
 * The verbs transport's one message on the control socket, sent by each
 * side after the handshake and before the rdma_cm exchange:
 *   be32 magic "RDMV", be32 version, be32 rdma_cm port (the accepting side
 *   listens there; 0 from the connecting side), be32 the largest path MTU
 *   the sender wants in bytes (verbs.mtu; 0: the route's),
 *   be64 address and be32 rkey of the sender's credit word, be32 flags,
 *   16 bytes of token: from the accepting side, random; the connecting
 *   side puts it first in its CONNECT_REQUEST's private data, and the
 *   acceptor rejects any request without it (another host may reach the
 *   rdma_cm port first). Zero from the connecting side.
 * RDMX_VERBS_F_SRQ: the sender's RECVs come from a shared receive queue.
 * It grants no credits then: SENDs towards it go straight to the NIC,
 * which retries them on RNR (the sender asked rdma_cm for infinite RNR
 * retries) until a RECV is posted. The connecting side sets it here; the
 * accepting side, whose srq is known only when rdmx_accept hands the
 * connection out, sets it in the first byte of the private data of its
 * rdma_cm answer (RDMX_VERBS_TOKEN_LEN bytes), and leaves it clear here.
 *
 * On iWARP the connecting side then sends RDMX_VERBS_UP, one byte on the
 * control socket, once its side is established, and the accepting side
 * puts nothing on the QP before it: siw drops a connection whose first
 * frames arrive before it has read the MPA reply (what the RTR of MPA
 * version 2's peer-to-peer mode is for). Version 3: the answer's flags
 * and this byte.
 *
 * Once a connection is started, each side's progress sends RDMX_VERBS_PING
 * on the control socket whenever it has sent nothing there for a quarter
 * of tcp.user_timeout, and the other side reads and drops it. The kernel
 * then always has something of ours to retransmit, and ends the socket
 * (TCP_USER_TIMEOUT) only when the peer's host acknowledges nothing for
 * tcp.user_timeout: a lost packet or two is not a dead host, as a lost
 * keepalive probe would be. Version 4: this byte.
 *
 * RDMX_VERBS_F_KEYS: the sender's connection goes through a device other
 * than its context's first, and the low half of its rkeys is the first
 * device's key, not this one's. Before its first one-sided request naming
 * an rkey, the other side asks on the control socket:
 *   RDMX_VERBS_KEY_ASK, be64 rkey, be64 the request's remote address,
 * and the sender answers, from its progress engine:
 *   RDMX_VERBS_KEY_IS, be64 rkey, be32 key on its device, u8 1 (granted:
 *   the rkey is live and holds the address) or 0 (refused: the key of a
 *   registration that grants no remote access, so that the asking NIC
 *   fails the request with a remote access error, as any refusal).
 * The asker keeps granted keys per rkey; the device still checks bounds
 * and access on every request. Version 5: these.
 */
#ifndef RDMX_VERBS_PROTO_H
#define RDMX_VERBS_PROTO_H

#include <stdint.h>
#include <string.h>

#include "bytes.h"

#define RDMX_VERBS_MAGIC 0x52444d56u /* "RDMV" */
#define RDMX_VERBS_VERSION 5
#define RDMX_VERBS_SETUP_LEN 48
#define RDMX_VERBS_TOKEN_LEN 16
#define RDMX_VERBS_F_SRQ 1u
#define RDMX_VERBS_F_KEYS 2u
#define RDMX_VERBS_UP 0x55 /* 'U' */
#define RDMX_VERBS_PING 0x50 /* 'P' */
#define RDMX_VERBS_KEY_ASK 0x4b /* 'K' */
#define RDMX_VERBS_KEY_ASK_LEN 17
#define RDMX_VERBS_KEY_IS 0x6b /* 'k' */
#define RDMX_VERBS_KEY_IS_LEN 14

struct rdmx_verbs_setup {
	uint32_t cm_port;
	uint32_t mtu; /* bytes; 0: auto */
	uint64_t credit_addr;
	uint32_t credit_rkey;
	uint32_t flags; /* RDMX_VERBS_F_* */
	uint8_t token[RDMX_VERBS_TOKEN_LEN];
};

_Static_assert(RDMX_VERBS_SETUP_LEN == 4 * 4 + 8 + 2 * 4 + RDMX_VERBS_TOKEN_LEN,
	       "setup size");

static inline void rdmx_verbs_setup_pack(const struct rdmx_verbs_setup *s,
					 uint8_t b[RDMX_VERBS_SETUP_LEN])
{
	rdmx_put_be(b, RDMX_VERBS_MAGIC, 4);
	rdmx_put_be(b + 4, RDMX_VERBS_VERSION, 4);
	rdmx_put_be(b + 8, s->cm_port, 4);
	rdmx_put_be(b + 12, s->mtu, 4);
	rdmx_put_be(b + 16, s->credit_addr, 8);
	rdmx_put_be(b + 24, s->credit_rkey, 4);
	rdmx_put_be(b + 28, s->flags, 4);
	memcpy(b + 32, s->token, RDMX_VERBS_TOKEN_LEN);
}

static inline int rdmx_verbs_setup_unpack(const uint8_t b[RDMX_VERBS_SETUP_LEN],
					  struct rdmx_verbs_setup *s)
{
	if (rdmx_get_be(b, 4) != RDMX_VERBS_MAGIC ||
	    rdmx_get_be(b + 4, 4) != RDMX_VERBS_VERSION ||
	    rdmx_get_be(b + 8, 4) > 65535)
		return -1;
	s->cm_port = (uint32_t)rdmx_get_be(b + 8, 4);
	s->mtu = (uint32_t)rdmx_get_be(b + 12, 4);
	s->credit_addr = rdmx_get_be(b + 16, 8);
	s->credit_rkey = (uint32_t)rdmx_get_be(b + 24, 4);
	s->flags = (uint32_t)rdmx_get_be(b + 28, 4); /* unknown bits: ignored */
	memcpy(s->token, b + 32, RDMX_VERBS_TOKEN_LEN);
	return 0;
}

#endif
