// SPDX-License-Identifier: MIT
/* The KV store's messages (kv_proto.h). */
#include <stdlib.h>
#include <string.h>

#include "kv_proto.h"

void *kv_msgs_alloc(size_t align, size_t len)
{
	void *p = aligned_alloc(align, (len + align - 1) / align * align);

	if (p)
		memset(p, 0, len);
	return p;
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

void kv_req_encode(uint8_t *buf, const struct kv_req *r)
{
	put32(buf, KV_MAGIC);
	buf[4] = r->op;
	buf[5] = 0;
	buf[6] = (uint8_t)(r->key_len >> 8);
	buf[7] = (uint8_t)r->key_len;
	put64(buf + 8, r->req_id);
	put64(buf + 16, r->a);
	put64(buf + 24, r->b);
}

bool kv_req_decode(const uint8_t *buf, uint32_t len, struct kv_req *r)
{
	if (len < KV_REQ_HDR || get32(buf) != KV_MAGIC)
		return false;
	r->op = buf[4];
	r->key_len = (uint16_t)(buf[6] << 8 | buf[7]);
	r->req_id = get64(buf + 8);
	r->a = get64(buf + 16);
	r->b = get64(buf + 24);
	if (r->key_len > RDMX_KV_KEY_MAX ||
	    (uint32_t)KV_REQ_HDR + r->key_len > len)
		return false;
	r->key = buf + KV_REQ_HDR;
	r->payload = r->key + r->key_len;
	r->payload_len = len - KV_REQ_HDR - r->key_len;
	switch (r->op) {
	case KV_OP_HELLO:
		return r->payload_len == RDMX_REMOTE_PACKED_LEN;
	case KV_OP_PUT:
		return r->key_len && r->payload_len == r->a;
	case KV_OP_GET:
	case KV_OP_PUT_READ:
	case KV_OP_DEL:
		return r->key_len && !r->payload_len;
	default:
		return false;
	}
}

void kv_answer_encode(uint8_t *buf, const struct kv_answer *a)
{
	memset(buf, 0, KV_ANSWER_LEN);
	put32(buf, KV_MAGIC);
	buf[4] = a->status;
	put64(buf + 8, a->req_id);
	put64(buf + 16, a->len);
}

bool kv_answer_decode(const uint8_t *buf, uint32_t len, struct kv_answer *a)
{
	if (len != KV_ANSWER_LEN || get32(buf) != KV_MAGIC || buf[4] > KV_IOERR)
		return false;
	a->status = buf[4];
	a->req_id = get64(buf + 8);
	a->len = get64(buf + 16);
	return true;
}
