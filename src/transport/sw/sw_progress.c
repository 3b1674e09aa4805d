/* SPDX-License-Identifier: MIT */
/*
 * The receive side and the progress engine. Headers and small payloads
 * arrive through a staging buffer; a large payload is read with readv
 * straight into the registered memory it is bound for. Every one-sided
 * request is checked against the target's registrations before a byte of
 * target memory is touched.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include "copy.h"
#include "mem.h"
#include "sw.h"

/* Payloads at least this large bypass the staging buffer. */
#define RDMX_SW_DIRECT_MIN (16 * 1024)
/* Bytes one connection may take per call, so others get their turn. */
#define RDMX_SW_RX_BUDGET (8u << 20)

static void rdmx_sw_proto_fail(struct rdmx_sw_conn *c, const char *what)
{
	rdmx_peer_error("%s connection to %s: %s (frame type %u seq %llu); "
			"closing it",
			c->base.ops->name, c->base.info.peer_addr, what,
			c->rx_h.type, (unsigned long long)c->rx_h.seq);
	rdmx_sw_conn_fail(c, RDMX_ERR_CONN_LOST);
}

/* A pipe call returned @n <= 0, not -EAGAIN: 0 closed, else -errno. */
static void rdmx_sw_lost(struct rdmx_sw_conn *c, ssize_t n)
{
	errno = (int)-n;
	if (n == 0)
		rdmx_info("%s connection to %s closed by the peer",
			  c->base.ops->name, c->base.info.peer_addr);
	else
		rdmx_info("%s connection to %s lost: %m", c->base.ops->name,
			  c->base.info.peer_addr);
	rdmx_sw_conn_fail(c, RDMX_ERR_CONN_LOST);
}

/*
 * Read more into the staging buffer: bytes read, 0 would block, -1 dead.
 * *@drained: it read less than it asked for (the socket or ring is empty
 * now, and a read more would most likely find nothing).
 */
static ssize_t rdmx_sw_rx_fill(struct rdmx_sw_conn *c, bool *drained)
{
	ssize_t n;

	if (c->rx_pos == c->rx_len) {
		c->rx_pos = c->rx_len = 0;
	} else if (c->rx_pos) {
		memmove(c->rxbuf, c->rxbuf + c->rx_pos, c->rx_len - c->rx_pos);
		c->rx_len -= c->rx_pos;
		c->rx_pos = 0;
	}
	n = c->tctx->tp->pipe->recv(c, c->rxbuf + c->rx_len,
				    sizeof(c->rxbuf) - c->rx_len);
	if (n > 0) {
		*drained = (size_t)n < sizeof(c->rxbuf) - c->rx_len;
		c->rx_len += (size_t)n;
		c->rx_total += (uint64_t)n;
		return n;
	}
	if (n == -EAGAIN)
		return 0;
	rdmx_sw_lost(c, n);
	return -1;
}

/* Expect the frame's payload, to land in @dst (NULL: read and drop it). */
static void rdmx_sw_rx_expect(struct rdmx_sw_conn *c, const struct iovec *dst,
			      int ndst)
{
	uint64_t left = rdmx_sw_wire_len(&c->rx_h);

	c->rx_niov = 0;
	c->rx_iov_i = 0;
	for (int i = 0; dst && i < ndst && left; i++) {
		size_t n = dst[i].iov_len < left ? dst[i].iov_len : left;

		if (!n)
			continue;
		c->rx_iov[c->rx_niov].iov_base = dst[i].iov_base;
		c->rx_iov[c->rx_niov++].iov_len = n;
		left -= n;
	}
	c->rx_left = rdmx_sw_wire_len(&c->rx_h);
	c->rx_in_payload = true;
}

/* Consume @n bytes of placed payload from the destination list. */
static void rdmx_sw_rx_consume(struct rdmx_sw_conn *c, const uint8_t *src,
			       size_t n)
{
	c->rx_left -= n;
	while (n && c->rx_iov_i < c->rx_niov) {
		struct iovec *v = &c->rx_iov[c->rx_iov_i];
		size_t take = v->iov_len < n ? v->iov_len : n;

		if (src) {
			rdmx_copy(v->iov_base, src, take);
			src += take;
		}
		v->iov_base = (uint8_t *)v->iov_base + take;
		v->iov_len -= take;
		n -= take;
		if (!v->iov_len)
			c->rx_iov_i++;
	}
}

/* A peer's one-sided request done here: counted by transport and op. */
static void rdmx_sw_served(struct rdmx_sw_conn *c, enum rdmx_opcode op,
			   uint64_t bytes)
{
	rdmx_stats_served(c->base.ctx, c->base.ops->id, op, bytes);
}

/*
 * Refuse request @seq (an access refusal for reason @why). An access
 * refusal counts against the peer: past conn.max_access_errors it has been
 * probing rkeys, and the connection ends once this NAK is on its way, as a
 * NIC's queue pair goes to error.
 */
static void rdmx_sw_nak(struct rdmx_sw_conn *c, uint64_t seq, uint8_t code,
			enum rdmx_refusal why)
{
	struct rdmx_sw_hdr h = { .type = RDMX_SW_NAK, .op = code, .seq = seq };
	uint64_t max = c->base.ctx->cfg.conn_max_access_errors;

	if (rdmx_sw_answer(c, &h, NULL, NULL) || code != RDMX_SW_NAK_ACCESS)
		return;
	if (++c->access_errors <= max) {
		rdmx_stats_refused(c->base.ctx, false, why);
		return;
	}
	rdmx_stats_refused(c->base.ctx, true, why);
	rdmx_peer_warn("%s connection to %s: %u one-sided requests refused "
		       "(conn.max_access_errors %llu); cutting the peer off",
		       c->base.ops->name, c->base.info.peer_addr,
		       c->access_errors, (unsigned long long)max);
	/* Nothing the peer does after it hears the NAK may land. */
	if (c->tctx->tp->pipe->seal)
		c->tctx->tp->pipe->seal(c);
	rdmx_sw_tx_progress(c);
	rdmx_sw_conn_fail(c, RDMX_ERR_CONN_LOST);
}

/* Pop the oldest request and complete it. */
static void rdmx_sw_retire(struct rdmx_sw_conn *c, rdmx_status st)
{
	struct rdmx_sw_op *op = c->inflight.head;

	c->inflight.head = op->next;
	if (!c->inflight.head)
		c->inflight.tail = NULL;
	c->inflight_n--;
	c->inflight_reads -= rdmx_sw_op_reads(op);
	rdmx_sw_done(c, op->wr_id, op->opcode, op->unsignaled, st, op->len);
	op->in_q = false;
	rdmx_sw_op_drop(c, op);
}

/*
 * A request completes only once all its bytes have left its buffers: the
 * peer cannot have placed or refused what it has not received, and an
 * answer before that would let the application reuse or free a buffer the
 * engine is still sending from. True (and the connection failed) if @op
 * is still being sent.
 */
static bool rdmx_sw_sending(struct rdmx_sw_conn *c, struct rdmx_sw_op *op)
{
	if (!op->in_tx)
		return false;
	rdmx_sw_proto_fail(c, "answer to a request not yet sent in full");
	return true;
}

/* The oldest request, if it is the one an answer of @type for @seq is for. */
static struct rdmx_sw_op *rdmx_sw_answered(struct rdmx_sw_conn *c,
					   uint8_t req_type)
{
	struct rdmx_sw_op *op = c->inflight.head;

	if (!op || op->h.seq != c->rx_h.seq ||
	    (req_type && op->h.type != req_type)) {
		rdmx_sw_proto_fail(c, "answer to no outstanding request");
		return NULL;
	}
	if (rdmx_sw_sending(c, op))
		return NULL;
	return op;
}

/* Does the peer hold a credit for a SEND or WRITE_IMM that arrived? */
static bool rdmx_sw_rq_ready(struct rdmx_sw_conn *c)
{
	return c->srq ? rdmx_sw_srq_ready(c) : c->rq_head != NULL;
}

/* Take the RECV it spends, from the srq or our own queue; NULL when the
 * peer held no credit. */
static struct rdmx_sw_recv *rdmx_sw_rq_pop(struct rdmx_sw_conn *c)
{
	struct rdmx_sw_recv *r = c->rq_head;

	if (c->srq)
		return rdmx_sw_srq_take(c);
	if (!r)
		return NULL;
	c->rq_head = r->next;
	if (!c->rq_head)
		c->rq_tail = NULL;
	c->rq_count--;
	return r;
}

/* ---- target side: requests --------------------------------------------- */

static void rdmx_sw_rx_send(struct rdmx_sw_conn *c)
{
	c->rx_recv = rdmx_sw_rq_pop(c);
	if (!c->rx_recv) {
		rdmx_sw_proto_fail(c, "SEND without a credit");
		return;
	}
	if (c->rx_recv->revoked) {
		rdmx_warn("a SEND from %s took a RECV whose region was "
			  "deregistered: the connection ends (as a NIC's "
			  "protection error would end it)",
			  c->base.info.peer_addr);
		rdmx_sw_conn_fail(c, RDMX_ERR_FLUSHED);
		return;
	}
	if (c->rx_h.length > c->rx_recv->cap) {
		c->rx_nak = RDMX_SW_NAK_LENGTH;
		rdmx_sw_rx_expect(c, NULL, 0);
		return;
	}
	rdmx_sw_rx_expect(c, c->rx_recv->iov, c->rx_recv->niov);
}

/* A BYREF request's descriptors land here. */
static void rdmx_sw_rx_expect_refs(struct rdmx_sw_conn *c)
{
	struct iovec dst = { c->rx_refs, sizeof(c->rx_refs) };

	rdmx_sw_rx_expect(c, &dst, 1);
}

/*
 * Move a BYREF request's data between the region the target checked and
 * the initiator's buffers: pull for a WRITE, push for a READ. Returns 0,
 * -EPROTO when the descriptors do not add up to the length, or -EFAULT.
 */
static int rdmx_sw_byref_move(struct rdmx_sw_conn *c, bool pull)
{
	const struct rdmx_sw_hdr *h = &c->rx_h;
	const struct rdmx_sw_pipe *pipe = c->tctx->tp->pipe;
	struct iovec remote[RDMX_MAX_SGE];
	struct iovec local = { (void *)(uintptr_t)h->addr, h->length };
	uint64_t total = 0;
	ssize_t n;

	for (int i = 0; i < h->op; i++) {
		const uint8_t *d = c->rx_refs + i * RDMX_SW_REF_LEN;
		uint64_t len = rdmx_get_be(d + 8, 8);

		if (len > RDMX_SW_MAX_MSG)
			return -EPROTO;
		remote[i].iov_base = (void *)(uintptr_t)rdmx_get_be(d, 8);
		remote[i].iov_len = len;
		total += len;
	}
	if (total != h->length)
		return -EPROTO;
	n = pull ? pipe->pull(c, &local, 1, remote, h->op)
		 : pipe->push(c, &local, 1, remote, h->op);
	if (n == (ssize_t)h->length)
		return 0;
	errno = n < 0 ? (int)-n : EFAULT;
	rdmx_info("%s connection to %s: single-copy %s of %u bytes failed: %m",
		  c->base.ops->name, c->base.info.peer_addr,
		  pull ? "pull" : "push", h->length);
	return -EFAULT;
}

static void rdmx_sw_rx_write(struct rdmx_sw_conn *c)
{
	const struct rdmx_sw_hdr *h = &c->rx_h;
	struct iovec dst;

	if (h->type == RDMX_SW_WRITE_IMM && !rdmx_sw_rq_ready(c)) {
		rdmx_sw_proto_fail(c, "WRITE_IMM without a credit");
		return;
	}
	if (!h->length) { /* zero-length: no memory touched, no key checked */
		rdmx_sw_rx_expect(c, NULL, 0);
		return;
	}
	c->rx_mr = rdmx_mr_acquire(c->base.ctx, h->rkey, h->addr, h->length,
				   RDMX_ACCESS_REMOTE_WRITE, &c->rx_why);
	if (!c->rx_mr) {
		c->rx_nak = RDMX_SW_NAK_ACCESS;
		rdmx_sw_rx_expect(c, NULL, 0);
		return;
	}
	if (h->flags & RDMX_SW_F_BYREF) {
		rdmx_sw_rx_expect_refs(c);
		return;
	}
	dst.iov_base = (void *)(uintptr_t)h->addr;
	dst.iov_len = h->length;
	rdmx_sw_rx_expect(c, &dst, 1);
}

static void rdmx_sw_rx_read_req(struct rdmx_sw_conn *c)
{
	const struct rdmx_sw_hdr *h = &c->rx_h;
	struct rdmx_sw_hdr a = { .type = RDMX_SW_READ_RESP,
				 .seq = h->seq,
				 .length = h->length };
	struct iovec src;
	struct rdmx_mr *mr = NULL;

	if (h->length) {
		mr = rdmx_mr_acquire(c->base.ctx, h->rkey, h->addr, h->length,
				     RDMX_ACCESS_REMOTE_READ, &c->rx_why);
		if (!mr && !(h->flags & RDMX_SW_F_BYREF)) {
			rdmx_sw_nak(c, h->seq, RDMX_SW_NAK_ACCESS, c->rx_why);
			return;
		}
	}
	if (h->flags & RDMX_SW_F_BYREF) {
		/* Answered in rx_done, once the descriptors are in. */
		c->rx_mr = mr;
		c->rx_nak = h->length && !mr ? RDMX_SW_NAK_ACCESS : 0;
		rdmx_sw_rx_expect_refs(c);
		return;
	}
	/* The reference keeps the region registered until the bytes are sent.
	 */
	src.iov_base = (void *)(uintptr_t)h->addr;
	src.iov_len = h->length;
	if (!rdmx_sw_answer(c, &a, mr, &src))
		rdmx_sw_served(c, RDMX_OP_READ, h->length);
}

static void rdmx_sw_rx_atomic(struct rdmx_sw_conn *c)
{
	const struct rdmx_sw_hdr *h = &c->rx_h;
	struct rdmx_sw_hdr a = { .type = RDMX_SW_ATOMIC_RESP, .seq = h->seq };
	enum rdmx_refusal why = RDMX_REFUSED_ALIGN;
	struct rdmx_mr *mr = NULL;
	uint64_t old;

	if (!(h->addr & 7))
		mr = rdmx_mr_acquire(c->base.ctx, h->rkey, h->addr, 8,
				     RDMX_ACCESS_REMOTE_ATOMIC, &why);
	if (!mr) {
		rdmx_sw_nak(c, h->seq, RDMX_SW_NAK_ACCESS, why);
		return;
	}
	old = rdmx_sw_atomic((uint64_t *)(uintptr_t)h->addr,
			     h->op == RDMX_SW_FETCH_ADD, h->arg0, h->arg1);
	rdmx_mr_release(mr);
	a.arg0 = old;
	if (!rdmx_sw_answer(c, &a, NULL, NULL))
		rdmx_sw_served(c,
			       h->op == RDMX_SW_FETCH_ADD ? RDMX_OP_FETCH_ADD
							  : RDMX_OP_CMP_SWAP,
			       8);
}

/* ---- initiator side: answers ------------------------------------------- */

static void rdmx_sw_rx_ack(struct rdmx_sw_conn *c)
{
	struct rdmx_sw_op *op;

	while ((op = c->inflight.head) && op->h.seq <= c->rx_h.seq) {
		if (op->h.type == RDMX_SW_READ_REQ ||
		    op->h.type == RDMX_SW_ATOMIC_REQ) {
			rdmx_sw_proto_fail(c, "ACK overtakes an answer");
			return;
		}
		if (rdmx_sw_sending(c, op))
			return;
		rdmx_sw_retire(c, RDMX_OK);
	}
}

static void rdmx_sw_rx_nak(struct rdmx_sw_conn *c)
{
	struct rdmx_sw_op *op = rdmx_sw_answered(c, 0);

	if (!op)
		return;
	/* A refused WRITE_IMM never reached a RECV: its credit is still ours.
	 */
	if (op->h.type == RDMX_SW_WRITE_IMM && c->rx_h.op == RDMX_SW_NAK_ACCESS)
		c->peer_credits++;
	rdmx_sw_retire(c, c->rx_h.op == RDMX_SW_NAK_LENGTH
				  ? RDMX_ERR_REMOTE_INVALID
				  : RDMX_ERR_REMOTE_ACCESS);
}

static void rdmx_sw_rx_read_resp(struct rdmx_sw_conn *c)
{
	struct rdmx_sw_op *op = rdmx_sw_answered(c, RDMX_SW_READ_REQ);

	if (!op)
		return;
	if (c->rx_h.length != op->len) {
		rdmx_sw_proto_fail(c, "READ answer of the wrong length");
		return;
	}
	/*
	 * Only a READ we sent by reference can have been placed by the
	 * target; answering a ring READ "placed" would report data that
	 * never came.
	 */
	if ((c->rx_h.flags ^ op->h.flags) & RDMX_SW_F_BYREF) {
		rdmx_sw_proto_fail(c, "READ answer of the wrong kind");
		return;
	}
	if (c->rx_h.flags & RDMX_SW_F_BYREF) {
		/* The target placed the data itself before answering. */
		rdmx_sw_retire(c, RDMX_OK);
		return;
	}
	rdmx_sw_rx_expect(c, op->local, op->nlocal);
}

static void rdmx_sw_rx_atomic_resp(struct rdmx_sw_conn *c)
{
	struct rdmx_sw_op *op = rdmx_sw_answered(c, RDMX_SW_ATOMIC_REQ);
	uint64_t v = c->rx_h.arg0;
	const uint8_t *src = (const uint8_t *)&v;

	if (!op)
		return;
	/* The value before, in host order, across the result sges. */
	for (int i = 0; i < op->nlocal; i++) {
		memcpy(op->local[i].iov_base, src, op->local[i].iov_len);
		src += op->local[i].iov_len;
	}
	rdmx_sw_retire(c, RDMX_OK);
}

/* ---- credits on a shared pool (sw_srq.c) ------------------------------- */

static void rdmx_sw_rx_credit(struct rdmx_sw_conn *c)
{
	struct rdmx_sw_hdr h = { .type = RDMX_SW_CREDIT,
				 .op = RDMX_SW_CREDIT_RETURN };

	switch (c->rx_h.op) {
	case RDMX_SW_CREDIT_SHARED: /* we are its sender */
		c->peer_shared = true;
		break;
	case RDMX_SW_CREDIT_LIMIT:
		if (!c->rx_h.arg0 || c->rx_h.arg0 > RDMX_SW_MAX_CREDITS) {
			rdmx_sw_proto_fail(c, "impossible request limit");
			return;
		}
		c->peer_limit = (uint32_t)c->rx_h.arg0;
		break;
	case RDMX_SW_CREDIT_REVOKE:
		/*
		 * What no waiting request needs: credits that came in this
		 * batch may not have been spent yet.
		 */
		h.arg0 = c->peer_credits > c->sq_needy
				 ? c->peer_credits - c->sq_needy
				 : 0;
		c->peer_credits -= (uint32_t)h.arg0;
		rdmx_sw_answer(c, &h, NULL, NULL);
		break;
	case RDMX_SW_CREDIT_ASK: /* we are its receiver */
	case RDMX_SW_CREDIT_RETURN:
		rdmx_sw_srq_credit(c, &c->rx_h);
		break;
	}
}

/* ---- frame dispatch ----------------------------------------------------- */

static void rdmx_sw_rx_header(struct rdmx_sw_conn *c, const uint8_t *buf)
{
	if (buf[0] != RDMX_SW_PROTO_VERSION) {
		c->rx_h = (struct rdmx_sw_hdr){ .type = buf[1] };
		rdmx_sw_proto_fail(c,
				   buf[0] < RDMX_SW_PROTO_VERSION
					   ? "the peer speaks an older frame "
					     "version: upgrade it"
					   : "the peer speaks a newer frame "
					     "version: upgrade this side");
		return;
	}
	if (rdmx_sw_hdr_unpack(buf, &c->rx_h)) {
		rdmx_sw_proto_fail(c, "malformed frame header");
		return;
	}
	/* No peer can have more RECVs posted than its conn.max_recv_wr allows.
	 */
	if (c->rx_h.credits > RDMX_SW_MAX_CREDITS ||
	    c->peer_credits > RDMX_SW_MAX_CREDITS - c->rx_h.credits) {
		rdmx_sw_proto_fail(c, "impossible credit grant");
		return;
	}
	if ((c->rx_h.flags & RDMX_SW_F_BYREF) && !c->tctx->tp->pipe->pull) {
		rdmx_sw_proto_fail(c, "single-copy frame on a pipe without it");
		return;
	}
	/*
	 * What we owe the peer is bounded by the limit we told it (and one
	 * REVOKE): a peer past it floods us, and is not served.
	 */
	if (rdmx_sw_is_request(&c->rx_h)) {
		if (c->owed > c->base.ctx->cfg.conn_max_peer_requests) {
			rdmx_sw_proto_fail(c, "more requests outstanding than "
					      "conn.max_peer_requests allows");
			return;
		}
		c->owed++;
	}
	c->peer_credits += c->rx_h.credits;
	c->credits_got += c->rx_h.credits;
	c->asked -= c->asked < c->rx_h.credits ? c->asked : c->rx_h.credits;
	c->rx_nak = 0;
	switch (c->rx_h.type) {
	case RDMX_SW_SEND:
		rdmx_sw_rx_send(c);
		break;
	case RDMX_SW_WRITE:
	case RDMX_SW_WRITE_IMM:
		rdmx_sw_rx_write(c);
		break;
	case RDMX_SW_READ_REQ:
		rdmx_sw_rx_read_req(c);
		break;
	case RDMX_SW_ATOMIC_REQ:
		rdmx_sw_rx_atomic(c);
		break;
	case RDMX_SW_ACK:
		rdmx_sw_rx_ack(c);
		break;
	case RDMX_SW_NAK:
		rdmx_sw_rx_nak(c);
		break;
	case RDMX_SW_READ_RESP:
		rdmx_sw_rx_read_resp(c);
		break;
	case RDMX_SW_ATOMIC_RESP:
		rdmx_sw_rx_atomic_resp(c);
		break;
	case RDMX_SW_CREDIT:
		rdmx_sw_rx_credit(c);
		break;
	}
}

/* Move a BYREF request's data; a failure becomes its NAK. */
static void rdmx_sw_rx_done_byref(struct rdmx_sw_conn *c, bool pull)
{
	int rc = rdmx_sw_byref_move(c, pull);

	if (rc == -EPROTO) {
		rdmx_sw_proto_fail(c, "BYREF descriptors do not add up");
	} else if (rc) {
		c->rx_nak = RDMX_SW_NAK_ACCESS;
		c->rx_why = RDMX_REFUSED_FAULT;
	}
}

/* The whole payload of the current frame has arrived. */
/*
 * The end of a one-sided request on its target: finish a BYREF copy (the
 * WRITE's data in, or the READ's data out), let go of the MR, NAK a refused
 * request. True when the request stands and wants its answer.
 */
static bool rdmx_sw_rx_target_end(struct rdmx_sw_conn *c, bool byref,
				  bool write)
{
	if (!c->rx_nak && byref && c->rx_h.length)
		rdmx_sw_rx_done_byref(c, write);
	rdmx_mr_release(c->rx_mr);
	c->rx_mr = NULL;
	if (c->dead)
		return false;
	if (c->rx_nak) {
		rdmx_sw_nak(c, c->rx_h.seq, RDMX_SW_NAK_ACCESS, c->rx_why);
		return false;
	}
	return true;
}

static void rdmx_sw_rx_done(struct rdmx_sw_conn *c)
{
	const struct rdmx_sw_hdr *h = &c->rx_h;
	struct rdmx_sw_recv *r;

	c->rx_in_payload = false;
	switch (h->type) {
	case RDMX_SW_SEND:
		r = c->rx_recv;
		c->rx_recv = NULL;
		if (c->rx_nak) {
			rdmx_sw_complete(c, r->wr_id, RDMX_OP_RECV,
					 RDMX_ERR_LOCAL_LENGTH, h->length, 0);
			rdmx_sw_nak(c, h->seq, RDMX_SW_NAK_LENGTH, 0);
		} else {
			rdmx_sw_complete(c, r->wr_id, RDMX_OP_RECV, RDMX_OK,
					 h->length, 0);
			rdmx_sw_ack(c, h->seq);
		}
		rdmx_sw_recv_spent(c, r);
		break;
	case RDMX_SW_WRITE:
	case RDMX_SW_WRITE_IMM:
		if (!rdmx_sw_rx_target_end(c, h->flags & RDMX_SW_F_BYREF, true))
			break;
		rdmx_sw_served(c,
			       h->type == RDMX_SW_WRITE ? RDMX_OP_WRITE
							: RDMX_OP_WRITE_IMM,
			       h->length);
		if (h->type == RDMX_SW_WRITE_IMM) {
			r = rdmx_sw_rq_pop(c);
			rdmx_sw_complete(c, r->wr_id, RDMX_OP_RECV_IMM, RDMX_OK,
					 h->length, (uint32_t)h->arg0);
			rdmx_sw_recv_spent(c, r);
		}
		rdmx_sw_ack(c, h->seq);
		break;
	case RDMX_SW_READ_REQ: /* BYREF: the descriptors are in */
		if (rdmx_sw_rx_target_end(c, true, false)) {
			struct rdmx_sw_hdr a = { .type = RDMX_SW_READ_RESP,
						 .flags = RDMX_SW_F_BYREF,
						 .seq = h->seq,
						 .length = h->length };

			if (!rdmx_sw_answer(c, &a, NULL, NULL))
				rdmx_sw_served(c, RDMX_OP_READ, h->length);
		}
		break;
	case RDMX_SW_READ_RESP:
		rdmx_sw_retire(c, RDMX_OK);
		break;
	}
}

/* Place staged payload bytes; returns how many. */
static size_t rdmx_sw_rx_staged(struct rdmx_sw_conn *c)
{
	size_t n = c->rx_len - c->rx_pos;

	if (n > c->rx_left)
		n = (size_t)c->rx_left;
	rdmx_sw_rx_consume(c, c->rxbuf + c->rx_pos, n);
	c->rx_pos += n;
	return n;
}

/*
 * Tell the pipe what the next input is, when that changed: the rest of a
 * payload that is placed straight into its destination, up to
 * RDMX_SW_WAIT_MAX, when that rest is at least RDMX_SW_WAIT_MIN; else
 * anything. On tcp, a receiver woken for every segment (and reading
 * each) slowed the sender's side of the same socket: 1 MiB WRITEs went
 * at 4.3 GB/s where qperf's blocking stream went at 5.5, READs at 4.2.
 * Woken per 128 KiB: 6.2-6.7 and 5.8.
 * The mark is raised only after a read into the payload (@raise): raised
 * as soon as a header came, the stream went at 5.1-5.6. It is lowered
 * after every pass too, where the rest went elsewhere (a region
 * deregistered mid-frame: then it is read and dropped through staging),
 * so that it never asks for more than is certain to come.
 */
#define RDMX_SW_WAIT_MIN (64 * 1024)
#define RDMX_SW_WAIT_MAX (128 * 1024)

static void rdmx_sw_rx_wait(struct rdmx_sw_conn *c, bool raise)
{
	uint64_t w = 0;

	if (!c->tctx->tp->pipe->rx_wait)
		return;
	if (c->rx_in_payload && c->rx_iov_i < c->rx_niov &&
	    c->rx_left >= RDMX_SW_WAIT_MIN)
		w = c->rx_left < RDMX_SW_WAIT_MAX ? c->rx_left
						  : RDMX_SW_WAIT_MAX;
	if (w < c->rx_waits || (raise && w != c->rx_waits)) {
		c->tctx->tp->pipe->rx_wait(c, w);
		c->rx_waits = w;
	}
}

/*
 * Read payload from the socket: straight into its destination when large,
 * else through staging. Returns bytes read, 0 would block, -1 dead.
 */
static ssize_t rdmx_sw_rx_read(struct rdmx_sw_conn *c, bool *drained)
{
	ssize_t n;

	if (c->rx_left < RDMX_SW_DIRECT_MIN || c->rx_iov_i == c->rx_niov)
		return rdmx_sw_rx_fill(c, drained);
	/* The destination list holds exactly rx_left bytes: no over-read. */
	n = c->tctx->tp->pipe->readv(c, c->rx_iov + c->rx_iov_i,
				     c->rx_niov - c->rx_iov_i);
	if (n > 0) {
		*drained = (uint64_t)n < c->rx_left;
		c->rx_total += (uint64_t)n;
		rdmx_sw_rx_consume(c, NULL, (size_t)n);
		rdmx_sw_rx_wait(c, true);
		return n;
	}
	if (n == -EAGAIN) {
		rdmx_sw_rx_wait(c, true);
		return 0;
	}
	rdmx_sw_lost(c, n);
	return -1;
}

/*
 * Between progress calls a frame may wait for its peer indefinitely: let
 * go of the region it is placed into, so rdmx_mr_dereg need not wait.
 */
static void rdmx_sw_rx_park(struct rdmx_sw_conn *c)
{
	if (!c->rx_mr || !c->rx_in_payload)
		return;
	rdmx_mr_release(c->rx_mr);
	c->rx_mr = NULL;
	c->rx_parked = true;
}

/* Take it back; deregistered meanwhile, the rest is dropped and refused. */
static void rdmx_sw_rx_unpark(struct rdmx_sw_conn *c)
{
	const struct rdmx_sw_hdr *h = &c->rx_h;

	if (!c->rx_parked || c->dead)
		return;
	c->rx_parked = false;
	c->rx_mr = rdmx_mr_acquire(c->base.ctx, h->rkey, h->addr, h->length,
				   h->type == RDMX_SW_READ_REQ
					   ? RDMX_ACCESS_REMOTE_READ
					   : RDMX_ACCESS_REMOTE_WRITE,
				   &c->rx_why);
	if (c->rx_mr)
		return;
	rdmx_info("%s connection to %s: rkey 0x%llx was deregistered while a "
		  "request for it arrived; refusing it",
		  c->base.ops->name, c->base.info.peer_addr,
		  (unsigned long long)h->rkey);
	c->rx_nak = RDMX_SW_NAK_ACCESS;
	c->rx_iov_i = c->rx_niov; /* the rest goes nowhere */
}

/* Take the next frame's header if it is staged whole; true if it was. */
static bool rdmx_sw_rx_staged_hdr(struct rdmx_sw_conn *c)
{
	const uint8_t *b = c->rxbuf + c->rx_pos;
	size_t n;

	if (c->rx_len - c->rx_pos < RDMX_SW_HDR_MIN)
		return false;
	n = rdmx_sw_hdr_len(b);
	if (c->rx_len - c->rx_pos < n)
		return false;
	c->rx_pos += n;
	rdmx_sw_rx_header(c, b);
	return true;
}

void rdmx_sw_rx_progress(struct rdmx_sw_conn *c, bool hold)
{
	ssize_t budget = RDMX_SW_RX_BUDGET, n;
	bool drained = false;

	rdmx_sw_rx_unpark(c);

	/*
	 * The budget bounds only what is read from the socket. Bytes already
	 * staged are always processed: epoll will not fire for them again.
	 */
	while (!c->dead) {
		if (c->rx_in_payload && !c->rx_left) {
			rdmx_sw_rx_done(c);
			continue;
		}
		if (c->rx_in_payload && c->rx_pos < c->rx_len) {
			rdmx_sw_rx_staged(c);
			continue;
		}
		if (!c->rx_in_payload && rdmx_sw_rx_staged_hdr(c))
			continue;
		/*
		 * Once a read came short, the next would most likely find
		 * nothing (on tcp, a system call for EAGAIN): what comes
		 * later shows on the ring, or epoll reports it.
		 */
		if (budget <= 0 || drained)
			break;
		n = c->rx_in_payload ? rdmx_sw_rx_read(c, &drained)
				     : rdmx_sw_rx_fill(c, &drained);
		if (n <= 0)
			break;
		budget -= n;
	}
	rdmx_sw_rx_park(c);
	if (!c->dead)
		rdmx_sw_rx_wait(c, false);
	/* Send the answers and grants this produced, and what credits allow. */
	rdmx_sw_tx_progress_or_hold(c, hold);
}

/*
 * Serve @c, whose reference the caller holds (and gives up here), for
 * @events. Input seen on its ring (@ring) rang no doorbell that needs
 * taking: if one rang too, epoll reports it (and it is read) later.
 * @hold: a caller that spins (its thread backing off) may hold bare ACKs
 * for its answer to carry along.
 */
static void rdmx_sw_serve(struct rdmx_sw_ctx *tctx, struct rdmx_sw_conn *c,
			  uint32_t events, bool aux, bool ring, bool hold)
{
	rdmx_spin_lock(&c->lock);
	if (tctx->tp->pipe->wake && !c->dead && !ring)
		tctx->tp->pipe->wake(c, aux);
	if (events & (EPOLLIN | EPOLLERR | EPOLLHUP))
		rdmx_sw_rx_progress(c, hold);
	else
		rdmx_sw_tx_progress(c);
	rdmx_sw_unlock(c);
	rdmx_sw_conn_put(c);
}

/* (Dis)arm every connection's input wake-ups; the slots lock held. True
 * when rdmx_membarrier must follow the fence (rdmx_sw_fence_armed). */
static bool rdmx_sw_arm_each(struct rdmx_sw_ctx *tctx, bool on)
{
	bool membarrier = false;

	for (uint32_t i = 0; i < tctx->slots_used; i++)
		if (tctx->slots[i])
			membarrier |= tctx->tp->pipe->arm(tctx->slots[i], on);
	return membarrier;
}

/*
 * Make the context's eventfd readable: it wakes the progress thread (or,
 * without one, a caller asleep on the progress fd); drained by whoever
 * handles it (rdmx_sw_kicked).
 */
static void rdmx_sw_kick(struct rdmx_sw_ctx *tctx)
{
	uint64_t one = 1;

	if (write(tctx->stop_efd, &one, sizeof(one)) != sizeof(one))
		rdmx_debug("%s progress: cannot write its eventfd: %m",
			   tctx->tp->ops->name);
}

static void rdmx_sw_fence_armed(bool membarrier)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (membarrier)
		rdmx_membarrier();
}

/* (Dis)arm every connection's input wake-ups. */
static void rdmx_sw_arm_all(struct rdmx_sw_ctx *tctx, bool on)
{
	bool membarrier;

	if (!tctx->tp->pipe->arm)
		return;
	rdmx_spin_lock(&tctx->slots_lock);
	membarrier = rdmx_sw_arm_each(tctx, on);
	rdmx_spin_unlock(&tctx->slots_lock);
	rdmx_sw_fence_armed(membarrier);
}

/*
 * Without a progress thread the callers are all the progress there is. One
 * that spins (@spinning) serves every connection as long as it spins, as
 * it does while the thread backs off: backing_off says so, the peers'
 * wake-ups go disarmed, and bare ACKs wait for its next frame. A call that
 * will sleep or is event-driven arms them again; input that came while
 * they were off rang nothing, so @kick (a caller about to sleep, that
 * cannot serve it first) makes the progress fd readable for it.
 * Flag and arming change together under the slots lock: a spinning and a
 * sleeping caller on two threads would otherwise leave them apart.
 */
static void rdmx_sw_unthreaded(struct rdmx_sw_ctx *tctx, bool spinning,
			       bool kick)
{
	const struct rdmx_sw_pipe *pipe = tctx->tp->pipe;
	bool changed, arming = false, membarrier = false, ready = false;

	if (atomic_load_explicit(&tctx->backing_off, memory_order_relaxed) ==
	    spinning)
		return;
	rdmx_spin_lock(&tctx->slots_lock);
	changed = atomic_load(&tctx->backing_off) != spinning;
	if (changed)
		atomic_store(&tctx->backing_off, spinning);
	if (changed && pipe->arm) {
		membarrier = rdmx_sw_arm_each(tctx, !spinning);
		arming = !spinning;
	}
	if (arming)
		rdmx_sw_fence_armed(membarrier);
	for (uint32_t i = 0; arming && kick && i < tctx->slots_used && !ready;
	     i++)
		ready = tctx->slots[i] && pipe->ready(tctx->slots[i]);
	rdmx_spin_unlock(&tctx->slots_lock);
	/* Drained by the next progress call (rdmx_sw_handle). */
	if (ready)
		rdmx_sw_kick(tctx);
}

/* Drain the stop/kick eventfd; true when it means "exit". */
static bool rdmx_sw_kicked(struct rdmx_sw_ctx *tctx)
{
	uint64_t v;

	if (read(tctx->stop_efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		rdmx_debug("%s progress: eventfd read: %m",
			   tctx->tp->ops->name);
	return atomic_load(&tctx->stopping);
}

/* Handle a batch of epoll events; returns how many were for connections. */
static int rdmx_sw_handle(struct rdmx_sw_ctx *tctx,
			  const struct epoll_event *ev, int n, bool hold)
{
	int handled = 0;

	for (int i = 0; i < n; i++) {
		struct rdmx_sw_conn *c;

		if (!ev[i].data.u64) {
			/* The thread's business; without one, a kick to a
			 * sleeping caller (rdmx_sw_unthreaded): taken. */
			if (!tctx->thread_running)
				rdmx_sw_kicked(tctx);
			continue;
		}
		if (ev[i].data.u64 == RDMX_SW_KEY_TIMER) {
			rdmx_sw_watchdog(tctx);
			continue;
		}
		c = rdmx_sw_conn_get(tctx, ev[i].data.u64);
		if (!c)
			continue;
		rdmx_sw_serve(tctx, c, ev[i].events,
			      ev[i].data.u64 & RDMX_SW_KEY_AUX, false, hold);
		handled++;
	}
	return handled;
}

/*
 * Pipes that can say "input ready" without a system call (shared-memory
 * rings) are polled directly first: a caller spinning on arriving data then
 * makes no syscall. Only when no ring has input does it ask epoll, which
 * also carries what rings cannot show (a peer's control socket closing).
 * The connections with input are taken (a reference each) in the same
 * pass over the table, under its lock once, up to RDMX_SW_READY_MAX. The
 * next pass starts where this one stopped: each started at slot 0, and
 * with more than that many connections busy the first ones were always
 * ready again and the others waited, 60-300 ms at a time for half of an
 * rdmx kv server's 64 clients over shm.
 */
#define RDMX_SW_READY_MAX 32

static int rdmx_sw_poll_ready(struct rdmx_sw_ctx *tctx, bool hold)
{
	struct rdmx_sw_conn *ready[RDMX_SW_READY_MAX];
	uint32_t at;
	int n = 0;

	rdmx_spin_lock(&tctx->slots_lock);
	at = tctx->ready_from < tctx->slots_used ? tctx->ready_from : 0;
	for (uint32_t k = 0; k < tctx->slots_used && n < RDMX_SW_READY_MAX;
	     k++) {
		struct rdmx_sw_conn *c = tctx->slots[at];

		if (c && tctx->tp->pipe->ready(c)) {
			atomic_fetch_add(&c->refs, 1);
			ready[n++] = c;
		}
		if (++at == tctx->slots_used)
			at = 0;
	}
	tctx->ready_from = at;
	rdmx_spin_unlock(&tctx->slots_lock);
	for (int i = 0; i < n; i++)
		rdmx_sw_serve(tctx, ready[i], EPOLLIN, false, true, hold);
	return n;
}

/*
 * A spinner whose rings are empty asks epoll what only epoll shows (a
 * peer's control socket closing, the watchdog's tick) once a millisecond
 * at most: a system call costs ~1 us on some of these VMs (~0.15 on
 * others), and one in 32 empty polls put one in the middle of most
 * round trips of a SEND of 8 bytes there: p50 0.47 -> 0.95-1.1 us, p90
 * 0.49 -> 1.2-1.5 us. The clock is read one empty poll in
 * RDMX_SW_EPOLL_EVERY (~30 ns a read).
 */
#define RDMX_SW_EPOLL_EVERY 32
#define RDMX_SW_EPOLL_QUIET_US 1000

/*
 * Count an empty poll of @tctx; true when it is the spinner's turn to ask
 * epoll. The count and the time are the context's own: one count a thread
 * kept for all its contexts' transports, called in turn, landed every
 * RDMX_SW_EPOLL_EVERY-th count on the same one (with shm and tcp both
 * open, always tcp), and the others never asked epoll. Loads and stores:
 * a count or a time lost to a race costs one early or late look.
 */
static bool rdmx_sw_empty_poll(struct rdmx_sw_ctx *tctx)
{
	unsigned n =
		atomic_load_explicit(&tctx->empty_polls, memory_order_relaxed) +
		1;
	uint64_t now;

	atomic_store_explicit(&tctx->empty_polls, n, memory_order_relaxed);
	if (n % RDMX_SW_EPOLL_EVERY)
		return false;
	now = rdmx_now_us();
	if (now - atomic_load_explicit(&tctx->spin_epoll_us,
				       memory_order_relaxed) <
	    RDMX_SW_EPOLL_QUIET_US)
		return false;
	atomic_store_explicit(&tctx->spin_epoll_us, now, memory_order_relaxed);
	return true;
}

/*
 * One thread spinning over many cqs of one context (rdmx kv bench: a cq
 * per client, 32 clients over tcp) made a progress call, so an epoll_wait,
 * for each cq it found empty: 5.8 system calls per GET at the client,
 * nearly all of them finding nothing (~1 us each on these VMs). A
 * spinner's epoll_wait that found nothing now stands for the context for
 * RDMX_SW_EPOLL_SHARE_US: the poll of another cq within that time asks no
 * system call, and what arrives meanwhile is read by the next look, at
 * most that much later. A poll of the same cq looks at once, so a caller
 * spinning on one cq waits as before. Plain loads and stores: a race
 * costs one look more or less.
 *
 * The time is read at the first poll the look stands for, then one such
 * poll in RDMX_SW_EPOLL_SHARE_CHECK: read at each, the clock (~20 ns)
 * was 5% of rdmx kv bench's samples at 32 clients x 16 over tcp, and a
 * caller spinning on one cq read it after each look for nothing. A look
 * stands for at least that many polls, the time aside.
 */
#define RDMX_SW_EPOLL_SHARE_US 3
#define RDMX_SW_EPOLL_SHARE_CHECK 8

static bool rdmx_sw_epoll_shared(struct rdmx_sw_ctx *tctx)
{
	const void *for_cq = atomic_load_explicit(&tctx->empty_epoll_for,
						  memory_order_relaxed);
	unsigned n;
	uint64_t since;

	if (!for_cq || !rdmx_progress_cq || for_cq == rdmx_progress_cq)
		return false;
	n = atomic_load_explicit(&tctx->empty_epoll_skips,
				 memory_order_relaxed) +
	    1;
	atomic_store_explicit(&tctx->empty_epoll_skips, n,
			      memory_order_relaxed);
	since = atomic_load_explicit(&tctx->empty_epoll_us,
				     memory_order_relaxed);
	if (!since) { /* the first: the look's time, near enough */
		atomic_store_explicit(&tctx->empty_epoll_us, rdmx_now_us(),
				      memory_order_relaxed);
		return true;
	}
	return n % RDMX_SW_EPOLL_SHARE_CHECK ||
	       rdmx_now_us() - since < RDMX_SW_EPOLL_SHARE_US;
}

/* After a spinner's epoll_wait on its cq's behalf: found @n events. */
static void rdmx_sw_epoll_seen(struct rdmx_sw_ctx *tctx, int n)
{
	if (!rdmx_progress_cq)
		return;
	if (n <= 0) {
		atomic_store_explicit(&tctx->empty_epoll_us, 0,
				      memory_order_relaxed);
		atomic_store_explicit(&tctx->empty_epoll_skips, 0,
				      memory_order_relaxed);
	}
	atomic_store_explicit(&tctx->empty_epoll_for,
			      n <= 0 ? (const void *)rdmx_progress_cq : NULL,
			      memory_order_relaxed);
}

/*
 * A caller spins: stamp it for the thread's look (rdmx_sw_thread). The
 * clock costs ~17 ns here, as much as an empty poll and a fifth of a
 * mapped 4 KiB READ, so a caller that keeps polling reads it one call in
 * stamp_every (and at once after idle() cleared the stamp). That starts
 * at RDMX_SW_STAMP_MIN and doubles, up to RDMX_SW_STAMP_MAX, while the
 * stamps come less than progress.idle_after / 8 apart; stamps further
 * apart than a quarter of it send it back to the start. One call in 8
 * made every eighth READ 15-25 ns slower, 12% of them: the p99. The stamp
 * lags by up to stamp_every calls: within a quarter of idle_after while
 * the caller keeps its pace; one that slows down suddenly may be taken
 * for gone once, and the thread serves a while (no harm but speed).
 * Plain loads and stores: a count lost to a race costs nothing.
 */
#define RDMX_SW_STAMP_MAX 1024
_Static_assert(!(RDMX_SW_STAMP_MIN & (RDMX_SW_STAMP_MIN - 1)) &&
		       !(RDMX_SW_STAMP_MAX & (RDMX_SW_STAMP_MAX - 1)),
	       "rdmx_sw_spun masks with stamp_every: powers of two");

/* The stamp itself, one call in every (rdmx_sw_spun). */
static __attribute__((noinline)) void rdmx_sw_stamp(struct rdmx_sw_ctx *tctx,
						    uint64_t quiet,
						    uint64_t last,
						    unsigned every)
{
	uint64_t now = rdmx_now_us();

	/* seq_cst, then backing_off: pairs with the thread's store of it
	 * and its load of the stamp (rdmx_sw_thread), so that one of us sees
	 * the other. */
	atomic_store(&tctx->app_poll_us, now);
	if (!last || now - last > quiet / 4)
		every = RDMX_SW_STAMP_MIN;
	else if (now - last < quiet / 8 && every < RDMX_SW_STAMP_MAX)
		every *= 2;
	atomic_store_explicit(&tctx->stamp_every, every, memory_order_relaxed);
	/*
	 * The thread took over (we were away) and may sleep in epoll_wait on
	 * what we now take: each event wakes it in the kernel, gone by the
	 * time it looks, and it sleeps again without coming back to its check
	 * of our stamp. Over tcp each answer then woke it for nothing (a
	 * sleeper's READs: 50-150 wake-ups in 200, 1 run in 10 on a loaded
	 * host) until one event stayed for it, or our stamp up to every calls
	 * later. Call it back to its check once (not with idle_after 0: it
	 * never backs off).
	 */
	if (quiet && !atomic_load(&tctx->backing_off) &&
	    !atomic_exchange(&tctx->recalled, true))
		rdmx_sw_kick(tctx);
}

/* Inline: a spinner's every poll comes here, and most calls only count. */
static inline __attribute__((always_inline)) void
rdmx_sw_spun(struct rdmx_sw_ctx *tctx)
{
	uint64_t quiet = tctx->ctx->cfg.progress_idle_after_us, last;
	unsigned n, every;
	bool recall;

	n = atomic_load_explicit(&tctx->app_polls, memory_order_relaxed);
	atomic_store_explicit(&tctx->app_polls, n + 1, memory_order_relaxed);
	every = atomic_load_explicit(&tctx->stamp_every, memory_order_relaxed);
	last = atomic_load_explicit(&tctx->app_poll_us, memory_order_relaxed);
	/* The thread serves, and we have not called it back yet
	 * (rdmx_sw_stamp): at this call, not one in every. */
	recall = quiet &&
		 !atomic_load_explicit(&tctx->backing_off,
				       memory_order_relaxed) &&
		 !atomic_load_explicit(&tctx->recalled, memory_order_relaxed);
	/* every is a power of two: a mask, not a division (tens of cycles,
	 * on every poll that finds a completion). */
	if (n & (every - 1) && last && !recall)
		return;
	rdmx_sw_stamp(tctx, quiet, last, every);
}

void rdmx_sw_polled(void *priv)
{
	struct rdmx_sw_ctx *tctx = priv;

	if (tctx->thread_running)
		rdmx_sw_spun(tctx);
}

/* A look at epoll for @tctx's connections (rdmx_sw_progress): out of its
 * line, with its 32 events on the stack, as a spinner over rings makes it
 * once a millisecond at most. */
static __attribute__((noinline)) int
rdmx_sw_epoll_look(struct rdmx_sw_ctx *tctx, bool rings, bool hold)
{
	struct epoll_event ev[32];
	int n = epoll_wait(tctx->epfd, ev, 32, 0);

	/* What a look found is what came for connections: a kick for the
	 * thread (rdmx_sw_stamp's recall), readable until the thread runs,
	 * is not input, and counted as such it kept a spinner over many cqs
	 * from sharing its looks while the thread waited for the CPU. */
	n = n > 0 ? rdmx_sw_handle(tctx, ev, n, hold) : 0;
	if (!rings)
		rdmx_sw_epoll_seen(tctx, n);
	return n;
}

int rdmx_sw_progress(void *priv, bool spinning)
{
	struct rdmx_sw_ctx *tctx = priv;
	bool rings = tctx->tp->pipe->ready != NULL, hold;
	int n;

	if (!tctx->thread_running)
		rdmx_sw_unthreaded(tctx, spinning, false);
	else if (spinning)
		rdmx_sw_spun(tctx);
	hold = spinning &&
	       atomic_load_explicit(&tctx->backing_off, memory_order_relaxed);
	/* Nothing held, as in a spinner's idle polls: no call. */
	if (rdmx_sw_acks_held(tctx)) {
		if (hold)
			rdmx_sw_release_acks_due(tctx);
		else
			rdmx_sw_release_acks(tctx);
	}
	if (rings) {
		n = rdmx_sw_poll_ready(tctx, hold);
		if (n)
			return n;
		/* Its rings show their input without a system call. */
		if (spinning && !rdmx_sw_empty_poll(tctx))
			return 0;
	} else if (rdmx_sw_epoll_shared(tctx)) {
		return 0;
	}
	return rdmx_sw_epoll_look(tctx, rings, hold);
}

void rdmx_sw_idle(void *priv)
{
	struct rdmx_sw_ctx *tctx = priv;

	rdmx_sw_release_acks(tctx); /* nobody will poll them out */
	if (!tctx->thread_running) {
		rdmx_sw_unthreaded(tctx, false, true);
		return;
	}
	/* Pairs with the thread's store of backing_off, then load (Dekker). */
	atomic_store(&tctx->app_poll_us, 0);
	if (atomic_load(&tctx->backing_off))
		rdmx_sw_kick(tctx);
}

/*
 * A caller serves from epfd (ops.served): only for pipes whose input
 * shows there (tcp's sockets), and with a thread to keep out of its way.
 * Over tcp both used to wake for each answer of a sleeping caller's
 * request, the thread first: it took the data and signalled the cq while
 * the caller waited for the CPU (a 4 KiB READ, its caller asleep: p50
 * 34.5 us, where one wake-up gives 28). Now the thread backs off while a
 * caller sleeps on epfd, and for progress.idle_after after one woke or an
 * event loop polled: the caller's wake-up is the only one.
 */
void rdmx_sw_caller_serves(void *priv, int sleeping)
{
	struct rdmx_sw_ctx *tctx = priv;

	if (!tctx->thread_running) {
		if (sleeping > 0)
			rdmx_sw_idle(priv);
		return;
	}
	if (sleeping > 0)
		rdmx_sw_release_acks(tctx); /* nobody will poll them out */
	if (sleeping)
		atomic_fetch_add(&tctx->sleepers, sleeping);
	rdmx_sw_polled(tctx); /* the spinner's stamp, as often as it */
}

/* The thread stays out of the callers' way: one sleeps on epfd, or one
 * polled within progress.idle_after. */
static bool rdmx_sw_callers_serve(struct rdmx_sw_ctx *tctx, uint64_t last,
				  uint64_t now)
{
	uint64_t quiet = tctx->ctx->cfg.progress_idle_after_us;

	return quiet &&
	       (atomic_load(&tctx->sleepers) || (last && now - last < quiet));
}

int rdmx_sw_progress_fd(void *priv)
{
	return ((struct rdmx_sw_ctx *)priv)->epfd;
}

/*
 * While a caller spins on rdmx_poll, it serves every connection itself:
 * sleep until it has been quiet for progress.idle_after, or until idle()
 * or close kicks us, with the peers' wake-ups disarmed. The same while a
 * caller sleeps on epfd and serves when woken, and after it woke
 * (rdmx_sw_caller_serves). Returns true to exit the thread.
 *
 * Each look costs the spinning caller: a timer's wake-up on these VMs
 * took the tcp READ's p99 from 10 us to 35-700 us when we looked every
 * millisecond or two, and the median from 8.6 to 11.6 us; looking half as
 * often each time from 1 ms still gave 18-26 us. So look every
 * RDMX_SW_LOOK_US: a caller that stops without rdmx_cq_wait or
 * rdmx_cq_fd (which kick us at once, unless it serves from there) leaves
 * one-sided requests waiting at most that long past progress.idle_after.
 */
#define RDMX_SW_LOOK_US (50 * 1000)

/*
 * The caller's stamp is older than progress.idle_after: has it gone, or
 * do its calls just come slower than when its stamp interval grew (one
 * call in up to RDMX_SW_STAMP_MAX)? rdmx kv bench's client, its polls
 * empty and fast while the server lagged, then each taking many answers,
 * stamped more than a millisecond apart: the thread took over, no ACK or
 * grant could wait for a frame any more, each went alone, the polls got
 * slower still, and the thread kept coming back (~740 wake-ups a second,
 * 1 run in 6 over tcp at 32 x 16). So watch its call count for
 * idle_after: if it moved, it is there. 1 when it moved, 0 when not, -1
 * when kicked (idle() or exit) meanwhile.
 */
static int rdmx_sw_still_polling(struct rdmx_sw_ctx *tctx, struct pollfd *pfd,
				 uint64_t quiet)
{
	unsigned n =
		atomic_load_explicit(&tctx->app_polls, memory_order_relaxed);

	if (poll(pfd, 1, (int)(quiet / 1000) + 1) > 0)
		return -1;
	return atomic_load_explicit(&tctx->app_polls, memory_order_relaxed) !=
	       n;
}

static bool rdmx_sw_back_off(struct rdmx_sw_ctx *tctx, uint64_t last)
{
	uint64_t quiet = tctx->ctx->cfg.progress_idle_after_us;
	struct pollfd pfd = { .fd = tctx->stop_efd, .events = POLLIN };
	bool exit = false;

	atomic_store(&tctx->backing_off, true);
	rdmx_sw_arm_all(tctx, false);
	for (;;) {
		/* Stored backing_off, now load app_poll_us: pairs with idle().
		 */
		uint64_t now = rdmx_now_us(), wait;

		last = atomic_load(&tctx->app_poll_us);
		if (!rdmx_sw_callers_serve(tctx, last, now)) {
			/* A stamp idle() cleared (0) means gone: no watch. */
			int moved = last && quiet
					    ? rdmx_sw_still_polling(tctx, &pfd,
								    quiet)
					    : 0;

			if (moved < 0)
				exit = rdmx_sw_kicked(tctx);
			if (moved <= 0)
				break;
		}
		wait = last && last + quiet > now ? last + quiet - now : 0;
		if (wait < RDMX_SW_LOOK_US)
			wait = RDMX_SW_LOOK_US;
		if (poll(&pfd, 1, (int)(wait / 1000) + 1) > 0 &&
		    rdmx_sw_kicked(tctx)) {
			exit = true;
			break;
		}
	}
	atomic_store(&tctx->backing_off, false);
	atomic_store_explicit(&tctx->take_overs,
			      atomic_load_explicit(&tctx->take_overs,
						   memory_order_relaxed) +
				      1,
			      memory_order_relaxed);
	return exit;
}

void *rdmx_sw_thread(void *arg)
{
	struct rdmx_sw_ctx *tctx = arg;
	struct epoll_event ev[32];
	uint64_t last;
	int n;

	atomic_store(&tctx->thread_tid, (int)gettid());
	for (;;) {
		/* Back at the check: a stamp from now on may recall us again
		 * (rdmx_sw_polled). */
		atomic_store(&tctx->recalled, false);
		last = atomic_load(&tctx->app_poll_us);
		if (rdmx_sw_callers_serve(tctx, last, rdmx_now_us())) {
			if (rdmx_sw_back_off(tctx, last))
				return NULL;
			/* Armed again: what came unannounced is served now. */
			rdmx_sw_arm_all(tctx, true);
			rdmx_sw_progress(tctx, false);
			continue;
		}
		rdmx_sw_release_acks(tctx);
		n = epoll_wait(tctx->epfd, ev, 32, -1);
		if (n < 0 && errno != EINTR) {
			rdmx_error("%s progress: epoll_wait: %m",
				   tctx->tp->ops->name);
			return NULL;
		}
		for (int i = 0; i < n; i++)
			if (!ev[i].data.u64 && rdmx_sw_kicked(tctx))
				return NULL;
		if (n > 0)
			rdmx_sw_handle(tctx, ev, n, false);
	}
}
