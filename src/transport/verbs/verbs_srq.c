/* SPDX-License-Identifier: MIT */
/*
 * Shared receive queues on the device. Flow control here is the NIC's own:
 * a connection whose RECVs come from a srq grants no credits (the peer
 * learns it from the setup message), and a SEND that finds the srq empty
 * is RNR-NAKed and retried by the peer's NIC, without limit, until a RECV
 * is posted. iWARP has no RNR retry (an empty srq would end the
 * connection), so a context on an iWARP device leaves srqs to the software
 * transports. A srq lives on the context's first device, and serves the
 * connections on it.
 */
#include <errno.h>
#include <stdlib.h>

#include "verbs.h"

static rdmx_status rdmx_verbs_srq_create(struct rdmx_srq *srq)
{
	struct rdmx_verbs_srq *s;
	struct rdmx_verbs_ctx *v;
	struct rdmx_verbs_dev *d;
	struct ibv_srq_init_attr ia = { 0 };
	void *priv;
	rdmx_status st;

	st = rdmx_ctx_transport(srq->ctx, RDMX_TRANSPORT_VERBS, &priv);
	if (st)
		return st;
	v = priv;
	d = v->devs[0];
	if (d->dev->device->transport_type != IBV_TRANSPORT_IB ||
	    !d->attr.max_srq) {
		rdmx_info("verbs: %s has no shared receive queue a SEND can "
			  "wait on (%s); srqs use the software transports",
			  d->name,
			  d->attr.max_srq ? "iWARP has no RNR retry"
					  : "the device has none");
		return RDMX_ERR_UNSUPPORTED;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return RDMX_ERR_NOMEM;
	s->vctx = v;
	s->d = d;
	ia.attr.max_wr = srq->max_wr < (uint32_t)d->attr.max_srq_wr
				 ? srq->max_wr
				 : (uint32_t)d->attr.max_srq_wr;
	ia.attr.max_sge = v->ctx->cfg.conn_max_sge <
					  (uint64_t)d->attr.max_srq_sge
				  ? (uint32_t)v->ctx->cfg.conn_max_sge
				  : (uint32_t)d->attr.max_srq_sge;
	s->size = ia.attr.max_wr;
	s->slot = calloc(s->size, sizeof(*s->slot));
	s->free = calloc(s->size, sizeof(*s->free));
	if (!s->slot || !s->free) {
		st = RDMX_ERR_NOMEM;
		goto err_free;
	}
	s->ibsrq = ibv_create_srq(d->pd, &ia);
	if (!s->ibsrq) {
		rdmx_error("verbs: ibv_create_srq of %u RECVs on %s: %m",
			   s->size, d->name);
		st = RDMX_ERR_SYSTEM;
		goto err_free;
	}
	/* Popped from the end: slot 0 first. */
	for (uint32_t i = 0; i < s->size; i++)
		s->free[i] = s->size - 1 - i;
	s->nfree = s->size;
	pthread_mutex_init(&s->lock, NULL);
	srq->max_wr = s->size;
	srq->tp = s;
	return RDMX_OK;

err_free:
	free(s->slot);
	free(s->free);
	free(s);
	return st;
}

static int rdmx_verbs_srq_seq_cmp(const void *a, const void *b)
{
	uint64_t x = (*(const struct rdmx_verbs_srq_slot *const *)a)->seq;
	uint64_t y = (*(const struct rdmx_verbs_srq_slot *const *)b)->seq;

	return x < y ? -1 : x > y;
}

static void rdmx_verbs_srq_destroy(struct rdmx_srq *srq)
{
	struct rdmx_verbs_srq *s = srq->tp;
	struct rdmx_verbs_srq_slot **used;
	uint32_t n = 0;

	/* No QP uses it any more: nothing can take a RECV now. */
	if (ibv_destroy_srq(s->ibsrq))
		rdmx_error("verbs: ibv_destroy_srq: %m");
	used = calloc(s->size, sizeof(*used));
	for (uint32_t i = 0; used && i < s->size; i++)
		if (s->slot[i].used)
			used[n++] = &s->slot[i];
	if (!used)
		rdmx_error("verbs: out of memory flushing a srq: %u RECVs get "
			   "no completion",
			   s->size - s->nfree);
	qsort(used, n, sizeof(*used), rdmx_verbs_srq_seq_cmp);
	for (uint32_t i = 0; i < n; i++) {
		struct rdmx_completion wc = { .wr_id = used[i]->wr_id,
					      .status = RDMX_ERR_FLUSHED,
					      .opcode = RDMX_OP_RECV };

		rdmx_cq_push(srq->cq, &wc);
	}
	free(used);
	pthread_mutex_destroy(&s->lock);
	free(s->slot);
	free(s->free);
	free(s);
}

static rdmx_status rdmx_verbs_srq_post_recv(struct rdmx_srq *srq,
					    const struct rdmx_sge *sg,
					    int num_sge, uint64_t wr_id)
{
	struct rdmx_verbs_srq *s = srq->tp;
	struct ibv_sge sge[RDMX_MAX_SGE];
	struct ibv_recv_wr w = { .sg_list = sge }, *bad;
	rdmx_status st = RDMX_OK;
	uint32_t slot;
	int rc;

	w.num_sge = rdmx_verbs_recv_sges(s->vctx, s->d, sg, num_sge, sge);
	pthread_mutex_lock(&s->lock);
	if (!s->nfree) {
		pthread_mutex_unlock(&s->lock);
		return RDMX_ERR_AGAIN;
	}
	slot = s->free[--s->nfree];
	s->slot[slot] = (struct rdmx_verbs_srq_slot){ .wr_id = wr_id,
						      .seq = s->seq++,
						      .used = true };
	w.wr_id = RDMX_VERBS_SRQ_TAG | slot;
	rc = ibv_post_srq_recv(s->ibsrq, &w, &bad);
	if (rc) {
		s->slot[slot].used = false;
		s->free[s->nfree++] = slot;
		errno = rc < 0 ? -rc : rc;
		rdmx_error("verbs: ibv_post_srq_recv: %m");
		st = errno == ENOMEM ? RDMX_ERR_AGAIN : RDMX_ERR_SYSTEM;
	}
	pthread_mutex_unlock(&s->lock);
	return st;
}

struct rdmx_verbs_rec rdmx_verbs_srq_take(struct rdmx_verbs_srq *s,
					  uint32_t slot)
{
	struct rdmx_verbs_rec rec = { .opcode = RDMX_OP_RECV,
				      .signaled = true,
				      .report = true };

	pthread_mutex_lock(&s->lock);
	rec.wr_id = s->slot[slot].wr_id;
	s->slot[slot].used = false;
	s->free[s->nfree++] = slot;
	pthread_mutex_unlock(&s->lock);
	return rec;
}

const struct rdmx_srq_ops rdmx_verbs_srq_ops = {
	.name = "verbs",
	.create = rdmx_verbs_srq_create,
	.destroy = rdmx_verbs_srq_destroy,
	.post_recv = rdmx_verbs_srq_post_recv,
};
