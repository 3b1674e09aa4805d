// SPDX-License-Identifier: MIT
/*
 * The KV client: one connection, a registered buffer the server WRITEs GET
 * values into (and READs large PUT values from), and up to KV_DEPTH
 * requests in flight. One thread uses a client at a time.
 *
 * The buffer is handed out by a first-fit allocator of extents: a GET
 * reserves room, and when the answer says how long the value is, the rest
 * of the room goes back at once; the value's part goes back at release.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv.h"

#define KV_DEPTH 64 /* requests in flight */
#define KV_ALIGN 64
#define KV_RESULTS (2 * KV_DEPTH)

struct kv_ext {
	uint64_t off, len;
};

struct kv_slot {
	bool busy;
	enum rdmx_kv_op op;
	uint64_t tag;
	uint16_t gen;
	uint64_t off, room; /* the buffer part it holds, if any */
	bool own_room; /* a GET's room, or a PUT's copy: give back */
};

struct rdmx_kv_client {
	struct rdmx_cq *cq;
	struct rdmx_conn *conn;
	struct rdmx_ctx *ctx;
	uint8_t *buf; /* rdmx_mem_alloc: a same-host store maps it */
	uint64_t buf_len;
	struct rdmx_mr *buf_mr;
	uint8_t *msgs; /* KV_DEPTH sends of KV_MSG, then the answers' RECVs */
	struct rdmx_mr *msgs_mr;
	struct kv_slot slot[KV_DEPTH];
	uint32_t busy;
	struct kv_ext *free; /* sorted by offset, merged */
	uint32_t nfree, free_cap;
	struct rdmx_kv_result results[KV_RESULTS]; /* taken, not yet polled */
	uint32_t rhead, rcount;
	/*
	 * The first request after a look at the cq leaves at once; those
	 * that follow it wait for the next look or rdmx_kv_flush, and go as
	 * one list (kv_flush): a pipelining caller's requests share a frame
	 * train, one sendmsg on tcp. Each sge lives beside its request.
	 */
	struct rdmx_wr pend[KV_DEPTH];
	struct rdmx_sge pend_sg[KV_DEPTH];
	uint32_t npend;
	/* Values of this size or more go by PUT_READ (the hello's answer). */
	uint64_t pull_from;
	struct rdmx_kv_attr attr;
	rdmx_status dead;
};

static double kv_client_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- the buffer's extents ----------------------------------------------- */

static bool kv_ext_alloc(struct rdmx_kv_client *c, uint64_t len, uint64_t *off)
{
	len = (len + KV_ALIGN - 1) & ~(uint64_t)(KV_ALIGN - 1);
	for (uint32_t i = 0; i < c->nfree; i++) {
		if (c->free[i].len < len)
			continue;
		*off = c->free[i].off;
		c->free[i].off += len;
		c->free[i].len -= len;
		if (!c->free[i].len) {
			memmove(&c->free[i], &c->free[i + 1],
				(c->nfree - i - 1) * sizeof(c->free[0]));
			c->nfree--;
		}
		return true;
	}
	return false;
}

static void kv_ext_free(struct rdmx_kv_client *c, uint64_t off, uint64_t len)
{
	uint32_t i = 0;

	len = (len + KV_ALIGN - 1) & ~(uint64_t)(KV_ALIGN - 1);
	if (!len)
		return;
	while (i < c->nfree && c->free[i].off < off)
		i++;
	if (i && c->free[i - 1].off + c->free[i - 1].len == off) {
		c->free[i - 1].len += len;
		if (i < c->nfree && off + len == c->free[i].off) {
			c->free[i - 1].len += c->free[i].len;
			memmove(&c->free[i], &c->free[i + 1],
				(c->nfree - i - 1) * sizeof(c->free[0]));
			c->nfree--;
		}
		return;
	}
	if (i < c->nfree && off + len == c->free[i].off) {
		c->free[i].off = off;
		c->free[i].len += len;
		return;
	}
	if (c->nfree == c->free_cap) { /* values held apart make holes */
		void *p = realloc(c->free, 2 * c->free_cap * sizeof(*c->free));

		if (!p) { /* lose the bytes, never the order */
			kv_log(RDMX_LOG_WARN,
			       "no memory to track %llu free "
			       "bytes of the buffer",
			       (unsigned long long)len);
			return;
		}
		c->free = p;
		c->free_cap *= 2;
	}
	memmove(&c->free[i + 1], &c->free[i],
		(c->nfree - i) * sizeof(c->free[0]));
	c->free[i] = (struct kv_ext){ off, len };
	c->nfree++;
}

/* ---- connection --------------------------------------------------------- */

static uint8_t *kv_msg(struct rdmx_kv_client *c, uint32_t i)
{
	return c->msgs + (size_t)i * KV_MSG;
}

static uint8_t *kv_ans(struct rdmx_kv_client *c, uint32_t i)
{
	return c->msgs + (size_t)KV_DEPTH * KV_MSG + (size_t)i * KV_ALIGN;
}

static rdmx_status kv_recv_post(struct rdmx_kv_client *c, uint32_t i)
{
	struct rdmx_sge sg = { kv_ans(c, i), KV_ALIGN, c->msgs_mr };

	return rdmx_post_recv(c->conn, &sg, 1, i);
}

static void kv_result_push(struct rdmx_kv_client *c,
			   const struct rdmx_kv_result *r)
{
	c->results[(c->rhead + c->rcount++) % KV_RESULTS] = *r;
}

/* The connection is gone: everything in flight fails, once. */
static void kv_client_fail(struct rdmx_kv_client *c, rdmx_status st)
{
	if (c->dead)
		return;
	kv_log(RDMX_LOG_ERROR, "server lost: %s", rdmx_strerror(st));
	c->dead = RDMX_ERR_CONN_LOST;
	c->npend = 0; /* their slots fail below */
	rdmx_conn_close(c->conn);
	c->conn = NULL;
	for (uint32_t i = 0; i < KV_DEPTH; i++) {
		struct kv_slot *s = &c->slot[i];
		struct rdmx_kv_result r = { .tag = s->tag,
					    .op = s->op,
					    .status = RDMX_ERR_CONN_LOST };

		if (!s->busy)
			continue;
		if (s->own_room)
			kv_ext_free(c, s->off, s->room);
		s->busy = false;
		c->busy--;
		if (s->op) /* not the hello */
			kv_result_push(c, &r);
	}
}

static rdmx_status kv_status_of(uint8_t st)
{
	switch (st) {
	case KV_OK:
		return RDMX_OK;
	case KV_NOT_FOUND:
		return RDMX_ERR_NOT_FOUND;
	case KV_TOO_LARGE:
		return RDMX_ERR_LOCAL_LENGTH;
	case KV_NOMEM:
		return RDMX_ERR_NOMEM;
	case KV_IOERR:
		return RDMX_ERR_SYSTEM;
	default:
		return RDMX_ERR_PROTOCOL;
	}
}

/* One answer arrived in RECV buffer @i. */
static void kv_answer(struct rdmx_kv_client *c, uint32_t i, uint32_t len)
{
	struct kv_answer a;
	struct kv_slot *s;
	struct rdmx_kv_result r = { 0 };
	uint32_t idx;

	if (!kv_answer_decode(kv_ans(c, i), len, &a) ||
	    (idx = (uint32_t)(a.req_id & 0xffff)) >= KV_DEPTH ||
	    !c->slot[idx].busy ||
	    c->slot[idx].gen != (uint16_t)(a.req_id >> 16)) {
		kv_client_fail(c, RDMX_ERR_PROTOCOL);
		return;
	}
	kv_recv_post(c, i);
	s = &c->slot[idx];
	r.tag = s->tag;
	r.op = s->op;
	r.status = kv_status_of(a.status);
	if (s->op == RDMX_KV_GET && r.status == RDMX_OK && a.len > s->room) {
		kv_client_fail(c, RDMX_ERR_PROTOCOL);
		return;
	}
	if (s->op == RDMX_KV_GET &&
	    (r.status == RDMX_OK || r.status == RDMX_ERR_LOCAL_LENGTH)) {
		r.value.len = a.len;
		if (r.status == RDMX_OK) {
			uint64_t keep = (a.len + KV_ALIGN - 1) &
					~(uint64_t)(KV_ALIGN - 1);

			r.value.data = c->buf + s->off;
			r.value.off = s->off;
			r.value.room = keep;
			kv_ext_free(c, s->off + keep, s->room - keep);
			s->own_room = false;
		}
	}
	if (!s->op && r.status == RDMX_OK && a.len) /* the hello's */
		c->pull_from = a.len;
	if (s->own_room)
		kv_ext_free(c, s->off, s->room);
	s->busy = false;
	c->busy--;
	if (s->op)
		kv_result_push(c, &r);
}

/*
 * Send the requests made since the last call as one list. What the send
 * queue cannot take yet (AGAIN) waits for the next call, in order.
 */
static void kv_flush(struct rdmx_kv_client *c)
{
	int posted = 0;
	rdmx_status st;

	if (c->dead || !c->npend)
		return;
	st = rdmx_post_list(c->conn, c->pend, (int)c->npend, &posted);
	if (st && st != RDMX_ERR_AGAIN) {
		kv_client_fail(c, st);
		return;
	}
	c->npend -= (uint32_t)posted;
	for (uint32_t k = 0; k < c->npend; k++) {
		c->pend_sg[k] = c->pend_sg[k + (uint32_t)posted];
		c->pend[k] = c->pend[k + (uint32_t)posted];
		c->pend[k].sg_list = &c->pend_sg[k];
	}
}

/*
 * Send what waits, then take completions off the cq into results; false
 * if none came. All at once: each request has a SEND's and an answer's,
 * and answers taken apart would go on apart, as requests posted apart.
 */
static bool kv_progress(struct rdmx_kv_client *c)
{
	struct rdmx_completion wc[2 * KV_DEPTH];
	int n;

	kv_flush(c);
	if (c->dead || c->rcount + KV_DEPTH > KV_RESULTS)
		return false;
	n = rdmx_poll(c->cq, wc, 2 * KV_DEPTH);
	for (int i = 0; i < n; i++) {
		if (wc[i].status != RDMX_OK) {
			kv_client_fail(c, wc[i].status);
			break;
		}
		if (wc[i].opcode == RDMX_OP_RECV)
			kv_answer(c, (uint32_t)wc[i].wr_id, wc[i].byte_len);
	}
	return n > 0;
}

/* A free slot for a request, or -1 (RDMX_ERR_AGAIN). */
static int kv_slot_get(struct rdmx_kv_client *c)
{
	for (uint32_t i = 0; i < KV_DEPTH; i++)
		if (!c->slot[i].busy)
			return (int)i;
	return -1;
}

/*
 * SEND slot @i's request: @r's header, its key and @payload. The only
 * one in flight goes out now; others at the next look at the cq
 * (kv_flush, from rdmx_kv_poll, a call that waits, or rdmx_kv_flush),
 * with every other request made before them: a pipelining caller's
 * first request of a batch going alone split its batches in two (kv
 * bench over tcp, one client, pipeline 16: 0.66 sendmsg per GET).
 */
static rdmx_status kv_send(struct rdmx_kv_client *c, int i, struct kv_req *r,
			   const void *key, const void *payload, uint32_t plen)
{
	struct kv_slot *s = &c->slot[i];
	uint8_t *m = kv_msg(c, (uint32_t)i);
	uint32_t k = c->npend++;

	s->gen++;
	r->req_id = (uint64_t)s->gen << 16 | (uint32_t)i;
	kv_req_encode(m, r);
	memcpy(m + KV_REQ_HDR, key, r->key_len);
	if (plen)
		rdmx_memcpy(m + KV_REQ_HDR + r->key_len, payload, plen);
	c->pend_sg[k] = (struct rdmx_sge){ m, KV_REQ_HDR + r->key_len + plen,
					   c->msgs_mr };
	c->pend[k] = (struct rdmx_wr){ .wr_id = (uint64_t)i,
				       .opcode = RDMX_OP_SEND,
				       .sg_list = &c->pend_sg[k],
				       .num_sge = 1 };
	s->busy = true;
	c->busy++;
	/* Alone in flight (every one before was taken): it goes now,
	 * unless the caller flushes its batches itself. */
	if (c->busy == 1 && !(c->attr.flags & RDMX_KV_FLUSH_EXPLICIT))
		kv_flush(c);
	return RDMX_OK;
}

void rdmx_kv_flush(struct rdmx_kv_client *c)
{
	if (c)
		kv_flush(c);
}

/*
 * The start of every request: @key checked, the client alive, a free slot
 * set for @op. Returns its index, or -1 with *@st saying why not.
 */
static int kv_post_begin(struct rdmx_kv_client *c, const void *key, size_t klen,
			 enum rdmx_kv_op op, uint64_t tag, rdmx_status *st)
{
	int i;

	if (!key || !klen || klen > RDMX_KV_KEY_MAX) {
		kv_log(RDMX_LOG_ERROR, "a key is 1 to %d bytes",
		       RDMX_KV_KEY_MAX);
		*st = RDMX_ERR_INVALID;
		return -1;
	}
	if ((*st = c->dead))
		return -1;
	if ((i = kv_slot_get(c)) < 0) {
		*st = RDMX_ERR_AGAIN;
		return -1;
	}
	c->slot[i] =
		(struct kv_slot){ .op = op, .tag = tag, .gen = c->slot[i].gen };
	return i;
}

rdmx_status rdmx_kv_post_get(struct rdmx_kv_client *c, const void *key,
			     size_t klen, uint64_t room, uint64_t tag)
{
	struct kv_req r = { .op = KV_OP_GET, .key_len = (uint16_t)klen };
	rdmx_status st;
	int i = kv_post_begin(c, key, klen, RDMX_KV_GET, tag, &st);

	if (i < 0)
		return st;
	room = room ? room : c->attr.get_room;
	if (room > c->buf_len)
		room = c->buf_len;
	if (!kv_ext_alloc(c, room, &c->slot[i].off))
		return c->busy ? RDMX_ERR_AGAIN : RDMX_ERR_NOMEM;
	c->slot[i].room = (room + KV_ALIGN - 1) & ~(uint64_t)(KV_ALIGN - 1);
	c->slot[i].own_room = true;
	r.a = c->slot[i].off;
	r.b = room;
	return kv_send(c, i, &r, key, NULL, 0);
}

rdmx_status rdmx_kv_post_put(struct rdmx_kv_client *c, const void *key,
			     size_t klen, const void *val, uint64_t vlen,
			     uint64_t tag)
{
	struct kv_req r = { .op = KV_OP_PUT, .key_len = (uint16_t)klen };
	const uint8_t *v = val;
	rdmx_status st;
	int i;

	if (vlen > UINT32_MAX || vlen > c->buf_len || (vlen && !val)) {
		kv_log(RDMX_LOG_ERROR,
		       "a value of %llu bytes is larger than "
		       "the client's buffer",
		       (unsigned long long)vlen);
		return RDMX_ERR_INVALID;
	}
	if ((i = kv_post_begin(c, key, klen, RDMX_KV_PUT, tag, &st)) < 0)
		return st;
	if (vlen + klen <= KV_INLINE_MAX && vlen < c->pull_from) {
		r.a = vlen;
		return kv_send(c, i, &r, key, val, (uint32_t)vlen);
	}
	r.op = KV_OP_PUT_READ;
	r.b = vlen;
	if (v >= c->buf && v + vlen <= c->buf + c->buf_len) {
		r.a = (uint64_t)(v - c->buf); /* in place: no copy */
	} else {
		if (!kv_ext_alloc(c, vlen, &c->slot[i].off))
			return c->busy ? RDMX_ERR_AGAIN : RDMX_ERR_NOMEM;
		c->slot[i].room = vlen;
		c->slot[i].own_room = true;
		rdmx_memcpy(c->buf + c->slot[i].off, v, vlen);
		r.a = c->slot[i].off;
	}
	return kv_send(c, i, &r, key, NULL, 0);
}

rdmx_status rdmx_kv_post_del(struct rdmx_kv_client *c, const void *key,
			     size_t klen, uint64_t tag)
{
	struct kv_req r = { .op = KV_OP_DEL, .key_len = (uint16_t)klen };
	rdmx_status st;
	int i = kv_post_begin(c, key, klen, RDMX_KV_DEL, tag, &st);

	return i < 0 ? st : kv_send(c, i, &r, key, NULL, 0);
}

/*
 * Nothing to take: wait on the cq (it spins progress.wait_spin, then
 * sleeps), so many clients on few cores leave the cores to the server.
 * True once @deadline has passed.
 */
static bool kv_wait_cq(struct rdmx_kv_client *c, double deadline)
{
	double left = deadline - kv_client_now_ms();

	if (left <= 0)
		return true;
	rdmx_cq_wait(c->cq, left < 10 ? (int)left + 1 : 10);
	return false;
}

int rdmx_kv_poll(struct rdmx_kv_client *c, struct rdmx_kv_result *res, int max,
		 int timeout_ms)
{
	/* The clock only once there is something to wait for: a spinner
	 * polling with timeout 0 read it at every call, 4.5% of rdmx kv
	 * bench's samples at 32 clients x 16 over tcp (perf). */
	double deadline = 0;
	int n = 0;

	for (;;) {
		kv_progress(c);
		while (n < max && c->rcount) {
			res[n++] = c->results[c->rhead];
			c->rhead = (c->rhead + 1) % KV_RESULTS;
			c->rcount--;
		}
		if (n || !timeout_ms || c->dead || !c->busy)
			return n;
		if (!deadline)
			deadline = kv_client_now_ms() + timeout_ms;
		if (kv_wait_cq(c, deadline))
			return 0;
	}
}

void rdmx_kv_release(struct rdmx_kv_client *c, struct rdmx_kv_value *v)
{
	if (!v || !v->room)
		return;
	kv_ext_free(c, v->off, v->room);
	v->room = 0;
}

/* ---- the synchronous calls ---------------------------------------------- */

/* Post with @tag, then wait for that result; others wait for poll. */
static rdmx_status kv_wait(struct rdmx_kv_client *c, uint64_t tag,
			   struct rdmx_kv_result *out)
{
	double deadline = kv_client_now_ms() + c->attr.timeout_ms;

	for (;;) {
		for (uint32_t k = 0; k < c->rcount; k++) {
			uint32_t at = (c->rhead + k) % KV_RESULTS;

			if (c->results[at].tag != tag)
				continue;
			*out = c->results[at];
			/* Close the gap, keeping the others in order. */
			for (; k + 1 < c->rcount; k++)
				c->results[(c->rhead + k) % KV_RESULTS] =
					c->results[(c->rhead + k + 1) %
						   KV_RESULTS];
			c->rcount--;
			return out->status;
		}
		if (c->dead)
			return c->dead;
		if (!kv_progress(c) && kv_wait_cq(c, deadline))
			kv_client_fail(c, RDMX_ERR_TIMEOUT);
	}
}

#define KV_SYNC_TAG UINT64_MAX

rdmx_status rdmx_kv_put(struct rdmx_kv_client *c, const void *key, size_t klen,
			const void *val, uint64_t vlen)
{
	struct rdmx_kv_result r;
	rdmx_status st;

	while ((st = rdmx_kv_post_put(c, key, klen, val, vlen, KV_SYNC_TAG)) ==
	       RDMX_ERR_AGAIN)
		kv_progress(c);
	return st ? st : kv_wait(c, KV_SYNC_TAG, &r);
}

rdmx_status rdmx_kv_get_ref(struct rdmx_kv_client *c, const void *key,
			    size_t klen, struct rdmx_kv_value *v)
{
	struct rdmx_kv_result r;
	rdmx_status st;

	while ((st = rdmx_kv_post_get(c, key, klen, 0, KV_SYNC_TAG)) ==
	       RDMX_ERR_AGAIN)
		kv_progress(c);
	if (!st)
		st = kv_wait(c, KV_SYNC_TAG, &r);
	*v = r.value;
	if (st == RDMX_ERR_LOCAL_LENGTH) { /* a second try, with room */
		while ((st = rdmx_kv_post_get(c, key, klen, r.value.len,
					      KV_SYNC_TAG)) == RDMX_ERR_AGAIN)
			kv_progress(c);
		if (!st)
			st = kv_wait(c, KV_SYNC_TAG, &r);
		*v = r.value;
	}
	return st;
}

rdmx_status rdmx_kv_get(struct rdmx_kv_client *c, const void *key, size_t klen,
			void *out, uint64_t room, uint64_t *len_p)
{
	struct rdmx_kv_result r;
	rdmx_status st;

	while ((st = rdmx_kv_post_get(c, key, klen, room ? room : 1,
				      KV_SYNC_TAG)) == RDMX_ERR_AGAIN)
		kv_progress(c);
	if (!st)
		st = kv_wait(c, KV_SYNC_TAG, &r);
	if (len_p && (st == RDMX_OK || st == RDMX_ERR_LOCAL_LENGTH))
		*len_p = r.value.len;
	if (st == RDMX_OK) {
		rdmx_memcpy(out, r.value.data, r.value.len);
		rdmx_kv_release(c, &r.value);
	}
	return st;
}

rdmx_status rdmx_kv_del(struct rdmx_kv_client *c, const void *key, size_t klen)
{
	struct rdmx_kv_result r;
	rdmx_status st;

	while ((st = rdmx_kv_post_del(c, key, klen, KV_SYNC_TAG)) ==
	       RDMX_ERR_AGAIN)
		kv_progress(c);
	return st ? st : kv_wait(c, KV_SYNC_TAG, &r);
}

/* ---- connect and close -------------------------------------------------- */

static rdmx_status kv_hello(struct rdmx_kv_client *c)
{
	struct kv_req r = { .op = KV_OP_HELLO };
	struct rdmx_remote rem;
	uint8_t packed[RDMX_REMOTE_PACKED_LEN];
	rdmx_status st;

	rdmx_mr_remote(c->buf_mr, &rem);
	rdmx_remote_pack(&rem, packed);
	c->slot[0] = (struct kv_slot){ .op = 0, .tag = KV_SYNC_TAG };
	st = kv_send(c, 0, &r, "", packed, sizeof(packed));
	if (st)
		return st;
	/* The hello pushes no result (op 0): wait for its slot to free. */
	for (double end = kv_client_now_ms() + c->attr.timeout_ms;
	     c->slot[0].busy && !c->dead;)
		if (!kv_progress(c) && kv_client_now_ms() > end)
			kv_client_fail(c, RDMX_ERR_TIMEOUT);
	return c->dead;
}

static void kv_attr_resolve(struct rdmx_kv_client *c,
			    const struct rdmx_kv_attr *attr)
{
	uint64_t mask = attr ? attr->mask : 0;

	c->attr.buffer_bytes = mask & RDMX_KV_ATTR_BUFFER_BYTES
				       ? attr->buffer_bytes
				       : 64ull << 20;
	c->attr.timeout_ms = mask & RDMX_KV_ATTR_TIMEOUT_MS ? attr->timeout_ms
							    : 5000;
	c->attr.get_room = mask & RDMX_KV_ATTR_GET_ROOM ? attr->get_room
							: 1ull << 20;
	c->attr.flags = mask & RDMX_KV_ATTR_FLAGS ? attr->flags : 0;
}

rdmx_status rdmx_kv_connect(struct rdmx_ctx *ctx, const char *addr,
			    const struct rdmx_kv_attr *attr,
			    struct rdmx_kv_client **c_p)
{
	const unsigned access = RDMX_ACCESS_LOCAL_WRITE |
				RDMX_ACCESS_REMOTE_WRITE |
				RDMX_ACCESS_REMOTE_READ;
	size_t msgs = (size_t)KV_DEPTH * (KV_MSG + KV_ALIGN);
	struct rdmx_conn_attr ca = { 0 };
	struct rdmx_kv_client *c;
	void *buf = NULL;
	char full[280];
	rdmx_status st;

	if (!ctx || !addr || !c_p)
		return RDMX_ERR_INVALID;
	c = calloc(1, sizeof(*c));
	if (!c)
		return RDMX_ERR_NOMEM;
	kv_attr_resolve(c, attr);
	c->pull_from = UINT64_MAX; /* until the hello's answer says */
	c->buf_len = c->attr.buffer_bytes;
	if (c->buf_len < KV_ALIGN || !c->attr.timeout_ms || !c->attr.get_room) {
		kv_log(RDMX_LOG_ERROR, "the buffer is at least 64 bytes, the "
				       "timeout and the GET room above 0");
		free(c);
		return RDMX_ERR_INVALID;
	}
	if (c->attr.flags & ~(uint64_t)RDMX_KV_FLUSH_EXPLICIT) {
		kv_log(RDMX_LOG_ERROR,
		       "unknown flags 0x%llx (RDMX_KV_FLUSH_EXPLICIT is 0x%x)",
		       (unsigned long long)c->attr.flags,
		       RDMX_KV_FLUSH_EXPLICIT);
		free(c);
		return RDMX_ERR_INVALID;
	}
	/* "host" alone: the store's port. */
	if (addr[0] != '@' && /* "@NAME": the context's resolver's */
	    (!strchr(addr, ':') || (addr[0] == '[' && !strstr(addr, "]:"))))
		snprintf(full, sizeof(full), "%s:%d", addr, RDMX_KV_PORT);
	else
		snprintf(full, sizeof(full), "%s", addr);
	c->free_cap = 2 * KV_DEPTH;
	c->free = calloc(c->free_cap, sizeof(*c->free));
	c->ctx = ctx;
	/* Over shm the store WRITEs values into it, and READs large PUTs
	 * from it, itself: this process's CPU takes no part. */
	st = rdmx_mem_alloc(ctx, c->buf_len, 0, &buf);
	c->buf = buf;
	c->msgs = kv_msgs_alloc(KV_ALIGN, msgs);
	if (!st && (!c->free || !c->msgs))
		st = RDMX_ERR_NOMEM;
	if (st)
		goto err;
	c->free[0] =
		(struct kv_ext){ 0, c->buf_len & ~(uint64_t)(KV_ALIGN - 1) };
	c->nfree = 1;
	st = rdmx_cq_create(ctx, &c->cq);
	if (!st)
		st = rdmx_mr_reg(ctx, c->buf, c->buf_len, access, &c->buf_mr);
	if (!st)
		st = rdmx_mr_reg(ctx, c->msgs, msgs, RDMX_ACCESS_LOCAL_WRITE,
				 &c->msgs_mr);
	ca.cq = c->cq;
	if (!st && (st = rdmx_connect(ctx, full, &ca, (int)c->attr.timeout_ms,
				      &c->conn)))
		goto err; /* rdmx_connect said why in a line of its own */
	for (uint32_t i = 0; i < KV_DEPTH && !st; i++)
		st = kv_recv_post(c, i);
	if (!st)
		st = kv_hello(c);
	if (st) {
		kv_log(RDMX_LOG_ERROR, "cannot reach the store at %s: %s", full,
		       rdmx_strerror(st));
		goto err;
	}
	*c_p = c;
	return RDMX_OK;
err:
	rdmx_kv_close(c);
	return st;
}

void rdmx_kv_close(struct rdmx_kv_client *c)
{
	if (!c)
		return;
	rdmx_conn_close(c->conn);
	rdmx_mr_dereg(c->buf_mr);
	rdmx_mr_dereg(c->msgs_mr);
	rdmx_cq_destroy(c->cq);
	rdmx_mem_free(c->ctx, c->buf);
	free(c->msgs);
	free(c->free);
	free(c);
}

void rdmx_kv_buffer(const struct rdmx_kv_client *c, void **addr_p,
		    size_t *len_p)
{
	*addr_p = c->buf;
	*len_p = c->buf_len;
}
