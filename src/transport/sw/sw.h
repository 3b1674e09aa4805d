/* SPDX-License-Identifier: MIT */
/*
 * The software RC engine: an RDMA reliable connection (credits, in-order
 * completion, answers for every request, target-side access checks, flush
 * on death) over any reliable byte pipe. The tcp transport gives it a
 * socket, the shm transport a shared-memory ring; each pipe is a small ops
 * table below, and nothing in this directory knows which one it runs on.
 *
 * Locking: each connection has one lock, `lock` (a spin lock: core/spin.h),
 * that guards all of its state, the socket I/O included; every rdmx_sw_*
 * function below that takes a `struct rdmx_sw_conn *` expects it held unless it
 * says otherwise. The cq lock nests inside it. The per-context `slots_lock`
 * (a spin lock too: every spinning poll takes it, and a mutex's pair cost
 * ~11 of an empty poll's 31 ns) guards the table that maps epoll keys to
 * connections and nests outside no other lock.
 */
#ifndef RDMX_SW_H
#define RDMX_SW_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core.h"
#include "spin.h"
#include "sw_proto.h"

struct rdmx_sw_conn;

/*
 * A byte pipe. I/O calls return the byte count, -EAGAIN when they would
 * block, 0 when the peer closed, or another -errno when the pipe broke.
 * Called with the connection's lock held.
 */
struct rdmx_sw_pipe {
	const char *name;
	ssize_t (*recv)(struct rdmx_sw_conn *c, void *buf, size_t len);
	ssize_t (*readv)(struct rdmx_sw_conn *c, const struct iovec *iov,
			 int iovcnt);
	ssize_t (*sendv)(struct rdmx_sw_conn *c, const struct iovec *iov,
			 int iovcnt);
	/* Ask (or stop asking) for a wake-up when sendv could take more. */
	void (*want_out)(struct rdmx_sw_conn *c, bool want);
	/*
	 * Optional: the next input to wait for is @bytes of a payload, all
	 * certain to come (0: anything, a header). A pipe may then report
	 * input only once that much is there (rdmx_sw_rx_wait).
	 */
	void (*rx_wait)(struct rdmx_sw_conn *c, uint64_t bytes);
	/* Optional: an epoll event arrived on fd (@aux false) or fd2. */
	void (*wake)(struct rdmx_sw_conn *c, bool aux);
	/*
	 * Optional: move bytes between our @local buffers and the peer's
	 * @remote ones directly (single copy). Return the bytes moved, or
	 * -errno. With them, the engine may send one-sided payloads BYREF.
	 */
	ssize_t (*pull)(struct rdmx_sw_conn *c, const struct iovec *local,
			int nlocal, const struct iovec *remote, int nremote);
	ssize_t (*push)(struct rdmx_sw_conn *c, const struct iovec *local,
			int nlocal, const struct iovec *remote, int nremote);
	/*
	 * Optional: do the one-sided request @wr (a WRITE, READ or atomic of
	 * @total bytes) on the peer's memory ourselves, now, if the peer
	 * granted us a mapping of it: data moved and results placed, true.
	 * False: send it as usual (the target then checks and answers it).
	 * Called only while nothing of the connection's is posted or in
	 * flight, so the request stays in order, or for one that need not
	 * (RDMX_WR_UNORDERED).
	 */
	bool (*direct)(struct rdmx_sw_conn *c, const struct rdmx_wr *wr,
		       uint64_t total);
	/*
	 * Optional: (dis)arm the peer's wake-ups for input. Disarmed, the
	 * peer may skip them (a spinning caller sees input anyway); arming
	 * is followed by a seq_cst fence, rdmx_membarrier() once if any arm
	 * said true (core/mem.h), and a ready() check by the engine.
	 */
	bool (*arm)(struct rdmx_sw_conn *c, bool on);
	/* Optional, lock-free: is there input? Lets polling skip epoll. */
	bool (*ready)(struct rdmx_sw_conn *c);
	/*
	 * Optional, each watchdog tick: false when the peer's host has
	 * answered nothing for tcp.user_timeout while something of ours
	 * waits for an answer (two ticks in a row end the connection).
	 * A connection over such a pipe that has sent nothing for a quarter
	 * of tcp.user_timeout sends an empty credit frame, a heartbeat, so
	 * that something always waits: a host is then judged by several
	 * retransmitted frames, not by one keepalive a lost packet kills.
	 */
	bool (*alive)(struct rdmx_sw_conn *c);
	/*
	 * Optional: the connection is about to end, its last frames still
	 * to go out: from now on the peer touches none of our memory
	 * directly (and a copy of its that runs has ended on return).
	 */
	void (*seal)(struct rdmx_sw_conn *c);
	/* The connection died: stop both directions (fds stay open). */
	void (*shutdown)(struct rdmx_sw_conn *c);
	/* Last reference gone: close fds, unmap, free pipe state. */
	void (*destroy)(struct rdmx_sw_conn *c);
};

/* Per-context state: one epoll set and, by default, one progress thread. */
#define RDMX_SW_STAMP_MIN 8

struct rdmx_sw_ctx {
	struct rdmx_ctx *ctx;
	const struct rdmx_sw_transport *tp;
	uint64_t byref_min; /* one-sided payloads this large go BYREF; 0 never
			     */
	int epfd;
	int stop_efd; /* wakes the progress thread: to exit, or to take over */
	int timer_fd; /* the watchdog's tick, armed while connections live */
	atomic_bool stopping;
	pthread_t thread;
	atomic_int thread_tid; /* its kernel id, once it runs (tests, perf) */
	bool thread_running;
	/*
	 * Spinning callers drive progress; while one polled within
	 * progress.idle_after, the thread stays out of their way (no wake-up
	 * per message) and peers' wake-ups are disarmed. idle() hands back.
	 * Without a thread, backing_off says the last caller spun
	 * (rdmx_sw_unthreaded).
	 * app_polls counts the calls that stamp app_poll_us (rdmx_sw_polled).
	 */
	_Atomic uint64_t app_poll_us;
	_Atomic unsigned app_polls;
	_Atomic unsigned stamp_every; /* rdmx_sw_polled; from STAMP_MIN */
	_Atomic unsigned empty_polls; /* rdmx_sw_empty_poll */
	_Atomic uint64_t spin_epoll_us; /* a spinner's last epoll_wait */
	/* A spinner's last epoll_wait that found nothing: when (0 until the
	 * first poll it stands for reads the clock), how many polls it stood
	 * for, and for which cq (rdmx_sw_epoll_shared); NULL once one found
	 * input. */
	_Atomic uint64_t empty_epoll_us;
	_Atomic unsigned empty_epoll_skips;
	_Atomic(const void *) empty_epoll_for;
	/* Callers asleep on epfd that serve when woken (rdmx_sw_caller_serves).
	 */
	atomic_int sleepers;
	atomic_bool backing_off;
	_Atomic unsigned take_overs; /* back-offs the thread ended (tests) */
	/* A caller stamped while the thread served, and kicked it back to
	 * its check (rdmx_sw_polled); cleared there. */
	atomic_bool recalled;
	/*
	 * The connections that hold ACKs back (rdmx_sw_release_acks), each
	 * with a reference: a stack that holders push onto and a release
	 * takes whole, so a release walks those, not every connection.
	 */
	_Atomic(struct rdmx_sw_conn *) held;
	/* Those whose ACKs ride with requests (acks_ride), and the
	 * spinner's calls since the last release of them. */
	_Atomic(struct rdmx_sw_conn *) held_ride;
	_Atomic unsigned held_calls;

	/*
	 * epoll carries a key (generation << 32 | slot + 1), never a pointer:
	 * a connection closed while another thread holds its epoll event
	 * simply fails to look up.
	 */
	struct rdmx_spin slots_lock;
	struct rdmx_sw_conn **slots;
	uint32_t *gens;
	uint32_t nslots;
	/*
	 * 1 + the highest slot in use (0: none): walks over the slots stop
	 * there. The array doubles as connections come and never shrinks,
	 * and a spinner's every poll walks it: after 600 connection pairs
	 * had come and gone in one context (2048 slots), a one-thread shm
	 * SEND/RECV round trip on the pair left took 7.4-9.6 us, not 0.57.
	 */
	uint32_t slots_used;
	uint32_t ready_from; /* the slot rdmx_sw_poll_ready looks at first */
};

/* A frame to transmit: a request (kept until answered) or an answer. */
struct rdmx_sw_op {
	struct rdmx_sw_op *next; /* sq or inflight queue */
	struct rdmx_sw_op *tx_next; /* transmit queue */
	uint8_t hdr[RDMX_SW_HDR_LEN];
	struct rdmx_sw_hdr h; /* decoded copy; packed on commit */
	int iovcnt; /* of iov[] */
	size_t tx_len; /* sum of iov lengths */
	bool in_q; /* in sq or inflight */
	bool needs_credit; /* SEND, WRITE_IMM */
	bool unsignaled; /* RDMX_WR_UNSIGNALED: no completion on success */
	bool fence; /* RDMX_WR_FENCE: committed after earlier READs, atomics */
	/* answers: how many of the peer's requests this frame answers */
	uint32_t covers;
	/*
	 * In the transmit queue. Not beside in_q: a load of both at once
	 * could not take its bytes from the two stores still in the core's
	 * store buffer, and waited for every older store to leave, the
	 * ring's among them (a line the peer holds: ~100 ns here).
	 */
	bool in_tx;
	/* requests */
	uint64_t wr_id;
	enum rdmx_opcode opcode;
	uint32_t len;
	int nlocal; /* of local[] */
	/* READ_RESP: the registration its payload comes from */
	struct rdmx_mr *mr;
	int nuse; /* of use[] */
	/*
	 * The arrays, last: each is read only up to its count, so a reused
	 * op is zeroed only up to here (RDMX_SW_OP_ZEROED). The whole op is
	 * over 1 KiB, and its memset a tenth of a small SEND's CPU time.
	 */
	struct iovec iov[1 + RDMX_MAX_SGE]; /* iov[0] is hdr */
	struct iovec local[RDMX_MAX_SGE]; /* where READ / atomic data land */
	/* requests: the registrations of their sges (rdmx_sw_mr_revoke) */
	struct rdmx_mr *use[RDMX_MAX_SGE];
	/* BYREF requests: the descriptors of our buffers, as sent */
	uint8_t refs[RDMX_MAX_SGE * RDMX_SW_REF_LEN];
};

#define RDMX_SW_OP_ZEROED offsetof(struct rdmx_sw_op, iov)

/* A READ or an atomic: what a fenced request waits for. */
static inline bool rdmx_sw_op_reads(const struct rdmx_sw_op *op)
{
	return op->h.type == RDMX_SW_READ_REQ ||
	       op->h.type == RDMX_SW_ATOMIC_REQ;
}

struct rdmx_sw_queue {
	struct rdmx_sw_op *head, *tail;
};

/*
 * Spent objects of one kind, each linked through its first bytes while it
 * waits to be reused: at most max, what the connection's queue depths let
 * be in use at once, so that a connection at its depth allocates nothing
 * per request. A cache of 64 each had a send stream 256 deep spend a fifth
 * of its time in malloc and free.
 */
struct rdmx_sw_cache {
	void *head;
	uint32_t n, max;
};

struct rdmx_sw_recv {
	struct rdmx_sw_recv *next;
	uint64_t wr_id;
	uint64_t cap;
	int niov; /* of iov[] and use[] */
	/* A region of it was deregistered: a SEND that takes it ends the
	 * connection (a NIC's protection error), a WRITE_IMM may. */
	bool revoked;
	/* Read only up to niov: not zeroed on reuse (RDMX_SW_RECV_ZEROED). */
	struct iovec iov[RDMX_MAX_SGE];
	struct rdmx_mr *use[RDMX_MAX_SGE]; /* the registrations of iov[] */
};

#define RDMX_SW_RECV_ZEROED offsetof(struct rdmx_sw_recv, iov)

#define RDMX_SW_RXBUF (64 * 1024)
/* Set in the epoll key of a connection's second fd. */
#define RDMX_SW_KEY_AUX (1ull << 31)
/* The watchdog's timer: slot 0, which no connection has. */
#define RDMX_SW_KEY_TIMER (1ull << 32)
#define RDMX_SW_TICK_MS 250

struct rdmx_sw_conn {
	struct rdmx_conn base;
	struct rdmx_sw_ctx *tctx;
	int fd; /* watched by epoll: the socket, or a doorbell */
	int fd2; /* watched too when >= 0: e.g. a liveness socket */
	void *pipe_priv;
	uint64_t key;
	atomic_int refs; /* the user's, plus one per progress call inside */

	/*
	 * Held over a frame's processing and a send: one atomic exchange to
	 * take, a store to give back (core/spin.h), 3 pairs on each side of
	 * a small message's way. A sendmsg, or a single copy of a large
	 * request, is the longest it is held.
	 */
	struct rdmx_spin lock;
	bool dead;
	rdmx_status dead_status; /* what the work flushed with */
	bool want_out; /* EPOLLOUT is armed */

	/* initiator */
	uint64_t next_seq;
	uint32_t outstanding; /* in sq + inflight, + unsignaled_held */
	/* Unsignaled requests done, holding their send queue slots until a
	 * later request's completion (as on a NIC, where the CQE of a
	 * signaled request frees the slots of those before it). */
	uint32_t unsignaled_held;
	uint32_t inflight_n; /* in inflight */
	uint32_t inflight_reads; /* of them, READs and atomics (fences) */
	uint32_t peer_limit; /* requests the peer lets us have at it (LIMIT) */
	uint32_t peer_credits; /* RECVs the peer posted that we may consume */
	uint64_t credits_got; /* all credits ever received */
	uint32_t sq_needy; /* requests in sq that need a credit */
	uint32_t asked; /* of them, what the peer knows it owes us */
	bool peer_shared; /* the peer grants from a srq: ASK when short */
	struct rdmx_sw_queue sq; /* posted, not yet committed */
	struct rdmx_sw_queue inflight; /* committed, awaiting an answer */
	/*
	 * The watchdog (rdmx_sw_watchdog): bytes moved each way, as it last
	 * saw them, and since when we wait to hear (inflight requests) or
	 * to send (tx_head) without a byte moving; suspect counts ticks the
	 * pipe found the peer's host silent.
	 */
	uint64_t rx_total, tx_total, seen_rx, seen_tx;
	uint64_t tx_sends; /* pipe sendv calls that sent (tests read it) */
	/* CREDIT frames that went alone; tests read it while a progress
	 * thread sends, so atomic (relaxed) */
	_Atomic uint64_t tx_bare_credits;
	uint64_t heard_us, moved_us, sent_us;
	unsigned suspect;

	/*
	 * Spent ops and RECVs (its own or its srq's), kept for its next
	 * requests, answers and RECVs: no allocation per request on a
	 * steady pipeline. Under the lock.
	 */
	struct rdmx_sw_cache ops, recvs;

	/* transmit */
	struct rdmx_sw_op *tx_head, *tx_tail;
	size_t tx_off; /* bytes of tx_head already sent */
	/*
	 * ACKs only, held back after input a spinning caller handled (its
	 * thread backing off): its answer (a reply SEND, the next request)
	 * is likely posted before its next poll, and they go out together,
	 * one write instead of two. The next progress call on the context
	 * sends them anyway, as do idle(), close, and the thread before it
	 * sleeps or when it takes over from a caller that stopped polling
	 * (after progress.idle_after, at most RDMX_SW_LOOK_US late).
	 */
	bool acks_held;
	/*
	 * acks_ride: the caller posts on this connection soon after input,
	 * so its held ACKs wait for that request (up to RDMX_SW_HOLD_CALLS
	 * progress calls) instead of leaving at the next call. Learnt:
	 * acks_alone says the last held ones left on their own, and a
	 * request posted after that sets acks_ride.
	 */
	bool acks_ride, acks_alone;
	unsigned held_at; /* tctx->held_calls when acks_held was set */
	bool held_listed; /* on tctx->held or held_ride (under lock) */
	struct rdmx_sw_conn *next_held;
	/*
	 * The ACK of the peer's requests, when none is queued already: every
	 * SEND, WRITE and WRITE_IMM gets one, and an op from the cache for
	 * each (taken, zeroed, given back) was ~80 instructions of a small
	 * SEND's ~3000 on the two sides. Never in a queue but tx; in_tx says
	 * it is taken, and rdmx_sw_op_drop leaves it here.
	 */
	struct rdmx_sw_op ack_op;

	/* target */
	uint32_t owed; /* the peer's requests whose answers have not left */
	uint32_t access_errors; /* requests of the peer refused so far */
	struct rdmx_sw_recv *rq_head, *rq_tail;
	uint32_t rq_count;
	uint32_t grant; /* RECVs posted but not yet told to the peer */
	uint64_t granted_total; /* all credits ever put in frames */

	/* target with a shared receive queue (sw_srq.c); srq->lock guards
	 * the srq_* fields */
	struct rdmx_sw_srq *srq;
	struct rdmx_sw_conn *srq_next; /* the srq's connections */
	uint32_t srq_held; /* credits the peer holds, as far as we know */
	uint32_t srq_want; /* credits it waits for */
	uint32_t srq_pending; /* granted, not yet in a frame */
	bool srq_revoke; /* a REVOKE is due */
	bool srq_revoking; /* one is out: no grants until the RETURN */
	bool srq_kick; /* has a frame to send: kick after unlocking */
	/* srq_pending or srq_revoke set, for its transmit to take. Set
	 * under srq->lock; read without it (rdmx_sw_srq_tx). */
	atomic_bool srq_due;
	/* The srq's RECVs it spent (no bound: at most the srq's): to the
	 * srq's cache at its next take, under the srq lock it takes anyway. */
	struct rdmx_sw_cache srq_spent;

	/* receive state: a header, then its payload */
	uint8_t rxbuf[RDMX_SW_RXBUF];
	size_t rx_pos, rx_len;
	bool rx_in_payload;
	struct rdmx_sw_hdr rx_h;
	struct iovec rx_iov[RDMX_MAX_SGE]; /* where payload goes; none: drop */
	int rx_niov, rx_iov_i;
	uint64_t rx_left;
	uint64_t rx_waits; /* what the pipe's rx_wait was last told */
	uint16_t rx_nak; /* answer with this NAK when placed */
	enum rdmx_refusal rx_why; /* and why, for an access NAK */
	uint8_t rx_refs[RDMX_MAX_SGE * RDMX_SW_REF_LEN]; /* BYREF descriptors */
	/*
	 * The one-sided target of the frame being received, held while
	 * placing. Between progress calls it is let go (rx_parked) and looked
	 * up again by rkey, so a peer that stops mid-frame cannot hold up
	 * rdmx_mr_dereg; a region gone meanwhile turns the rest into a NAK.
	 */
	struct rdmx_mr *rx_mr;
	bool rx_parked;
	struct rdmx_sw_recv *rx_recv; /* RECV a SEND is filling */
};

static inline struct rdmx_sw_conn *to_sw_conn(struct rdmx_conn *conn)
{
	return rdmx_container_of(conn, struct rdmx_sw_conn, base);
}

/* A transport built on the engine: its ops table and its pipe. */
struct rdmx_sw_transport {
	const struct rdmx_transport_ops *ops;
	const struct rdmx_sw_pipe *pipe;
};

/*
 * A shared receive queue of the software transports: one pool of RECVs
 * for connections of tcp and shm alike. Each peer may send only on a
 * credit, as always; credits come from the pool by demand, one standing
 * credit goes to each idle connection while RECVs are spare, and credits an
 * idle peer holds are revoked when another one waits.
 */
struct rdmx_sw_srq {
	struct rdmx_srq *srq;
	pthread_mutex_t lock; /* nests inside connection locks */
	struct rdmx_sw_recv *head, *tail;
	uint32_t count; /* RECVs posted, not taken */
	uint32_t reserved; /* of them, promised as credits */
	struct rdmx_sw_conn *links;
	struct rdmx_sw_conn *cursor; /* where the next demand round starts */
	/*
	 * Of the links: those that want credits, those that hold none and
	 * are not being revoked from, and those being revoked from
	 * (rdmx_sw_srq_tally). With neither of the first two, balancing has
	 * nothing to do and walks no link.
	 */
	uint32_t wanting, bare, revoking;
	uint32_t nlinks; /* how many links */
	uint64_t visits; /* links balancing and kicks looked at (tests) */
	struct rdmx_sw_cache recvs; /* spent RECVs, up to the srq's max_wr */
	struct rdmx_sw_srq *all_next; /* in the process's list of srqs */
	atomic_bool kick; /* some srq_kick is set */
	/*
	 * The user's, plus one per connection that joined, dropped when its
	 * memory goes: a progress thread may still be in rdmx_sw_unlock()
	 * of a closed connection when the user destroys the srq.
	 */
	atomic_int refs;
};

extern const struct rdmx_srq_ops rdmx_sw_srq_ops;

/*
 * A target's atomic on @p: fetch-and-add @a0 (@fadd), or compare with
 * @a0 and swap in @a1. The CPU's atomics: atomic against every other
 * initiator's, whichever way (engine or mapping) they come. Returns the
 * value before.
 */
static inline uint64_t rdmx_sw_atomic(uint64_t *p, bool fadd, uint64_t a0,
				      uint64_t a1)
{
	uint64_t old = a0;

	if (fadd)
		return __atomic_fetch_add(p, a0, __ATOMIC_SEQ_CST);
	__atomic_compare_exchange_n(p, &old, a1, false, __ATOMIC_SEQ_CST,
				    __ATOMIC_SEQ_CST);
	return old;
}

/* Is @mr among the @n registrations of @use? */
static inline bool rdmx_sw_uses(struct rdmx_mr *const *use, int n,
				const struct rdmx_mr *mr)
{
	for (int i = 0; i < n; i++)
		if (use[i] == mr)
			return true;
	return false;
}

/* sw_srq.c */
/* The connection's RECVs come from attr's srq: join it, tell the peer. */
void rdmx_sw_srq_attach(struct rdmx_sw_conn *c);
/* Leave (the connection died): its credits go back to the pool. */
void rdmx_sw_srq_detach(struct rdmx_sw_conn *c);
/* The connection's memory goes: drop its reference. */
void rdmx_sw_srq_put(struct rdmx_sw_srq *s);
/* Revoke the RECVs on @mr of every srq of @mr's context. */
void rdmx_sw_srq_revoke(const struct rdmx_mr *mr);
/* A SEND or WRITE_IMM arrived: does the peer hold a credit for it? */
bool rdmx_sw_srq_ready(struct rdmx_sw_conn *c);
/* Take the RECV for it, spending the peer's credit. */
struct rdmx_sw_recv *rdmx_sw_srq_take(struct rdmx_sw_conn *c);
/* ASK or RETURN from the peer. */
void rdmx_sw_srq_credit(struct rdmx_sw_conn *c, const struct rdmx_sw_hdr *h);
/* Before transmitting: move grants and a due REVOKE into frames. */
void rdmx_sw_srq_tx(struct rdmx_sw_conn *c);
/* Unlock @c, then send what other connections of its srq have due. */
void rdmx_sw_unlock(struct rdmx_sw_conn *c);

/* sw_conn.c */
rdmx_status rdmx_sw_open(struct rdmx_ctx *ctx,
			 const struct rdmx_sw_transport *tp, void **priv_p);
void rdmx_sw_close(void *priv);
/*
 * A connection on a ready pipe, not started. On failure the pipe is
 * destroyed: the caller gives up @fd, @fd2 and @pipe_priv either way.
 */
rdmx_status rdmx_sw_conn_create(struct rdmx_sw_ctx *e, int fd, int fd2,
				void *pipe_priv,
				const struct rdmx_conn_attr *attr,
				struct rdmx_conn **conn_p);
/*
 * The ops' conn_start: a slot, epoll watching @fd (and @fd2 when >= 0),
 * and our first frame. Until then the peer can commit no request here.
 */
rdmx_status rdmx_sw_conn_start(struct rdmx_conn *conn);
/*
 * A watchdog tick (the timer's epoll event): a connection whose peer took
 * and answered nothing for conn.stall_timeout fails with
 * RDMX_ERR_TIMEOUT; one whose host the pipe finds silent, with
 * RDMX_ERR_CONN_LOST.
 */
void rdmx_sw_watchdog(struct rdmx_sw_ctx *tctx);
/* (Dis)arm the watchdog's timer. */
void rdmx_sw_timer_arm(struct rdmx_sw_ctx *tctx, bool on);
/*
 * The ops' mr_revoke: end every connection a request on @mr is posted on,
 * or whose SEND is being placed into it; mark the RECVs on @mr, of
 * connections and srqs, revoked.
 */
void rdmx_sw_mr_revoke(void *priv, struct rdmx_mr *mr);
/* Call @fn on each live connection, its lock held; returns how many. */
unsigned rdmx_sw_each(struct rdmx_sw_ctx *tctx,
		      void (*fn)(struct rdmx_sw_conn *c, void *arg), void *arg);
/* The engine's own EPOLLOUT arming, for pipes whose fd is the data fd. */
void rdmx_sw_epoll_out(struct rdmx_sw_conn *c, bool want);
void rdmx_sw_conn_close(struct rdmx_conn *conn);
rdmx_status rdmx_sw_conn_check(struct rdmx_conn *conn);
/* Look up by epoll key and take a reference; NULL if closed. No lock. */
struct rdmx_sw_conn *rdmx_sw_conn_get(struct rdmx_sw_ctx *tctx, uint64_t key);
void rdmx_sw_conn_put(struct rdmx_sw_conn *c); /* no lock held */
/*
 * Request @wr_id is done with @st: complete it unless it succeeded
 * unsignaled (then its send queue slot, counted in `outstanding`, is held
 * for the next completion, as on a NIC).
 */
void rdmx_sw_done(struct rdmx_sw_conn *c, uint64_t wr_id, enum rdmx_opcode op,
		  bool unsignaled, rdmx_status st, uint32_t len);
/* Kill the connection: every queued request and RECV completes with @st. */
void rdmx_sw_conn_fail(struct rdmx_sw_conn *c, rdmx_status st);
void rdmx_sw_complete(struct rdmx_sw_conn *c, uint64_t wr_id,
		      enum rdmx_opcode op, rdmx_status st, uint32_t len,
		      uint32_t imm);

/* sw_post.c */
rdmx_status rdmx_sw_post_send(struct rdmx_conn *conn, const struct rdmx_wr *wr);
rdmx_status rdmx_sw_post_list(struct rdmx_conn *conn, const struct rdmx_wr *wrs,
			      int n, int *posted_p);
rdmx_status rdmx_sw_post_recv(struct rdmx_conn *conn, const struct rdmx_sge *sg,
			      int num_sge, uint64_t wr_id);
/* Fill a zeroed RECV with the checked @sg. */
void rdmx_sw_recv_fill(struct rdmx_sw_recv *r, const struct rdmx_sge *sg,
		       int num_sge, uint64_t wr_id);
/* A RECV that completed: back to where it came from (our cache, or the
 * srq's by way of srq_spent). Connection lock held. */
void rdmx_sw_recv_spent(struct rdmx_sw_conn *c, struct rdmx_sw_recv *r);
/* Queue an answer or control frame (ACK, NAK, READ_RESP, ATOMIC_RESP,
 * CREDIT); on failure the connection is dead. */
rdmx_status rdmx_sw_answer(struct rdmx_sw_conn *c, struct rdmx_sw_hdr *h,
			   struct rdmx_mr *mr, const struct iovec *payload);
/* Acknowledge request @seq, merged into a queued ACK where order allows. */
rdmx_status rdmx_sw_ack(struct rdmx_sw_conn *c, uint64_t seq);
/* Commit what credits allow, then send what the socket takes. */
void rdmx_sw_tx_progress(struct rdmx_sw_conn *c);
/* The same; with @hold, a transmit queue of bare ACKs waits (acks_held). */
void rdmx_sw_tx_progress_or_hold(struct rdmx_sw_conn *c, bool hold);
/* Send the ACKs connections hold back (no lock). */
void rdmx_sw_release_acks(struct rdmx_sw_ctx *tctx);
/* The same, from a spinner's progress call: ACKs that ride wait up to
 * RDMX_SW_HOLD_CALLS calls. */
void rdmx_sw_release_acks_due(struct rdmx_sw_ctx *tctx);
/* Some connection of @tctx holds ACKs back: a spinner's every poll looks
 * before it calls either of the above, whose calls were ~50 of an empty
 * poll's instructions (relaxed loads, as theirs). */
static inline bool rdmx_sw_acks_held(struct rdmx_sw_ctx *tctx)
{
	return atomic_load_explicit(&tctx->held, memory_order_relaxed) ||
	       atomic_load_explicit(&tctx->held_ride, memory_order_relaxed);
}
/* An object of @size from @k, zeroed up to @zeroed (all of it when it
 * comes from the heap); NULL when out of memory. */
void *rdmx_sw_cache_get(struct rdmx_sw_cache *k, size_t size, size_t zeroed);
/* Keep @p in @k for reuse, or free it when @k is full. */
void rdmx_sw_cache_put(struct rdmx_sw_cache *k, void *p);
/* Free all @k holds. */
void rdmx_sw_cache_free(struct rdmx_sw_cache *k);
/* Move all @from holds to @to (freeing what @to has no room for). */
void rdmx_sw_cache_move(struct rdmx_sw_cache *to, struct rdmx_sw_cache *from);
/* Done with @op unless a queue still holds it: to @c's cache, or freed.
 * Connection lock held. */
void rdmx_sw_op_drop(struct rdmx_sw_conn *c, struct rdmx_sw_op *op);

/* sw_progress.c */
/* Read and act on everything the socket has; @hold: as
 * rdmx_sw_tx_progress_or_hold. */
void rdmx_sw_rx_progress(struct rdmx_sw_conn *c, bool hold);
/* Handle ready connections without blocking; returns the number. */
int rdmx_sw_progress(void *priv, bool spinning);
void rdmx_sw_idle(void *priv);
void rdmx_sw_polled(void *priv);
void rdmx_sw_caller_serves(void *priv, int sleeping);
int rdmx_sw_progress_fd(void *priv);
void *rdmx_sw_thread(void *arg);

#endif
