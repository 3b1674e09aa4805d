// SPDX-License-Identifier: MIT
/*
 * One connection to a memory server: connect, look a region up, then move
 * pages between a registered staging area and the region by READ and
 * WRITE. The explicit calls and the fault handler each own one.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "page.h"

/* A local link's completions, waiting for page_link_poll. */
#define PAGE_LOCAL_WC 1024

struct page_local_wc {
	struct rdmx_completion wc[PAGE_LOCAL_WC];
	int head, count;
};

static double page_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static rdmx_status page_link_stage(struct page_link *l, struct rdmx_ctx *ctx,
				   size_t stage_len)
{
	void *p = mmap(NULL, stage_len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		page_log(RDMX_LOG_ERROR, "mmap of %zu bytes of staging: %m",
			 stage_len);
		return RDMX_ERR_NOMEM;
	}
	l->stage = p;
	l->stage_len = stage_len;
	if (!ctx)
		return RDMX_OK;
	return rdmx_mr_reg(ctx, p, stage_len, RDMX_ACCESS_LOCAL_WRITE,
			   &l->stage_mr);
}

/* Wait for one successful completion of @op (the lookup's SEND or RECV). */
static rdmx_status page_link_expect(struct page_link *l, enum rdmx_opcode op,
				    struct rdmx_completion *wc, double deadline)
{
	while (page_now_ms() < deadline) {
		int n = rdmx_poll(l->cq, wc, 1);

		if (n < 0)
			return n;
		if (n == 0) {
			rdmx_cq_wait(l->cq, 10);
			continue;
		}
		l->outstanding--;
		if (wc->status != RDMX_OK)
			return wc->status;
		if (wc->opcode == op)
			return RDMX_OK;
		/* The SEND's completion may come after the reply. */
		if (op == RDMX_OP_RECV && wc->opcode == RDMX_OP_SEND)
			continue;
		return RDMX_ERR_PROTOCOL;
	}
	return RDMX_ERR_TIMEOUT;
}

static rdmx_status page_link_lookup(struct page_link *l, const char *addr,
				    const char *name, int timeout_ms)
{
	double deadline = page_now_ms() + timeout_ms;
	struct rdmx_sge out = { l->msg, 0, l->msg_mr };
	struct rdmx_sge in = { l->msg + PAGE_MSG, PAGE_MSG, l->msg_mr };
	struct rdmx_completion wc, sent;
	struct page_reply r;
	rdmx_status st;

	out.length = page_lookup_encode(l->msg, name);
	st = rdmx_post_recv(l->conn, &in, 1, 0);
	if (st == RDMX_OK)
		st = rdmx_post_send(l->conn, &out, 0);
	if (st != RDMX_OK)
		return st;
	l->outstanding = 2;
	st = page_link_expect(l, RDMX_OP_RECV, &wc, deadline);
	/* The SEND's completion, when it came after the reply: into its own
	 * record, for wc's byte_len is the reply's (siw, now and then). */
	if (st == RDMX_OK && l->outstanding)
		st = page_link_expect(l, RDMX_OP_SEND, &sent, deadline);
	if (st != RDMX_OK) {
		page_log(RDMX_LOG_ERROR, "lookup of %s at %s: %s", name, addr,
			 rdmx_strerror(st));
		return st;
	}
	if (!page_reply_decode(l->msg + PAGE_MSG, wc.byte_len, &r) ||
	    (r.status == PAGE_REPLY_OK && r.page_size != PAGE_SIZE_BYTES)) {
		char what[128];

		page_reply_explain(l->msg + PAGE_MSG, wc.byte_len, what,
				   sizeof(what));
		page_log(RDMX_LOG_ERROR,
			 "%s does not answer as a memory server of this "
			 "version (%s)",
			 addr, what);
		return RDMX_ERR_PROTOCOL;
	}
	if (r.status == PAGE_REPLY_NOT_FOUND) {
		page_log(RDMX_LOG_ERROR,
			 "the memory server at %s has no region %s", addr,
			 name);
		return RDMX_ERR_NOT_FOUND;
	}
	if (r.status != PAGE_REPLY_OK) {
		page_log(RDMX_LOG_ERROR,
			 "the memory server at %s refused our lookup of %s as "
			 "malformed (its log says why)",
			 addr, name);
		return RDMX_ERR_PROTOCOL;
	}
	l->region = r.region;
	return RDMX_OK;
}

rdmx_status page_link_open(struct page_link *l, struct rdmx_ctx *ctx,
			   const char *addr, const char *name, int timeout_ms,
			   size_t stage_len)
{
	struct rdmx_conn_attr ca = { 0 };
	struct rdmx_conn_info info;
	rdmx_status st;

	memset(l, 0, sizeof(*l));
	st = rdmx_cq_create(ctx, &l->cq);
	if (st != RDMX_OK)
		return st;
	l->msg = aligned_alloc(64, 2 * PAGE_MSG);
	if (!l->msg) {
		st = RDMX_ERR_NOMEM;
		goto err;
	}
	st = rdmx_mr_reg(ctx, l->msg, 2 * PAGE_MSG, RDMX_ACCESS_LOCAL_WRITE,
			 &l->msg_mr);
	if (st == RDMX_OK)
		st = page_link_stage(l, ctx, stage_len);
	if (st != RDMX_OK)
		goto err;
	ca.cq = l->cq;
	st = rdmx_connect(ctx, addr, &ca, timeout_ms, &l->conn);
	if (st != RDMX_OK)
		goto err; /* rdmx_connect said why in a line of its own */
	st = page_link_lookup(l, addr, name, timeout_ms);
	if (st != RDMX_OK)
		goto err;
	rdmx_conn_info(l->conn, &info);
	l->settles = info.flags & RDMX_CONN_COMPLETES_LOCALLY;
	return RDMX_OK;
err:
	page_link_close(l);
	return st;
}

rdmx_status page_link_open_local(struct page_link *l, const uint8_t *src,
				 uint64_t len, size_t stage_len)
{
	memset(l, 0, sizeof(*l));
	l->local = src;
	l->local_len = len;
	l->region.length = len;
	l->msg = calloc(1, sizeof(struct page_local_wc));
	if (!l->msg)
		return RDMX_ERR_NOMEM;
	return page_link_stage(l, NULL, stage_len);
}

void page_link_close(struct page_link *l)
{
	/* The connection first: its flushed work completes into the cq. */
	rdmx_conn_close(l->conn);
	l->conn = NULL;
	rdmx_mr_dereg(l->stage_mr);
	rdmx_mr_dereg(l->msg_mr);
	rdmx_cq_destroy(l->cq);
	if (l->stage)
		munmap(l->stage, l->stage_len);
	free(l->msg);
	memset(l, 0, sizeof(*l));
}

void page_link_fail(struct page_link *l, rdmx_status st, const char *why)
{
	if (l->dead == RDMX_OK)
		page_log(RDMX_LOG_ERROR, "memory server lost: %s (%s)", why,
			 rdmx_strerror(st));
	l->dead = RDMX_ERR_CONN_LOST;
	rdmx_conn_close(l->conn);
	l->conn = NULL;
}

static rdmx_status page_link_local(struct page_link *l, enum rdmx_opcode op,
				   uint64_t wr_id, size_t stage_off,
				   uint64_t off, uint32_t len)
{
	struct page_local_wc *q = (struct page_local_wc *)l->msg;
	struct rdmx_completion *wc;

	if (q->count == PAGE_LOCAL_WC)
		return RDMX_ERR_AGAIN;
	if (op == RDMX_OP_READ)
		rdmx_memcpy(l->stage + stage_off, l->local + off, len);
	else
		rdmx_memcpy((uint8_t *)l->local + off, l->stage + stage_off,
			    len);
	wc = &q->wc[(q->head + q->count++) % PAGE_LOCAL_WC];
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = wr_id;
	wc->opcode = op;
	return RDMX_OK;
}

rdmx_status page_link_post(struct page_link *l, enum rdmx_opcode op,
			   uint64_t wr_id, size_t stage_off, uint64_t off,
			   uint32_t len)
{
	struct rdmx_sge sg = { l->stage + stage_off, len, l->stage_mr };
	rdmx_status st;

	if (l->dead != RDMX_OK)
		return l->dead;
	if (l->local)
		st = page_link_local(l, op, wr_id, stage_off, off, len);
	else if (op == RDMX_OP_READ)
		st = rdmx_post_read(l->conn, &sg, l->region.addr + off,
				    l->region.rkey, wr_id);
	else
		st = rdmx_post_write(l->conn, &sg, l->region.addr + off,
				     l->region.rkey, wr_id);
	if (st == RDMX_OK)
		l->outstanding++;
	return st;
}

rdmx_status page_link_post_settle(struct page_link *l, uint64_t wr_id)
{
	/* Into the lookup's buffer: registered, and unused since. */
	struct rdmx_sge sg = { l->msg, 8, l->msg_mr };
	rdmx_status st;

	if (l->dead != RDMX_OK)
		return l->dead;
	st = rdmx_post_read(l->conn, &sg, l->region.addr, l->region.rkey,
			    wr_id);
	if (st == RDMX_OK)
		l->outstanding++;
	return st;
}

rdmx_status page_link_post_wait(struct page_link *l, const struct page_xfer *x,
				rdmx_status (*room)(void *arg), void *arg)
{
	for (;;) {
		rdmx_status st = x->settle ? page_link_post_settle(l, x->wr_id)
					   : page_link_post(l, x->op, x->wr_id,
							    x->stage_off,
							    x->off, x->len);

		if (st != RDMX_ERR_AGAIN || l->outstanding <= 0)
			return st;
		st = room(arg);
		if (st != RDMX_OK)
			return st;
	}
}

int page_link_poll(struct page_link *l, struct rdmx_completion *wc, int max)
{
	struct page_local_wc *q = (struct page_local_wc *)l->msg;
	int n = 0;

	if (!l->local) {
		if (!l->cq)
			return 0;
		n = rdmx_poll(l->cq, wc, max);
	} else {
		for (; n < max && q->count; n++, q->count--) {
			wc[n] = q->wc[q->head];
			q->head = (q->head + 1) % PAGE_LOCAL_WC;
		}
	}
	if (n > 0)
		l->outstanding -= n;
	return n;
}
