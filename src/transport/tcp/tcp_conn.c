/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp.h"

rdmx_status rdmx_tcp_open(struct rdmx_ctx *ctx, void **priv_p)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0 };
	struct rdmx_tcp_ctx *tctx;
	int rc;

	tctx = calloc(1, sizeof(*tctx));
	if (!tctx)
		return RDMX_ERR_NOMEM;
	tctx->ctx = ctx;
	pthread_mutex_init(&tctx->slots_lock, NULL);
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
	if (ctx->cfg.progress_thread) {
		rc = pthread_create(&tctx->thread, NULL, rdmx_tcp_thread, tctx);
		if (rc) {
			errno = rc;
			rdmx_error("pthread_create for tcp progress: %m");
			goto err_efd;
		}
		tctx->thread_running = true;
	}
	*priv_p = tctx;
	return RDMX_OK;

err_efd:
	close(tctx->stop_efd);
err_epoll:
	close(tctx->epfd);
err_free:
	pthread_mutex_destroy(&tctx->slots_lock);
	free(tctx);
	return RDMX_ERR_SYSTEM;
}

void rdmx_tcp_close(void *priv)
{
	struct rdmx_tcp_ctx *tctx = priv;
	uint64_t one = 1;

	if (tctx->thread_running) {
		if (write(tctx->stop_efd, &one, sizeof(one)) != sizeof(one))
			rdmx_error("cannot stop the tcp progress thread: %m");
		pthread_join(tctx->thread, NULL);
	}
	close(tctx->stop_efd);
	close(tctx->epfd);
	pthread_mutex_destroy(&tctx->slots_lock);
	free(tctx->slots);
	free(tctx->gens);
	free(tctx);
}

/* Give @c a slot and its key. */
static rdmx_status rdmx_tcp_slot_add(struct rdmx_tcp_ctx *tctx,
				     struct rdmx_tcp_conn *c)
{
	uint32_t i, n;

	pthread_mutex_lock(&tctx->slots_lock);
	for (i = 0; i < tctx->nslots && tctx->slots[i]; i++)
		;
	if (i == tctx->nslots) {
		struct rdmx_tcp_conn **slots;
		uint32_t *gens;

		n = tctx->nslots ? tctx->nslots * 2 : 16;
		slots = realloc(tctx->slots, n * sizeof(*slots));
		if (slots)
			tctx->slots = slots;
		gens = slots ? realloc(tctx->gens, n * sizeof(*gens)) : NULL;
		if (!gens) {
			pthread_mutex_unlock(&tctx->slots_lock);
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
	c->key = (uint64_t)++tctx->gens[i] << 32 | (i + 1);
	pthread_mutex_unlock(&tctx->slots_lock);
	return RDMX_OK;
}

static void rdmx_tcp_slot_del(struct rdmx_tcp_ctx *tctx, uint64_t key)
{
	pthread_mutex_lock(&tctx->slots_lock);
	tctx->slots[(uint32_t)key - 1] = NULL;
	pthread_mutex_unlock(&tctx->slots_lock);
}

struct rdmx_tcp_conn *rdmx_tcp_conn_get(struct rdmx_tcp_ctx *tctx, uint64_t key)
{
	uint32_t i = (uint32_t)key - 1;
	struct rdmx_tcp_conn *c = NULL;

	pthread_mutex_lock(&tctx->slots_lock);
	if (i < tctx->nslots && tctx->gens[i] == key >> 32) {
		c = tctx->slots[i];
		if (c)
			atomic_fetch_add(&c->refs, 1);
	}
	pthread_mutex_unlock(&tctx->slots_lock);
	return c;
}

void rdmx_tcp_conn_put(struct rdmx_tcp_conn *c)
{
	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	close(c->fd);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

rdmx_status rdmx_tcp_conn_create(void *priv, int fd,
				 const struct rdmx_conn_attr *attr,
				 struct rdmx_conn **conn_p)
{
	struct rdmx_tcp_ctx *tctx = priv;
	struct epoll_event ev = { .events = EPOLLIN };
	struct rdmx_tcp_conn *c;
	rdmx_status st;

	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return RDMX_ERR_NOMEM;
	}
	rdmx_conn_init(&c->base, tctx->ctx, &rdmx_tcp_ops, attr);
	c->tctx = tctx;
	c->fd = fd;
	atomic_init(&c->refs, 1);
	pthread_mutex_init(&c->lock, NULL);
	st = rdmx_tcp_slot_add(tctx, c);
	if (st)
		goto err_free;
	ev.data.u64 = c->key;
	if (epoll_ctl(tctx->epfd, EPOLL_CTL_ADD, fd, &ev)) {
		rdmx_error("epoll_ctl add fd %d: %m", fd);
		st = RDMX_ERR_SYSTEM;
		goto err_slot;
	}
	*conn_p = &c->base;
	return RDMX_OK;

err_slot:
	rdmx_tcp_slot_del(tctx, c->key);
err_free:
	rdmx_tcp_conn_put(c);
	return st;
}

void rdmx_tcp_complete(struct rdmx_tcp_conn *c, uint64_t wr_id,
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

static void rdmx_tcp_flush_queue(struct rdmx_tcp_conn *c,
				 struct rdmx_tcp_queue *q, rdmx_status st)
{
	struct rdmx_tcp_op *op;

	while ((op = q->head)) {
		q->head = op->next;
		rdmx_tcp_complete(c, op->wr_id, op->opcode, st, 0, 0);
		c->outstanding--;
		op->in_q = false;
		rdmx_tcp_op_drop(op);
	}
	q->tail = NULL;
}

void rdmx_tcp_conn_fail(struct rdmx_tcp_conn *c, rdmx_status st)
{
	struct rdmx_tcp_recv *r;
	struct rdmx_tcp_op *op;

	if (c->dead)
		return;
	c->dead = true;
	/* Oldest first, so completions stay in posting order. */
	rdmx_tcp_flush_queue(c, &c->inflight, st);
	rdmx_tcp_flush_queue(c, &c->sq, st);
	while ((op = c->tx_head)) {
		c->tx_head = op->tx_next;
		op->in_tx = false;
		rdmx_tcp_op_drop(op);
	}
	c->tx_tail = NULL;
	while ((r = c->rq_head)) {
		c->rq_head = r->next;
		rdmx_tcp_complete(c, r->wr_id, RDMX_OP_RECV, st, 0, 0);
		free(r);
	}
	if (c->rx_recv) {
		rdmx_tcp_complete(c, c->rx_recv->wr_id, RDMX_OP_RECV, st, 0, 0);
		free(c->rx_recv);
		c->rx_recv = NULL;
	}
	rdmx_mr_release(c->rx_mr);
	c->rx_mr = NULL;
	c->rq_count = 0;
	epoll_ctl(c->tctx->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	shutdown(c->fd, SHUT_RDWR);
}

void rdmx_tcp_conn_close(struct rdmx_conn *conn)
{
	struct rdmx_tcp_conn *c = to_tcp_conn(conn);

	pthread_mutex_lock(&c->lock);
	rdmx_tcp_conn_fail(c, RDMX_ERR_FLUSHED);
	pthread_mutex_unlock(&c->lock);
	rdmx_tcp_slot_del(c->tctx, c->key);
	rdmx_tcp_conn_put(c);
}
