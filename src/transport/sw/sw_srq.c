/* SPDX-License-Identifier: MIT */
/*
 * Shared receive queues over the software engine: credits on a shared pool.
 *
 * A peer may send a SEND or WRITE_IMM only on a credit, and a credit is a
 * RECV set aside for it: reserved <= count always, so a credit is never
 * refused. Which peer gets the spare RECVs (count - reserved) is decided in
 * rdmx_sw_srq_balance(), in this order:
 *   1. peers that ASKed, one credit each in turn, from a rotating cursor;
 *   2. if some still wait and nothing is spare, REVOKE from the peers that
 *      hold credits and ask for none (they RETURN what they did not use);
 *   3. else one standing credit to each peer that holds none, so a
 *      request/response peer never waits for an ASK round trip;
 *   4. and when a peer is left with none because nothing is spare, REVOKE
 *      from the one that holds the most past its share of the pool (a
 *      burst's credits, kept while nobody asks), one at a time.
 * Decisions are made under the srq lock and only recorded in each
 * connection (srq_pending, srq_revoke); the connection sends them under its
 * own lock. A connection that is not the caller's is "kicked" after the
 * caller drops its connection lock (rdmx_sw_unlock): two connection locks
 * are never held at once.
 * Balancing walks the links only while some want credits or hold none
 * (the tallies wanting and bare). While no peer asks, a taken RECV's
 * credit goes straight back to its connection (rdmx_sw_srq_take), and a
 * RECV posted finds nothing to do: every RECV taken or posted had walked all
 * links, a quarter of an rdmx kv server's time with 32 clients.
 */
#include <stdlib.h>

#include "sw.h"

#define RDMX_SW_KICK_BATCH 16

static uint32_t rdmx_sw_srq_spare(const struct rdmx_sw_srq *s)
{
	return s->count - s->reserved;
}

/*
 * Count @l into the srq's tallies (@sign 1) or out of them (-1): around
 * every change of its srq_want, srq_held or srq_revoking.
 */
static void rdmx_sw_srq_tally(struct rdmx_sw_srq *s,
			      const struct rdmx_sw_conn *l, int sign)
{
	s->wanting += (uint32_t)(sign * (l->srq_want != 0));
	s->bare += (uint32_t)(sign * (!l->srq_held && !l->srq_revoking));
	s->revoking += (uint32_t)(sign * l->srq_revoking);
}

static void rdmx_sw_srq_kick(struct rdmx_sw_srq *s, struct rdmx_sw_conn *l)
{
	l->srq_kick = true;
	atomic_store_explicit(&l->srq_due, true, memory_order_relaxed);
	atomic_store(&s->kick, true);
}

/* One credit to @l; with @kick, after unlocking (not for the connection
 * whose lock the caller holds and sends from). */
static void rdmx_sw_srq_grant(struct rdmx_sw_srq *s, struct rdmx_sw_conn *l,
			      bool kick)
{
	rdmx_sw_srq_tally(s, l, -1);
	l->srq_pending++;
	l->srq_held++;
	rdmx_sw_srq_tally(s, l, 1);
	s->reserved++;
	if (kick)
		rdmx_sw_srq_kick(s, l);
	else
		atomic_store_explicit(&l->srq_due, true, memory_order_relaxed);
}

/* Ask @l to give back the credits it holds and does not use. */
static void rdmx_sw_srq_reclaim(struct rdmx_sw_srq *s, struct rdmx_sw_conn *l)
{
	rdmx_sw_srq_tally(s, l, -1);
	l->srq_revoke = l->srq_revoking = true;
	rdmx_sw_srq_tally(s, l, 1);
	rdmx_sw_srq_kick(s, l);
}

/* The link after @l, wrapping around. */
static struct rdmx_sw_conn *rdmx_sw_srq_next(const struct rdmx_sw_srq *s,
					     const struct rdmx_sw_conn *l)
{
	return l->srq_next ? l->srq_next : s->links;
}

/* Step 1: grant to waiting peers, one each per round. True if any waits. */
static bool rdmx_sw_srq_serve_demand(struct rdmx_sw_srq *s)
{
	struct rdmx_sw_conn *l, *start;
	bool served = true;

	/* A peer we revoke from is served once its RETURN is in. */
	while (served && rdmx_sw_srq_spare(s)) {
		served = false;
		l = start = s->cursor ? s->cursor : s->links;
		do {
			s->visits++;
			if (l->srq_want && !l->srq_revoking &&
			    rdmx_sw_srq_spare(s)) {
				rdmx_sw_srq_grant(s, l, true);
				rdmx_sw_srq_tally(s, l, -1);
				l->srq_want--;
				rdmx_sw_srq_tally(s, l, 1);
				s->cursor = rdmx_sw_srq_next(s, l);
				served = true;
			}
			l = rdmx_sw_srq_next(s, l);
		} while (l != start);
	}
	return s->wanting != 0;
}

static void rdmx_sw_srq_balance(struct rdmx_sw_srq *s)
{
	struct rdmx_sw_conn *l;

	if (!s->links)
		return;
	if (s->wanting && rdmx_sw_srq_serve_demand(s)) {
		/* Step 2: someone waits and nothing is spare. */
		for (l = s->links; l; l = l->srq_next) {
			s->visits++;
			if (l->srq_held && !l->srq_want && !l->srq_revoking)
				rdmx_sw_srq_reclaim(s, l);
		}
	} else {
		/* Step 3: a standing credit for each idle peer. */
		for (l = s->links; l && s->bare && rdmx_sw_srq_spare(s);
		     l = l->srq_next) {
			s->visits++;
			if (!l->srq_held && !l->srq_revoking)
				rdmx_sw_srq_grant(s, l, true);
		}
	}
}

/*
 * Step 4: a peer was left holding no credit because nothing is spare. If
 * another holds more than its share of the RECVs posted, revoke from the
 * one that holds the most: after a burst, a peer keeps the credits it was
 * granted while nobody asks, and each RECV taken from the others then
 * left them bare until it was posted again, every post walking the links
 * to find them (regress/14-srq-steady-traffic). One revoke at a time: a
 * pool that is short for everyone finds no such peer.
 */
static void rdmx_sw_srq_reclaim_hoard(struct rdmx_sw_srq *s)
{
	uint32_t share = s->count / s->nlinks;
	struct rdmx_sw_conn *most = NULL;

	if (s->revoking)
		return;
	for (struct rdmx_sw_conn *l = s->links; l; l = l->srq_next) {
		s->visits++;
		if (!l->srq_want && !l->srq_revoking && l->srq_held > share &&
		    (!most || l->srq_held > most->srq_held))
			most = l;
	}
	if (most)
		rdmx_sw_srq_reclaim(s, most);
}

/*
 * Send what balancing left due on the srq's connections. Called with no
 * connection lock held.
 */
static void rdmx_sw_srq_kicks(struct rdmx_sw_srq *s)
{
	struct rdmx_sw_conn *batch[RDMX_SW_KICK_BATCH];
	int n;

	do {
		n = 0;
		pthread_mutex_lock(&s->lock);
		atomic_store(&s->kick, false);
		for (struct rdmx_sw_conn *l = s->links;
		     l && n < RDMX_SW_KICK_BATCH; l = l->srq_next) {
			s->visits++;
			if (!l->srq_kick)
				continue;
			l->srq_kick = false;
			atomic_fetch_add(&l->refs, 1);
			batch[n++] = l;
		}
		if (n == RDMX_SW_KICK_BATCH)
			atomic_store(&s->kick, true);
		pthread_mutex_unlock(&s->lock);
		for (int i = 0; i < n; i++) {
			rdmx_spin_lock(&batch[i]->lock);
			rdmx_sw_tx_progress(batch[i]);
			rdmx_spin_unlock(&batch[i]->lock);
			rdmx_sw_conn_put(batch[i]);
		}
	} while (atomic_load(&s->kick));
}

void rdmx_sw_unlock(struct rdmx_sw_conn *c)
{
	struct rdmx_sw_srq *s = c->srq;

	rdmx_spin_unlock(&c->lock);
	if (s && atomic_load(&s->kick))
		rdmx_sw_srq_kicks(s);
}

void rdmx_sw_srq_attach(struct rdmx_sw_conn *c)
{
	struct rdmx_sw_srq *s = c->base.srq->tp;
	struct rdmx_sw_hdr h = { .type = RDMX_SW_CREDIT,
				 .op = RDMX_SW_CREDIT_SHARED };

	atomic_fetch_add(&s->refs, 1);
	pthread_mutex_lock(&s->lock);
	c->srq = s;
	c->srq_next = s->links;
	s->links = c;
	s->nlinks++;
	rdmx_sw_srq_tally(s, c, 1);
	rdmx_sw_srq_balance(s);
	c->srq_kick = false; /* sent below */
	pthread_mutex_unlock(&s->lock);
	/* First on the wire, so the peer knows before any credit. */
	if (!rdmx_sw_answer(c, &h, NULL, NULL))
		rdmx_sw_tx_progress(c);
}

void rdmx_sw_srq_detach(struct rdmx_sw_conn *c)
{
	struct rdmx_sw_srq *s = c->srq;
	struct rdmx_sw_conn **pp;

	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	for (pp = &s->links; *pp != c; pp = &(*pp)->srq_next)
		;
	*pp = c->srq_next;
	s->nlinks--;
	if (s->cursor == c)
		s->cursor = NULL;
	rdmx_sw_srq_tally(s, c, -1);
	s->reserved -= c->srq_held;
	c->srq_held = c->srq_want = c->srq_pending = 0;
	c->srq_kick = c->srq_revoke = false;
	atomic_store_explicit(&c->srq_due, false, memory_order_relaxed);
	rdmx_sw_srq_balance(s);
	pthread_mutex_unlock(&s->lock);
	/* c->srq stays: rdmx_sw_unlock still sends the others' grants. */
}

bool rdmx_sw_srq_ready(struct rdmx_sw_conn *c)
{
	bool ready;

	pthread_mutex_lock(&c->srq->lock);
	ready = c->srq_held - c->srq_pending > 0;
	pthread_mutex_unlock(&c->srq->lock);
	return ready;
}

struct rdmx_sw_recv *rdmx_sw_srq_take(struct rdmx_sw_conn *c)
{
	struct rdmx_sw_srq *s = c->srq;
	struct rdmx_sw_recv *r = NULL;

	pthread_mutex_lock(&s->lock);
	rdmx_sw_cache_move(&s->recvs, &c->srq_spent);
	if (c->srq_held - c->srq_pending > 0) {
		r = s->head;
		s->head = r->next;
		if (!s->head)
			s->tail = NULL;
		s->count--;
		s->reserved--;
		rdmx_sw_srq_tally(s, c, -1);
		c->srq_held--;
		rdmx_sw_srq_tally(s, c, 1);
		/*
		 * The credit it spent goes back to it while nobody waits:
		 * a peer that keeps k requests in flight keeps k credits,
		 * where asking each time cost every batch of requests a
		 * round trip (rdmx kv over tcp, one client, pipeline 16:
		 * each request waited for a grant). Balancing takes back
		 * what it does not use once others ask. And then it has
		 * no link to look for. No kick: the input being served
		 * ends in a transmit of @c (held for its answer to carry,
		 * when the caller spins), not in a frame of its own and a
		 * walk for the kicked.
		 */
		if (!s->wanting && !c->srq_revoking && rdmx_sw_srq_spare(s))
			rdmx_sw_srq_grant(s, c, false);
		else if (!c->srq_held && !rdmx_sw_srq_spare(s))
			rdmx_sw_srq_reclaim_hoard(s);
		rdmx_sw_srq_balance(s);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* @want, less what would take @c past conn.max_peer_requests held. */
static uint64_t rdmx_sw_srq_cap(const struct rdmx_sw_conn *c, uint64_t want)
{
	uint64_t max = c->base.ctx->cfg.conn_max_peer_requests;
	uint64_t room = c->srq_held < max ? max - c->srq_held : 0;

	return want < room ? want : room;
}

void rdmx_sw_srq_credit(struct rdmx_sw_conn *c, const struct rdmx_sw_hdr *h)
{
	struct rdmx_sw_srq *s = c->srq;
	uint64_t on_way, level, want;

	if (!s) {
		rdmx_peer_error(
			"%s connection to %s: credit %s for a connection "
			"without a srq; ignored",
			c->base.ops->name, c->base.info.peer_addr,
			h->op == RDMX_SW_CREDIT_ASK ? "request" : "return");
		return;
	}
	pthread_mutex_lock(&s->lock);
	if (h->op == RDMX_SW_CREDIT_ASK) {
		/*
		 * Grants the peer had not seen when it asked, and those
		 * decided but not sent: counting either twice would leave a
		 * want that no request has, and a peer that wants is never
		 * revoked from.
		 */
		on_way = c->granted_total - h->arg1 + c->grant + c->srq_pending;
		want = h->arg0 > on_way ? h->arg0 - on_way : 0;
		/*
		 * But a peer whose requests were all taken here before its
		 * ASK, each giving its credit back (rdmx_sw_srq_take), had
		 * them in flight with those waiting: it keeps that many at
		 * once, and what it holds (srq_held, those given back
		 * included) is short of that. Netted out, an rdmx kv client
		 * sending 16 at a time held 15 for good, and the last of
		 * every batch waited for a credit given back. A peer that
		 * sends its next request before its last is answered has
		 * it in flight too; one that waits for its answers (seq 0,
		 * as from senders before this field) keeps what it has.
		 */
		/* Wrapped (a hostile sum), it is below arg0; capped below. */
		level = h->seq + h->arg0;
		if (level > c->srq_held && level - c->srq_held > want)
			want = level - c->srq_held;
		rdmx_sw_srq_tally(s, c, -1);
		/*
		 * Credits past the requests it may have outstanding here are
		 * of no use to an honest peer: a want beyond them would only
		 * hoard the pool (a peer that wants is never revoked from).
		 */
		c->srq_want = (uint32_t)rdmx_sw_srq_cap(c, want);
		rdmx_sw_srq_tally(s, c, 1);
	} else if (h->arg0 > c->srq_held - c->srq_pending) {
		pthread_mutex_unlock(&s->lock);
		rdmx_sw_conn_fail(c, RDMX_ERR_CONN_LOST);
		rdmx_peer_error(
			"%s connection to %s returned %llu credits it did "
			"not hold; closed",
			c->base.ops->name, c->base.info.peer_addr,
			(unsigned long long)h->arg0);
		return;
	} else {
		rdmx_sw_srq_tally(s, c, -1);
		c->srq_held -= (uint32_t)h->arg0;
		s->reserved -= (uint32_t)h->arg0;
		c->srq_revoking = false;
		rdmx_sw_srq_tally(s, c, 1);
	}
	rdmx_sw_srq_balance(s);
	pthread_mutex_unlock(&s->lock);
}

void rdmx_sw_srq_tx(struct rdmx_sw_conn *c)
{
	struct rdmx_sw_srq *s = c->srq;
	struct rdmx_sw_hdr h = { .type = RDMX_SW_CREDIT,
				 .op = RDMX_SW_CREDIT_REVOKE };
	bool revoke;

	/* Nothing decided for it: no lock (a decision racing this sets
	 * the flag, and its kick brings us back). */
	if (!atomic_load_explicit(&c->srq_due, memory_order_relaxed))
		return;
	pthread_mutex_lock(&s->lock);
	c->grant += c->srq_pending;
	c->srq_pending = 0;
	revoke = c->srq_revoke;
	c->srq_kick = c->srq_revoke = false;
	atomic_store_explicit(&c->srq_due, false, memory_order_relaxed);
	pthread_mutex_unlock(&s->lock);
	if (revoke)
		rdmx_sw_answer(c, &h, NULL, NULL);
}

/* ---- the srq ops ----------------------------------------------------------
 */

/* Every live srq of the process, for rdmx_sw_srq_revoke. */
static pthread_mutex_t rdmx_sw_srqs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdmx_sw_srq *rdmx_sw_srqs;

static void rdmx_sw_srq_list(struct rdmx_sw_srq *s, bool add)
{
	struct rdmx_sw_srq **pp;

	pthread_mutex_lock(&rdmx_sw_srqs_lock);
	if (add) {
		s->all_next = rdmx_sw_srqs;
		rdmx_sw_srqs = s;
	} else {
		for (pp = &rdmx_sw_srqs; *pp != s; pp = &(*pp)->all_next)
			;
		*pp = s->all_next;
	}
	pthread_mutex_unlock(&rdmx_sw_srqs_lock);
}

void rdmx_sw_srq_revoke(const struct rdmx_mr *mr)
{
	pthread_mutex_lock(&rdmx_sw_srqs_lock);
	for (struct rdmx_sw_srq *s = rdmx_sw_srqs; s; s = s->all_next) {
		if (s->srq->ctx != mr->ctx)
			continue;
		pthread_mutex_lock(&s->lock);
		for (struct rdmx_sw_recv *r = s->head; r; r = r->next)
			r->revoked |= rdmx_sw_uses(r->use, r->niov, mr);
		pthread_mutex_unlock(&s->lock);
	}
	pthread_mutex_unlock(&rdmx_sw_srqs_lock);
}

static rdmx_status rdmx_sw_srq_create(struct rdmx_srq *srq)
{
	struct rdmx_sw_srq *s = calloc(1, sizeof(*s));

	if (!s)
		return RDMX_ERR_NOMEM;
	s->srq = srq;
	s->recvs.max = srq->max_wr;
	pthread_mutex_init(&s->lock, NULL);
	atomic_init(&s->refs, 1);
	srq->tp = s;
	rdmx_sw_srq_list(s, true);
	return RDMX_OK;
}

void rdmx_sw_srq_put(struct rdmx_sw_srq *s)
{
	if (atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	rdmx_sw_cache_free(&s->recvs);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static void rdmx_sw_srq_destroy(struct rdmx_srq *srq)
{
	struct rdmx_sw_srq *s = srq->tp;
	struct rdmx_sw_recv *r;

	rdmx_sw_srq_list(s, false);
	while ((r = s->head)) {
		struct rdmx_completion wc = { .wr_id = r->wr_id,
					      .status = RDMX_ERR_FLUSHED,
					      .opcode = RDMX_OP_RECV };

		s->head = r->next;
		rdmx_cq_push(srq->cq, &wc);
		free(r);
	}
	s->tail = NULL;
	s->srq = NULL;
	rdmx_sw_srq_put(s);
}

static rdmx_status rdmx_sw_srq_post_recv(struct rdmx_srq *srq,
					 const struct rdmx_sge *sg, int num_sge,
					 uint64_t wr_id)
{
	struct rdmx_sw_srq *s = srq->tp;
	struct rdmx_sw_recv *r;
	bool kick;

	pthread_mutex_lock(&s->lock);
	if (s->count >= srq->max_wr) {
		pthread_mutex_unlock(&s->lock);
		return RDMX_ERR_AGAIN;
	}
	r = rdmx_sw_cache_get(&s->recvs, sizeof(*r), RDMX_SW_RECV_ZEROED);
	if (!r) {
		pthread_mutex_unlock(&s->lock);
		return RDMX_ERR_NOMEM;
	}
	rdmx_sw_recv_fill(r, sg, num_sge, wr_id);
	if (s->tail)
		s->tail->next = r;
	else
		s->head = r;
	s->tail = r;
	s->count++;
	rdmx_sw_srq_balance(s);
	kick = atomic_load(&s->kick);
	pthread_mutex_unlock(&s->lock);
	if (kick)
		rdmx_sw_srq_kicks(s);
	return RDMX_OK;
}

const struct rdmx_srq_ops rdmx_sw_srq_ops = {
	.name = "software (tcp, shm)",
	.create = rdmx_sw_srq_create,
	.destroy = rdmx_sw_srq_destroy,
	.post_recv = rdmx_sw_srq_post_recv,
};
