/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core.h"
#include "mem.h"
#include "tsan.h"

#define RDMX_CQ_INITIAL 256

/*
 * The owner's lane. A completion queue is usually polled by one thread,
 * and with shm's one-sided requests that thread makes most completions
 * itself, inside rdmx_post: a 4 KiB READ is a copy of ~20 ns, and the
 * ring's lock cost ~10 ns more, an atomic exchange on each side (push,
 * then take) that waits for the copy's stores to drain. So the first
 * thread to poll a cq owns a small lane of it. A completion that thread
 * makes while the ring is empty goes into the lane, and its polls take
 * from the lane first, with no atomic read-modify-write on either side.
 *
 * Order: a completion of a connection is pushed under that connection's
 * lock, so one pushed to the ring before is seen there (count != 0) by a
 * later push of the same connection, which then goes to the ring too.
 * Lane entries are therefore older than every ring entry, and a poll
 * takes them first.
 *
 * The lane closes for good (rdmx_cq_share) when a second thread polls or
 * waits, when a thread sleeps in rdmx_cq_wait, and when rdmx_cq_fd hands
 * out the fd: sleepers are woken by the ring's eventfd, which the lane
 * does not signal. The closer holds the lock, marks the cq shared, issues
 * rdmx_membarrier_private (the owner's side has only a compiler barrier,
 * as the shm rings' waiters do with the global one), waits for the owner
 * to be out, and moves the lane to the front of the ring. Both are in
 * this process: the private barrier interrupts only its CPUs. Without
 * membarrier, and under TSan (which cannot see it), no thread owns a cq.
 */
#define RDMX_CQ_SHARED ((uintptr_t)1)

static _Thread_local RDMX_TLS_FAST char rdmx_cq_token;

static uintptr_t rdmx_cq_me(void)
{
	return (uintptr_t)&rdmx_cq_token;
}

/*
 * count changes under cq->lock, relaxed; the owner reads it without the
 * lock (a push of its own), where a hint is all it needs.
 */
static uint32_t rdmx_cq_count(const struct rdmx_cq *cq)
{
	return atomic_load_explicit(&cq->count, memory_order_relaxed);
}

static void rdmx_cq_count_add(struct rdmx_cq *cq, int delta)
{
	atomic_store_explicit(&cq->count, rdmx_cq_count(cq) + (unsigned)delta,
			      memory_order_relaxed);
}

static bool rdmx_cq_owned_by_me(const struct rdmx_cq *cq)
{
	return atomic_load_explicit(&cq->owner, memory_order_relaxed) ==
	       rdmx_cq_me();
}

/* The owner steps into its lane: false once the lane has closed. */
static bool rdmx_cq_enter(struct rdmx_cq *cq)
{
	atomic_store_explicit(&cq->owner_in, true, memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst); /* the closer fences */
	if (rdmx_cq_owned_by_me(cq))
		return true;
	atomic_store_explicit(&cq->owner_in, false, memory_order_release);
	return false;
}

static void rdmx_cq_leave(struct rdmx_cq *cq)
{
	atomic_store_explicit(&cq->owner_in, false, memory_order_release);
}

rdmx_status rdmx_cq_create(struct rdmx_ctx *ctx, struct rdmx_cq **cq_p)
{
	struct rdmx_cq *cq;

	if (!ctx || !cq_p)
		return rdmx_invalid("rdmx_cq_create", "NULL %s",
				    !ctx ? "context" : "output pointer");
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return RDMX_ERR_NOMEM;
	cq->ring = calloc(RDMX_CQ_INITIAL, sizeof(*cq->ring));
	if (!cq->ring)
		goto err_free;
	cq->cap = RDMX_CQ_INITIAL;
	cq->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (cq->efd < 0) {
		rdmx_error("eventfd: %m");
		goto err_ring;
	}
	cq->wfd = -1;
	cq->ctx = ctx;
	rdmx_ctx_child(ctx, &ctx->ncqs, 1);
	*cq_p = cq;
	return RDMX_OK;

err_ring:
	free(cq->ring);
err_free:
	free(cq);
	return RDMX_ERR_NOMEM;
}

/*
 * Closed connections. A completion names its connection (wc.conn), and
 * its taker compares that and asks rdmx_conn_user_ctx of it after the
 * take, though the connection may have been closed meanwhile: the kv
 * server closes a client whose requests are still queued. Freed at its
 * close, the connection's memory went to the next one accepted, whose
 * requests the server then took for the closed one's and dropped (a new
 * client's hello, unanswered). So rdmx_conn_close leaves it here.
 * Everything naming it was pushed before its close returned, so once a
 * take leaves the cq empty, all of it has been given out; the take after
 * that one, which the caller makes once done with its batch, frees it.
 * A connection no completion ever named is freed at its close: a client
 * that connects and closes in a loop, never polling, would otherwise
 * grow without end (test_conn_churn_bounded). A cq never emptied keeps
 * the others until it is; rdmx_cq_destroy frees the rest. Without closed
 * connections, a take pays one relaxed load, a push one more.
 */
void rdmx_cq_closed(struct rdmx_cq *cq, struct rdmx_conn *conn)
{
	/* Its pushes came before, under its lock, which its close took. */
	if (!atomic_load_explicit(&conn->named, memory_order_relaxed)) {
		rdmx_conn_mem_put(conn);
		return;
	}
	rdmx_spin_lock(&cq->lock);
	conn->next_closed = cq->closed;
	cq->closed = conn;
	atomic_store_explicit(&cq->any_closed, true, memory_order_relaxed);
	rdmx_spin_unlock(&cq->lock);
}

/* Let go of a list of closed connections; no cq lock held. */
static void rdmx_cq_closed_free(struct rdmx_conn *list)
{
	while (list) {
		struct rdmx_conn *next = list->next_closed;

		rdmx_conn_mem_put(list);
		list = next;
	}
}

rdmx_status rdmx_cq_destroy(struct rdmx_cq *cq)
{
	if (!cq)
		return RDMX_OK;
	rdmx_spin_lock(&cq->lock);
	if (cq->nconns) {
		rdmx_error("rdmx_cq_destroy: %u connections or srqs still "
			   "deliver to this cq",
			   cq->nconns);
		rdmx_spin_unlock(&cq->lock);
		return RDMX_ERR_BUSY;
	}
	rdmx_spin_unlock(&cq->lock);
	rdmx_cq_closed_free(cq->closed);
	rdmx_cq_closed_free(cq->given_out);
	rdmx_ctx_child(cq->ctx, &cq->ctx->ncqs, -1);
	if (cq->wfd >= 0)
		close(cq->wfd);
	close(cq->efd);
	free(cq->ring);
	free(cq);
	return RDMX_OK;
}

void rdmx_cq_attach(struct rdmx_cq *cq, int delta)
{
	rdmx_spin_lock(&cq->lock);
	cq->nconns += (unsigned)delta;
	rdmx_spin_unlock(&cq->lock);
}

/* Double the ring, keeping order. Call with cq->lock held. */
static bool rdmx_cq_grow(struct rdmx_cq *cq)
{
	struct rdmx_completion *ring;
	uint32_t cap = cq->cap * 2;

	ring = malloc(cap * sizeof(*ring));
	if (!ring)
		return false;
	for (uint32_t i = 0; i < rdmx_cq_count(cq); i++)
		ring[i] = cq->ring[(cq->head + i) % cq->cap];
	free(cq->ring);
	cq->ring = ring;
	cq->cap = cap;
	cq->head = 0;
	return true;
}

/*
 * The cq whose rdmx_poll, from an event loop on rdmx_cq_fd, this thread is
 * in, making progress: what that progress completes on it, the same call
 * takes. Such a loop wrote efd for each of those completions and read it
 * back as it took it, two system calls a completion (~1 us each on some
 * of these VMs); the signal now waits for the end of the call, and is not
 * made when the call took everything.
 */
static _Thread_local RDMX_TLS_FAST const struct rdmx_cq *rdmx_cq_polling;

_Thread_local RDMX_TLS_FAST const struct rdmx_cq *rdmx_progress_cq;

/* Call with cq->lock held. */
static void rdmx_cq_signal(struct rdmx_cq *cq)
{
	uint64_t one = 1;

	if (cq->signaled || (!cq->fd_exported && !cq->waiters))
		return;
	if (rdmx_cq_polling == cq) {
		atomic_store_explicit(&cq->signal_due, true,
				      memory_order_relaxed);
		return;
	}
	if (write(cq->efd, &one, sizeof(one)) == sizeof(one))
		cq->signaled = true;
}

/* The end of that rdmx_poll: the signal its progress left, if still due. */
static void rdmx_cq_signal_due(struct rdmx_cq *cq)
{
	rdmx_cq_polling = NULL;
	if (!atomic_load_explicit(&cq->signal_due, memory_order_relaxed))
		return;
	rdmx_spin_lock(&cq->lock);
	atomic_store_explicit(&cq->signal_due, false, memory_order_relaxed);
	if (rdmx_cq_count(cq))
		rdmx_cq_signal(cq);
	rdmx_spin_unlock(&cq->lock);
}

/*
 * Close the lane (see "The owner's lane"); cq->lock held. Its entries go
 * to the front of the ring, oldest first.
 */
static void rdmx_cq_share(struct rdmx_cq *cq)
{
	uintptr_t was = atomic_exchange(&cq->owner, RDMX_CQ_SHARED);

	if (was == 0 || was == RDMX_CQ_SHARED)
		return;
	rdmx_membarrier_private();
	for (unsigned i = 0;
	     atomic_load_explicit(&cq->owner_in, memory_order_acquire); i++) {
		if (i < RDMX_SPIN_PAUSES)
			rdmx_spin_pause();
		else
			sched_yield(); /* the owner, preempted inside */
	}
	while (cq->lane_count) {
		if (rdmx_cq_count(cq) == cq->cap && !rdmx_cq_grow(cq)) {
			rdmx_error("cq: out of memory, %u completions lost",
				   cq->lane_count);
			cq->lane_count = 0;
			break;
		}
		cq->lane_count--;
		cq->head = (cq->head + cq->cap - 1) % cq->cap;
		cq->ring[cq->head] = cq->lane[(cq->lane_head + cq->lane_count) %
					      RDMX_CQ_LANE];
		rdmx_cq_count_add(cq, 1);
	}
}

/* rdmx_cq_share, taking the lock for it. */
static void rdmx_cq_share_now(struct rdmx_cq *cq)
{
	rdmx_spin_lock(&cq->lock);
	rdmx_cq_share(cq);
	rdmx_spin_unlock(&cq->lock);
}

/* The owner's push, into its lane while the ring is empty. */
static bool rdmx_cq_lane_push(struct rdmx_cq *cq,
			      const struct rdmx_completion *wc)
{
	bool in;

	if (!rdmx_cq_owned_by_me(cq) || !rdmx_cq_enter(cq))
		return false;
	in = cq->lane_count < RDMX_CQ_LANE && !rdmx_cq_count(cq);
	if (in)
		cq->lane[(cq->lane_head + cq->lane_count++) % RDMX_CQ_LANE] =
			*wc;
	rdmx_cq_leave(cq);
	return in;
}

void rdmx_cq_push(struct rdmx_cq *cq, const struct rdmx_completion *wc)
{
	rdmx_stats_completed(cq->ctx, wc);
	if (wc->conn &&
	    !atomic_load_explicit(&wc->conn->named, memory_order_relaxed))
		atomic_store_explicit(&wc->conn->named, true,
				      memory_order_relaxed);
	if (rdmx_cq_lane_push(cq, wc))
		return;
	rdmx_spin_lock(&cq->lock);
	if (rdmx_cq_count(cq) == cq->cap && !rdmx_cq_grow(cq)) {
		/* Cannot happen short of memory exhaustion; say so loudly. */
		rdmx_error("cq: out of memory, completion of wr_id %llu lost",
			   (unsigned long long)wc->wr_id);
		rdmx_spin_unlock(&cq->lock);
		return;
	}
	cq->ring[(cq->head + rdmx_cq_count(cq)) % cq->cap] = *wc;
	rdmx_cq_count_add(cq, 1);
	rdmx_cq_signal(cq);
	rdmx_spin_unlock(&cq->lock);
}

/*
 * The owner's take from its lane; a first poller becomes the owner, a
 * second one closes the lane.
 */
static inline __attribute__((always_inline)) int
rdmx_cq_lane_take(struct rdmx_cq *cq, struct rdmx_completion *wc, int max)
{
	uintptr_t owner =
		atomic_load_explicit(&cq->owner, memory_order_relaxed);
	int n = 0;

#ifndef RDMX_TSAN
	if (!owner && rdmx_membarrier_private_ready() &&
	    atomic_compare_exchange_strong(&cq->owner, &owner, rdmx_cq_me()))
		owner = rdmx_cq_me();
#endif
	if (owner == RDMX_CQ_SHARED || !owner)
		return 0;
	if (owner != rdmx_cq_me()) {
		rdmx_cq_share_now(cq);
		return 0;
	}
	if (!rdmx_cq_enter(cq))
		return 0;
	while (n < max && cq->lane_count) {
		wc[n++] = cq->lane[cq->lane_head];
		cq->lane_head = (cq->lane_head + 1) % RDMX_CQ_LANE;
		cq->lane_count--;
	}
	rdmx_cq_leave(cq);
	return n;
}

/*
 * A take's turn of the closed connections (lock held, after the take):
 * those given out at an earlier take are handed back to be freed, and
 * those closed before the cq was left empty have now been given out.
 */
static struct rdmx_conn *rdmx_cq_closed_turn(struct rdmx_cq *cq)
{
	struct rdmx_conn *done = cq->given_out;

	cq->given_out = NULL;
	/* After rdmx_cq_lane_take, a lane is ours or closed. */
	if (!rdmx_cq_count(cq) &&
	    !(rdmx_cq_owned_by_me(cq) && cq->lane_count)) {
		cq->given_out = cq->closed;
		cq->closed = NULL;
	}
	atomic_store_explicit(&cq->any_closed, cq->closed || cq->given_out,
			      memory_order_relaxed);
	return done;
}

/* The take under the lock, after @n from the lane (rdmx_cq_take). */
static __attribute__((noinline)) int
rdmx_cq_take_locked(struct rdmx_cq *cq, struct rdmx_completion *wc, int max,
		    int n)
{
	struct rdmx_conn *done = NULL;
	uint64_t v;

	rdmx_spin_lock(&cq->lock);
	while (n < max && rdmx_cq_count(cq)) {
		wc[n++] = cq->ring[cq->head];
		cq->head = (cq->head + 1) % cq->cap;
		rdmx_cq_count_add(cq, -1);
	}
	if (!rdmx_cq_count(cq) && cq->signaled) {
		/* Empty again: make the fd unreadable. */
		if (read(cq->efd, &v, sizeof(v)) == sizeof(v) ||
		    errno == EAGAIN)
			cq->signaled = false;
	}
	if (cq->closed || cq->given_out)
		done = rdmx_cq_closed_turn(cq);
	rdmx_spin_unlock(&cq->lock);
	rdmx_cq_closed_free(done);
	return n;
}

/*
 * Inline in rdmx_poll, which takes twice: the call's entry and exit were
 * ~20 of an empty take's ~60 instructions, and an empty poll's two takes
 * a third of its ~330 (the rest of it: its progress call).
 */
static inline __attribute__((always_inline)) int
rdmx_cq_take(struct rdmx_cq *cq, struct rdmx_completion *wc, int max)
{
	int n = rdmx_cq_lane_take(cq, wc, max);
	bool quick;

	/*
	 * From the lane, and the ring behind it empty: no lock. Nor when
	 * both are empty and nobody waits on the fd (which would have to be
	 * made unreadable): a spinner's empty poll took the lock for nothing.
	 * Closed connections wait for the lock (rdmx_cq_closed_turn).
	 */
	quick = n == max ||
		(!rdmx_cq_count(cq) &&
		 (n || !atomic_load_explicit(&cq->fd_exported,
					     memory_order_relaxed)));
	if (quick &&
	    !atomic_load_explicit(&cq->any_closed, memory_order_relaxed))
		return n;
	return rdmx_cq_take_locked(cq, wc, max, n);
}

/* A transport's progress fd, or -1 while it is not open. */
static int rdmx_cq_tp_fd(const struct rdmx_ctx *ctx, int i)
{
	void *priv = atomic_load(&ctx->tp[i].priv);

	return priv && ctx->tp[i].ops->progress_fd
		       ? ctx->tp[i].ops->progress_fd(priv)
		       : -1;
}

/* Add to wfd the transports opened since; cq->lock held. */
static void rdmx_cq_watch(struct rdmx_cq *cq)
{
	for (int i = 0; i < RDMX_TRANSPORT_MAX && cq->wfd >= 0; i++) {
		struct epoll_event ev = { .events = EPOLLIN };
		int fd;

		if (atomic_load(&cq->wfd_tps) & (1u << i) ||
		    !atomic_load(&cq->ctx->tp[i].priv))
			continue;
		fd = rdmx_cq_tp_fd(cq->ctx, i);
		if (fd >= 0 && epoll_ctl(cq->wfd, EPOLL_CTL_ADD, fd, &ev))
			rdmx_warn("rdmx_cq_fd: watching the %s transport: %m",
				  cq->ctx->tp[i].ops->name);
		atomic_fetch_or(&cq->wfd_tps, 1u << i);
	}
}

/* A transport opened since wfd was last completed (no lock: a hint). */
static bool rdmx_cq_unwatched(struct rdmx_cq *cq)
{
	unsigned tps = atomic_load_explicit(&cq->wfd_tps, memory_order_relaxed);

	for (int i = 0; i < RDMX_TRANSPORT_MAX; i++)
		if (!(tps & (1u << i)) &&
		    atomic_load_explicit(&cq->ctx->tp[i].priv,
					 memory_order_relaxed))
			return true;
	return false;
}

/*
 * The transports hear of a spinner's fruitful polls one in
 * RDMX_CQ_POLLED_EVERY: the call through each open transport cost ~3 ns
 * of a mapped 8-byte READ's ~47, and what they do with it (a clock stamp
 * for the progress thread, rdmx_sw_polled) comes one call in 8 or more
 * anyway. A load and a store: a count lost to a race costs nothing.
 */
#define RDMX_CQ_POLLED_EVERY 8

static bool rdmx_cq_polled_turn(struct rdmx_cq *cq)
{
	unsigned n = atomic_load_explicit(&cq->polls, memory_order_relaxed);

	atomic_store_explicit(&cq->polls, n + 1, memory_order_relaxed);
	return !(n % RDMX_CQ_POLLED_EVERY);
}

/*
 * A spinner's poll that finds completions queued takes them and makes no
 * progress call: a ping-pong's answer is there, and a look at the pipes
 * would only delay it. But a caller with a backlog (a server that took in
 * a pass over its clients' input and answers it 32 at a time) then read
 * nothing new until it had answered it all: requests that came meanwhile
 * waited for the whole backlog, and those that came just after a pass a
 * whole second one. An rdmx kv server's 32 clients keeping 16 GETs in
 * flight each over shm: the two whose requests came last in each pass
 * were served every other pass, at twice the others' latency (p50 1027
 * against 510 us), and set the p99 (2.1x the p50). As a NIC keeps taking
 * input while the application drains its cq, a poll that leaves
 * RDMX_CQ_BACKLOG or more queued makes a progress call once per
 * RDMX_CQ_BACKLOG completions taken: the clients' shares came out equal
 * and the p98 was 1.25x the p50. A load and a store, as for polls.
 */
#define RDMX_CQ_BACKLOG 32

static bool rdmx_cq_backlog_turn(struct rdmx_cq *cq, int taken)
{
	unsigned n;

	if (rdmx_cq_count(cq) < RDMX_CQ_BACKLOG)
		return false;
	n = atomic_load_explicit(&cq->backlog_taken, memory_order_relaxed) +
	    (unsigned)taken;
	atomic_store_explicit(&cq->backlog_taken, n < RDMX_CQ_BACKLOG ? n : 0,
			      memory_order_relaxed);
	return n >= RDMX_CQ_BACKLOG;
}

int rdmx_poll(struct rdmx_cq *cq, struct rdmx_completion *wc, int max)
{
	bool spinning;
	int n;

	if (!cq || !wc || max < 0)
		return rdmx_invalid("rdmx_poll", "%s",
				    !cq	  ? "NULL cq"
				    : !wc ? "NULL completion array"
					  : "negative max");
	if (atomic_load_explicit(&cq->fd_exported, memory_order_relaxed) &&
	    rdmx_cq_unwatched(cq)) {
		rdmx_spin_lock(&cq->lock);
		rdmx_cq_watch(cq);
		rdmx_spin_unlock(&cq->lock);
	}
	/*
	 * A caller of rdmx_poll polls in a loop, unless it waits on the cq's
	 * fd: then it is event-driven and the background thread must serve.
	 */
	spinning =
		!atomic_load_explicit(&cq->fd_exported, memory_order_relaxed);
	if (!spinning) /* its event loop serves what the fd shows */
		rdmx_ctx_served(cq->ctx, 0, 0);
	else
		rdmx_ctx_spun(cq->ctx);
	n = rdmx_cq_take(cq, wc, max);
	if (n) {
		/*
		 * Say so even without a progress call: a caller that always
		 * finds its completions queued (by the thread, woken by each
		 * message) would otherwise never send the thread into its
		 * back-off, and each message would cost a wake-up.
		 */
		if (spinning && rdmx_cq_polled_turn(cq))
			rdmx_ctx_polled(cq->ctx);
		if (spinning && rdmx_cq_backlog_turn(cq, n)) {
			rdmx_progress_cq = cq;
			rdmx_ctx_progress(cq->ctx, true);
			rdmx_progress_cq = NULL;
		}
		return n;
	}
	if (!spinning) /* an event loop's: its own completions signal late */
		rdmx_cq_polling = cq;
	else
		rdmx_progress_cq = cq;
	if (rdmx_ctx_progress(cq->ctx, spinning))
		n = rdmx_cq_take(cq, wc, max);
	rdmx_progress_cq = NULL;
	if (!spinning)
		rdmx_cq_signal_due(cq);
	return n;
}

/* Something to take, for the owner (its lane) or anyone (the ring). */
static bool rdmx_cq_ready(struct rdmx_cq *cq)
{
	bool ready = rdmx_cq_owned_by_me(cq) && cq->lane_count;

	if (!ready) {
		rdmx_spin_lock(&cq->lock);
		ready = rdmx_cq_count(cq) != 0;
		rdmx_spin_unlock(&cq->lock);
	}
	return ready;
}

/*
 * Sleep on the cq's eventfd and on every open transport's progress fd: a
 * context without a progress thread still advances while it waits, and
 * with one, the peer's signal wakes this thread itself, which makes the
 * progress (one cross-core wake-up; the thread's, then ours, were two).
 */
static void rdmx_cq_sleep(struct rdmx_cq *cq, int timeout_ms)
{
	struct pollfd pfd[1 + RDMX_TRANSPORT_MAX];
	nfds_t n = 0;

	pfd[n++] = (struct pollfd){ .fd = cq->efd, .events = POLLIN };
	for (int i = 0; i < RDMX_TRANSPORT_MAX; i++) {
		int fd = rdmx_cq_tp_fd(cq->ctx, i);

		if (fd >= 0)
			pfd[n++] =
				(struct pollfd){ .fd = fd, .events = POLLIN };
	}
	poll(pfd, n, timeout_ms);
}

rdmx_status rdmx_cq_wait(struct rdmx_cq *cq, int timeout_ms)
{
	uint64_t start = rdmx_now_us(), deadline, spin, now;
	unsigned told;

	if (!cq)
		return rdmx_invalid("rdmx_cq_wait", "NULL cq");
	spin = cq->ctx->cfg.progress_use_event_channel
		       ? cq->ctx->cfg.progress_wait_spin_us
		       : UINT64_MAX; /* polling: never sleep */
	deadline = rdmx_deadline(timeout_ms);
	if (!rdmx_cq_owned_by_me(cq)) /* the lane is not ours to see */
		rdmx_cq_share_now(cq);
	for (bool spinning = true;;) {
		/* Past the spin, woken: progress once, not as a spinner (that
		 * would send the progress thread into its back-off). */
		rdmx_ctx_progress(cq->ctx, spinning);
		if (rdmx_cq_ready(cq))
			return RDMX_OK;
		now = rdmx_now_us();
		if (now >= deadline)
			return RDMX_ERR_TIMEOUT;
		if (now - start < spin)
			continue;
		spinning = false;

		/*
		 * From here we serve what wakes us (ops.served), or hand
		 * over to the background thread (over tcp it was woken by
		 * each answer too, and ran first on our CPU).
		 */
		rdmx_ctx_sleeps(cq->ctx);
		told = rdmx_ctx_served(cq->ctx, 1, 0);
		rdmx_spin_lock(&cq->lock);
		rdmx_cq_share(cq); /* the eventfd wakes it, not the lane */
		cq->waiters++;
		if (rdmx_cq_count(cq))
			rdmx_cq_signal(cq);
		rdmx_spin_unlock(&cq->lock);

		rdmx_cq_sleep(cq, rdmx_ms_left(deadline));

		rdmx_spin_lock(&cq->lock);
		cq->waiters--;
		rdmx_spin_unlock(&cq->lock);
		rdmx_ctx_served(cq->ctx, -1, told);
	}
}

int rdmx_cq_fd(struct rdmx_cq *cq)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int fd;

	if (!cq)
		return rdmx_invalid("rdmx_cq_fd", "NULL cq");
	rdmx_ctx_sleeps(cq->ctx); /* its caller waits on the fd */
	rdmx_spin_lock(&cq->lock);
	if (cq->wfd < 0) {
		cq->wfd = epoll_create1(EPOLL_CLOEXEC);
		if (cq->wfd >= 0 &&
		    epoll_ctl(cq->wfd, EPOLL_CTL_ADD, cq->efd, &ev)) {
			close(cq->wfd);
			cq->wfd = -1;
		}
		if (cq->wfd < 0) /* the eventfd alone still works */
			rdmx_warn("rdmx_cq_fd: epoll: %m; completions wake "
				  "through the progress thread");
	}
	rdmx_cq_watch(cq);
	rdmx_cq_share(cq); /* the fd shows the ring's eventfd, not the lane */
	fd = cq->wfd >= 0 ? cq->wfd : cq->efd;
	/*
	 * The first call hands over to the background thread (a caller that
	 * spun kept it backed off); an event loop that asks each time round
	 * woke it with each call (and over tcp keeps it out of the way by
	 * polling: ops.served).
	 */
	if (!atomic_exchange_explicit(&cq->fd_exported, true,
				      memory_order_relaxed))
		rdmx_ctx_idle(cq->ctx);
	if (rdmx_cq_count(cq))
		rdmx_cq_signal(cq);
	rdmx_spin_unlock(&cq->lock);
	return fd;
}
