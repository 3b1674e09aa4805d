// SPDX-License-Identifier: MIT
/*
 * The KV server: one accepting thread hands each new client to a worker,
 * round-robin; each worker has its own cq, a shared receive queue for all
 * its clients' requests, and one loop. A GET's value goes out by a WRITE
 * straight from the pool, followed by the answer's SEND: the SEND
 * completes only after the WRITE has (in order, on one connection), so
 * its completion is where the GET lets go of the item. A large PUT is
 * pulled with one READ into a fresh block, published when it lands.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kv.h"

/*
 * srq RECVs per worker. With 512, 32 clients keeping 16 GETs each in
 * flight held them all: each reposted RECV went to whoever asked, and
 * the clients waited on credits (kv bench over tcp: 139-178 k GETs/s;
 * 1024: 251-261 k; 2048: 270-320 k). But the RECVs are taken in turn, so
 * all their buffers cycle through the cache: with 2048 (16 MiB) one shm
 * client's SETs went from 195-247 k/s to 178-205 k and their p99 from
 * 6-9 to 15-17 us. 1024 (8 MiB) keeps those as with 512.
 * So a worker starts with 1024 and adds 1024 more (a chunk) while it has
 * fewer than KV_RECVS_PER_CLIENT for each of its clients: 64 clients
 * keeping 16 each in flight held all of 1024, and over tcp they did
 * 173-190 k GETs/s against 371-406 k with 2048. When clients leave, the
 * last chunk's RECVs are not posted again as they come back (after 64
 * clients had come and gone, 32 did 10% fewer GETs/s with all 2048 in
 * the cache's way); they are posted again if clients come back.
 */
#define KV_RECV_CHUNK 1024
#define KV_RECV_CHUNKS 16 /* at most, per worker: 128 MiB */
#define KV_RECVS_PER_CLIENT 32 /* twice rdmx kv bench's pipeline */
/* Without a srq (siw has none): RECVs of each client's own, one for each
 * request it may have in flight (the client's pipeline is 64). */
#define KV_CONN_RECVS 65
#define KV_OPS_CHUNK 1024
#define KV_OPS_MAX (64 * KV_OPS_CHUNK) /* per worker */
#define KV_TAG_WRITE 1ull /* wr_id bit: an unsignaled WRITE's error */

struct kv_client {
	/* Written by the worker only: from its first request, or when it
	 * takes the client in (accepted, handed over under the lock). */
	struct rdmx_conn *conn;
	struct rdmx_conn *accepted;
	/* The accepter could not post its own RECVs (handed over under the
	 * lock): its worker ends it on taking it in. */
	bool refused;
	/* The worker's: it took the client in. Until then the accepter may
	 * still post the client's RECVs and write `accepted`, so a client
	 * closed before (its first request was bad, or it went) keeps its
	 * connection open and is not freed. */
	bool taken;
	struct rdmx_remote buf; /* the client's buffer, after HELLO */
	bool hello, closed;
	uint8_t *rbuf; /* KV_CONN_RECVS x KV_MSG, without a srq */
	struct rdmx_mr *rmr;
	struct kv_client *next_closing, *next_incoming;
	/* Answers of this batch of requests, posted as one list at its end
	 * (kv_flush); the client is on its worker's list while any wait. */
	struct kv_work *out_head, *out_tail;
	struct kv_client *next_out;
};

enum kv_work_kind { KV_ANSWER, KV_GET_ANSWER, KV_PUT_READ };

/* One request in flight; its answer is sent from here (registered). */
struct kv_work {
	uint8_t answer[KV_ANSWER_LEN];
	enum kv_work_kind kind;
	struct kv_client *cl;
	struct kv_item *item;
	uint64_t req_id;
	struct rdmx_mr *mr; /* its chunk's */
	struct kv_work *next_free;
	/* Its answer waiting for kv_flush: a GET's WRITE, then the SEND. */
	struct rdmx_wr wr[2];
	struct rdmx_sge sg[2];
	int nwr;
	struct kv_work *next_out;
} __attribute__((aligned(64)));

struct kv_work_chunk {
	struct kv_work op[KV_OPS_CHUNK];
	struct rdmx_mr *mr;
	struct kv_work_chunk *next;
};

/* KV_RECV_CHUNK of a worker's srq RECVs: KV_MSG bytes each. */
struct kv_rchunk {
	uint8_t *buf;
	struct rdmx_mr *mr;
	/* Its RECVs back and not posted (out of use, or new). */
	uint16_t idle[KV_RECV_CHUNK];
	uint32_t nidle;
};

struct kv_worker {
	struct rdmx_kv_server *srv;
	struct rdmx_cq *cq;
	struct rdmx_srq *srq;
	struct kv_rchunk rchunk[KV_RECV_CHUNKS];
	uint32_t nrchunks; /* allocated */
	uint32_t ruse; /* of them, those whose RECVs are posted again */
	bool rfull; /* no more chunks: at the most, or one failed */
	struct kv_work *free_ops;
	struct kv_work_chunk *chunks;
	uint32_t nops;
	pthread_mutex_t lock; /* incoming */
	struct kv_client *incoming; /* handed over, not yet taken in */
	struct kv_client **clients;
	uint32_t nclients, clients_cap;
	struct kv_client *closing;
	struct kv_client *out; /* clients with answers waiting (kv_flush) */
	bool store_held; /* kv_store_hold */
	double next_check_ms;
	pthread_t thread;
	bool started;
};

struct rdmx_kv_server {
	struct rdmx_ctx *ctx;
	struct rdmx_listener *lst;
	struct kv_store *store;
	struct kv_aof *aof; /* NULL without persistence */
	struct kv_resp *resp; /* the Redis port, if served */
	uint8_t *pool;
	uint64_t pool_len;
	struct rdmx_mr *pool_mr;
	struct kv_worker *w;
	uint32_t nworkers, next_worker;
	pthread_t accepter;
	bool accepting;
	atomic_bool stop;
	atomic_uint_fast64_t clients_open, clients_total, clients_ejected;
	/* The workers' srq RECVs posted now (out of use ones not again). */
	atomic_uint_fast64_t request_buffers;
};

static double kv_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- ops ---------------------------------------------------------------- */

static struct kv_work *kv_work_get(struct kv_worker *w)
{
	struct kv_work *op = w->free_ops;

	if (!op && w->nops < KV_OPS_MAX) {
		struct kv_work_chunk *ch = aligned_alloc(64, sizeof(*ch));

		if (ch &&
		    rdmx_mr_reg(w->srv->ctx, ch, sizeof(*ch),
				RDMX_ACCESS_LOCAL_WRITE, &ch->mr) == RDMX_OK) {
			for (int i = 0; i < KV_OPS_CHUNK; i++) {
				ch->op[i].mr = ch->mr;
				ch->op[i].next_free = w->free_ops;
				w->free_ops = &ch->op[i];
			}
			ch->next = w->chunks;
			w->chunks = ch;
			w->nops += KV_OPS_CHUNK;
		} else {
			free(ch);
		}
		op = w->free_ops;
	}
	if (op)
		w->free_ops = op->next_free;
	return op;
}

static void kv_work_put(struct kv_worker *w, struct kv_work *op)
{
	op->next_free = w->free_ops;
	w->free_ops = op;
}

/* ---- clients ------------------------------------------------------------ */

static void kv_client_close(struct kv_worker *w, struct kv_client *cl,
			    const char *why);

/*
 * The store's lock, taken by a batch's first lookup or release and held
 * until the batch is served, then dropped before its answers are posted:
 * a GET took and gave it twice (its lookup, and its item's release once
 * the answer went), and uncontended pthread mutexes were 10% of the
 * worker's time at 32 clients x 16 over shm. Held, it covers lookups and
 * releases only: dropped before anything that takes another lock first
 * (a PUT's or DELETE's log), posts, or may wait (a client's close).
 */
static void kv_store_hold(struct kv_worker *w)
{
	if (w->store_held)
		return;
	kv_store_lock(w->srv->store);
	w->store_held = true;
}

static void kv_store_drop(struct kv_worker *w)
{
	if (!w->store_held)
		return;
	w->store_held = false;
	kv_store_unlock(w->srv->store);
}

/* Take in the clients the accepter handed over since last time. */
static void kv_client_take(struct kv_worker *w)
{
	struct kv_client *cl;

	pthread_mutex_lock(&w->lock);
	cl = w->incoming;
	w->incoming = NULL;
	for (struct kv_client *c = cl; c; c = c->next_incoming) {
		c->conn = c->accepted;
		c->taken = true;
	}
	pthread_mutex_unlock(&w->lock);
	while (cl) {
		struct kv_client *next = cl->next_incoming;

		if (cl->closed) { /* ended before it was taken in */
			atomic_fetch_sub(&w->srv->clients_open, 1);
			cl = next;
			continue;
		}
		if (cl->refused) {
			kv_client_close(w, cl, NULL);
			cl = next;
			continue;
		}
		if (w->nclients == w->clients_cap) {
			uint32_t cap = w->clients_cap ? 2 * w->clients_cap : 16;
			void *p =
				realloc(w->clients, cap * sizeof(*w->clients));

			if (!p) { /* no room to watch it: end it */
				kv_client_close(w, cl, "no memory for it");
				cl = next;
				continue;
			}
			w->clients = p;
			w->clients_cap = cap;
		}
		w->clients[w->nclients++] = cl;
		cl = next;
	}
}

/*
 * End @cl. Its connection is closed only once the cq is empty (a request
 * of it may still wait there, naming the connection), and the client is
 * freed once the cq has been emptied again of the work that close flushed.
 */
static void kv_client_close(struct kv_worker *w, struct kv_client *cl,
			    const char *why)
{
	struct rdmx_conn_info info = { .peer_addr = "" };

	if (cl->closed)
		return;
	kv_store_drop(w);
	if (why) {
		/* Set by then: by its first request, or at its take. */
		if (cl->conn)
			rdmx_conn_info(cl->conn, &info);
		kv_log_peer(RDMX_LOG_WARN, "client %s closed: %s",
			    info.peer_addr[0] ? info.peer_addr : "(unknown)",
			    why);
		atomic_fetch_add(&w->srv->clients_ejected, 1);
	}
	cl->closed = true;
	for (uint32_t i = 0; i < w->nclients; i++)
		if (w->clients[i] == cl) {
			w->clients[i] = w->clients[--w->nclients];
			break;
		}
	cl->next_closing = w->closing;
	w->closing = cl;
	/* Counted from its hand-over: one not yet taken in is uncounted
	 * at its take, never before (the count would wrap meanwhile). */
	if (cl->taken)
		atomic_fetch_sub(&w->srv->clients_open, 1);
}

/*
 * @cl's work failed with @st. A client that went, or whose connection we
 * closed, ends without a word, as kv_client_check ends one: its posts
 * and work fail with CONN_LOST or FLUSHED, which is no fault of its (the
 * server used to say "its answers do not fit the send queue" for every
 * client that closed with GETs in flight). Anything else it is told by
 * @why and the status.
 */
static void kv_client_failed(struct kv_worker *w, struct kv_client *cl,
			     rdmx_status st, const char *why)
{
	char msg[160];

	if (st == RDMX_ERR_CONN_LOST || st == RDMX_ERR_FLUSHED) {
		kv_client_close(w, cl, NULL);
		return;
	}
	snprintf(msg, sizeof(msg), "%s (%s)", why, rdmx_strerror(st));
	kv_client_close(w, cl, msg);
}

/* With a srq, a client's end completes nothing: look now and then. */
static void kv_client_check(struct kv_worker *w)
{
	double now = kv_now_ms();

	if (now < w->next_check_ms)
		return;
	w->next_check_ms = now + 100;
	for (uint32_t i = 0; i < w->nclients;) {
		struct kv_client *cl = w->clients[i];

		if (rdmx_conn_check(cl->conn) != RDMX_OK)
			kv_client_close(w, cl, NULL);
		else
			i++;
	}
}

/* ---- requests ----------------------------------------------------------- */

/* @op's answer was not posted: let go of its item and of it. */
static void kv_answer_drop(struct kv_worker *w, struct kv_work *op)
{
	if (op->item) {
		kv_store_hold(w);
		kv_unref(w->srv->store, op->item);
	}
	kv_work_put(w, op);
}

/*
 * Queue @op's answer, a SEND; with @value (its one sge copied), the WRITE
 * of a GET's value first. kv_flush posts each client's queue as one list
 * at the end of the batch of requests: one frame on the software
 * transports (a pipelining client's answers share a sendmsg), one
 * doorbell on verbs.
 */
static void kv_answer_after(struct kv_worker *w, struct kv_work *op,
			    uint8_t status, uint64_t len,
			    const struct rdmx_wr *value)
{
	struct kv_answer a = { status, op->req_id, len };
	struct kv_client *cl = op->cl;

	kv_answer_encode(op->answer, &a);
	op->nwr = 0;
	if (value) {
		op->sg[0] = value->sg_list[0];
		op->wr[0] = *value;
		op->wr[0].sg_list = &op->sg[0];
		op->nwr = 1;
	}
	op->sg[op->nwr] =
		(struct rdmx_sge){ op->answer, KV_ANSWER_LEN, op->mr };
	op->wr[op->nwr] = (struct rdmx_wr){ .wr_id = (uintptr_t)op,
					    .opcode = RDMX_OP_SEND,
					    .sg_list = &op->sg[op->nwr],
					    .num_sge = 1 };
	op->nwr++;
	op->next_out = NULL;
	if (cl->out_head) {
		cl->out_tail->next_out = op;
	} else { /* its first: the client joins the worker's list */
		cl->out_head = op;
		cl->next_out = w->out;
		w->out = cl;
	}
	cl->out_tail = op;
}

/* Post @cl's queued answers as one list (at most 32 at a time). */
static void kv_flush_client(struct kv_worker *w, struct kv_client *cl)
{
	struct rdmx_wr wrs[64];

	while (cl->out_head) {
		struct kv_work *op = cl->out_head, *stop;
		int n = 0, posted = 0, at = 0;
		rdmx_status st = RDMX_ERR_CONN_LOST;

		for (stop = op; stop && n + stop->nwr <= 64;
		     stop = stop->next_out)
			for (int i = 0; i < stop->nwr; i++)
				wrs[n++] = stop->wr[i];
		if (!cl->closed)
			st = rdmx_post_list(cl->conn, wrs, n, &posted);
		/* Those whose SEND went now complete; the rest are dropped. */
		while (op != stop) {
			struct kv_work *next = op->next_out;

			at += op->nwr;
			if (st && at > posted)
				kv_answer_drop(w, op);
			op = next;
		}
		cl->out_head = stop;
		if (st && !cl->closed)
			kv_client_failed(w, cl, st,
					 "its answers do not fit the send "
					 "queue");
	}
	cl->out_tail = NULL;
}

/* The batch is done: post every client's answers. */
static void kv_flush(struct kv_worker *w)
{
	while (w->out) {
		struct kv_client *cl = w->out;

		w->out = cl->next_out;
		kv_flush_client(w, cl);
	}
}

/*
 * A batch of completions served: the store's lock let go, then every
 * client's answers posted, then the lock let go again (answers that could
 * not go gave their items back).
 */
static void kv_batch_end(struct kv_worker *w)
{
	kv_store_drop(w);
	kv_flush(w);
	kv_store_drop(w);
}

static void kv_send_answer(struct kv_worker *w, struct kv_work *op,
			   uint8_t status, uint64_t len)
{
	kv_answer_after(w, op, status, len, NULL);
}

/*
 * Make @it (its value in the pool) the key's: logged first when there is
 * an append-only file, then published, both under the file's lock so the
 * log has the store's order. KV_OK, or KV_IOERR (and the old value stays).
 */
static uint8_t kv_commit_put(struct rdmx_kv_server *srv, struct kv_item *it)
{
	uint8_t st = KV_OK;

	kv_aof_lock(srv->aof);
	if (kv_aof_append(srv->aof, 'P', it->key, it->klen, srv->pool + it->off,
			  it->vlen))
		st = KV_IOERR;
	kv_store_lock(srv->store);
	if (st == KV_OK)
		kv_publish(srv->store, it);
	else
		kv_abandon(srv->store, it);
	kv_store_unlock(srv->store);
	kv_aof_unlock(srv->aof);
	return st;
}

uint8_t kv_server_del(struct rdmx_kv_server *srv, const void *key, size_t klen)
{
	uint8_t st = KV_OK;

	/* Logged first, found or not: replay forgives a miss. */
	kv_aof_lock(srv->aof);
	if (kv_aof_append(srv->aof, 'D', key, (uint16_t)klen, NULL, 0))
		st = KV_IOERR;
	kv_store_lock(srv->store);
	if (st == KV_OK && !kv_del(srv->store, key, klen))
		st = KV_NOT_FOUND;
	kv_store_unlock(srv->store);
	kv_aof_unlock(srv->aof);
	return st;
}

uint8_t kv_server_put(struct rdmx_kv_server *srv, const void *key, size_t klen,
		      const void *val, uint64_t vlen)
{
	struct kv_item *it;

	if (!klen || klen > RDMX_KV_KEY_MAX)
		return KV_BAD;
	kv_store_lock(srv->store);
	it = kv_prepare(srv->store, key, klen, vlen);
	kv_store_unlock(srv->store);
	if (!it)
		return KV_NOMEM;
	rdmx_memcpy(srv->pool + it->off, val, vlen);
	return kv_commit_put(srv, it);
}

bool kv_server_exists(struct rdmx_kv_server *srv, const void *key, size_t klen)
{
	struct kv_item *it = NULL;

	if (!klen || klen > RDMX_KV_KEY_MAX)
		return false;
	kv_store_lock(srv->store);
	it = kv_get(srv->store, key, klen);
	if (it)
		kv_unref(srv->store, it);
	kv_store_unlock(srv->store);
	return it != NULL;
}

struct kv_store *kv_server_store(struct rdmx_kv_server *srv)
{
	return srv->store;
}

bool kv_server_persists(const struct rdmx_kv_server *srv)
{
	return srv->aof != NULL;
}

static void kv_do_get(struct kv_worker *w, struct kv_work *op,
		      const struct kv_req *r)
{
	struct kv_client *cl = op->cl;
	struct kv_store *s = w->srv->store;
	struct kv_item *it;

	kv_store_hold(w);
	it = kv_get(s, r->key, r->key_len);
	if (!it) {
		kv_send_answer(w, op, KV_NOT_FOUND, 0);
		return;
	}
	op->item = it;
	op->kind = KV_GET_ANSWER;
	if (it->vlen > r->b) {
		kv_send_answer(w, op, KV_TOO_LARGE, it->vlen);
		return;
	}
	if (r->a > cl->buf.length || it->vlen > cl->buf.length - r->a) {
		kv_send_answer(w, op, KV_BAD, 0);
		return;
	}
	struct rdmx_sge sg = { w->srv->pool + it->off, (uint32_t)it->vlen,
			       w->srv->pool_mr };
	struct rdmx_wr wr = {
		.wr_id = (uintptr_t)cl | KV_TAG_WRITE,
		.opcode = RDMX_OP_WRITE,
		.sg_list = &sg,
		.num_sge = 1,
		.remote_addr = cl->buf.addr + r->a,
		.rkey = cl->buf.rkey,
		/* Into the room of this GET alone: over shm it is done at
		 * once, even behind answers the client has not taken yet. */
		.flags = RDMX_WR_UNSIGNALED | RDMX_WR_UNORDERED,
	};

	kv_answer_after(w, op, KV_OK, it->vlen, it->vlen ? &wr : NULL);
}

static void kv_do_put(struct kv_worker *w, struct kv_work *op,
		      const struct kv_req *r)
{
	struct kv_client *cl = op->cl;
	struct kv_store *s = w->srv->store;
	uint64_t vlen = r->op == KV_OP_PUT ? r->a : r->b;
	struct kv_item *it;
	rdmx_status st;

	if (r->op == KV_OP_PUT_READ &&
	    (r->a > cl->buf.length || vlen > cl->buf.length - r->a ||
	     vlen > UINT32_MAX)) {
		kv_send_answer(w, op, KV_BAD, 0);
		return;
	}
	kv_store_lock(s);
	it = kv_prepare(s, r->key, r->key_len, vlen);
	kv_store_unlock(s);
	if (!it) {
		kv_send_answer(w, op, KV_NOMEM, vlen);
		return;
	}
	if (r->op == KV_OP_PUT || !vlen) {
		/* Unpublished: the block is ours alone, no lock needed. */
		rdmx_memcpy(w->srv->pool + it->off, r->payload, vlen);
		kv_send_answer(w, op, kv_commit_put(w->srv, it), 0);
		return;
	}
	struct rdmx_sge sg = { w->srv->pool + it->off, (uint32_t)vlen,
			       w->srv->pool_mr };
	/* Of this PUT's value alone, which no answer before it touches. */
	struct rdmx_wr wr = { .wr_id = (uintptr_t)op,
			      .opcode = RDMX_OP_READ,
			      .sg_list = &sg,
			      .num_sge = 1,
			      .remote_addr = cl->buf.addr + r->a,
			      .rkey = cl->buf.rkey,
			      .flags = RDMX_WR_UNORDERED };

	op->kind = KV_PUT_READ;
	op->item = it;
	st = rdmx_post(cl->conn, &wr);
	if (st != RDMX_OK) {
		kv_store_lock(s);
		kv_abandon(s, it);
		kv_store_unlock(s);
		op->item = NULL;
		kv_client_failed(w, cl, st,
				 "its PUTs do not fit the send queue");
		kv_work_put(w, op);
	}
}

/* What the hello's answer says: from which size to send PUT_READ. */
static uint64_t kv_pull_from(const struct kv_client *cl)
{
	struct rdmx_conn_info info;

	rdmx_conn_info(cl->conn, &info);
	return info.flags & RDMX_CONN_MAPPED ? KV_PULL_MAPPED : 0;
}

static void kv_request(struct kv_worker *w, struct kv_client *cl,
		       const uint8_t *msg, uint32_t len)
{
	struct kv_req r;
	struct kv_work *op;

	if (!kv_req_decode(msg, len, &r) ||
	    (r.op != KV_OP_HELLO && !cl->hello)) {
		kv_client_close(w, cl, "a malformed request");
		return;
	}
	op = kv_work_get(w);
	if (!op) {
		kv_client_close(w, cl, "more requests in flight than served");
		return;
	}
	*op = (struct kv_work){
		.kind = KV_ANSWER, .cl = cl, .req_id = r.req_id, .mr = op->mr
	};
	if (r.op != KV_OP_GET)
		kv_store_drop(w);
	switch (r.op) {
	case KV_OP_HELLO:
		if (rdmx_remote_unpack(r.payload, r.payload_len, &cl->buf)) {
			kv_work_put(w, op);
			kv_client_close(w, cl, "a malformed hello");
			return;
		}
		cl->hello = true;
		/* Over shm, its buffer is mapped here, before the client's
		 * connect returns, not at its first GET: 32 clients' first
		 * GETs waited 5 ms for theirs, one after another. */
		rdmx_remote_attach(cl->conn, &cl->buf);
		kv_send_answer(w, op, KV_OK, kv_pull_from(cl));
		return;
	case KV_OP_GET:
		kv_do_get(w, op, &r);
		return;
	case KV_OP_PUT:
	case KV_OP_PUT_READ:
		kv_do_put(w, op, &r);
		return;
	default:
		kv_send_answer(w, op, kv_server_del(w->srv, r.key, r.key_len),
			       0);
	}
}

/* A completion of work this worker posted (answers, WRITEs, READs). */
static void kv_done(struct kv_worker *w, const struct rdmx_completion *wc)
{
	struct kv_store *s = w->srv->store;
	struct kv_work *op;

	if (wc->wr_id & KV_TAG_WRITE) { /* only a failed WRITE completes */
		struct kv_client *cl =
			(void *)(uintptr_t)(wc->wr_id & ~KV_TAG_WRITE);

		kv_client_failed(w, cl, wc->status,
				 "a WRITE into its buffer failed");
		return;
	}
	op = (void *)(uintptr_t)wc->wr_id;
	if (op->kind == KV_PUT_READ) {
		struct kv_item *it = op->item;

		kv_store_drop(w);
		op->item = NULL;
		op->kind = KV_ANSWER;
		if (wc->status == RDMX_OK) {
			kv_send_answer(w, op, kv_commit_put(w->srv, it), 0);
			return;
		}
		kv_store_lock(s);
		kv_abandon(s, it);
		kv_store_unlock(s);
		kv_client_failed(w, op->cl, wc->status,
				 "the READ of its value failed");
		kv_work_put(w, op);
		return;
	}
	if (op->item) {
		kv_store_hold(w);
		kv_unref(s, op->item);
	}
	if (wc->status != RDMX_OK)
		kv_client_close(w, op->cl, NULL);
	kv_work_put(w, op);
}

/* The buffer of the srq's RECV @i. */
static uint8_t *kv_rbuf(const struct kv_worker *w, uint64_t i)
{
	return w->rchunk[i / KV_RECV_CHUNK].buf +
	       (size_t)(i % KV_RECV_CHUNK) * KV_MSG;
}

static rdmx_status kv_recv_post(struct kv_worker *w, uint32_t i)
{
	struct rdmx_sge sg = { kv_rbuf(w, i), KV_MSG,
			       w->rchunk[i / KV_RECV_CHUNK].mr };

	return rdmx_srq_post_recv(w->srq, &sg, 1, i);
}

/* RECV @i came back: posted again, unless its chunk is out of use. */
static void kv_recv_back(struct kv_worker *w, uint32_t i)
{
	struct kv_rchunk *ch = &w->rchunk[i / KV_RECV_CHUNK];

	if (i / KV_RECV_CHUNK < w->ruse) {
		kv_recv_post(w, i);
		return;
	}
	ch->idle[ch->nidle++] = (uint16_t)(i % KV_RECV_CHUNK);
	atomic_fetch_sub(&w->srv->request_buffers, 1);
}

/*
 * One more chunk of the srq's RECVs in use: its idle RECVs posted, those
 * of a new chunk (all idle) or of one out of use. A chunk that cannot be
 * had (memory, registration) or posted (a verbs srq smaller than asked
 * for) ends the growth, and the RECVs posted so far serve. An error only
 * when none of the chunk's could be posted.
 */
static rdmx_status kv_recv_grow(struct kv_worker *w)
{
	uint32_t c = w->ruse;
	struct kv_rchunk *ch = &w->rchunk[c];
	rdmx_status st = RDMX_OK;

	if (c == KV_RECV_CHUNKS) {
		w->rfull = true;
		return RDMX_ERR_NOMEM;
	}
	if (c == w->nrchunks) {
		uint8_t *buf =
			kv_msgs_alloc(64, (size_t)KV_RECV_CHUNK * KV_MSG);

		st = buf ? rdmx_mr_reg(w->srv->ctx, buf,
				       (size_t)KV_RECV_CHUNK * KV_MSG,
				       RDMX_ACCESS_LOCAL_WRITE, &ch->mr)
			 : RDMX_ERR_NOMEM;
		if (st) {
			free(buf);
			w->rfull = true;
			kv_log(RDMX_LOG_WARN,
			       "a worker's %u clients share its %u RECVs for "
			       "requests; no more could be had: %s",
			       w->nclients, c * KV_RECV_CHUNK,
			       rdmx_strerror(st));
			return st;
		}
		ch->buf = buf;
		/* Posted from the top: in order. */
		for (uint32_t k = 0; k < KV_RECV_CHUNK; k++)
			ch->idle[k] = (uint16_t)(KV_RECV_CHUNK - 1 - k);
		ch->nidle = KV_RECV_CHUNK;
		w->nrchunks++;
	}
	w->ruse++;
	while (ch->nidle) {
		st = kv_recv_post(w,
				  c * KV_RECV_CHUNK + ch->idle[ch->nidle - 1]);
		if (st)
			break;
		ch->nidle--;
		atomic_fetch_add(&w->srv->request_buffers, 1);
	}
	if (st) {
		w->rfull = true;
		kv_log(RDMX_LOG_WARN,
		       "a worker's %u clients share the RECVs for requests "
		       "posted so far; no more could be posted: %s",
		       w->nclients, rdmx_strerror(st));
	}
	return st && ch->nidle == KV_RECV_CHUNK ? st : RDMX_OK;
}

/* As many chunks in use as the worker's clients call for, one at least. */
static void kv_recv_fit(struct kv_worker *w)
{
	uint64_t want = (uint64_t)w->nclients * KV_RECVS_PER_CLIENT;

	if (!w->srq)
		return;
	while (!w->rfull && want > (uint64_t)w->ruse * KV_RECV_CHUNK)
		kv_recv_grow(w);
	while (w->ruse > 1 && want <= (uint64_t)(w->ruse - 1) * KV_RECV_CHUNK)
		w->ruse--;
}

/* A client's own RECV @i, where there is no srq. */
static rdmx_status kv_conn_recv_post(struct kv_client *cl,
				     struct rdmx_conn *conn, uint32_t i)
{
	struct rdmx_sge sg = { cl->rbuf + (size_t)i * KV_MSG, KV_MSG, cl->rmr };

	return rdmx_post_recv(conn, &sg, 1, i);
}

/* The request a RECV completion brought: in the srq's buffers, or in
 * the client's own where there is no srq. */
static const uint8_t *kv_recv_msg(const struct kv_worker *w,
				  const struct kv_client *cl,
				  const struct rdmx_completion *wc)
{
	return cl && cl->rbuf ? cl->rbuf + wc->wr_id * KV_MSG
			      : kv_rbuf(w, wc->wr_id);
}

static void kv_completion(struct kv_worker *w, const struct rdmx_completion *wc)
{
	struct kv_client *cl;

	if (wc->opcode != RDMX_OP_RECV) {
		kv_done(w, wc);
		return;
	}
	/*
	 * A flushed RECV: the srq's at its end, or a client's own after we
	 * closed it (its buffer goes with it). A client that died is found
	 * by kv_client_check.
	 */
	if (wc->status != RDMX_OK)
		return;
	/* Safe to ask, closed or not (rdmx_conn_close); and cl is freed
	 * only once the cq was empty after the close (kv_client_reap). */
	cl = rdmx_conn_user_ctx(wc->conn);
	if (cl && !cl->taken && !cl->conn) /* before the hand-over */
		cl->conn = wc->conn;
	if (cl && cl->rbuf) {
		if (!cl->closed) {
			kv_request(w, cl, kv_recv_msg(w, cl, wc), wc->byte_len);
			if (!cl->closed)
				kv_conn_recv_post(cl, cl->conn,
						  (uint32_t)wc->wr_id);
		}
		return;
	}
	if (cl && !cl->closed)
		kv_request(w, cl, kv_recv_msg(w, cl, wc), wc->byte_len);
	kv_recv_back(w, (uint32_t)wc->wr_id);
}

/* The cq is empty: free what was closed before, close what is closing. */
static void kv_client_reap(struct kv_worker *w)
{
	for (struct kv_client **pp = &w->closing; *pp;) {
		struct kv_client *cl = *pp;

		if (!cl->taken) { /* the accepter has yet to let go of it */
			pp = &cl->next_closing;
			continue;
		}
		if (cl->conn) {
			/*
			 * Flushes into the cq, where what names the connection
			 * is served as usual: rdmx keeps it until then
			 * (rdmx_conn_close), and cl until the cq is empty.
			 */
			rdmx_conn_close(cl->conn);
			cl->conn = NULL;
			pp = &cl->next_closing;
			continue;
		}
		*pp = cl->next_closing;
		rdmx_mr_dereg(cl->rmr);
		free(cl->rbuf);
		free(cl);
	}
}

/*
 * Before a batch is served: start loading what its requests' lookups
 * will touch (kv_store_prefetch). Taken one by one, each GET of 4 KiB
 * values over 10,000 keys waited for two misses in a row (bucket, item):
 * kv_slot was 11-15% of the server's time.
 */
static void kv_prefetch(struct kv_worker *w, const struct rdmx_completion *wc,
			int n)
{
	const uint8_t *keys[KV_PREFETCH];
	uint16_t klens[KV_PREFETCH];
	bool value[KV_PREFETCH];
	int m = 0;

	for (int i = 0; i < n && m < KV_PREFETCH; i++) {
		struct kv_client *cl;
		struct kv_req r;

		if (wc[i].opcode != RDMX_OP_RECV || wc[i].status != RDMX_OK ||
		    !(cl = rdmx_conn_user_ctx(wc[i].conn)) ||
		    !kv_req_decode(kv_recv_msg(w, cl, &wc[i]), wc[i].byte_len,
				   &r))
			continue;
		keys[m] = r.key;
		value[m] = r.op == KV_OP_GET;
		klens[m++] = r.key_len;
	}
	if (m < 2) /* alone, it would wait for its misses all the same */
		return;
	kv_store_hold(w);
	kv_store_prefetch(w->srv->store, keys, klens, value, m);
}

/*
 * A worker that served a request this recently keeps polling instead of
 * sleeping: under load the next one comes sooner than a wake-up takes
 * on these VMs (~50 us), and a sleeping worker makes every client ring
 * its doorbell. 32 clients over shm: 167k -> 242k GETs/s, p99 466 ->
 * 126 us. Idle this long, it waits in rdmx_cq_wait (progress.wait_spin,
 * then asleep).
 */
#define KV_BUSY_MS 0.2

static void *kv_worker_run(void *arg)
{
	struct kv_worker *w = arg;
	struct rdmx_completion wc[32];
	double last_work = kv_now_ms(), now;
	bool worked = false;

	while (!atomic_load(&w->srv->stop)) {
		int n = rdmx_poll(w->cq, wc, 32);

		kv_prefetch(w, wc, n);
		for (int i = 0; i < n; i++)
			kv_completion(w, &wc[i]);
		kv_batch_end(w);
		if (n > 0) {
			worked = true;
			continue;
		}
		now = kv_now_ms();
		if (worked) {
			last_work = now;
			worked = false;
		}
		kv_client_reap(w);
		kv_client_take(w);
		kv_recv_fit(w);
		kv_client_check(w);
		kv_aof_tick(w->srv->aof);
		if (now - last_work >= KV_BUSY_MS)
			rdmx_cq_wait(w->cq, 20);
	}
	return NULL;
}

/* ---- workers and the server --------------------------------------------- */

static rdmx_status kv_worker_open(struct rdmx_kv_server *srv,
				  struct kv_worker *w)
{
	struct rdmx_srq_attr sa = { .mask = RDMX_SRQ_ATTR_MAX_WR,
				    .max_wr = KV_RECV_CHUNK * KV_RECV_CHUNKS };
	rdmx_status st;

	w->srv = srv;
	pthread_mutex_init(&w->lock, NULL);
	st = rdmx_cq_create(srv->ctx, &w->cq);
	if (st)
		return st;
	sa.cq = w->cq;
	st = rdmx_srq_create(srv->ctx, &sa, &w->srq);
	if (st == RDMX_ERR_UNSUPPORTED) { /* each client gets its own */
		kv_log(RDMX_LOG_INFO, "no shared receive queue here: each "
				      "client gets RECVs of its own");
		return RDMX_OK;
	}
	return st ? st : kv_recv_grow(w);
}

static void kv_worker_close(struct kv_worker *w)
{
	struct rdmx_completion wc[32];
	int n;

	if (w->cq) {
		kv_client_take(w);
		while (w->nclients)
			kv_client_close(w, w->clients[0], NULL);
		/* Twice: close them, then free them once their flushed
		 * answers and READs have given their items back. */
		for (int round = 0; round < 2; round++) {
			while ((n = rdmx_poll(w->cq, wc, 32)) > 0) {
				for (int i = 0; i < n; i++)
					if (wc[i].opcode != RDMX_OP_RECV)
						kv_done(w, &wc[i]);
				kv_batch_end(w); /* clients closed: drops */
			}
			kv_client_reap(w);
		}
	}
	rdmx_srq_destroy(w->srq); /* its RECVs flush into the cq */
	while (w->cq && rdmx_poll(w->cq, wc, 32) > 0)
		;
	for (uint32_t c = 0; c < w->nrchunks; c++) {
		rdmx_mr_dereg(w->rchunk[c].mr);
		free(w->rchunk[c].buf);
	}
	while (w->chunks) {
		struct kv_work_chunk *ch = w->chunks;

		w->chunks = ch->next;
		rdmx_mr_dereg(ch->mr);
		free(ch);
	}
	rdmx_cq_destroy(w->cq);
	free(w->clients);
	pthread_mutex_destroy(&w->lock);
}

static void kv_hand_over(struct kv_worker *w, struct kv_client *cl,
			 struct rdmx_conn *conn, bool refused)
{
	pthread_mutex_lock(&w->lock);
	cl->accepted = conn;
	cl->refused = refused;
	cl->next_incoming = w->incoming;
	w->incoming = cl;
	pthread_mutex_unlock(&w->lock);
	atomic_fetch_add(&w->srv->clients_open, 1);
	atomic_fetch_add(&w->srv->clients_total, 1);
}

/* A client; with @own_recvs, its RECV buffers, registered. */
static struct kv_client *kv_client_new(struct rdmx_kv_server *srv,
				       bool own_recvs)
{
	struct kv_client *cl = calloc(1, sizeof(*cl));
	size_t len = (size_t)KV_CONN_RECVS * KV_MSG;

	if (!cl || !own_recvs)
		return cl;
	cl->rbuf = kv_msgs_alloc(64, len);
	if (!cl->rbuf || rdmx_mr_reg(srv->ctx, cl->rbuf, len,
				     RDMX_ACCESS_LOCAL_WRITE, &cl->rmr)) {
		free(cl->rbuf);
		free(cl);
		return NULL;
	}
	return cl;
}

static void *kv_accepter(void *arg)
{
	struct rdmx_kv_server *srv = arg;

	struct kv_client *cl = NULL;

	while (!atomic_load(&srv->stop)) {
		struct kv_worker *w = &srv->w[srv->next_worker];
		/* The client rides on the connection, so its first request
		 * finds it even before the worker takes it in. */
		struct rdmx_conn *conn;
		bool refused = false;
		struct rdmx_conn_attr ca = {
			.mask = RDMX_CONN_ATTR_USER_CTX |
				(w->srq ? RDMX_CONN_ATTR_SRQ : 0),
			.cq = w->cq,
			.srq = w->srq
		};

		if (!cl && !(cl = kv_client_new(srv, !w->srq))) {
			usleep(10000);
			continue;
		}
		ca.user_ctx = cl;
		if (rdmx_accept(srv->lst, &ca, 100, &conn) != RDMX_OK)
			continue;
		if (cl->rbuf && !w->srq) {
			rdmx_status st = RDMX_OK;

			for (uint32_t i = 0; i < KV_CONN_RECVS && !st; i++)
				st = kv_conn_recv_post(cl, conn, i);
			/*
			 * Its worker ends it: a request may already be in a
			 * RECV posted before the failure, and names the
			 * connection in the worker's cq, which only the
			 * worker may take once it is closed (kv_client_reap).
			 */
			if (st && st != RDMX_ERR_CONN_LOST) { /* else it went */
				kv_log(RDMX_LOG_WARN,
				       "client refused: posting its %d RECVs: "
				       "%s (each client needs "
				       "conn.max_recv_wr %d or more)",
				       KV_CONN_RECVS, rdmx_strerror(st),
				       KV_CONN_RECVS);
				atomic_fetch_add(&srv->clients_ejected, 1);
			}
			refused = st != RDMX_OK;
		}
		kv_hand_over(w, cl, conn, refused);
		cl = NULL;
		srv->next_worker = (srv->next_worker + 1) % srv->nworkers;
	}
	if (cl) {
		rdmx_mr_dereg(cl->rmr);
		free(cl->rbuf);
		free(cl);
	}
	return NULL;
}

rdmx_status rdmx_kv_server_create(struct rdmx_ctx *ctx, const char *addr,
				  const struct rdmx_kv_server_attr *attr,
				  struct rdmx_kv_server **srv_p)
{
	uint64_t mask = attr ? attr->mask : 0;
	uint64_t memory = mask & RDMX_KV_SERVER_ATTR_MEMORY ? attr->memory
							    : 1ull << 30;
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	uint32_t threads = mask & RDMX_KV_SERVER_ATTR_THREADS
				   ? attr->threads
				   : (uint32_t)(cores > 1 ? cores / 2 : 1);
	struct rdmx_kv_server *srv;
	rdmx_status st;

	if (!ctx || !srv_p || memory < 4096 || !threads || threads > 256) {
		kv_log(RDMX_LOG_ERROR, "the pool is at least 4k, and 1 to 256 "
				       "threads serve it");
		return RDMX_ERR_INVALID;
	}
	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return RDMX_ERR_NOMEM;
	srv->ctx = ctx;
	srv->nworkers = threads;
	srv->w = calloc(threads, sizeof(*srv->w));
	if (!srv->w || kv_store_create(memory,
				       mask & RDMX_KV_SERVER_ATTR_EVICT &&
					       attr->evict == RDMX_KV_EVICT_LRU,
				       &srv->store)) {
		kv_log(RDMX_LOG_ERROR, "no memory for a pool of %llu bytes",
		       (unsigned long long)memory);
		st = RDMX_ERR_NOMEM;
		goto err;
	}
	srv->pool = kv_store_pool(srv->store, &srv->pool_len);
	if (mask & RDMX_KV_SERVER_ATTR_AOF &&
	    (!attr->aof_path || attr->fsync > RDMX_KV_FSYNC_ALWAYS ||
	     kv_aof_open(attr->aof_path, attr->fsync, srv->store, &srv->aof))) {
		st = attr->aof_path ? RDMX_ERR_SYSTEM : RDMX_ERR_INVALID;
		goto err;
	}
	st = rdmx_mr_reg(ctx, srv->pool, srv->pool_len, RDMX_ACCESS_LOCAL_WRITE,
			 &srv->pool_mr);
	for (uint32_t i = 0; i < threads && !st; i++)
		st = kv_worker_open(srv, &srv->w[i]);
	if (!st)
		st = rdmx_listen(ctx, addr, &srv->lst);
	if (!st && mask & RDMX_KV_SERVER_ATTR_RESP &&
	    (!attr->resp_addr ||
	     kv_resp_start(srv, attr->resp_addr, &srv->resp)))
		st = attr->resp_addr ? RDMX_ERR_SYSTEM : RDMX_ERR_INVALID;
	if (st)
		goto err;
	for (uint32_t i = 0; i < threads; i++) {
		if (pthread_create(&srv->w[i].thread, NULL, kv_worker_run,
				   &srv->w[i])) {
			st = RDMX_ERR_SYSTEM;
			goto err;
		}
		srv->w[i].started = true;
		pthread_setname_np(srv->w[i].thread, "rdmx-kv-worker");
	}
	if (pthread_create(&srv->accepter, NULL, kv_accepter, srv)) {
		st = RDMX_ERR_SYSTEM;
		goto err;
	}
	srv->accepting = true;
	/* Named, as the progress threads are, for top -H and perf. */
	pthread_setname_np(srv->accepter, "rdmx-kv-accept");
	*srv_p = srv;
	return RDMX_OK;
err:
	rdmx_kv_server_destroy(srv);
	return st;
}

int rdmx_kv_server_port(const struct rdmx_kv_server *srv)
{
	return rdmx_listener_port(srv->lst);
}

int rdmx_kv_server_resp_port(const struct rdmx_kv_server *srv)
{
	return kv_resp_port(srv->resp);
}

void rdmx_kv_server_stats(struct rdmx_kv_server *srv,
			  struct rdmx_kv_server_stats *out)
{
	struct kv_store_stats st;

	kv_store_lock(srv->store);
	kv_store_stats(srv->store, &st);
	kv_store_unlock(srv->store);
	*out = (struct rdmx_kv_server_stats){
		.keys = st.keys,
		.bytes_used = st.bytes_used,
		.pool_bytes = st.pool_bytes,
		.gets = st.gets,
		.hits = st.hits,
		.puts = st.puts,
		.dels = st.dels,
		.refused_nomem = st.refused_nomem,
		.evicted = st.evicted,
		.clients_open = atomic_load(&srv->clients_open),
		.clients_total = atomic_load(&srv->clients_total),
		.clients_ejected = atomic_load(&srv->clients_ejected),
		.request_buffers = atomic_load(&srv->request_buffers),
	};
	kv_aof_lock(srv->aof);
	out->aof_records = kv_aof_records(srv->aof);
	kv_aof_unlock(srv->aof);
}

void rdmx_kv_server_destroy(struct rdmx_kv_server *srv)
{
	if (!srv)
		return;
	kv_resp_stop(srv->resp);
	atomic_store(&srv->stop, true);
	if (srv->accepting)
		pthread_join(srv->accepter, NULL);
	rdmx_listener_close(srv->lst);
	for (uint32_t i = 0; srv->w && i < srv->nworkers; i++) {
		if (srv->w[i].started)
			pthread_join(srv->w[i].thread, NULL);
		if (srv->w[i].srv)
			kv_worker_close(&srv->w[i]);
	}
	rdmx_mr_dereg(srv->pool_mr);
	kv_aof_close(srv->aof);
	kv_store_destroy(srv->store);
	free(srv->w);
	free(srv);
}
