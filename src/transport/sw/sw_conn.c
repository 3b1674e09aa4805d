/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sw.h"

rdmx_status rdmx_sw_open(struct rdmx_ctx *ctx,
			 const struct rdmx_sw_transport *tp, void **priv_p)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0 };
	struct rdmx_sw_ctx *tctx;

	tctx = calloc(1, sizeof(*tctx));
	if (!tctx)
		return RDMX_ERR_NOMEM;
	tctx->ctx = ctx;
	tctx->tp = tp;
	atomic_init(&tctx->stamp_every, RDMX_SW_STAMP_MIN);
	tctx->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (tctx->epfd < 0) {
		rdmx_error("epoll_create1: %m");
		goto err_free;
	}
	tctx->stop_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (tctx->stop_efd < 0) {
		rdmx_error("eventfd: %m");
		goto err_epoll;
	}
	/* Key 0 is the stop signal; connections start at slot + 1. */
	if (epoll_ctl(tctx->epfd, EPOLL_CTL_ADD, tctx->stop_efd, &ev)) {
		rdmx_error("epoll_ctl: %m");
		goto err_efd;
	}
	tctx->timer_fd =
		timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	ev.data.u64 = RDMX_SW_KEY_TIMER;
	if (tctx->timer_fd < 0 ||
	    epoll_ctl(tctx->epfd, EPOLL_CTL_ADD, tctx->timer_fd, &ev)) {
		rdmx_error("the watchdog's timerfd: %m");
		goto err_timer;
	}
	if (ctx->cfg.progress_thread) {
		/* Set before the thread starts, which reads it (TSan saw the
		 * store after pthread_create race the thread's first look). */
		tctx->thread_running = true;
		if (rdmx_progress_thread_start(ctx, &tctx->thread,
					       rdmx_sw_thread, tctx,
					       tp->ops->name))
			goto err_timer;
	}
	*priv_p = tctx;
	return RDMX_OK;

err_timer:
	if (tctx->timer_fd >= 0)
		close(tctx->timer_fd);
err_efd:
	close(tctx->stop_efd);
err_epoll:
	close(tctx->epfd);
err_free:
	free(tctx);
	return RDMX_ERR_SYSTEM;
}

void rdmx_sw_close(void *priv)
{
	struct rdmx_sw_ctx *tctx = priv;
	uint64_t one = 1;

	if (tctx->thread_running) {
		atomic_store(&tctx->stopping, true);
		if (write(tctx->stop_efd, &one, sizeof(one)) != sizeof(one))
			rdmx_error("cannot stop the %s progress thread: %m",
				   tctx->tp->ops->name);
		pthread_join(tctx->thread, NULL);
	}
	rdmx_sw_release_acks(tctx); /* their references */
	close(tctx->stop_efd);
	close(tctx->timer_fd);
	close(tctx->epfd);
	free(tctx->slots);
	free(tctx->gens);
	free(tctx);
}

/* Give @c a slot and its key. */
static rdmx_status rdmx_sw_slot_add(struct rdmx_sw_ctx *tctx,
				    struct rdmx_sw_conn *c)
{
	uint32_t i, n;

	rdmx_spin_lock(&tctx->slots_lock);
	for (i = 0; i < tctx->nslots && tctx->slots[i]; i++)
		;
	if (i == tctx->nslots) {
		struct rdmx_sw_conn **slots;
		uint32_t *gens;

		n = tctx->nslots ? tctx->nslots * 2 : 16;
		slots = realloc(tctx->slots, n * sizeof(*slots));
		if (slots)
			tctx->slots = slots;
		gens = slots ? realloc(tctx->gens, n * sizeof(*gens)) : NULL;
		if (!gens) {
			rdmx_spin_unlock(&tctx->slots_lock);
			return RDMX_ERR_NOMEM;
		}
		tctx->gens = gens;
		memset(slots + tctx->nslots, 0,
		       (n - tctx->nslots) * sizeof(*slots));
		memset(gens + tctx->nslots, 0,
		       (n - tctx->nslots) * sizeof(*gens));
		tctx->nslots = n;
	}
	tctx->slots[i] = c;
	if (i >= tctx->slots_used)
		tctx->slots_used = i + 1;
	c->key = (uint64_t)++tctx->gens[i] << 32 | (i + 1);
	rdmx_sw_timer_arm(tctx, true); /* under the lock: see the watchdog */
	/*
	 * A pipe starts armed (its consumer may be asleep). While the thread
	 * backs off, a spinning caller serves this one too: disarm it, as
	 * the thread did the others, or its peer rings for every message
	 * until the thread next backs off. The thread stores backing_off
	 * false before it arms all again under this lock, so this never
	 * undoes that arming.
	 */
	if (tctx->tp->pipe->arm && atomic_load(&tctx->backing_off))
		tctx->tp->pipe->arm(c, false);
	rdmx_spin_unlock(&tctx->slots_lock);
	return RDMX_OK;
}

static void rdmx_sw_slot_del(struct rdmx_sw_ctx *tctx, uint64_t key)
{
	rdmx_spin_lock(&tctx->slots_lock);
	tctx->slots[(uint32_t)key - 1] = NULL;
	while (tctx->slots_used && !tctx->slots[tctx->slots_used - 1])
		tctx->slots_used--;
	rdmx_spin_unlock(&tctx->slots_lock);
}

struct rdmx_sw_conn *rdmx_sw_conn_get(struct rdmx_sw_ctx *tctx, uint64_t key)
{
	uint32_t i = (uint32_t)(key & ~RDMX_SW_KEY_AUX) - 1;
	struct rdmx_sw_conn *c = NULL;

	rdmx_spin_lock(&tctx->slots_lock);
	if (i < tctx->nslots && tctx->gens[i] == (uint32_t)(key >> 32)) {
		c = tctx->slots[i];
		if (c)
			atomic_fetch_add(&c->refs, 1);
	}
	rdmx_spin_unlock(&tctx->slots_lock);
	return c;
}

void rdmx_sw_conn_put(struct rdmx_sw_conn *c)
{
	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	if (c->srq)
		rdmx_sw_srq_put(c->srq);
	c->tctx->tp->pipe->destroy(c);
	rdmx_sw_cache_free(&c->ops);
	rdmx_sw_cache_free(&c->recvs);
	rdmx_sw_cache_free(&c->srq_spent);
	rdmx_conn_mem_put(&c->base);
}

static int rdmx_sw_watch(struct rdmx_sw_conn *c, int op)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = c->key };
	struct epoll_event ev2 = { .events = EPOLLIN | EPOLLRDHUP,
				   .data.u64 = c->key | RDMX_SW_KEY_AUX };
	bool del = op == EPOLL_CTL_DEL;

	if (epoll_ctl(c->tctx->epfd, op, c->fd, del ? NULL : &ev))
		return -1;
	if (c->fd2 >= 0 &&
	    epoll_ctl(c->tctx->epfd, op, c->fd2, del ? NULL : &ev2))
		return -1;
	return 0;
}

/*
 * Our first frame: how many requests the peer may have outstanding here.
 * It commits none before it has heard this.
 */
static void rdmx_sw_tell_limit(struct rdmx_sw_conn *c)
{
	struct rdmx_sw_hdr h = {
		.type = RDMX_SW_CREDIT,
		.op = RDMX_SW_CREDIT_LIMIT,
		.arg0 = c->base.ctx->cfg.conn_max_peer_requests,
	};

	rdmx_sw_answer(c, &h, NULL, NULL);
}

rdmx_status rdmx_sw_conn_create(struct rdmx_sw_ctx *e, int fd, int fd2,
				void *pipe_priv,
				const struct rdmx_conn_attr *attr,
				struct rdmx_conn **conn_p)
{
	struct rdmx_sw_conn *c;

	c = calloc(1, sizeof(*c));
	if (!c) {
		struct rdmx_sw_conn tmp = { .fd = fd,
					    .fd2 = fd2,
					    .pipe_priv = pipe_priv };

		e->tp->pipe->destroy(&tmp);
		return RDMX_ERR_NOMEM;
	}
	rdmx_conn_init(&c->base, e->ctx, e->tp->ops, attr);
	/* Ops: our requests, and answers and ACKs to the peer's. */
	c->ops.max = e->ctx->cfg.conn_max_send_wr +
		     e->ctx->cfg.conn_max_peer_requests;
	c->recvs.max = e->ctx->cfg.conn_max_recv_wr;
	c->srq_spent.max = UINT32_MAX;
	c->tctx = e;
	c->fd = fd;
	c->fd2 = fd2;
	c->pipe_priv = pipe_priv;
	atomic_init(&c->refs, 1);
	*conn_p = &c->base;
	return RDMX_OK;
}

rdmx_status rdmx_sw_conn_start(struct rdmx_conn *conn)
{
	struct rdmx_sw_conn *c = to_sw_conn(conn);
	rdmx_status st;

	st = rdmx_sw_slot_add(c->tctx, c);
	if (st)
		return st;
	if (rdmx_sw_watch(c, EPOLL_CTL_ADD)) {
		rdmx_error("epoll_ctl add fd %d: %m", c->fd);
		rdmx_sw_watch(c, EPOLL_CTL_DEL); /* @fd2 may have failed */
		rdmx_sw_slot_del(c->tctx, c->key);
		c->key = 0;
		return RDMX_ERR_SYSTEM;
	}
	rdmx_spin_lock(&c->lock);
	c->heard_us = c->moved_us = c->sent_us = rdmx_now_us();
	rdmx_sw_tell_limit(c);
	if (c->base.srq && !c->dead)
		rdmx_sw_srq_attach(c);
	rdmx_sw_tx_progress(c);
	rdmx_sw_unlock(c);
	return RDMX_OK;
}

void rdmx_sw_epoll_out(struct rdmx_sw_conn *c, bool want)
{
	struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0),
				  .data.u64 = c->key };

	if (epoll_ctl(c->tctx->epfd, EPOLL_CTL_MOD, c->fd, &ev))
		rdmx_error("epoll_ctl mod fd %d: %m", c->fd);
}

void rdmx_sw_complete(struct rdmx_sw_conn *c, uint64_t wr_id,
		      enum rdmx_opcode op, rdmx_status st, uint32_t len,
		      uint32_t imm)
{
	struct rdmx_completion wc = { .wr_id = wr_id,
				      .status = st,
				      .opcode = op,
				      .byte_len = len,
				      .imm = imm,
				      .conn = &c->base };

	rdmx_cq_push(c->base.cq, &wc);
}

void rdmx_sw_done(struct rdmx_sw_conn *c, uint64_t wr_id, enum rdmx_opcode op,
		  bool unsignaled, rdmx_status st, uint32_t len)
{
	if (!st && unsignaled) {
		c->unsignaled_held++; /* its slot is the next completion's */
		return;
	}
	c->outstanding -= 1 + c->unsignaled_held;
	c->unsignaled_held = 0;
	rdmx_sw_complete(c, wr_id, op, st, st ? 0 : len, 0);
}

static void rdmx_sw_flush_queue(struct rdmx_sw_conn *c, struct rdmx_sw_queue *q,
				rdmx_status st)
{
	struct rdmx_sw_op *op;

	while ((op = q->head)) {
		q->head = op->next;
		rdmx_sw_complete(c, op->wr_id, op->opcode, st, 0, 0);
		c->outstanding--;
		op->in_q = false;
		rdmx_sw_op_drop(c, op);
	}
	q->tail = NULL;
}

void rdmx_sw_conn_fail(struct rdmx_sw_conn *c, rdmx_status st)
{
	struct rdmx_sw_recv *r;
	struct rdmx_sw_op *op;

	if (c->dead)
		return;
	c->dead = true;
	c->dead_status = st;
	/* Oldest first, so completions stay in posting order. */
	rdmx_sw_flush_queue(c, &c->inflight, st);
	rdmx_sw_flush_queue(c, &c->sq, st);
	c->outstanding -= c->unsignaled_held;
	c->unsignaled_held = 0;
	c->inflight_n = 0;
	c->inflight_reads = 0;
	while ((op = c->tx_head)) {
		c->tx_head = op->tx_next;
		op->in_tx = false;
		rdmx_sw_op_drop(c, op);
	}
	c->tx_tail = NULL;
	while ((r = c->rq_head)) {
		c->rq_head = r->next;
		rdmx_sw_complete(c, r->wr_id, RDMX_OP_RECV, st, 0, 0);
		free(r);
	}
	if (c->rx_recv) {
		rdmx_sw_complete(c, c->rx_recv->wr_id, RDMX_OP_RECV, st, 0, 0);
		free(c->rx_recv);
		c->rx_recv = NULL;
	}
	rdmx_mr_release(c->rx_mr);
	c->rx_mr = NULL;
	c->rx_parked = false;
	c->rq_count = 0;
	rdmx_sw_srq_detach(c);
	rdmx_sw_watch(c, EPOLL_CTL_DEL);
	c->tctx->tp->pipe->shutdown(c);
}

rdmx_status rdmx_sw_conn_check(struct rdmx_conn *conn)
{
	struct rdmx_sw_conn *c = to_sw_conn(conn);
	rdmx_status st;

	rdmx_spin_lock(&c->lock);
	st = c->dead ? c->dead_status : RDMX_OK;
	rdmx_spin_unlock(&c->lock);
	return st;
}

/*
 * Does a request queued on @c use @mr, or a SEND being placed into a RECV
 * on it? A request leaves sq and inflight only once its bytes have left
 * (an earlier answer is a protocol error), so the transmit queue need not
 * be searched. Call with c->lock held.
 */
static bool rdmx_sw_conn_uses(const struct rdmx_sw_conn *c,
			      const struct rdmx_mr *mr)
{
	const struct rdmx_sw_queue *qs[] = { &c->sq, &c->inflight };

	for (unsigned q = 0; q < 2; q++)
		for (const struct rdmx_sw_op *op = qs[q]->head; op;
		     op = op->next)
			if (rdmx_sw_uses(op->use, op->nuse, mr))
				return true;
	return c->rx_recv &&
	       rdmx_sw_uses(c->rx_recv->use, c->rx_recv->niov, mr);
}

/*
 * Call @fn on every live connection of @tctx, each under its lock, with a
 * reference held. Returns how many there were.
 */
unsigned rdmx_sw_each(struct rdmx_sw_ctx *tctx,
		      void (*fn)(struct rdmx_sw_conn *c, void *arg), void *arg)
{
	unsigned live = 0;

	for (uint32_t i = 0;; i++) {
		struct rdmx_sw_conn *c;

		rdmx_spin_lock(&tctx->slots_lock);
		if (i >= tctx->slots_used) {
			rdmx_spin_unlock(&tctx->slots_lock);
			return live;
		}
		c = tctx->slots[i];
		if (c)
			atomic_fetch_add(&c->refs, 1);
		rdmx_spin_unlock(&tctx->slots_lock);
		if (!c)
			continue;
		rdmx_spin_lock(&c->lock);
		if (!c->dead) {
			live++;
			fn(c, arg);
		}
		rdmx_sw_unlock(c);
		rdmx_sw_conn_put(c);
	}
}

static void rdmx_sw_conn_revoke(struct rdmx_sw_conn *c, void *arg)
{
	const struct rdmx_mr *mr = arg;

	if (rdmx_sw_conn_uses(c, mr)) {
		rdmx_warn("rdmx_mr_dereg of a region that requests posted to "
			  "%s still use: that connection ends, its requests "
			  "flushed (as a NIC's protection error would end it)",
			  c->base.info.peer_addr);
		rdmx_sw_conn_fail(c, RDMX_ERR_FLUSHED);
	}
	for (struct rdmx_sw_recv *r = c->rq_head; r; r = r->next)
		r->revoked |= rdmx_sw_uses(r->use, r->niov, mr);
}

void rdmx_sw_mr_revoke(void *priv, struct rdmx_mr *mr)
{
	rdmx_sw_srq_revoke(mr);
	rdmx_sw_each(priv, rdmx_sw_conn_revoke, mr);
}

void rdmx_sw_timer_arm(struct rdmx_sw_ctx *tctx, bool on)
{
	struct itimerspec t = { 0 };

	if (on) {
		t.it_interval.tv_nsec = RDMX_SW_TICK_MS * 1000000l;
		t.it_value = t.it_interval;
	}
	if (timerfd_settime(tctx->timer_fd, 0, &t, NULL))
		rdmx_error("the watchdog's timerfd_settime: %m");
}

/*
 * One connection's tick. Its clocks restart while nothing waits, and
 * whenever a byte moves the way something waits.
 */
static void rdmx_sw_conn_tick(struct rdmx_sw_conn *c, void *arg)
{
	/* Read under the lock conn_start sets the clocks under: never before
	 * them. */
	uint64_t now = rdmx_now_us();
	uint64_t stall = c->base.ctx->cfg.conn_stall_timeout_ms * 1000;
	const struct rdmx_sw_pipe *pipe = c->tctx->tp->pipe;
	uint64_t since;

	(void)arg;
	if (!c->inflight.head || c->rx_total != c->seen_rx)
		c->heard_us = now;
	if (!c->tx_head || c->tx_total != c->seen_tx)
		c->moved_us = now;
	if (c->tx_total != c->seen_tx)
		c->sent_us = now;
	c->seen_rx = c->rx_total;
	c->seen_tx = c->tx_total;
	since = c->heard_us < c->moved_us ? c->heard_us : c->moved_us;
	if (now - since >= stall) {
		rdmx_warn(
			"%s took nothing of what we send, or answered none of "
			"our requests, for %llu ms: its work fails "
			"(conn.stall_timeout)",
			c->base.info.peer_addr,
			(unsigned long long)(now - since) / 1000);
		rdmx_sw_conn_fail(c, RDMX_ERR_TIMEOUT);
		return;
	}
	if (pipe->alive && !c->tx_head &&
	    now - c->sent_us >= c->base.ctx->cfg.tcp_user_timeout_ms * 250) {
		struct rdmx_sw_hdr beat = { .type = RDMX_SW_CREDIT,
					    .op = RDMX_SW_CREDIT_GRANT };

		if (!rdmx_sw_answer(c, &beat, NULL, NULL))
			rdmx_sw_tx_progress(c);
		c->sent_us = now;
	}
	if (!pipe->alive || pipe->alive(c)) {
		c->suspect = 0;
	} else if (++c->suspect >= 2) {
		rdmx_warn(
			"the host of %s answered nothing for tcp.user_timeout "
			"(%llu ms): it is gone",
			c->base.info.peer_addr,
			(unsigned long long)
				c->base.ctx->cfg.tcp_user_timeout_ms);
		rdmx_sw_conn_fail(c, RDMX_ERR_CONN_LOST);
	}
}

void rdmx_sw_watchdog(struct rdmx_sw_ctx *tctx)
{
	uint64_t ticks;

	if (read(tctx->timer_fd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
		rdmx_debug("the watchdog's timerfd: %m");
	if (rdmx_sw_each(tctx, rdmx_sw_conn_tick, NULL))
		return;
	/* Idle with no connection: off until a slot is taken (which arms it
	 * under the same lock, so no arming is lost). */
	rdmx_spin_lock(&tctx->slots_lock);
	if (!tctx->slots_used)
		rdmx_sw_timer_arm(tctx, false);
	rdmx_spin_unlock(&tctx->slots_lock);
}

void rdmx_sw_conn_close(struct rdmx_conn *conn)
{
	struct rdmx_sw_conn *c = to_sw_conn(conn);

	if (!c->key) { /* never started: nobody else knows it */
		rdmx_sw_conn_put(c);
		return;
	}
	rdmx_spin_lock(&c->lock);
	/* What arrived was placed: the peer hears so, as from a NIC. */
	if (c->acks_held && !c->dead)
		rdmx_sw_tx_progress(c);
	rdmx_sw_conn_fail(c, RDMX_ERR_FLUSHED);
	rdmx_sw_unlock(c);
	rdmx_sw_slot_del(c->tctx, c->key);
	rdmx_sw_conn_put(c);
}
