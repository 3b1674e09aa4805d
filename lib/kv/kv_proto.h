/* SPDX-License-Identifier: MIT */
/*
 * The KV store's wire format. Requests and answers are SENDs; a GET's value
 * arrives by the server's WRITE into the client's buffer before the answer,
 * a large PUT's value is taken by the server's READ from it. Fields are
 * big-endian at fixed offsets.
 *
 *   REQUEST  0 magic u32 | 4 op u8 | 5 reserved u8 | 6 key_len u16 |
 *            8 req_id u64 | 16 a u64 | 24 b u64 | 32 key | value (inline)
 *     HELLO     payload: the client buffer's rdmx_remote_pack (24 bytes)
 *     GET       a: offset in the client's buffer, b: room there
 *     PUT       a: value length; the value follows the key
 *     PUT_READ  a: offset of the value in the client's buffer, b: length
 *     DEL
 *   ANSWER   0 magic u32 | 4 status u8 | 5 reserved[3] | 8 req_id u64 |
 *            16 len u64 (GET: the value's length; TOO_LARGE: the room needed;
 *            HELLO: values of this many bytes or more are best sent as
 *            PUT_READ, 0: only those too large to travel inline)
 */
#ifndef RDMX_KV_PROTO_H
#define RDMX_KV_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdmx.h"
#include "rdmx_kv.h"

#define KV_MAGIC 0x524b5631u /* "RKV1" */
#define KV_REQ_HDR 32
#define KV_ANSWER_LEN 24
#define KV_MSG 8192 /* a request's RECV buffer */
/* Values up to this travel inline in a PUT (with the longest key). */
#define KV_INLINE_MAX (KV_MSG - KV_REQ_HDR - RDMX_KV_KEY_MAX)

_Static_assert(KV_INLINE_MAX >= 4096, "4 KiB values travel inline");

/*
 * Where the server maps the client's buffer (RDMX_CONN_MAPPED: shm), its
 * READ of a value is one memcpy, and inline the value is copied three
 * times on the way (into the ring, out of it into a RECV, into the
 * pool). From 1 KiB the READ wins: kv bench over shm, 32 clients, SET p99
 * 149-168 -> 121-126 us at 1 KiB, 284-298 -> 143-158 us at 4 KiB, with
 * ops/s the same or up to 20% more; at 256 B no gain.
 */
#define KV_PULL_MAPPED 1024

enum kv_op {
	KV_OP_HELLO = 1,
	KV_OP_GET,
	KV_OP_PUT,
	KV_OP_PUT_READ,
	KV_OP_DEL,
};

enum kv_status {
	KV_OK = 0,
	KV_NOT_FOUND,
	KV_TOO_LARGE,
	KV_NOMEM,
	KV_BAD,
	KV_IOERR, /* the append-only file could not take it */
};

struct kv_req {
	uint8_t op; /* enum kv_op */
	uint16_t key_len;
	uint64_t req_id, a, b;
	const uint8_t *key; /* into the message */
	const uint8_t *payload; /* after the key */
	uint32_t payload_len;
};

struct kv_answer {
	uint8_t status; /* enum kv_status */
	uint64_t req_id, len;
};

/*
 * Message buffers (requests, answers, RECVs), @align-aligned, every page
 * touched before use: a page's first touch is a fault, and each was taken
 * inside a request. Posting a client's first 16 GETs took 230-380 us
 * (kv bench, 32 clients x 16 over tcp; 30-90 us touched), and the
 * server's 8 MiB of RECVs paid theirs as each was first filled. NULL
 * when out of memory.
 */
void *kv_msgs_alloc(size_t align, size_t len);

/* Encode the header of @r at @buf; the key and payload follow it there. */
void kv_req_encode(uint8_t *buf, const struct kv_req *r);
/* Decode @len bytes; false when malformed (lengths checked). */
bool kv_req_decode(const uint8_t *buf, uint32_t len, struct kv_req *r);
void kv_answer_encode(uint8_t *buf, const struct kv_answer *a);
bool kv_answer_decode(const uint8_t *buf, uint32_t len, struct kv_answer *a);

#endif
