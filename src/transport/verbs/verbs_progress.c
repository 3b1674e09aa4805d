/* SPDX-License-Identifier: MIT */
/* Completions from a verbs CQ, and the progress thread. */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "verbs.h"
#include "verbs_proto.h"

/*
 * The device's word for a failed completion, as an rdmx status. Devices
 * word the same event differently (a SEND larger than the RECV is
 * LOC_LEN_ERR at the receiver on most, LOC_QP_OP_ERR on rxe), so the side
 * and the operation decide; the device's own words go to the log.
 */
static rdmx_status rdmx_verbs_status(const struct rdmx_verbs_conn *c,
				     const struct ibv_wc *wc, bool recv,
				     enum rdmx_opcode op)
{
	bool two_sided = op == RDMX_OP_SEND || op == RDMX_OP_WRITE_IMM;

	if (wc->status == IBV_WC_SUCCESS)
		return RDMX_OK;
	/*
	 * Once the connection is over, whatever fails says why it ended, in
	 * the device's words or not (siw completes WRITEs in flight at close
	 * with LOC_QP_OP_ERR, where the others flush). Except a RECV the
	 * device found too small: that is its own outcome, and on siw the
	 * Terminate it sends may end the connection before we poll it.
	 */
	if (c->dead && !(recv && wc->status == IBV_WC_LOC_LEN_ERR))
		return c->flush_status;
	switch (wc->status) {
	case IBV_WC_WR_FLUSH_ERR:
		/* Not flushed by us: the connection ended under us (siw: the
		 * peer's Terminate, or TCP gone). */
		return RDMX_ERR_CONN_LOST;
	case IBV_WC_LOC_LEN_ERR:
		return recv ? RDMX_ERR_LOCAL_LENGTH : RDMX_ERR_INVALID;
	case IBV_WC_LOC_QP_OP_ERR: /* rxe: RECV too small; siw: link broke */
		return recv ? RDMX_ERR_LOCAL_LENGTH : RDMX_ERR_CONN_LOST;
	case IBV_WC_REM_INV_REQ_ERR:
	case IBV_WC_REM_OP_ERR:
		if (recv)
			return RDMX_ERR_LOCAL_LENGTH;
		return two_sided ? RDMX_ERR_REMOTE_INVALID
				 : RDMX_ERR_REMOTE_ACCESS;
	case IBV_WC_REM_ACCESS_ERR:
		return RDMX_ERR_REMOTE_ACCESS;
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_MW_BIND_ERR:
		return RDMX_ERR_INVALID;
	default: /* retries exhausted, fatal errors: the peer is gone */
		return RDMX_ERR_CONN_LOST;
	}
}

/* A completion the NIC reported ends the connection: all behind it flushes. */
static void rdmx_verbs_failed(struct rdmx_verbs_conn *c,
			      const struct ibv_wc *wc, rdmx_status st)
{
	if (wc->status == IBV_WC_SUCCESS || c->dead)
		return;
	rdmx_info("verbs: %s on %s to %s (vendor error 0x%x)",
		  ibv_wc_status_str(wc->status), c->d->name,
		  c->base.info.peer_addr, wc->vendor_err);
	rdmx_verbs_mark_dead(c, st == RDMX_ERR_CONN_LOST ? RDMX_ERR_CONN_LOST
							 : RDMX_ERR_FLUSHED);
}

/* The record of a completed RECV: our queue's oldest, or the srq's slot. */
static struct rdmx_verbs_rec rdmx_verbs_recv_rec(struct rdmx_verbs_conn *c,
						 const struct ibv_wc *wc)
{
	struct rdmx_verbs_ring *r = &c->rq;
	struct rdmx_verbs_rec rec;

	if (wc->wr_id & RDMX_VERBS_SRQ_TAG)
		return rdmx_verbs_srq_take(c->srq, (uint32_t)wc->wr_id);
	rec = r->rec[r->head];
	r->head = (r->head + 1) % r->size;
	r->count--;
	r->signaled--;
	return rec;
}

static void rdmx_verbs_complete_recv(struct rdmx_verbs_conn *c,
				     const struct ibv_wc *wc)
{
	struct rdmx_verbs_rec rec = rdmx_verbs_recv_rec(c, wc);
	struct rdmx_completion out = { .wr_id = rec.wr_id,
				       .conn = &c->base,
				       .opcode = rec.opcode,
				       .byte_len = wc->byte_len };

	out.status = rdmx_verbs_status(c, wc, true, rec.opcode);
	rdmx_verbs_failed(c, wc, out.status);
	if (!out.status && wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM)
		out.opcode = RDMX_OP_RECV_IMM;
	if (wc->wc_flags & IBV_WC_WITH_IMM)
		out.imm = ntohl(wc->imm_data);
	if (out.status && out.status != RDMX_ERR_LOCAL_LENGTH)
		out.byte_len = 0;
	rdmx_cq_push(c->base.cq, &out);
}

/*
 * Send queue completions, given to the cq in posting order. An iWARP NIC
 * completes a WRITE once sent, so it may report it before a READ posted
 * earlier: a record waits, done, until those before it are. Unsignaled
 * records before a reported one were sent, so they are done too (READs
 * and atomics, which finish only when answered, are always signaled).
 */
static void rdmx_verbs_complete_send(struct rdmx_verbs_conn *c,
				     const struct ibv_wc *wc)
{
	struct rdmx_verbs_ring *r = &c->sq;
	uint32_t slot = (uint32_t)wc->wr_id;
	struct rdmx_verbs_rec *rec = &r->rec[slot];

	rec->status = rdmx_verbs_status(c, wc, false, rec->opcode);
	rec->done = true;
	rdmx_verbs_failed(c, wc, rec->status);
	for (uint32_t i = r->head; i != slot; i = (i + 1) % r->size)
		if (!r->rec[i].signaled)
			r->rec[i].done = true;
	c->busy_since = rdmx_now_us();
	while (r->count && r->rec[r->head].done) {
		struct rdmx_verbs_rec done = r->rec[r->head];
		struct rdmx_completion out = { .wr_id = done.wr_id,
					       .conn = &c->base,
					       .status = done.status,
					       .opcode = done.opcode };

		r->rec[r->head].done = false;
		r->head = (r->head + 1) % r->size;
		r->count--;
		r->signaled -= done.signaled;
		if (done.internal) { /* a credit update of ours */
			rdmx_debug("verbs: credit update to %s done: %s",
				   c->base.info.peer_addr,
				   rdmx_strerror(done.status));
			c->credit_busy = false;
			continue;
		}
		if (!done.status && !done.report)
			continue;
		out.byte_len = done.status ? 0 : done.len;
		rdmx_cq_push(c->base.cq, &out);
	}
}

int rdmx_verbs_poll_conn(struct rdmx_verbs_conn *c)
{
	struct ibv_wc wc[16];
	int n, total = 0;

	do {
		n = ibv_poll_cq(c->cq, 16, wc);
		for (int i = 0; i < n; i++) {
			if (c->sw_flushed &&
			    !(wc[i].wr_id & RDMX_VERBS_SRQ_TAG))
				continue; /* completed already, by us */
			if (wc[i].wr_id &
			    (RDMX_VERBS_RQ_TAG | RDMX_VERBS_SRQ_TAG))
				rdmx_verbs_complete_recv(c, &wc[i]);
			else
				rdmx_verbs_complete_send(c, &wc[i]);
		}
		total += n > 0 ? n : 0;
	} while (n == 16);
	if (n < 0)
		rdmx_error("verbs: ibv_poll_cq: %d", n);
	if (c->dead && !c->sq.count && c->pend_head) /* in posting order */
		rdmx_verbs_flush_pending(c, c->flush_status);
	rdmx_verbs_kick(c);
	return total;
}

void rdmx_verbs_flush_sw(struct rdmx_verbs_conn *c)
{
	struct rdmx_verbs_ring *r = &c->sq;
	struct rdmx_completion out = { .conn = &c->base };

	if (c->sw_flushed)
		return;
	c->sw_flushed = true;
	if (c->sq.signaled || c->rq.count)
		rdmx_info("verbs: %s left %u send and %u receive requests to "
			  "%s unflushed %llu ms after the connection ended; "
			  "completing them with \"%s\"",
			  c->d->name, c->sq.signaled, c->rq.count,
			  c->base.info.peer_addr,
			  (unsigned long long)(rdmx_now_us() - c->dead_since) /
				  1000,
			  rdmx_strerror(c->flush_status));
	/*
	 * In posting order, as the device would have. An unsignaled request
	 * has no completion to give: the device reports it only if it fails,
	 * and here nobody knows whether it did.
	 */
	for (; r->count; r->head = (r->head + 1) % r->size, r->count--) {
		struct rdmx_verbs_rec *rec = &r->rec[r->head];

		if (!rec->signaled)
			continue;
		r->signaled--;
		if (rec->internal) {
			c->credit_busy = false;
			continue;
		}
		out.status = rec->done ? rec->status : c->flush_status;
		rec->done = false;
		if (!out.status && !rec->report)
			continue;
		out.wr_id = rec->wr_id;
		out.opcode = rec->opcode;
		out.byte_len = out.status ? 0 : rec->len;
		rdmx_cq_push(c->base.cq, &out);
	}
	rdmx_verbs_flush_pending(c, c->flush_status); /* posted after those */
	r = &c->rq;
	out.status = c->flush_status;
	out.byte_len = 0;
	for (; r->count; r->head = (r->head + 1) % r->size, r->count--) {
		out.wr_id = r->rec[r->head].wr_id;
		out.opcode = r->rec[r->head].opcode;
		rdmx_cq_push(c->base.cq, &out);
	}
	r->signaled = 0;
}

/* How often a connection's heartbeat goes out (verbs_proto.h). */
static int rdmx_verbs_ping_ms(const struct rdmx_verbs_ctx *v)
{
	return (int)(v->ctx->cfg.tcp_user_timeout_ms / 4);
}

/*
 * Requests wait on the peer's NIC; on a device that drops a request
 * without a NAK (rxe, when the target deregisters during a READ) they
 * would wait forever. Connection lock held.
 */
void rdmx_verbs_watchdog(struct rdmx_verbs_conn *c, uint64_t now)
{
	uint64_t limit = c->vctx->ctx->cfg.verbs_request_timeout_ms * 1000;
	int qp_event = atomic_exchange(&c->qp_event, 0);

	if (qp_event && !c->dead) {
		rdmx_info("verbs: %s reports %s on the connection to %s",
			  c->d->name,
			  ibv_event_type_str((enum ibv_event_type)qp_event),
			  c->base.info.peer_addr);
		rdmx_verbs_conn_fail(c, RDMX_ERR_CONN_LOST);
		rdmx_verbs_poll_conn(c);
	}
	if (c->dead) {
		if (now - c->dead_since >= RDMX_VERBS_FLUSH_GRACE_US)
			rdmx_verbs_flush_sw(c);
		return;
	}
	if (now - c->pinged_us >=
	    (uint64_t)rdmx_verbs_ping_ms(c->vctx) * 1000) {
		uint8_t ping = RDMX_VERBS_PING;

		/* Full or broken: the kernel's bound, or the reader, tells. */
		if (send(c->ctl, &ping, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
			rdmx_debug("verbs: heartbeat to %s: %m",
				   c->base.info.peer_addr);
		c->pinged_us = now;
	}
	if (c->quiet && now - c->quiet_since >= limit) {
		rdmx_error("verbs: %s never said its side of the connection is "
			   "up (%llu ms); failing it (verbs.request_timeout)",
			   c->base.info.peer_addr,
			   (unsigned long long)(now - c->quiet_since) / 1000);
		rdmx_verbs_conn_fail(c, RDMX_ERR_CONN_LOST);
		return;
	}
	if (c->key_asked && now - c->key_asked_us >= limit) {
		rdmx_error("verbs: %s has not told the key of rkey 0x%llx for "
			   "%llu ms (its progress engine is not running?); "
			   "failing the connection (verbs.request_timeout)",
			   c->base.info.peer_addr,
			   (unsigned long long)c->key_asked,
			   (unsigned long long)(now - c->key_asked_us) / 1000);
		rdmx_verbs_conn_fail(c, RDMX_ERR_CONN_LOST);
		return;
	}
	/* Only requests the NIC will report can be overdue. */
	if (!c->sq.signaled || now - c->busy_since < limit)
		return;
	/* A SEND to a srq waits, RNR-retried, until a RECV is posted there. */
	if (c->peer_srq && c->sq.count &&
	    (c->sq.rec[c->sq.head].opcode == RDMX_OP_SEND ||
	     c->sq.rec[c->sq.head].opcode == RDMX_OP_WRITE_IMM)) {
		c->busy_since = now;
		return;
	}
	rdmx_error("verbs: %s completed nothing for %llu ms with %u requests "
		   "outstanding to %s; failing the connection "
		   "(verbs.request_timeout)",
		   c->d->name, (unsigned long long)(now - c->busy_since) / 1000,
		   c->sq.count, c->base.info.peer_addr);
	rdmx_verbs_conn_fail(c, RDMX_ERR_CONN_LOST);
	rdmx_verbs_poll_conn(c);
}

/*
 * The peer asks for our key of an rkey on this connection's device
 * (RDMX_VERBS_KEY_ASK in @m): the registration's, made there now if need
 * be, when the rkey is live and holds the address; else a key that grants
 * nothing. False if the answer could not be sent.
 */
static bool rdmx_verbs_key_answer(struct rdmx_verbs_conn *c, const uint8_t *m)
{
	uint64_t rkey = rdmx_get_be(m + 1, 8), addr = rdmx_get_be(m + 9, 8);
	uint8_t a[RDMX_VERBS_KEY_IS_LEN] = { RDMX_VERBS_KEY_IS };
	enum rdmx_refusal why;
	struct rdmx_mr *mr =
		rdmx_mr_acquire(c->vctx->ctx, rkey, addr, 0, 0, &why);
	struct ibv_mr *imr = mr ? rdmx_verbs_mr_on(c->vctx, c->d, mr) : NULL;

	rdmx_put_be(a + 1, rkey, 8);
	rdmx_put_be(a + 9, imr ? imr->rkey : c->d->refuse_mr->rkey, 4);
	a[13] = imr != NULL;
	rdmx_mr_release(mr);
	rdmx_debug("verbs: %s asked for the key of rkey 0x%llx on %s: %s",
		   c->base.info.peer_addr, (unsigned long long)rkey, c->d->name,
		   imr ? "granted" : "refused");
	return send(c->ctl, a, sizeof(a), MSG_DONTWAIT | MSG_NOSIGNAL) ==
	       (ssize_t)sizeof(a);
}

/*
 * Input on a connection's control socket: the peer's heartbeats, on a
 * quiet one its RDMX_VERBS_UP, which lets it speak, and keys asked and
 * told (verbs_proto.h). False if the socket ended (or said anything
 * else). Connection lock held.
 */
static bool rdmx_verbs_ctl_input(struct rdmx_verbs_conn *c)
{
	uint8_t b[64], *m = c->ctl_in;
	ssize_t n = recv(c->ctl, b, sizeof(b), MSG_DONTWAIT);

	if (n < 0)
		return errno == EAGAIN || errno == EINTR;
	for (ssize_t i = 0; i < n; i++) {
		if (!c->ctl_in_len && b[i] == RDMX_VERBS_PING)
			continue;
		if (!c->ctl_in_len && b[i] == RDMX_VERBS_UP) {
			if (!c->quiet)
				return false;
			c->quiet = false;
			rdmx_verbs_kick(c);
			continue;
		}
		if (!c->ctl_in_len && b[i] != RDMX_VERBS_KEY_ASK &&
		    (b[i] != RDMX_VERBS_KEY_IS || !c->keys))
			return false;
		m[c->ctl_in_len++] = b[i];
		if (c->ctl_in_len < (m[0] == RDMX_VERBS_KEY_ASK
					     ? RDMX_VERBS_KEY_ASK_LEN
					     : RDMX_VERBS_KEY_IS_LEN))
			continue;
		c->ctl_in_len = 0;
		if (m[0] == RDMX_VERBS_KEY_IS)
			rdmx_verbs_key_told(c, rdmx_get_be(m + 1, 8),
					    (uint32_t)rdmx_get_be(m + 9, 4),
					    m[13] == 1);
		else if (!rdmx_verbs_key_answer(c, m))
			return false;
	}
	return n > 0;
}

/* The control socket of @c ended: the peer is gone. Both locks held. */
static void rdmx_verbs_peer_gone(struct rdmx_verbs_ctx *v,
				 struct rdmx_verbs_conn *c)
{
	epoll_ctl(v->epfd, EPOLL_CTL_DEL, c->ctl, NULL);
	if (c->dead)
		return;
	rdmx_info("verbs connection to %s lost (control connection closed)",
		  c->base.info.peer_addr);
	rdmx_verbs_conn_fail(c, RDMX_ERR_CONN_LOST);
}

static bool rdmx_verbs_listed(struct rdmx_verbs_ctx *v,
			      const struct rdmx_verbs_conn *c)
{
	for (struct rdmx_verbs_conn *i = v->conns; i; i = i->next)
		if (i == c)
			return true;
	return false;
}

static bool rdmx_verbs_listed(struct rdmx_verbs_ctx *v,
			      const struct rdmx_verbs_conn *c);

/*
 * Completion events: ack, re-arm, then poll (so nothing slips between).
 * Context lock held. The ack comes first, for a connection being closed
 * too: its ibv_destroy_cq waits for it; and only a connection still in the
 * list (close unlinks it under the same lock) is touched after that.
 */
static void rdmx_verbs_channel(struct rdmx_verbs_ctx *v,
			       struct rdmx_verbs_dev *d)
{
	struct ibv_cq *cq;
	void *cq_ctx;

	while (!ibv_get_cq_event(d->chan, &cq, &cq_ctx)) {
		struct rdmx_verbs_conn *c = cq_ctx;

		ibv_ack_cq_events(cq, 1);
		if (!rdmx_verbs_listed(v, c))
			continue;
		pthread_mutex_lock(&c->lock);
		ibv_req_notify_cq(cq, 0);
		rdmx_verbs_poll_conn(c);
		pthread_mutex_unlock(&c->lock);
	}
}

/* Handle epoll events; the context lock is held. */
static int rdmx_verbs_handle(struct rdmx_verbs_ctx *v,
			     const struct epoll_event *ev, int n)
{
	int handled = 0;

	for (int i = 0; i < n; i++) {
		struct rdmx_verbs_conn *c = ev[i].data.ptr;
		unsigned ndevs = atomic_load(&v->ndevs), k;

		if (!c) /* stop: the thread's business */
			continue;
		/* A device's: its asynchronous events, or its channel. */
		for (k = 0; k < ndevs; k++)
			if (ev[i].data.ptr == v->devs[k] ||
			    ev[i].data.ptr == v->devs[k]->chan)
				break;
		if (k < ndevs && ev[i].data.ptr == v->devs[k]) {
			rdmx_verbs_async(v->devs[k]);
		} else if (k < ndevs) {
			rdmx_verbs_channel(v, v->devs[k]);
		} else if (rdmx_verbs_listed(v, c)) {
			pthread_mutex_lock(&c->lock);
			if (!rdmx_verbs_ctl_input(c))
				rdmx_verbs_peer_gone(v, c);
			rdmx_verbs_poll_conn(c);
			pthread_mutex_unlock(&c->lock);
		}
		handled++;
	}
	return handled;
}

int rdmx_verbs_progress(void *priv, bool spinning)
{
	struct rdmx_verbs_ctx *v = priv;
	struct epoll_event ev[16];
	int n = 0;

	(void)spinning;
	pthread_mutex_lock(&v->lock);
	/* Without the thread, we are the one who watches the sockets. */
	if (!v->thread_running) {
		int e = epoll_wait(v->epfd, ev, 16, 0);

		if (e > 0)
			n += rdmx_verbs_handle(v, ev, e);
	}
	for (struct rdmx_verbs_conn *c = v->conns; c; c = c->next) {
		pthread_mutex_lock(&c->lock);
		n += rdmx_verbs_poll_conn(c);
		if (!v->thread_running)
			rdmx_verbs_watchdog(c, rdmx_now_us());
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&v->lock);
	return n;
}

int rdmx_verbs_progress_fd(void *priv)
{
	return ((struct rdmx_verbs_ctx *)priv)->epfd;
}

/*
 * How long the thread may sleep (context lock held): a credit arrives as a
 * remote write, which raises no event, so while sends wait for one, look
 * every millisecond; while requests are outstanding, keep the watchdog
 * ticking. A post does not wake us, so with connections open we never
 * sleep longer than a heartbeat's interval: the watchdog sends those, and
 * sees work posted meanwhile.
 */
static int rdmx_verbs_sleep_ms(struct rdmx_verbs_ctx *v)
{
	int ms = v->conns ? rdmx_verbs_ping_ms(v) : -1;

	for (struct rdmx_verbs_conn *c = v->conns; c; c = c->next) {
		if (c->npending)
			return 1;
		/* The watchdog; or the device's grace to flush. */
		if (c->sq.signaled && !c->dead)
			ms = 100;
		if (c->dead && !c->sw_flushed &&
		    (c->sq.signaled || c->rq.count))
			ms = 100;
	}
	return ms;
}

void *rdmx_verbs_thread(void *arg)
{
	struct rdmx_verbs_ctx *v = arg;
	struct epoll_event ev[16];
	uint64_t val;
	int n, timeout;

	for (;;) {
		pthread_mutex_lock(&v->lock);
		timeout = rdmx_verbs_sleep_ms(v);
		pthread_mutex_unlock(&v->lock);
		n = epoll_wait(v->epfd, ev, 16, timeout);
		if (n < 0 && errno != EINTR) {
			rdmx_error("verbs progress: epoll_wait: %m");
			return NULL;
		}
		for (int i = 0; i < n; i++)
			if (!ev[i].data.ptr) {
				if (read(v->stop_efd, &val, sizeof(val)) < 0 &&
				    errno != EAGAIN)
					rdmx_debug("verbs: eventfd read: %m");
				if (atomic_load(&v->stopping))
					return NULL;
			}
		pthread_mutex_lock(&v->lock);
		if (n > 0)
			rdmx_verbs_handle(v, ev, n);
		for (struct rdmx_verbs_conn *c = v->conns; c; c = c->next) {
			pthread_mutex_lock(&c->lock);
			if (c->npending)
				rdmx_verbs_kick(c);
			rdmx_verbs_watchdog(c, rdmx_now_us());
			pthread_mutex_unlock(&c->lock);
		}
		pthread_mutex_unlock(&v->lock);
	}
}
