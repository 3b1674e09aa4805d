/* SPDX-License-Identifier: MIT */
/* Posting on a verbs QP: translation, inline sends, credits, the wait queue. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "verbs.h"
#include "verbs_proto.h"

static uint32_t rdmx_verbs_ring_push(struct rdmx_verbs_ring *r,
				     const struct rdmx_verbs_rec *rec)
{
	uint32_t slot = (r->head + r->count) % r->size;

	r->rec[slot] = *rec;
	r->count++;
	r->signaled += rec->signaled;
	return slot;
}

/* Undo the last push (the post it was for failed). */
static void rdmx_verbs_ring_unpush(struct rdmx_verbs_ring *r)
{
	r->count--;
	r->signaled -= r->rec[(r->head + r->count) % r->size].signaled;
}

/* Credits the peer granted that we have not used. */
static uint64_t rdmx_verbs_credits_left(const struct rdmx_verbs_conn *c)
{
	if (c->peer_srq)
		return UINT64_MAX;
	return __atomic_load_n(c->credit_in, __ATOMIC_ACQUIRE) - c->consumed;
}

static bool rdmx_verbs_needs_credit(enum rdmx_opcode op)
{
	return op == RDMX_OP_SEND || op == RDMX_OP_WRITE_IMM;
}

static bool rdmx_verbs_have_credit(const struct rdmx_verbs_conn *c)
{
	/* The peer's NIC writes this word: read it as the atomic it is. */
	return c->peer_srq ||
	       __atomic_load_n(c->credit_in, __ATOMIC_ACQUIRE) > c->consumed;
}

static rdmx_status rdmx_verbs_errno(const struct rdmx_verbs_conn *c, int rc)
{
	if (rc < 0) /* some providers (siw) return -errno */
		rc = -rc;
	if (rc == ENOMEM)
		return RDMX_ERR_AGAIN;
	errno = rc;
	rdmx_error("verbs: ibv_post_send to %s: %m", c->base.info.peer_addr);
	return RDMX_ERR_SYSTEM;
}

static bool rdmx_verbs_one_sided(enum rdmx_opcode op)
{
	return op == RDMX_OP_WRITE || op == RDMX_OP_WRITE_IMM ||
	       op == RDMX_OP_READ || op == RDMX_OP_FETCH_ADD ||
	       op == RDMX_OP_CMP_SWAP;
}

static struct rdmx_verbs_key *rdmx_verbs_key_slot(struct rdmx_verbs_conn *c,
						  uint64_t rkey)
{
	/* The high half is random (mr.c). */
	return &c->keys[(rkey >> 32) % RDMX_VERBS_KEYS];
}

/*
 * Can @wr go to the NIC as far as its rkey goes? Yes unless the peer's
 * keys need asking for (RDMX_VERBS_F_KEYS) and this one's is not known:
 * then ask, once, and the request waits at the head of the queue for the
 * answer (rdmx_verbs_key_told). Lock held.
 */
static bool rdmx_verbs_key_ready(struct rdmx_verbs_conn *c,
				 const struct rdmx_wr *wr)
{
	uint8_t ask[RDMX_VERBS_KEY_ASK_LEN] = { RDMX_VERBS_KEY_ASK };

	if (!c->keys || !rdmx_verbs_one_sided(wr->opcode) ||
	    rdmx_verbs_key_slot(c, wr->rkey)->rkey == wr->rkey ||
	    c->key_answer.rkey == wr->rkey)
		return true;
	if (c->key_asked)
		return false;
	rdmx_put_be(ask + 1, wr->rkey, 8);
	rdmx_put_be(ask + 9, wr->remote_addr, 8);
	/* Broken: the socket's reader fails the connection. */
	if (send(c->ctl, ask, sizeof(ask), MSG_DONTWAIT | MSG_NOSIGNAL) !=
	    (ssize_t)sizeof(ask))
		rdmx_debug("verbs: asking %s for a key: %m",
			   c->base.info.peer_addr);
	c->key_asked = wr->rkey;
	c->key_asked_us = rdmx_now_us();
	return false;
}

/* The NIC's key for @wr's rkey: its low half, or what the peer told. */
static uint32_t rdmx_verbs_peer_key(struct rdmx_verbs_conn *c,
				    const struct rdmx_wr *wr, bool internal)
{
	struct rdmx_verbs_key *k;

	if (!c->keys || internal)
		return (uint32_t)wr->rkey;
	k = rdmx_verbs_key_slot(c, wr->rkey);
	return k->rkey == wr->rkey ? k->key : c->key_answer.key;
}

void rdmx_verbs_key_told(struct rdmx_verbs_conn *c, uint64_t rkey, uint32_t key,
			 bool ok)
{
	if (!rkey || rkey != c->key_asked)
		return;
	c->key_asked = 0;
	c->key_answer = (struct rdmx_verbs_key){ rkey, key };
	if (ok)
		*rdmx_verbs_key_slot(c, rkey) = c->key_answer;
	rdmx_verbs_kick(c);
}

/*
 * Fill @w (and @sge) for one work request and push its record; the caller
 * posts it. Lock held.
 */
static rdmx_status rdmx_verbs_fill(struct rdmx_verbs_conn *c,
				   const struct rdmx_wr *wr, bool internal,
				   struct ibv_send_wr *w, struct ibv_sge *sge)
{
	struct rdmx_verbs_rec rec = {
		.wr_id = wr->wr_id,
		.opcode = wr->opcode,
		.internal = internal,
		.report = !(wr->flags & RDMX_WR_UNSIGNALED),
	};
	int n = 0;

	memset(w, 0, sizeof(*w));
	w->sg_list = sge;
	/* A READ or an atomic is done only once answered: always reported. */
	rec.signaled = internal || rec.report || wr->opcode == RDMX_OP_READ ||
		       wr->opcode == RDMX_OP_FETCH_ADD ||
		       wr->opcode == RDMX_OP_CMP_SWAP;
	w->send_flags = rec.signaled ? IBV_SEND_SIGNALED : 0;
	if (wr->flags & RDMX_WR_FENCE) /* after earlier READs and atomics */
		w->send_flags |= IBV_SEND_FENCE;

	for (int i = 0; i < wr->num_sge; i++) {
		struct ibv_mr *imr;

		if (!wr->sg_list[i].length)
			continue;
		imr = rdmx_verbs_mr_on(c->vctx, c->d, wr->sg_list[i].mr);
		sge[n].addr = (uintptr_t)wr->sg_list[i].addr;
		sge[n].length = wr->sg_list[i].length;
		sge[n++].lkey = imr ? imr->lkey : 0;
		rec.len += wr->sg_list[i].length;
	}
	w->num_sge = n;
	switch (wr->opcode) {
	case RDMX_OP_SEND:
		w->opcode = IBV_WR_SEND;
		break;
	case RDMX_OP_WRITE:
		w->opcode = IBV_WR_RDMA_WRITE;
		break;
	case RDMX_OP_WRITE_IMM:
		w->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		w->imm_data = htonl(wr->imm);
		break;
	case RDMX_OP_READ:
		w->opcode = IBV_WR_RDMA_READ;
		break;
	case RDMX_OP_FETCH_ADD:
		w->opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
		break;
	case RDMX_OP_CMP_SWAP:
		w->opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		break;
	default:
		return RDMX_ERR_INVALID;
	}
	if (wr->opcode == RDMX_OP_FETCH_ADD || wr->opcode == RDMX_OP_CMP_SWAP) {
		w->wr.atomic.remote_addr = wr->remote_addr;
		w->wr.atomic.rkey = rdmx_verbs_peer_key(c, wr, internal);
		w->wr.atomic.compare_add = wr->compare_add;
		w->wr.atomic.swap = wr->swap;
	} else {
		w->wr.rdma.remote_addr = wr->remote_addr;
		w->wr.rdma.rkey = rdmx_verbs_peer_key(c, wr, internal);
	}
	/* Small payloads ride in the work request itself. */
	if (rec.len && rec.len <= c->max_inline && wr->opcode != RDMX_OP_READ &&
	    w->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD &&
	    w->opcode != IBV_WR_ATOMIC_CMP_AND_SWP)
		w->send_flags |= IBV_SEND_INLINE;
	if (rec.signaled && !c->sq.signaled) /* the watchdog's clock starts */
		c->busy_since = rdmx_now_us();
	w->wr_id = rdmx_verbs_ring_push(&c->sq, &rec);
	return RDMX_OK;
}

/* ibv_post_send, with siw's SIGPIPE taken rather than delivered. */
static int rdmx_verbs_ibv_post(struct rdmx_verbs_conn *c, struct ibv_send_wr *w,
			       struct ibv_send_wr **bad)
{
	struct rdmx_sigpipe sp;
	bool held = rdmx_verbs_sigpipe_hold(c->d, &sp);
	int rc = ibv_post_send(c->qp, w, bad);

	if (held)
		rdmx_sigpipe_release(&sp);
	return rc;
}

/* Give one work request to the NIC. Lock held. */
static rdmx_status rdmx_verbs_post_hw(struct rdmx_verbs_conn *c,
				      const struct rdmx_wr *wr, bool internal)
{
	struct ibv_sge sge[RDMX_MAX_SGE];
	struct ibv_send_wr w, *bad;
	rdmx_status st;
	int rc;

	st = rdmx_verbs_fill(c, wr, internal, &w, sge);
	if (st)
		return st;
	rc = rdmx_verbs_ibv_post(c, &w, &bad);
	if (rc) {
		rdmx_verbs_ring_unpush(&c->sq);
		return rdmx_verbs_errno(c, rc);
	}
	if (rdmx_verbs_needs_credit(wr->opcode))
		c->consumed++;
	return RDMX_OK;
}

/* Tell the peer how many RECVs we have posted: one write in flight. */
static void rdmx_verbs_credit_update(struct rdmx_verbs_conn *c)
{
	struct rdmx_mr mr = { .addr = (uint8_t *)c->credit_out, .length = 8 };
	struct rdmx_verbs_mr vm = { 0 };
	struct rdmx_sge sg = { c->credit_out, 8, &mr };
	struct rdmx_wr wr = { .opcode = RDMX_OP_WRITE,
			      .sg_list = &sg,
			      .num_sge = 1,
			      .remote_addr = c->peer_credit_addr,
			      .rkey = c->peer_credit_rkey };

	if (c->credit_busy || c->recvs_told == c->recvs_posted || c->dead ||
	    c->quiet)
		return;
	vm.imr[c->d->idx] = c->credit_mr;
	mr.tp_mr[RDMX_TRANSPORT_VERBS] = &vm;
	*c->credit_out = c->recvs_posted;
	if (rdmx_verbs_post_hw(c, &wr, true)) {
		rdmx_debug("verbs: credit update to %s not posted; will retry",
			   c->base.info.peer_addr);
		return; /* retried on the next kick */
	}
	rdmx_debug("verbs: told %s of %llu RECVs", c->base.info.peer_addr,
		   (unsigned long long)c->recvs_posted);
	c->credit_busy = true;
	c->recvs_told = c->recvs_posted;
}

void rdmx_verbs_kick(struct rdmx_verbs_conn *c)
{
	struct rdmx_verbs_pending *p;

	/* In order: the head waits for a credit, everything behind it too. */
	while ((p = c->pend_head) && !c->dead && !c->quiet) {
		if (!rdmx_verbs_key_ready(c, &p->wr))
			break;
		if (rdmx_verbs_needs_credit(p->wr.opcode) &&
		    !rdmx_verbs_have_credit(c)) {
			rdmx_debug("verbs: SEND to %s waits: peer posted %llu, "
				   "we used %llu",
				   c->base.info.peer_addr,
				   (unsigned long long)__atomic_load_n(
					   c->credit_in, __ATOMIC_ACQUIRE),
				   (unsigned long long)c->consumed);
			break;
		}
		if (rdmx_verbs_post_hw(c, &p->wr, false))
			break;
		c->pend_head = p->next;
		if (!c->pend_head)
			c->pend_tail = NULL;
		c->npending--;
		free(p);
	}
	rdmx_verbs_credit_update(c);
}

void rdmx_verbs_flush_pending(struct rdmx_verbs_conn *c, rdmx_status st)
{
	struct rdmx_verbs_pending *p;
	struct rdmx_completion wc = { .status = st, .conn = &c->base };

	while ((p = c->pend_head)) {
		c->pend_head = p->next;
		wc.wr_id = p->wr.wr_id;
		wc.opcode = p->wr.opcode;
		rdmx_cq_push(c->base.cq, &wc);
		free(p);
	}
	c->pend_tail = NULL;
	c->npending = 0;
}

static rdmx_status rdmx_verbs_defer(struct rdmx_verbs_conn *c,
				    const struct rdmx_wr *wr)
{
	struct rdmx_verbs_pending *p = malloc(sizeof(*p));

	if (!p)
		return RDMX_ERR_NOMEM;
	p->next = NULL;
	p->wr = *wr;
	memcpy(p->sg, wr->sg_list, (size_t)wr->num_sge * sizeof(p->sg[0]));
	p->wr.sg_list = p->sg;
	if (c->pend_tail)
		c->pend_tail->next = p;
	else
		c->pend_head = p;
	c->pend_tail = p;
	/* The credit will come as a remote write: no event wakes the thread. */
	if (c->npending++ == 0)
		rdmx_verbs_wake(c->vctx);
	return RDMX_OK;
}

/* One user request: to the NIC, or in order behind a credit. Lock held. */
static rdmx_status rdmx_verbs_post_one(struct rdmx_verbs_conn *c,
				       const struct rdmx_wr *wr)
{
	if (c->dead)
		return RDMX_ERR_CONN_LOST;
	/* This one too must fit; two slots stay for credit updates. */
	if (c->sq.count + c->npending + 1 + 2 > c->sq.size)
		return RDMX_ERR_AGAIN;
	if (c->npending || c->quiet ||
	    (rdmx_verbs_needs_credit(wr->opcode) &&
	     !rdmx_verbs_have_credit(c)) ||
	    !rdmx_verbs_key_ready(c, wr))
		return rdmx_verbs_defer(c, wr);
	return rdmx_verbs_post_hw(c, wr, false);
}

rdmx_status rdmx_verbs_post_send(struct rdmx_conn *conn,
				 const struct rdmx_wr *wr)
{
	struct rdmx_verbs_conn *c = to_verbs_conn(conn);
	rdmx_status st;

	pthread_mutex_lock(&c->lock);
	st = rdmx_verbs_post_one(c, wr);
	pthread_mutex_unlock(&c->lock);
	return st;
}

#define RDMX_VERBS_LIST_MAX 32

/*
 * Up to RDMX_VERBS_LIST_MAX requests as one chain: one ibv_post_send, one
 * doorbell. The caller checked room and credits. Returns how many the NIC
 * took (all, or those before the one it refused: *st_p says why).
 */
static int rdmx_verbs_post_chain(struct rdmx_verbs_conn *c,
				 const struct rdmx_wr *wrs, int n,
				 rdmx_status *st_p)
{
	struct ibv_sge sge[RDMX_VERBS_LIST_MAX][RDMX_MAX_SGE];
	struct ibv_send_wr w[RDMX_VERBS_LIST_MAX], *bad = NULL;
	int filled = 0, took, rc;

	for (; filled < n; filled++) {
		*st_p = rdmx_verbs_fill(c, &wrs[filled], false, &w[filled],
					sge[filled]);
		if (*st_p)
			break;
		if (filled)
			w[filled - 1].next = &w[filled];
	}
	rc = filled ? rdmx_verbs_ibv_post(c, w, &bad) : 0;
	took = rc ? (int)(bad - w) : filled;
	for (int i = took; i < filled; i++)
		rdmx_verbs_ring_unpush(&c->sq);
	for (int i = 0; i < took; i++)
		if (rdmx_verbs_needs_credit(wrs[i].opcode))
			c->consumed++;
	if (rc)
		*st_p = rdmx_verbs_errno(c, rc);
	return took;
}

rdmx_status rdmx_verbs_post_list(struct rdmx_conn *conn,
				 const struct rdmx_wr *wrs, int n,
				 int *posted_p)
{
	struct rdmx_verbs_conn *c = to_verbs_conn(conn);
	rdmx_status st = RDMX_OK;
	uint64_t need = 0;
	int done = 0;

	for (int i = 0; i < n; i++)
		need += rdmx_verbs_needs_credit(wrs[i].opcode);
	pthread_mutex_lock(&c->lock);
	/* Room, credits and keys for all, nothing queued ahead: chains. */
	if (!c->dead && !c->npending && !c->quiet && !c->keys &&
	    c->sq.count + (uint32_t)n + 2 <= c->sq.size &&
	    rdmx_verbs_credits_left(c) >= need) {
		while (done < n && !st) {
			int k = n - done < RDMX_VERBS_LIST_MAX
					? n - done
					: RDMX_VERBS_LIST_MAX;

			done += rdmx_verbs_post_chain(c, wrs + done, k, &st);
		}
	} else {
		/* Else one by one, keeping order behind waiting ones. */
		while (done < n && !(st = rdmx_verbs_post_one(c, &wrs[done])))
			done++;
	}
	pthread_mutex_unlock(&c->lock);
	*posted_p = done;
	return st;
}

int rdmx_verbs_recv_sges(struct rdmx_verbs_ctx *v, struct rdmx_verbs_dev *d,
			 const struct rdmx_sge *sg, int num_sge,
			 struct ibv_sge *out)
{
	int n = 0;

	for (int i = 0; i < num_sge; i++) {
		struct ibv_mr *imr;

		if (!sg[i].length)
			continue;
		imr = sg[i].mr ? rdmx_verbs_mr_on(v, d, sg[i].mr) : NULL;
		out[n].addr = (uintptr_t)sg[i].addr;
		out[n].length = sg[i].length;
		out[n++].lkey = imr ? imr->lkey : 0;
	}
	return n;
}

rdmx_status rdmx_verbs_post_recv(struct rdmx_conn *conn,
				 const struct rdmx_sge *sg, int num_sge,
				 uint64_t wr_id)
{
	struct rdmx_verbs_conn *c = to_verbs_conn(conn);
	struct rdmx_verbs_rec rec = { .wr_id = wr_id,
				      .opcode = RDMX_OP_RECV,
				      .signaled = true,
				      .report = true };
	struct ibv_sge sge[RDMX_MAX_SGE];
	struct ibv_recv_wr w = { .sg_list = sge }, *bad;
	rdmx_status st = RDMX_OK;
	int rc;

	w.num_sge = rdmx_verbs_recv_sges(c->vctx, c->d, sg, num_sge, sge);
	pthread_mutex_lock(&c->lock);
	if (c->dead) {
		st = RDMX_ERR_CONN_LOST;
	} else if (c->rq.count == c->rq.size) {
		st = RDMX_ERR_AGAIN;
	} else {
		w.wr_id = RDMX_VERBS_RQ_TAG |
			  rdmx_verbs_ring_push(&c->rq, &rec);
		rc = ibv_post_recv(c->qp, &w, &bad);
		if (rc) {
			rdmx_verbs_ring_unpush(&c->rq);
			st = rdmx_verbs_errno(c, rc);
		} else {
			c->recvs_posted++;
			rdmx_verbs_kick(c);
		}
	}
	pthread_mutex_unlock(&c->lock);
	return st;
}
