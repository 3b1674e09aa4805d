/* SPDX-License-Identifier: MIT */
/*
 * Shared receive queues: the public object. Which transports may use one is
 * settled here, once; the queue itself and its flow control belong to the
 * transport (the software engine's credits on a shared pool, or a device's
 * SRQ).
 */
#include <stdlib.h>

#include "core.h"

/*
 * Set @srq up on the best usable transport whose srq ops take it (verbs may
 * decline: iWARP), and let it serve every usable transport with the same
 * ops. RDMX_ERR_UNSUPPORTED when none does.
 */
static rdmx_status rdmx_srq_setup(struct rdmx_srq *srq)
{
	uint64_t usable = rdmx_ctx_transport_mask(srq->ctx, -1);
	rdmx_status st = RDMX_ERR_UNSUPPORTED;

	/* Best first, as the handshake chooses: the highest id. */
	for (int i = RDMX_TRANSPORT_MAX - 1; i >= 0; i--) {
		const struct rdmx_transport_ops *ops =
			rdmx_transport_by_id((unsigned)i);

		if (!ops || !ops->srq || !(usable & (1ull << ops->id)))
			continue;
		if (!srq->ops) {
			st = ops->srq->create(srq);
			if (st == RDMX_ERR_UNSUPPORTED)
				continue;
			if (st)
				return st;
			srq->ops = ops->srq;
		}
		if (ops->srq == srq->ops)
			srq->transports |= 1ull << ops->id;
	}
	return srq->ops ? RDMX_OK : st;
}

rdmx_status rdmx_srq_create(struct rdmx_ctx *ctx,
			    const struct rdmx_srq_attr *attr,
			    struct rdmx_srq **srq_p)
{
	struct rdmx_srq *srq;
	rdmx_status st;

	if (!ctx || !attr || !srq_p)
		return rdmx_invalid("rdmx_srq_create", "NULL %s",
				    !ctx    ? "context"
				    : !attr ? "attr"
					    : "output pointer");
	if (!attr->cq || attr->cq->ctx != ctx) {
		rdmx_error("rdmx_srq_create: attr needs a cq of the same "
			   "context");
		return RDMX_ERR_INVALID;
	}
	if ((attr->mask & RDMX_SRQ_ATTR_MAX_WR) &&
	    (!attr->max_wr || attr->max_wr > 65536)) {
		rdmx_error("rdmx_srq_create: max_wr %u is outside 1..65536",
			   attr->max_wr);
		return RDMX_ERR_INVALID;
	}
	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return RDMX_ERR_NOMEM;
	srq->ctx = ctx;
	srq->cq = attr->cq;
	srq->max_wr = (attr->mask & RDMX_SRQ_ATTR_MAX_WR)
			      ? attr->max_wr
			      : (uint32_t)ctx->cfg.conn_max_recv_wr;
	st = rdmx_srq_setup(srq);
	if (st) {
		if (st == RDMX_ERR_UNSUPPORTED)
			rdmx_error("rdmx_srq_create: no usable transport has "
				   "shared receive queues (transport: %s)",
				   ctx->cfg.transport);
		free(srq);
		return st;
	}
	rdmx_cq_attach(srq->cq, 1);
	rdmx_ctx_child(ctx, &ctx->nsrqs, 1);
	rdmx_debug("srq of %u RECVs on the %s transports", srq->max_wr,
		   srq->ops->name);
	*srq_p = srq;
	return RDMX_OK;
}

rdmx_status rdmx_srq_destroy(struct rdmx_srq *srq)
{
	unsigned n;

	if (!srq)
		return RDMX_OK;
	n = atomic_load(&srq->nconns);
	if (n) {
		rdmx_error("rdmx_srq_destroy: %u connections still use it", n);
		return RDMX_ERR_BUSY;
	}
	srq->ops->destroy(srq);
	rdmx_cq_attach(srq->cq, -1);
	rdmx_ctx_child(srq->ctx, &srq->ctx->nsrqs, -1);
	free(srq);
	return RDMX_OK;
}

rdmx_status rdmx_srq_post_recv(struct rdmx_srq *srq, const struct rdmx_sge *sg,
			       int num_sge, uint64_t wr_id)
{
	rdmx_status st;

	if (!srq)
		return rdmx_invalid("rdmx_srq_post_recv", "NULL srq");
	st = rdmx_recv_check(srq->ctx, sg, num_sge);
	if (st)
		return st;
	return srq->ops->post_recv(srq, sg, num_sge, wr_id);
}

uint64_t rdmx_conn_attr_transports(const struct rdmx_conn_attr *attr)
{
	uint64_t allow = ~0ull;

	/* The public bits are 1 << enum rdmx_transport_id. */
	_Static_assert(RDMX_TP_TCP == 1 << RDMX_TRANSPORT_TCP &&
			       RDMX_TP_SHM == 1 << RDMX_TRANSPORT_SHM &&
			       RDMX_TP_VERBS == 1 << RDMX_TRANSPORT_VERBS,
		       "RDMX_TP_* follow the transport ids");
	if (attr->mask & RDMX_CONN_ATTR_TRANSPORTS)
		allow &= attr->transports;
	if (attr->mask & RDMX_CONN_ATTR_SRQ)
		allow &= attr->srq->transports;
	return allow;
}
