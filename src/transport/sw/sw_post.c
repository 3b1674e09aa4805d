/* SPDX-License-Identifier: MIT */
/*
 * The transmit side: posting requests, committing them as credits allow,
 * and writing frames straight from registered memory with sendmsg.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "sw.h"

/*
 * Pieces of frames one sendmsg carries. An rdmx kv server's answers to a
 * client's 16 GETs are 64 (a WRITE's header and value, a SEND's header
 * and answer, each), and the ACK riding with them made 65: at 64, every
 * batch of answers took two sendmsg (32 clients x 16 over tcp: 0.145
 * sendmsg per GET at the server; 0.064 at 128, and 10% more GETs/s).
 */
#define RDMX_SW_TX_IOV 128

void *rdmx_sw_cache_get(struct rdmx_sw_cache *k, size_t size, size_t zeroed)
{
	void *p = k->head;

	if (!p)
		return calloc(1, size);
	k->head = *(void **)p;
	k->n--;
	return memset(p, 0, zeroed);
}

void rdmx_sw_cache_put(struct rdmx_sw_cache *k, void *p)
{
	if (k->n >= k->max) {
		free(p);
		return;
	}
	*(void **)p = k->head;
	k->head = p;
	k->n++;
}

void rdmx_sw_cache_move(struct rdmx_sw_cache *to, struct rdmx_sw_cache *from)
{
	while (from->head) {
		void *p = from->head;

		from->head = *(void **)p;
		rdmx_sw_cache_put(to, p);
	}
	from->n = 0;
}

void rdmx_sw_cache_free(struct rdmx_sw_cache *k)
{
	struct rdmx_sw_cache none = { .max = 0 }; /* keeps nothing */

	rdmx_sw_cache_move(&none, k);
}

void rdmx_sw_op_drop(struct rdmx_sw_conn *c, struct rdmx_sw_op *op)
{
	if (op->in_q || op->in_tx || op == &c->ack_op)
		return;
	rdmx_mr_release(op->mr);
	rdmx_sw_cache_put(&c->ops, op);
}

static void rdmx_sw_q_push(struct rdmx_sw_queue *q, struct rdmx_sw_op *op)
{
	op->next = NULL;
	if (q->tail)
		q->tail->next = op;
	else
		q->head = op;
	q->tail = op;
}

static struct rdmx_sw_op *rdmx_sw_q_pop(struct rdmx_sw_queue *q)
{
	struct rdmx_sw_op *op = q->head;

	q->head = op->next;
	if (!q->head)
		q->tail = NULL;
	return op;
}

/* Queue @op, its header packed in iov[0], at the end of the transmit queue. */
static void rdmx_sw_tx_link(struct rdmx_sw_conn *c, struct rdmx_sw_op *op)
{
	op->tx_len = 0;
	for (int i = 0; i < op->iovcnt; i++)
		op->tx_len += op->iov[i].iov_len;
	op->in_tx = true;
	op->tx_next = NULL;
	if (c->tx_tail)
		c->tx_tail->tx_next = op;
	else
		c->tx_head = op;
	c->tx_tail = op;
}

/* The RECVs posted since our last frame: told in the next one's header. */
static uint32_t rdmx_sw_grant_take(struct rdmx_sw_conn *c)
{
	uint32_t g = c->grant;

	c->granted_total += g;
	c->grant = 0;
	return g;
}

/* Committed: @op is in flight, awaiting its answer. */
static void rdmx_sw_inflight_push(struct rdmx_sw_conn *c, struct rdmx_sw_op *op)
{
	rdmx_sw_q_push(&c->inflight, op);
	c->inflight_n++;
	c->inflight_reads += rdmx_sw_op_reads(op);
}

/* Pack the header (handing over pending credits) and queue for sending. */
static void rdmx_sw_tx_append(struct rdmx_sw_conn *c, struct rdmx_sw_op *op)
{
	op->h.credits = rdmx_sw_grant_take(c);
	op->iov[0].iov_base = op->hdr;
	op->iov[0].iov_len = rdmx_sw_hdr_pack(&op->h, op->hdr);
	rdmx_sw_tx_link(c, op);
}

/* Ask for a wake-up exactly while frames wait for room in the pipe. */
static void rdmx_sw_want_out(struct rdmx_sw_conn *c, bool want)
{
	if (want == c->want_out)
		return;
	c->tctx->tp->pipe->want_out(c, want);
	c->want_out = want;
}

static void rdmx_sw_tx_advance(struct rdmx_sw_conn *c, size_t sent)
{
	struct rdmx_sw_op *op;

	c->tx_off += sent;
	while ((op = c->tx_head) && c->tx_off >= op->tx_len) {
		c->tx_off -= op->tx_len;
		c->tx_head = op->tx_next;
		if (!c->tx_head)
			c->tx_tail = NULL;
		op->in_tx = false;
		c->owed -= op->covers;
		rdmx_sw_op_drop(c, op);
	}
}

/* Gather up to RDMX_SW_TX_IOV pieces of queued frames, past tx_off. */
static int rdmx_sw_tx_gather(struct rdmx_sw_conn *c, struct iovec *iov)
{
	size_t skip = c->tx_off;
	int n = 0;

	for (struct rdmx_sw_op *op = c->tx_head; op && n < RDMX_SW_TX_IOV;
	     op = op->tx_next) {
		for (int i = 0; i < op->iovcnt && n < RDMX_SW_TX_IOV; i++) {
			const struct iovec *v = &op->iov[i];

			if (skip >= v->iov_len) {
				skip -= v->iov_len;
				continue;
			}
			iov[n].iov_base = (char *)v->iov_base + skip;
			iov[n++].iov_len = v->iov_len - skip;
			skip = 0;
		}
	}
	return n;
}

/* Push @c onto the held stack @top (lock-free; see rdmx_sw_ctx.held). */
static void rdmx_sw_stack_push(_Atomic(struct rdmx_sw_conn *) *top,
			       struct rdmx_sw_conn *c)
{
	struct rdmx_sw_conn *head =
		atomic_load_explicit(top, memory_order_relaxed);

	do
		c->next_held = head;
	while (!atomic_compare_exchange_weak(top, &head, c));
}

/*
 * List @c on one of its context's held stacks, once, with a reference:
 * held_ride when its ACKs ride with the caller's requests, else held.
 * held_listed changes only under c's lock, here and where the stack is
 * released: a plain flag (an exchange on it was a locked instruction on
 * every post and served message of a spinner, ~5% of a shm ping-pong).
 */
static void rdmx_sw_held_push(struct rdmx_sw_conn *c)
{
	if (c->held_listed)
		return;
	c->held_listed = true;
	atomic_fetch_add(&c->refs, 1);
	rdmx_sw_stack_push(c->acks_ride ? &c->tctx->held_ride : &c->tctx->held,
			   c);
}

static void rdmx_sw_tx_flush(struct rdmx_sw_conn *c)
{
	struct iovec iov[RDMX_SW_TX_IOV];
	ssize_t n;

	c->acks_held = false;
	while (c->tx_head) {
		n = c->tctx->tp->pipe->sendv(c, iov, rdmx_sw_tx_gather(c, iov));
		if (n > 0) {
			c->tx_total += (uint64_t)n;
			c->tx_sends++;
			rdmx_sw_tx_advance(c, (size_t)n);
			continue;
		}
		if (n == -EAGAIN)
			break;
		errno = (int)-n;
		rdmx_info("%s connection to %s lost while sending: %m",
			  c->base.ops->name, c->base.info.peer_addr);
		rdmx_sw_conn_fail(c, RDMX_ERR_CONN_LOST);
		return;
	}
	rdmx_sw_want_out(c, c->tx_head != NULL);
}

/* The transmit queue holds ACKs only, none of them started. */
static bool rdmx_sw_only_acks(const struct rdmx_sw_conn *c)
{
	if (!c->tx_head || c->tx_off)
		return false;
	for (const struct rdmx_sw_op *op = c->tx_head; op; op = op->tx_next)
		if (op->h.type != RDMX_SW_ACK)
			return false;
	return true;
}

void rdmx_sw_tx_progress(struct rdmx_sw_conn *c)
{
	rdmx_sw_tx_progress_or_hold(c, false);
}

/* Requests in flight that spent a credit: counted only when we ASK. */
static uint64_t rdmx_sw_inflight_needy(const struct rdmx_sw_conn *c)
{
	uint64_t n = 0;

	for (const struct rdmx_sw_op *op = c->inflight.head; op; op = op->next)
		n += op->needs_credit;
	return n;
}

/*
 * Must RECVs posted since our last frame be told now, in a frame of their
 * own if none goes? Not while the peer still holds at least as many
 * credits as we keep back, and at least RDMX_SW_GRANT_FLOOR: they ride
 * with our next frame, as a window update waits for half the window. A
 * client that reposts its RECV after each answer (rdmx kv, 32 x 16 GETs
 * over tcp, its progress thread serving) sent one 40-byte CREDIT per
 * answer: 0.9 of its sendmsg calls. A peer short of credits gets them at
 * once, so nothing waits for a grant we keep; a small window (a few
 * RECVs) is told at once, as before. Grants from a shared receive queue
 * go as they come: the peer asked for them.
 */
#define RDMX_SW_GRANT_FLOOR 16

static bool rdmx_sw_grant_due(const struct rdmx_sw_conn *c)
{
	/* The peer's credits: RECVs posted, not spent, told (rq_count counts
	 * the untold too; the peer spends only what it was told). */
	uint32_t told = c->rq_count - c->grant;

	if (!c->grant)
		return false;
	return c->srq || told < c->grant || told < RDMX_SW_GRANT_FLOOR;
}

void rdmx_sw_tx_progress_or_hold(struct rdmx_sw_conn *c, bool hold)
{
	struct rdmx_sw_op *op;

	if (c->dead)
		return;
	if (c->srq)
		rdmx_sw_srq_tx(c);
	/*
	 * The send queue is in order: a SEND without credit blocks it, and so
	 * do the peer's limit on our requests outstanding at it, and a fenced
	 * request while READs or atomics before it are unanswered (the target
	 * might otherwise serve it before their data is read).
	 */
	while ((op = c->sq.head) && c->inflight_n < c->peer_limit) {
		if (op->fence && c->inflight_reads)
			break;
		if (op->needs_credit) {
			if (!c->peer_credits)
				break;
			c->peer_credits--;
			c->sq_needy--;
		}
		rdmx_sw_q_pop(&c->sq);
		rdmx_sw_inflight_push(c, op);
		rdmx_sw_tx_append(c, op);
	}
	/*
	 * A peer that grants from a shared pool must hear that we wait, and
	 * how many of ours it holds: all of them is the level we keep.
	 */
	if (c->sq.head && c->peer_shared && c->sq_needy > c->asked) {
		struct rdmx_sw_hdr h = { .type = RDMX_SW_CREDIT,
					 .op = RDMX_SW_CREDIT_ASK,
					 .seq = rdmx_sw_inflight_needy(c),
					 .arg0 = c->sq_needy,
					 .arg1 = c->credits_got };

		if (rdmx_sw_answer(c, &h, NULL, NULL))
			return;
		c->asked = c->sq_needy;
	}
	/*
	 * With nothing but ACKs to send, a spinning caller's answer (or its
	 * next request) usually follows before its next poll: hold them, and
	 * new credits too, for that frame to carry (rdmx_sw_release_acks
	 * sends them at the next progress call at the latest).
	 */
	if (hold &&
	    (c->tx_head ? rdmx_sw_only_acks(c) : rdmx_sw_grant_due(c))) {
		if (!c->acks_held)
			c->held_at = atomic_load_explicit(&c->tctx->held_calls,
							  memory_order_relaxed);
		c->acks_held = true;
		rdmx_sw_held_push(c);
		return;
	}
	/*
	 * Credits ride on any frame; when none took them and they are due,
	 * send one (also behind frames still queued: those were packed
	 * without them).
	 */
	if (rdmx_sw_grant_due(c)) {
		struct rdmx_sw_hdr h = { .type = RDMX_SW_CREDIT };

		if (rdmx_sw_answer(c, &h, NULL, NULL))
			return;
		/* One writer (under the lock): no locked add. */
		atomic_store_explicit(
			&c->tx_bare_credits,
			atomic_load_explicit(&c->tx_bare_credits,
					     memory_order_relaxed) +
				1,
			memory_order_relaxed);
	}
	rdmx_sw_tx_flush(c);
}

/*
 * ACKs that ride wait for the caller's requests, RDMX_SW_HOLD_CALLS to
 * twice that many of the spinner's progress calls at most: kv bench over
 * tcp, 32 connections served in turn by one thread, sent 1.72 sendmsg
 * per GET at the client, where each request could carry the ACK of the
 * answer before it (1.0 with the wait). The bound keeps the peer's window
 * moving when no request comes.
 */
#define RDMX_SW_HOLD_CALLS 128

/*
 * Send the ACKs of the connections on @top. With @now (held_calls), the
 * stack of those that ride: only ACKs held since RDMX_SW_HOLD_CALLS calls
 * go, and their connections no longer wait; younger ones stay listed.
 */
static void rdmx_sw_release_stack(_Atomic(struct rdmx_sw_conn *) *top,
				  unsigned now)
{
	struct rdmx_sw_conn *c, *next;
	bool keep;

	if (!atomic_load_explicit(top, memory_order_relaxed) ||
	    !(c = atomic_exchange(top, NULL)))
		return;
	for (; c; c = next) {
		/* Read first: once unlisted (under its lock, where holders
		 * push), a holder may push it again and rewrite next_held. */
		next = c->next_held;
		rdmx_spin_lock(&c->lock);
		keep = now && c->acks_held && !c->dead &&
		       now - c->held_at < RDMX_SW_HOLD_CALLS;
		if (!keep) {
			c->held_listed = false;
			/* Held credits become a frame. */
			if (c->acks_held && !c->dead) {
				rdmx_sw_tx_progress(c);
				c->acks_alone = true;
				c->acks_ride = c->acks_ride && !now;
			}
		}
		rdmx_sw_unlock(c);
		if (!keep) {
			rdmx_sw_conn_put(c);
			continue;
		}
		/* Still listed, with its reference: back on the stack. */
		rdmx_sw_stack_push(top, c);
	}
}

void rdmx_sw_release_acks(struct rdmx_sw_ctx *tctx)
{
	rdmx_sw_release_stack(&tctx->held, 0);
	rdmx_sw_release_stack(&tctx->held_ride, 0);
}

/* Plain loads and stores of the count: a call lost to a race costs a
 * little more wait. */
void rdmx_sw_release_acks_due(struct rdmx_sw_ctx *tctx)
{
	unsigned n;

	rdmx_sw_release_stack(&tctx->held, 0);
	if (!atomic_load_explicit(&tctx->held_ride, memory_order_relaxed))
		return;
	n = atomic_load_explicit(&tctx->held_calls, memory_order_relaxed) + 1;
	atomic_store_explicit(&tctx->held_calls, n, memory_order_relaxed);
	if (!(n % RDMX_SW_HOLD_CALLS))
		rdmx_sw_release_stack(&tctx->held_ride, n);
}

rdmx_status rdmx_sw_answer(struct rdmx_sw_conn *c, struct rdmx_sw_hdr *h,
			   struct rdmx_mr *mr, const struct iovec *payload)
{
	struct rdmx_sw_op *op;

	/*
	 * A dead connection's transmit queue was dropped and is never walked
	 * again (the progress thread may have failed it at any point).
	 */
	if (c->dead) {
		rdmx_mr_release(mr);
		return c->dead_status;
	}
	op = rdmx_sw_cache_get(&c->ops, sizeof(*op), RDMX_SW_OP_ZEROED);
	if (!op) {
		/* An answer cannot be skipped without breaking the order. */
		rdmx_mr_release(mr);
		rdmx_error("%s: out of memory answering %s; closing",
			   c->base.ops->name, c->base.info.peer_addr);
		rdmx_sw_conn_fail(c, RDMX_ERR_CONN_LOST);
		return RDMX_ERR_NOMEM;
	}
	op->h = *h;
	op->mr = mr;
	op->covers = rdmx_sw_is_answer(h);
	op->iovcnt = 1;
	if (payload && payload->iov_len)
		op->iov[op->iovcnt++] = *payload;
	rdmx_sw_tx_append(c, op);
	return RDMX_OK;
}

rdmx_status rdmx_sw_ack(struct rdmx_sw_conn *c, uint64_t seq)
{
	struct rdmx_sw_op *op = c->tx_tail;
	struct rdmx_sw_hdr h = { .type = RDMX_SW_ACK, .seq = seq };

	/*
	 * An ACK at the tail, not yet started, may grow to cover @seq: nothing
	 * queued after it can be overtaken. Anywhere else it could be.
	 */
	if (op && op->h.type == RDMX_SW_ACK &&
	    !(op == c->tx_head && c->tx_off)) {
		op->h.seq = seq;
		op->covers++;
		rdmx_sw_hdr_pack(&op->h, op->hdr);
		return RDMX_OK;
	}
	op = &c->ack_op;
	if (op->in_tx || c->dead)
		return rdmx_sw_answer(c, &h, NULL, NULL);
	/* Only this and tx_append write it: the rest stays zero. */
	op->h = h;
	op->covers = 1;
	op->iovcnt = 1;
	rdmx_sw_tx_append(c, op);
	return RDMX_OK;
}

/*
 * BYREF: instead of the data, send descriptors of our buffers; the target
 * checks its registration, then moves the bytes itself (single copy).
 */
static void rdmx_sw_op_byref(struct rdmx_sw_op *op, const struct rdmx_wr *wr)
{
	for (int i = 0; i < wr->num_sge; i++) {
		rdmx_put_be(op->refs + i * RDMX_SW_REF_LEN,
			    (uintptr_t)wr->sg_list[i].addr, 8);
		rdmx_put_be(op->refs + i * RDMX_SW_REF_LEN + 8,
			    wr->sg_list[i].length, 8);
	}
	op->iov[1].iov_base = op->refs;
	op->iov[1].iov_len = (size_t)wr->num_sge * RDMX_SW_REF_LEN;
	op->iovcnt = 2;
	op->h.flags = RDMX_SW_F_BYREF;
	op->h.op = (uint8_t)wr->num_sge;
}

/* Fill @op's frame and bookkeeping from a checked work request. */
static void rdmx_sw_op_fill(struct rdmx_sw_op *op, const struct rdmx_wr *wr,
			    uint64_t total, bool byref)
{
	bool payload = wr->opcode == RDMX_OP_SEND ||
		       wr->opcode == RDMX_OP_WRITE ||
		       wr->opcode == RDMX_OP_WRITE_IMM;
	struct iovec *dst = payload ? op->iov + 1 : op->local;

	for (int i = 0; i < wr->num_sge; i++) {
		dst[i].iov_base = wr->sg_list[i].addr;
		dst[i].iov_len = wr->sg_list[i].length;
		op->use[i] = wr->sg_list[i].mr;
	}
	op->nuse = wr->num_sge;
	op->iovcnt = 1 + (payload ? wr->num_sge : 0);
	op->nlocal = payload ? 0 : wr->num_sge;
	op->wr_id = wr->wr_id;
	op->opcode = wr->opcode;
	op->unsignaled = wr->flags & RDMX_WR_UNSIGNALED;
	op->fence = wr->flags & RDMX_WR_FENCE;
	op->len = (uint32_t)total;
	op->h.addr = wr->remote_addr;
	op->h.rkey = wr->rkey;
	op->h.length = (uint32_t)total;
	switch (wr->opcode) {
	case RDMX_OP_SEND:
		op->h.type = RDMX_SW_SEND;
		op->needs_credit = true;
		break;
	case RDMX_OP_WRITE:
		op->h.type = RDMX_SW_WRITE;
		break;
	case RDMX_OP_WRITE_IMM:
		op->h.type = RDMX_SW_WRITE_IMM;
		op->h.arg0 = wr->imm;
		op->needs_credit = true;
		break;
	case RDMX_OP_READ:
		op->h.type = RDMX_SW_READ_REQ;
		break;
	default: /* atomics */
		op->h.type = RDMX_SW_ATOMIC_REQ;
		op->h.op = wr->opcode == RDMX_OP_FETCH_ADD ? RDMX_SW_FETCH_ADD
							   : RDMX_SW_CMP_SWAP;
		op->h.length = 0;
		op->h.arg0 = wr->compare_add;
		op->h.arg1 = wr->swap;
		break;
	}
	if (byref)
		rdmx_sw_op_byref(op, wr);
}

/*
 * A one-sided request the pipe can do itself on the peer's memory: only
 * while nothing of ours is posted or in flight (it would overtake it),
 * unless it may (RDMX_WR_UNORDERED).
 */
static bool rdmx_sw_direct(struct rdmx_sw_conn *c, const struct rdmx_wr *wr,
			   uint64_t total)
{
	const struct rdmx_sw_pipe *pipe = c->tctx->tp->pipe;

	if (!pipe->direct ||
	    (!(wr->flags & RDMX_WR_UNORDERED) &&
	     (c->sq.head || c->inflight.head)) ||
	    !total || wr->opcode == RDMX_OP_SEND ||
	    wr->opcode == RDMX_OP_WRITE_IMM || !pipe->direct(c, wr, total))
		return false;
	c->outstanding++;
	rdmx_sw_done(c, wr->wr_id, wr->opcode, wr->flags & RDMX_WR_UNSIGNALED,
		     RDMX_OK, (uint32_t)total);
	return true;
}

/* Queue (or do directly) @wr on @c, under its lock; nothing is sent yet. */
static rdmx_status rdmx_sw_post_locked(struct rdmx_sw_conn *c,
				       const struct rdmx_wr *wr, bool *queued)
{
	struct rdmx_sw_op *op;
	uint64_t total = 0;

	for (int i = 0; i < wr->num_sge; i++)
		total += wr->sg_list[i].length;
	if (total > RDMX_SW_MAX_MSG) {
		rdmx_error(
			"post: %llu bytes exceed the software transports' limit "
			"of %u per work request",
			(unsigned long long)total, RDMX_SW_MAX_MSG);
		return RDMX_ERR_INVALID;
	}
	if (c->dead)
		return RDMX_ERR_CONN_LOST;
	if (c->outstanding >= c->base.ctx->cfg.conn_max_send_wr)
		return RDMX_ERR_AGAIN;
	if (rdmx_sw_direct(c, wr, total))
		return RDMX_OK;
	if (!(op = rdmx_sw_cache_get(&c->ops, sizeof(*op), RDMX_SW_OP_ZEROED)))
		return RDMX_ERR_NOMEM;
	rdmx_sw_op_fill(op, wr, total,
			c->tctx->byref_min && total >= c->tctx->byref_min &&
				wr->num_sge &&
				(wr->opcode == RDMX_OP_WRITE ||
				 wr->opcode == RDMX_OP_WRITE_IMM ||
				 wr->opcode == RDMX_OP_READ));
	op->h.seq = c->next_seq++;
	op->in_q = true;
	rdmx_sw_q_push(&c->sq, op);
	c->outstanding++;
	c->sq_needy += op->needs_credit;
	*queued = true;
	return RDMX_OK;
}

/*
 * A small SEND that nothing of ours waits before, but ACKs: its frame
 * goes to the pipe, with those ACKs, before its op is filled and
 * committed. The op is taken from the cache first, so that a frame never
 * leaves without one to complete it. On a ring the peer sees the frame
 * ~40 ns sooner: the filling, queueing and gathering (~400 of a small
 * SEND's ~800 instructions up to its publish) come after it now. Nothing
 * sent (a full ring or socket, or a pipe error the regular path then
 * meets): false, and the regular path posts it. Part of it sent: the rest
 * waits in the transmit queue, as any frame's would.
 */
#define RDMX_SW_SEND_NOW 1024 /* bytes; larger SENDs gain nothing here */
#define RDMX_SW_NOW_ACKS 4 /* queued ACK frames it takes along */

static bool rdmx_sw_send_now(struct rdmx_sw_conn *c, const struct rdmx_wr *wr)
{
	struct iovec iov[RDMX_SW_NOW_ACKS + 1 + RDMX_MAX_SGE];
	struct rdmx_sw_hdr h = { .type = RDMX_SW_SEND };
	struct rdmx_sw_op *op, *ack;
	uint8_t hdr[RDMX_SW_HDR_LEN];
	uint64_t total = 0;
	ssize_t sent;
	int n = 0;

	if (wr->opcode != RDMX_OP_SEND || c->dead || c->srq || c->sq.head ||
	    c->tx_off || !c->peer_credits || c->inflight_n >= c->peer_limit ||
	    c->outstanding >= c->base.ctx->cfg.conn_max_send_wr ||
	    ((wr->flags & RDMX_WR_FENCE) && c->inflight_reads))
		return false;
	for (ack = c->tx_head; ack; ack = ack->tx_next) {
		if (ack->h.type != RDMX_SW_ACK || n == RDMX_SW_NOW_ACKS)
			return false;
		iov[n++] = ack->iov[0];
	}
	for (int i = 0; i < wr->num_sge; i++)
		total += wr->sg_list[i].length;
	if (total > RDMX_SW_SEND_NOW)
		return false;
	if (!(op = rdmx_sw_cache_get(&c->ops, sizeof(*op), 0)))
		return false;
	h.seq = c->next_seq;
	h.length = (uint32_t)total;
	h.credits = c->grant;
	iov[n].iov_base = hdr;
	iov[n++].iov_len = rdmx_sw_hdr_pack(&h, hdr);
	for (int i = 0; i < wr->num_sge; i++) {
		iov[n].iov_base = wr->sg_list[i].addr;
		iov[n++].iov_len = wr->sg_list[i].length;
	}
	sent = c->tctx->tp->pipe->sendv(c, iov, n);
	if (sent <= 0) {
		rdmx_sw_cache_put(&c->ops, op);
		return false;
	}
	/* It left (all or part): commit it as rdmx_sw_tx_progress would. */
	memset(op, 0, RDMX_SW_OP_ZEROED);
	rdmx_sw_op_fill(op, wr, total, false);
	op->h.seq = c->next_seq++;
	op->h.credits = rdmx_sw_grant_take(c); /* as in h: nothing posted since
						*/
	op->in_q = true;
	c->outstanding++;
	c->peer_credits--;
	rdmx_sw_inflight_push(c, op);
	/* In the transmit queue behind the ACKs, for the advance to drop
	 * what left and keep what did not. */
	memcpy(op->hdr, hdr, iov[n - 1 - wr->num_sge].iov_len);
	op->iov[0].iov_base = op->hdr;
	op->iov[0].iov_len = iov[n - 1 - wr->num_sge].iov_len;
	rdmx_sw_tx_link(c, op);
	c->acks_held = false;
	c->tx_total += (uint64_t)sent;
	c->tx_sends++;
	rdmx_sw_tx_advance(c, (size_t)sent);
	rdmx_sw_want_out(c, c->tx_head != NULL);
	return true;
}

rdmx_status rdmx_sw_post_send(struct rdmx_conn *conn, const struct rdmx_wr *wr)
{
	int posted;

	return rdmx_sw_post_list(conn, wr, 1, &posted);
}

/*
 * All of @wrs under one lock, then one transmit: their frames leave
 * together (one sendmsg on tcp, one ring publish on shm).
 */
rdmx_status rdmx_sw_post_list(struct rdmx_conn *conn, const struct rdmx_wr *wrs,
			      int n, int *posted_p)
{
	struct rdmx_sw_conn *c = to_sw_conn(conn);
	rdmx_status st = RDMX_OK;
	bool queued = false, held;
	int i;

	rdmx_spin_lock(&c->lock);
	held = c->acks_held; /* before the send clears it */
	if (n == 1 && rdmx_sw_send_now(c, wrs)) {
		if (held || c->acks_alone)
			c->acks_ride = true;
		c->acks_alone = false;
		rdmx_sw_unlock(c);
		*posted_p = 1;
		return RDMX_OK;
	}
	for (i = 0; i < n && !st; i++)
		st = rdmx_sw_post_locked(c, &wrs[i], &queued);
	if (queued) {
		/* ACKs that were held, or that just left alone, could ride
		 * with requests here: let the next ones wait for them. */
		if (c->acks_held || c->acks_alone)
			c->acks_ride = true;
		c->acks_alone = false;
		rdmx_sw_tx_progress(c);
	}
	rdmx_sw_unlock(c);
	*posted_p = st ? i - 1 : i;
	return st;
}

void rdmx_sw_recv_fill(struct rdmx_sw_recv *r, const struct rdmx_sge *sg,
		       int num_sge, uint64_t wr_id)
{
	r->wr_id = wr_id;
	r->niov = num_sge;
	for (int i = 0; i < num_sge; i++) {
		r->iov[i].iov_base = sg[i].addr;
		r->iov[i].iov_len = sg[i].length;
		r->cap += sg[i].length;
		r->use[i] = sg[i].mr;
	}
}

void rdmx_sw_recv_spent(struct rdmx_sw_conn *c, struct rdmx_sw_recv *r)
{
	rdmx_sw_cache_put(c->srq ? &c->srq_spent : &c->recvs, r);
}

rdmx_status rdmx_sw_post_recv(struct rdmx_conn *conn, const struct rdmx_sge *sg,
			      int num_sge, uint64_t wr_id)
{
	struct rdmx_sw_conn *c = to_sw_conn(conn);
	struct rdmx_sw_recv *r = NULL;
	rdmx_status st = RDMX_OK;

	rdmx_spin_lock(&c->lock);
	if (c->dead) {
		st = RDMX_ERR_CONN_LOST;
	} else if (c->rq_count >= c->base.ctx->cfg.conn_max_recv_wr) {
		st = RDMX_ERR_AGAIN;
	} else if (!(r = rdmx_sw_cache_get(&c->recvs, sizeof(*r),
					   RDMX_SW_RECV_ZEROED))) {
		st = RDMX_ERR_NOMEM;
	} else {
		rdmx_sw_recv_fill(r, sg, num_sge, wr_id);
	}
	if (!st) {
		if (c->rq_tail)
			c->rq_tail->next = r;
		else
			c->rq_head = r;
		c->rq_tail = r;
		c->rq_count++;
		c->grant++;
		/*
		 * A spinner's SEND usually follows its RECV: it carries the
		 * credit (held as bare ACKs are; see tx_progress_or_hold). Sent
		 * alone, it costs a system call on a socket, and on a ring a
		 * chunk of its own whose line the peer must fetch before the
		 * SEND's (shm send 8 B: 0.44 -> 0.375 us).
		 */
		rdmx_sw_tx_progress_or_hold(
			c, atomic_load_explicit(&c->tctx->backing_off,
						memory_order_relaxed));
	}
	rdmx_sw_unlock(c);
	return st;
}
