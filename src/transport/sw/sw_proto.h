/* SPDX-License-Identifier: MIT */
/*
 * Wire format of the software RC engine (the tcp and shm transports). Only
 * this file knows the byte layout.
 *
 * Every frame is a header of 16 to 56 bytes, as its type needs, then
 * rdmx_sw_wire_len() payload bytes: `length` data bytes for SEND, WRITE,
 * WRITE_IMM and READ_RESP (READ_REQ's length is the amount asked for;
 * every other type has length 0). With RDMX_SW_F_BYREF (pipes that can
 * reach the peer's memory: shm), a WRITE, WRITE_IMM or READ_REQ carries
 * `op` descriptors of the initiator's buffers instead (be64 address, be64
 * length each) and the target moves the data itself, once, after its
 * access check; the READ_RESP then carries nothing. Integers are
 * big-endian.
 *
 *    0  u8   version        RDMX_SW_PROTO_VERSION
 *    1  u8   type           enum rdmx_sw_type
 *    2  u8   op             ATOMIC_REQ: enum rdmx_sw_atomic; NAK: code;
 *                           BYREF requests: descriptor count (1..16)
 *    3  u8   flags          RDMX_SW_F_BYREF
 *    4  be32 credits        RECVs the sender posted since its last frame
 *    8  be64 seq            request sequence; answers echo it (an ACK:
 *                           the last request it covers); a CREDIT ASK:
 *                           the sender's requests in flight on credits
 *   ---- ACK, NAK: 16 bytes
 *   16  be32 length
 *   20  be32 (zero)
 *   ---- SEND, READ_RESP: 24 bytes
 *   24  be64 arg0           WRITE_IMM: imm; ATOMIC_REQ: add or compare;
 *                           ATOMIC_RESP: the value before
 *   ---- ATOMIC_RESP: 32 bytes
 *   32  be64 arg1           ATOMIC_REQ: swap
 *   ---- CREDIT: 40 bytes
 *   40  be64 addr           one-sided requests: target address
 *   48  be64 rkey           one-sided requests (all 64 bits are checked)
 *   ---- WRITE, WRITE_IMM, READ_REQ, ATOMIC_REQ: 56 bytes
 *
 * A header ends where its type's last field does: the fields after it are
 * zero. So the frames of a small message's round trip are short (a SEND of
 * 8 bytes and the ACK before it fit one 64-byte line with the shm ring's
 * stamp), and the first two bytes say how many follow.
 *
 * Every request gets exactly one answer, in request order: SEND, WRITE and
 * WRITE_IMM an ACK (one ACK may cover several: "all up to seq placed") or
 * a NAK; READ_REQ a READ_RESP or a NAK; ATOMIC_REQ an ATOMIC_RESP or a NAK.
 * SEND and WRITE_IMM each spend one credit, granted by the receiver as it
 * posts RECVs, so nothing waits on retries.
 *
 * A receiver whose RECVs come from a shared receive queue cannot promise
 * each peer its own: it grants from the pool by demand. Its first frame is
 * a CREDIT with op SHARED; from then on the sender, when a request waits
 * for a credit, ASKs (arg0: requests waiting for one; arg1: the credits it
 * has received so far, so the receiver can subtract grants still on the
 * way; seq: its requests in flight that spent one, so the receiver can
 * keep it at the level it sends at, in flight and waiting together; 0
 * from senders before that field). The receiver may REVOKE the credits a
 * peer holds and does not use; the peer answers RETURN (arg0: how many it
 * gives back, maybe 0).
 *
 * Each side's first frame is a CREDIT with op LIMIT: arg0 is how many
 * requests the peer may have outstanding at it (conn.max_peer_requests),
 * and the peer commits no request before it has heard it. A REVOKE counts
 * as one more, its RETURN as its answer. A side that receives more is
 * being flooded and ends the connection: what it owes a peer is bounded.
 */
#ifndef RDMX_SW_PROTO_H
#define RDMX_SW_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bytes.h"
#include "rdmx.h"

/* 1: a 48-byte header, a 32-bit rkey; 2: every header 56 bytes */
#define RDMX_SW_PROTO_VERSION 3
#define RDMX_SW_HDR_LEN 56 /* the longest header */
#define RDMX_SW_HDR_MIN 16 /* the shortest */
#define RDMX_SW_MAX_MSG (1u << 31)
#define RDMX_SW_MAX_CREDITS 65536 /* the largest tcp.rx_depth */
#define RDMX_SW_REF_LEN 16 /* one BYREF descriptor */

enum {
	RDMX_SW_F_BYREF = 1 << 0,
};

enum rdmx_sw_type {
	RDMX_SW_SEND = 1,
	RDMX_SW_WRITE,
	RDMX_SW_WRITE_IMM,
	RDMX_SW_READ_REQ,
	RDMX_SW_ATOMIC_REQ,
	RDMX_SW_ACK,
	RDMX_SW_NAK,
	RDMX_SW_READ_RESP,
	RDMX_SW_ATOMIC_RESP,
	RDMX_SW_CREDIT,
	RDMX_SW_TYPE_MAX = RDMX_SW_CREDIT,
};

enum rdmx_sw_atomic {
	RDMX_SW_FETCH_ADD = 1,
	RDMX_SW_CMP_SWAP = 2,
};

/* `op` of a CREDIT frame. */
enum rdmx_sw_credit_op {
	RDMX_SW_CREDIT_GRANT = 0, /* the credits field only */
	RDMX_SW_CREDIT_SHARED = 1, /* receiver: grants come by demand */
	RDMX_SW_CREDIT_ASK = 2, /* sender: arg0 waiting, arg1 received */
	RDMX_SW_CREDIT_REVOKE = 3, /* receiver: give back what you hold */
	RDMX_SW_CREDIT_RETURN = 4, /* sender: arg0 credits given back */
	RDMX_SW_CREDIT_LIMIT = 5, /* arg0: requests you may have at me */
	RDMX_SW_CREDIT_OP_MAX = RDMX_SW_CREDIT_LIMIT,
};

enum rdmx_sw_nak {
	RDMX_SW_NAK_ACCESS = 1, /* rkey, bounds, access flags or alignment */
	RDMX_SW_NAK_LENGTH = 2, /* SEND larger than the posted RECV */
};

struct rdmx_sw_hdr {
	uint8_t version;
	uint8_t type;
	uint8_t op;
	uint8_t flags;
	uint32_t credits;
	uint32_t length;
	uint64_t rkey;
	uint64_t seq;
	uint64_t addr;
	uint64_t arg0;
	uint64_t arg1;
};

/* Header bytes of a frame of @type (0: no such type). */
static inline size_t rdmx_sw_type_hdr_len(uint8_t type)
{
	static const uint8_t len[RDMX_SW_TYPE_MAX + 1] = {
		[RDMX_SW_SEND] = 24,	    [RDMX_SW_WRITE] = 56,
		[RDMX_SW_WRITE_IMM] = 56,   [RDMX_SW_READ_REQ] = 56,
		[RDMX_SW_ATOMIC_REQ] = 56,  [RDMX_SW_ACK] = 16,
		[RDMX_SW_NAK] = 16,	    [RDMX_SW_READ_RESP] = 24,
		[RDMX_SW_ATOMIC_RESP] = 32, [RDMX_SW_CREDIT] = 40,
	};

	return type <= RDMX_SW_TYPE_MAX ? len[type] : 0;
}

/*
 * Header bytes of the frame that starts at @b, from its first two; a
 * frame of another version or of no type gets RDMX_SW_HDR_MIN, for
 * rdmx_sw_hdr_unpack to refuse.
 */
static inline size_t rdmx_sw_hdr_len(const uint8_t *b)
{
	size_t n = rdmx_sw_type_hdr_len(b[1]);

	return b[0] == RDMX_SW_PROTO_VERSION && n ? n : RDMX_SW_HDR_MIN;
}

/* Pack @h into @b; returns the header's length (its type's). */
static inline size_t rdmx_sw_hdr_pack(const struct rdmx_sw_hdr *h,
				      uint8_t b[RDMX_SW_HDR_LEN])
{
	size_t n = rdmx_sw_type_hdr_len(h->type);

	if (!n) /* no such type: a peer's test of our checks */
		n = RDMX_SW_HDR_LEN;
	b[0] = RDMX_SW_PROTO_VERSION;
	b[1] = h->type;
	b[2] = h->op;
	b[3] = h->flags;
	rdmx_put_be(b + 4, h->credits, 4);
	rdmx_put_be(b + 8, h->seq, 8);
	if (n > 16) {
		rdmx_put_be(b + 16, h->length, 4);
		rdmx_put_be(b + 20, 0, 4);
	}
	if (n > 24)
		rdmx_put_be(b + 24, h->arg0, 8);
	if (n > 32)
		rdmx_put_be(b + 32, h->arg1, 8);
	if (n > 40) {
		rdmx_put_be(b + 40, h->addr, 8);
		rdmx_put_be(b + 48, h->rkey, 8);
	}
	return n;
}

/* True for the types whose `length` bytes follow the header. */
static inline int rdmx_sw_has_payload(uint8_t type)
{
	return type == RDMX_SW_SEND || type == RDMX_SW_WRITE ||
	       type == RDMX_SW_WRITE_IMM || type == RDMX_SW_READ_RESP;
}

/* True for the peer's requests that want an answer (REVOKE: a RETURN). */
static inline bool rdmx_sw_is_request(const struct rdmx_sw_hdr *h)
{
	return (h->type >= RDMX_SW_SEND && h->type <= RDMX_SW_ATOMIC_REQ) ||
	       (h->type == RDMX_SW_CREDIT && h->op == RDMX_SW_CREDIT_REVOKE);
}

/* True for the frames that answer one request (an ACK may grow to more). */
static inline bool rdmx_sw_is_answer(const struct rdmx_sw_hdr *h)
{
	return (h->type >= RDMX_SW_ACK && h->type <= RDMX_SW_ATOMIC_RESP) ||
	       (h->type == RDMX_SW_CREDIT && h->op == RDMX_SW_CREDIT_RETURN);
}

/* Bytes that follow a header on the wire. */
static inline uint32_t rdmx_sw_wire_len(const struct rdmx_sw_hdr *h)
{
	if (h->flags & RDMX_SW_F_BYREF)
		return h->type == RDMX_SW_READ_RESP ? 0
						    : h->op * RDMX_SW_REF_LEN;
	return rdmx_sw_has_payload(h->type) ? h->length : 0;
}

/*
 * Decode and validate the header at @b, of rdmx_sw_hdr_len(b) bytes:
 * version, type, flags, length bound and the fields each type must leave
 * zero. RDMX_ERR_PROTOCOL on any fault.
 */
static inline rdmx_status rdmx_sw_hdr_unpack(const uint8_t *b,
					     struct rdmx_sw_hdr *h)
{
	size_t n = rdmx_sw_hdr_len(b);

	*h = (struct rdmx_sw_hdr){
		.version = b[0], .type = b[1], .op = b[2], .flags = b[3]
	};
	h->credits = (uint32_t)rdmx_get_be(b + 4, 4);
	h->seq = rdmx_get_be(b + 8, 8);
	if (n > 16) {
		h->length = (uint32_t)rdmx_get_be(b + 16, 4);
		if (rdmx_get_be(b + 20, 4))
			return RDMX_ERR_PROTOCOL;
	}
	if (n > 24)
		h->arg0 = rdmx_get_be(b + 24, 8);
	if (n > 32)
		h->arg1 = rdmx_get_be(b + 32, 8);
	if (n > 40) {
		h->addr = rdmx_get_be(b + 40, 8);
		h->rkey = rdmx_get_be(b + 48, 8);
	}
	if (h->version != RDMX_SW_PROTO_VERSION || !h->type ||
	    h->type > RDMX_SW_TYPE_MAX || h->length > RDMX_SW_MAX_MSG ||
	    (h->flags & ~RDMX_SW_F_BYREF))
		return RDMX_ERR_PROTOCOL;
	if (h->flags & RDMX_SW_F_BYREF) {
		bool req = h->type == RDMX_SW_WRITE ||
			   h->type == RDMX_SW_WRITE_IMM ||
			   h->type == RDMX_SW_READ_REQ;

		if (!(req || h->type == RDMX_SW_READ_RESP) ||
		    (req && (!h->op || h->op > RDMX_MAX_SGE)) ||
		    (!req && h->op))
			return RDMX_ERR_PROTOCOL;
	}
	if (!rdmx_sw_has_payload(h->type) && h->type != RDMX_SW_READ_REQ &&
	    h->length)
		return RDMX_ERR_PROTOCOL;
	if (h->type == RDMX_SW_ATOMIC_REQ && h->op != RDMX_SW_FETCH_ADD &&
	    h->op != RDMX_SW_CMP_SWAP)
		return RDMX_ERR_PROTOCOL;
	if (h->type == RDMX_SW_CREDIT && h->op > RDMX_SW_CREDIT_OP_MAX)
		return RDMX_ERR_PROTOCOL;
	if (h->type == RDMX_SW_NAK && h->op != RDMX_SW_NAK_ACCESS &&
	    h->op != RDMX_SW_NAK_LENGTH)
		return RDMX_ERR_PROTOCOL;
	return RDMX_OK;
}

#endif
