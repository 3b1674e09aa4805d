/* SPDX-License-Identifier: MIT */
/*
 * Internal core objects and the transport ops table. Transports include this
 * file; core code never asks which transport it talks to, it calls ops and
 * checks RDMX_CAP_* bits.
 */
#ifndef RDMX_CORE_H
#define RDMX_CORE_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "log.h"
#include "rdmx.h"
#include "sock.h"
#include "spin.h"

/*
 * Thread-locals of the hot paths, initial-exec: read at a fixed offset
 * from the thread pointer, not through __tls_get_addr (a call per
 * message). 69 bytes of the static TLS glibc keeps spare for libraries
 * loaded later, dlopen included (stats.c's shard cache, cq.c's token).
 */
#define RDMX_TLS_FAST __attribute__((tls_model("initial-exec")))

#define rdmx_container_of(ptr, type, member)                                   \
	((type *)((char *)(ptr)-offsetof(type, member)))

/* Transport ids double as bit positions in the handshake's transport mask. */
enum rdmx_transport_id {
	RDMX_TRANSPORT_TCP = 0,
	RDMX_TRANSPORT_SHM = 1,
	RDMX_TRANSPORT_VERBS = 2,
	RDMX_TRANSPORT_MAX = 3,
};

enum {
	RDMX_CAP_SEND = 1 << 0,
	RDMX_CAP_WRITE = 1 << 1,
	RDMX_CAP_WRITE_IMM = 1 << 2,
	RDMX_CAP_READ = 1 << 3,
	RDMX_CAP_ATOMIC = 1 << 4,
	RDMX_CAP_SAME_HOST = 1 << 5, /* both ends must share a host */
};

struct rdmx_conn;
struct rdmx_srq;

/*
 * Shared receive queues of a transport. Transports whose ops point at the
 * same table can serve one srq together (tcp and shm: the software engine).
 */
struct rdmx_srq_ops {
	const char *name;
	/* Set up srq->tp; RECVs may be posted from then on. */
	rdmx_status (*create)(struct rdmx_srq *srq);
	/* No connection uses it: complete the RECVs still posted with
	 * RDMX_ERR_FLUSHED in srq->cq (conn NULL), then free srq->tp. */
	void (*destroy)(struct rdmx_srq *srq);
	/* The sges are checked. RDMX_ERR_AGAIN when max_wr are posted. */
	rdmx_status (*post_recv)(struct rdmx_srq *srq,
				 const struct rdmx_sge *sg, int num_sge,
				 uint64_t wr_id);
};

/*
 * One table per transport, with designated initializers. A NULL op is a
 * missing capability: core returns RDMX_ERR_UNSUPPORTED for it.
 */
struct rdmx_transport_ops {
	const char *name;
	enum rdmx_transport_id id;
	uint64_t caps;
	/* Per-context state, opened on first use, closed with the context. */
	rdmx_status (*open)(struct rdmx_ctx *ctx, void **priv_p);
	void (*close)(void *priv);
	/*
	 * Turn a control socket whose handshake chose this transport into a
	 * connection, its setup done by @deadline (rdmx_now_us() time), not
	 * started. Owns @fd from the call on, success or not, and reads or
	 * writes it only inside this call and from conn_start on.
	 */
	rdmx_status (*conn_create)(void *priv, int fd, bool accepting,
				   const struct rdmx_conn_attr *attr,
				   uint64_t deadline,
				   struct rdmx_conn **conn_p);
	/*
	 * Make a connection from conn_create live, its progress
	 * driven and its completions pushed to conn->cq (which core may
	 * change before the call). Until then nothing drives it and it
	 * completes nothing, so a listener can set it up before rdmx_accept
	 * hands it out. On failure it is as before the call.
	 */
	rdmx_status (*conn_start)(struct rdmx_conn *conn);
	/*
	 * Flush posted work as RDMX_ERR_FLUSHED into the cq, then free;
	 * also a connection that was never started.
	 */
	void (*conn_close)(struct rdmx_conn *conn);
	/* RDMX_OK while up, else the status its work ended with. */
	rdmx_status (*conn_check)(struct rdmx_conn *conn);
	/* Initiator ops, all opcodes; wr and its sges are already checked. */
	rdmx_status (*post_send)(struct rdmx_conn *conn,
				 const struct rdmx_wr *wr);
	/*
	 * Optional: post @n checked requests in order with one doorbell;
	 * sets *posted_p. NULL: core posts them one by one.
	 */
	rdmx_status (*post_list)(struct rdmx_conn *conn,
				 const struct rdmx_wr *wrs, int n,
				 int *posted_p);
	rdmx_status (*post_recv)(struct rdmx_conn *conn,
				 const struct rdmx_sge *sg, int num_sge,
				 uint64_t wr_id);
	/*
	 * Non-blocking progress on the caller's thread; returns events.
	 * @spinning: the caller polls in a loop and will call again soon, so
	 * a background thread may stay out of its way until idle().
	 */
	int (*progress)(void *priv, bool spinning);
	/* The callers stop driving progress (one is about to sleep). */
	void (*idle)(void *priv);
	/*
	 * Optional: a spinning caller took completions that were already
	 * queued, so it made no progress call, but polls all the same: a
	 * background thread should stay out of its way as for progress().
	 */
	void (*polled)(void *priv);
	/*
	 * Optional: a caller serves this transport from progress_fd, which
	 * shows all its input: it sleeps on the fd in rdmx_cq_wait (@sleeping
	 * 1 going in, -1 woken) or polls from an event loop on rdmx_cq_fd
	 * (0). A background thread may stay out of its way while one sleeps,
	 * and as for progress(spinning) after. NULL: a caller that goes to
	 * sleep calls idle() and the thread serves.
	 */
	void (*served)(void *priv, int sleeping);
	/*
	 * Optional: can this transport reach the peer of the control socket
	 * @fd from here? Decides what the handshake offers. NULL: yes.
	 */
	bool (*usable)(struct rdmx_ctx *ctx, int fd);
	/*
	 * Optional: register @mr with the hardware too. May set *rkey_p: the
	 * key a peer must use (the NIC's). Undone by dereg_mr.
	 */
	rdmx_status (*reg_mr)(void *priv, struct rdmx_mr *mr, uint32_t *rkey_p);
	void (*dereg_mr)(void *priv, struct rdmx_mr *mr);
	/*
	 * Optional: @mr is being deregistered: end the connections whose
	 * posted requests still use it, as a NIC's protection error would,
	 * and keep RECVs on it from being written. Nothing of ours touches
	 * the region once it returns.
	 */
	void (*mr_revoke)(void *priv, struct rdmx_mr *mr);
	/* A descriptor readable when progress() has work (for waiting). */
	int (*progress_fd)(void *priv);
	/*
	 * Optional: get ready for one-sided requests on the peer's region
	 * @remote now (rdmx_remote_attach). NULL: nothing to do.
	 */
	void (*remote_attach)(struct rdmx_conn *conn,
			      const struct rdmx_remote *remote);
	/*
	 * Optional: shared receive queues. conn_create then honours
	 * attr->srq (RDMX_CONN_ATTR_SRQ), whose ops are these.
	 */
	const struct rdmx_srq_ops *srq;
};

extern const struct rdmx_transport_ops rdmx_tcp_ops;
extern const struct rdmx_transport_ops rdmx_shm_ops;
#ifdef RDMX_HAVE_VERBS
extern const struct rdmx_transport_ops rdmx_verbs_ops;
#endif

/* ---- context ------------------------------------------------------------ */

#define RDMX_MR_BUCKETS 256
#define RDMX_AUTH_KEY_MAX 1024

#define RDMX_HOST_ID_LEN 16

struct rdmx_ctx {
	struct rdmx_config cfg;
	cpu_set_t cpus; /* where the creating thread could run: progress
			 * threads run there unless progress.cpu pins them */
	/* Equal in two contexts that can reach each other's memory. */
	uint8_t host_id[RDMX_HOST_ID_LEN];
	uint8_t auth_key[RDMX_AUTH_KEY_MAX];
	size_t auth_key_len; /* 0: no pre-shared key */
	/* auth.allowed_peers, parsed; none: everyone */
	struct rdmx_cidr allowed[RDMX_CIDR_MAX];
	int nallowed;

	pthread_mutex_t lock; /* children counts and transport opening */
	unsigned nconns, ncqs, nlisteners, nmrs, nsrqs, nmems;

	pthread_rwlock_t mr_lock; /* the rkey table, mems and the grants */
	struct rdmx_mr *mr_buckets[RDMX_MR_BUCKETS];
	struct rdmx_mem *mems; /* rdmx_mem_alloc's blocks (mem.h) */
	struct rdmx_mem_table *mem_table; /* grants to same-host peers */
	int mem_table_fd;
	uint64_t mem_table_ino;

	struct {
		const struct rdmx_transport_ops *ops;
		_Atomic(void *) priv; /* set once under lock, read anywhere */
		bool absent; /* open said RDMX_ERR_UNSUPPORTED: do not ask again
			      */
	} tp[RDMX_TRANSPORT_MAX];
	/*
	 * 1 + the id of the one open transport with a progress op, while it
	 * is the only one; -1 once there are more (set under lock): then
	 * rdmx_ctx_progress calls it alone, a jump where the loop over all
	 * cost ~40 of an empty spinning poll's ~310 instructions.
	 */
	atomic_int progress_only;

	struct rdmx_stats stats; /* relaxed atomic adds only (stats.c) */
	/* Per-thread shards of the message counters (stats.c): pushed under
	 * shards_lock, read without it; id keys the threads' caches. */
	uint64_t id;
	pthread_mutex_t shards_lock;
	_Atomic(struct rdmx_stats_shard *) shards;

	struct { /* "@NAME" -> "host:port"; under lock */
		rdmx_resolve_fn fn;
		void *arg;
	} resolver;
	struct rdmx_ctx *all_next; /* the live contexts (ctx.c) */
};

/* "@NAME" without the '@': its address, through the context's resolver. */
rdmx_status rdmx_ctx_resolve(struct rdmx_ctx *ctx, const char *name, char *addr,
			     size_t len);

/* Open (once) and return the per-context state of a transport. */
rdmx_status rdmx_ctx_transport(struct rdmx_ctx *ctx, enum rdmx_transport_id id,
			       void **priv_p);
/*
 * Bit mask of transports this context could use, after transport config,
 * for the connection on control socket @fd (-1: any connection).
 */
uint64_t rdmx_ctx_transport_mask(struct rdmx_ctx *ctx, int fd);
const struct rdmx_transport_ops *rdmx_transport_by_id(unsigned id);
/* Drive every open transport once; returns the number of events. */
int rdmx_ctx_progress(struct rdmx_ctx *ctx, bool spinning);
/* Tell every open transport that callers stopped driving progress. */
void rdmx_ctx_idle(struct rdmx_ctx *ctx);
/* Tell every open transport that a spinning caller polled (ops.polled). */
void rdmx_ctx_polled(struct rdmx_ctx *ctx);
/*
 * This thread spins on a cq of @ctx (rdmx_poll): noted, so that it hands
 * @ctx back when it sleeps on another context's cq (rdmx_ctx_sleeps).
 */
extern _Thread_local RDMX_TLS_FAST uint64_t rdmx_spun_last; /* its id */
void rdmx_ctx_spun_note(const struct rdmx_ctx *ctx);
static inline void rdmx_ctx_spun(const struct rdmx_ctx *ctx)
{
	if (rdmx_spun_last != ctx->id)
		rdmx_ctx_spun_note(ctx);
}
/* This thread is about to sleep on a cq of @ctx (rdmx_cq_wait, rdmx_cq_fd):
 * every other context it spun on since it last slept is told idle. */
void rdmx_ctx_sleeps(const struct rdmx_ctx *ctx);
/*
 * A caller serves from the progress fds (ops.served): @sleeping 1 before
 * it sleeps on them, -1 with the mask that call returned once it woke, 0
 * for a poll from an event loop on rdmx_cq_fd. A transport without
 * ops.served is told idle() at sleep instead. Returns the transports told
 * of a sleeper.
 */
unsigned rdmx_ctx_served(struct rdmx_ctx *ctx, int sleeping, unsigned told);
void rdmx_ctx_child(struct rdmx_ctx *ctx, unsigned *counter, int delta);

/* ---- memory registration ------------------------------------------------ */

struct rdmx_mr {
	struct rdmx_ctx *ctx;
	uint8_t *addr;
	size_t length;
	unsigned access;
	uint64_t rkey; /* rdmx_remote.rkey: random high half, NIC's low */
	atomic_uint refs; /* transfers in progress into or out of it */
	struct rdmx_mem *mem; /* the rdmx_mem_alloc block it lies in */
	int grant; /* its entry in the grant table (mem.h), or -1: never
		    * granted */
	void *tp_mr[RDMX_TRANSPORT_MAX]; /* a transport's own registration */
	struct rdmx_mr *next; /* rkey hash chain */
};

/*
 * rdmx_mr_acquire - the target side of a one-sided operation: find the live
 * registration @rkey and check that [addr, addr + len) lies inside it with
 * every bit of @access. Returns it with a reference held, to be dropped by
 * rdmx_mr_release() when the transfer ends, or NULL (and logs at debug),
 * with the reason in *why_p.
 */
struct rdmx_mr *rdmx_mr_acquire(struct rdmx_ctx *ctx, uint64_t rkey,
				uint64_t addr, uint64_t len, unsigned access,
				enum rdmx_refusal *why_p);
void rdmx_mr_release(struct rdmx_mr *mr);

/* Log why rdmx_sge_check refused @sg: num_sge (@i -1), or its entry @i
 * (past its registration, or @write into one without LOCAL_WRITE). */
rdmx_status rdmx_sge_refuse(const struct rdmx_sge *sg, int num_sge, int max,
			    int i, bool write);

/*
 * rdmx_sge_check - check a local sge list: each entry inside its mr, with
 * LOCAL_WRITE when @write. Sets *total_p to the byte count. Inline: every
 * post and post_recv makes it, and the call was ~25 of its ~50
 * instructions for one sge.
 */
static inline rdmx_status rdmx_sge_check(const struct rdmx_sge *sg, int num_sge,
					 int max, bool write, uint64_t *total_p)
{
	uint64_t total = 0;

	if (num_sge < 0 || num_sge > max || (num_sge && !sg))
		return rdmx_sge_refuse(sg, num_sge, max, -1, write);
	for (int i = 0; i < num_sge; i++) {
		const struct rdmx_mr *mr = sg[i].mr;
		uintptr_t a = (uintptr_t)sg[i].addr;

		if (!sg[i].length)
			continue;
		if (!mr || a < (uintptr_t)mr->addr ||
		    sg[i].length > mr->length ||
		    a - (uintptr_t)mr->addr > mr->length - sg[i].length)
			return rdmx_sge_refuse(sg, num_sge, max, i, false);
		if (write && !(mr->access & RDMX_ACCESS_LOCAL_WRITE))
			return rdmx_sge_refuse(sg, num_sge, max, i, true);
		total += sg[i].length;
	}
	*total_p = total;
	return RDMX_OK;
}
/* The same for a RECV's sges: LOCAL_WRITE, at most conn.max_sge. */
rdmx_status rdmx_recv_check(const struct rdmx_ctx *ctx,
			    const struct rdmx_sge *sg, int num_sge);

/* ---- completion queues -------------------------------------------------- */

/* The owner's lane of a cq (cq.c): completions its one poller made itself. */
#define RDMX_CQ_LANE 16

struct rdmx_cq {
	struct rdmx_ctx *ctx;
	/*
	 * The lane (cq.c, "The owner's lane"): owner is 0 until a thread
	 * polls, then that thread's token, and RDMX_CQ_SHARED once the lane
	 * has closed. lane_head and lane_count are the owner's, or the
	 * closer's once the owner is out (owner_in clear).
	 */
	_Atomic uintptr_t owner;
	atomic_bool owner_in;
	uint32_t lane_head, lane_count;
	struct rdmx_completion lane[RDMX_CQ_LANE];
	struct rdmx_spin lock; /* the ring and the fields below it */
	struct rdmx_completion *ring;
	uint32_t cap, head;
	atomic_uint count; /* relaxed: the owner reads it without the lock */
	int efd; /* eventfd: nonzero while completions are ready */
	/*
	 * What rdmx_cq_fd hands out: an epoll set of efd and the progress
	 * fds of the context's open transports (the bits of wfd_tps), so a
	 * sleeper wakes on its peer's signal itself, not after a progress
	 * thread woke and signalled efd: one cross-core wake-up, not two.
	 */
	int wfd;
	atomic_uint wfd_tps;
	atomic_bool fd_exported; /* the user holds wfd: always signal */
	bool signaled; /* efd counter is nonzero */
	/* A push of the polling thread's own progress left efd for the end
	 * of its rdmx_poll (rdmx_cq_signal). */
	atomic_bool signal_due;
	unsigned waiters; /* threads sleeping in rdmx_cq_wait */
	unsigned nconns;
	atomic_uint polls; /* rdmx_poll's that found some; relaxed, racy */
	atomic_uint backlog_taken; /* rdmx_cq_backlog_turn; relaxed, racy */
	/*
	 * Closed connections (cq.c, "Closed connections"): closed, whose
	 * completions may still be here; given_out, whose have all been
	 * taken, freed at the next take. any_closed: either is nonempty.
	 */
	struct rdmx_conn *closed, *given_out;
	atomic_bool any_closed;
};

/*
 * A connection just closed, whose completions are all in @cq by now:
 * its memory is kept until they have been taken and the cq polled again.
 */
void rdmx_cq_closed(struct rdmx_cq *cq, struct rdmx_conn *conn);
/* Deliver one completion; call with no cq lock held (any thread). */
void rdmx_cq_push(struct rdmx_cq *cq, const struct rdmx_completion *wc);
/* A connection starts or stops delivering to @cq. */
void rdmx_cq_attach(struct rdmx_cq *cq, int delta);

/* ---- shared receive queues (srq.c) -------------------------------------- */

struct rdmx_srq {
	struct rdmx_ctx *ctx;
	struct rdmx_cq *cq; /* where RECVs left at destroy flush */
	uint32_t max_wr;
	const struct rdmx_srq_ops *ops;
	uint64_t transports; /* bit mask of the transports it can serve */
	void *tp; /* the transports' state, owned by ops */
	atomic_uint nconns;
};

/*
 * The transports a connection with @attr may be set up over: its
 * attr.transports, and its srq's (~0: no limit). Used by the handshake on
 * both sides.
 */
uint64_t rdmx_conn_attr_transports(const struct rdmx_conn_attr *attr);

/* ---- connections -------------------------------------------------------- */

/* Every transport connection embeds this first (to_<t>_conn() maps back). */
struct rdmx_conn {
	struct rdmx_ctx *ctx;
	const struct rdmx_transport_ops *ops;
	struct rdmx_cq *cq;
	struct rdmx_srq *srq; /* NULL: RECVs are the connection's own */
	void *user_ctx;
	uint64_t caps; /* RDMX_CAP_*: the transport's, less what the device
			  lacks */
	struct rdmx_conn_info info;
	struct rdmx_lat *lat; /* post stamps; NULL unless metrics.latency */
	uint8_t peer_data[RDMX_PRIVATE_DATA_MAX]; /* the peer's private data */
	uint16_t peer_data_len;
	int ctl_fd; /* the control socket, the transport's: core writes on it
		       only before conn_start */
	/*
	 * A closed connection's memory outlives its close until its cq has
	 * given out every completion naming it (cq.c, "Closed connections"):
	 * keep counts the holders beside the transport, and the transport
	 * frees with rdmx_conn_mem_put, never free.
	 */
	atomic_uint keep;
	atomic_bool named; /* by a completion pushed to the cq (relaxed) */
	struct rdmx_conn *next_closed; /* the cq's lists, under its lock */
};

/*
 * The transport lets go of @conn's memory (its last use of it): freed
 * here unless the cq still holds it, then when the cq lets go.
 */
void rdmx_conn_mem_put(struct rdmx_conn *conn);

/*
 * A connection in two steps (conn.c), so that a listener's workers can do
 * the first, which waits on the peer, before rdmx_accept is called.
 *
 * rdmx_conn_setup hands a control socket that finished its handshake to
 * its transport, whose setup ends by @deadline, and exchanges the private
 * data that can be (see handshake.h). It owns @fd from here on, and
 * closes it if it fails. The connection it gives is not live: nothing
 * drives it and it completes nothing. A server's setup uses no more of
 * @attr than its cq (to fill the connection in); a client's uses its srq
 * too (a verbs QP is made here).
 *
 * rdmx_conn_start sends the server's private data (@accepting), takes
 * @attr's cq, srq and user_ctx, counts the connection and makes it live
 * (the transport binds the srq there). On failure the connection is gone.
 * rdmx_conn_discard frees one that was set up and never started.
 */
struct rdmx_hs_result;
rdmx_status rdmx_conn_setup(struct rdmx_ctx *ctx, int fd, bool accepting,
			    const struct rdmx_hs_result *res,
			    const struct rdmx_conn_attr *attr,
			    uint64_t deadline, struct rdmx_conn **conn_p);
rdmx_status rdmx_conn_start(struct rdmx_conn *conn, bool accepting,
			    const struct rdmx_conn_attr *attr,
			    uint64_t deadline, struct rdmx_conn **conn_p);
void rdmx_conn_discard(struct rdmx_conn *conn);
/* @attr is usable on @ctx, and @out is not NULL; logs what is wrong. */
bool rdmx_conn_attr_ok(const struct rdmx_ctx *ctx,
		       const struct rdmx_conn_attr *attr, void *out);

/* Fill the base part; used by transports in conn_create. */
void rdmx_conn_init(struct rdmx_conn *conn, struct rdmx_ctx *ctx,
		    const struct rdmx_transport_ops *ops,
		    const struct rdmx_conn_attr *attr);

/* ---- statistics (stats.c) ----------------------------------------------- */

/*
 * Posted requests: one with the byte count rdmx_wr_check found, or a
 * list's tally, added to the counters in one go (a request the transport
 * did not take is taken out of the tally first).
 */
struct rdmx_stats_tally {
	uint64_t ops[RDMX_STATS_OPS], bytes[RDMX_STATS_OPS];
};
/* At rdmx_ctx_create and _destroy: the context's id and shards. */
void rdmx_stats_init(struct rdmx_ctx *ctx);
void rdmx_stats_fini(struct rdmx_ctx *ctx);
void rdmx_stats_posted(struct rdmx_conn *conn, enum rdmx_opcode op,
		       uint64_t bytes);
void rdmx_stats_unposted(struct rdmx_stats_tally *t, const struct rdmx_wr *wr);
void rdmx_stats_posted_tally(struct rdmx_conn *conn,
			     const struct rdmx_stats_tally *t);
/* Count a completion (from rdmx_cq_push, the connection still alive). */
void rdmx_stats_completed(struct rdmx_ctx *ctx,
			  const struct rdmx_completion *wc);
/* A peer's one-sided request refused; @cut: the peer is cut off for it. */
/* The target side: a peer's one-sided request refused (and the peer cut
 * off, @cut), or served over transport @tp. */
void rdmx_stats_refused(struct rdmx_ctx *ctx, bool cut, enum rdmx_refusal why);
void rdmx_stats_served(struct rdmx_ctx *ctx, unsigned tp, enum rdmx_opcode op,
		       uint64_t bytes);
/* A connection of this transport opened (+1) or closed (-1). */
void rdmx_stats_conn(struct rdmx_conn *conn, int delta);
/* The post-time FIFO: created with the connection, stamped before a post,
 * the stamps of requests that were not posted taken back after. */
rdmx_status rdmx_lat_create(struct rdmx_conn *conn);
void rdmx_lat_destroy(struct rdmx_lat *lat);
void rdmx_lat_stamp_on(struct rdmx_conn *conn, const struct rdmx_wr *wrs,
		       int n);
void rdmx_lat_unstamp(struct rdmx_conn *conn, const struct rdmx_wr *wrs, int n);

/*
 * A connection's latency table. A connection is live before rdmx_accept
 * returns it: a server whose RECVs come from a srq may complete and answer
 * its first SEND while the accepting thread still attaches the table. Read
 * it as the completion path does.
 */
static inline struct rdmx_lat *rdmx_lat_of(const struct rdmx_conn *conn)
{
	return __atomic_load_n(&conn->lat, __ATOMIC_ACQUIRE);
}

/* Inline, the test for a table that is there only with metrics.latency:
 * a call on every post cost ~2 ns of a mapped 8-byte READ's ~44. */
static inline void rdmx_lat_stamp(struct rdmx_conn *conn,
				  const struct rdmx_wr *wrs, int n)
{
	if (rdmx_lat_of(conn))
		rdmx_lat_stamp_on(conn, wrs, n);
}

/* Monotonic clock in microseconds. */
uint64_t rdmx_now_us(void);

/*
 * The cq a spinner's rdmx_poll makes progress for, during that progress
 * call; NULL in every other progress call (the thread's, rdmx_cq_wait's).
 * A transport may tell callers that poll many cqs apart from one that
 * polls one (rdmx_sw_epoll_shared).
 */
extern _Thread_local RDMX_TLS_FAST const struct rdmx_cq *rdmx_progress_cq;
/* The deadline @timeout_ms from now; UINT64_MAX when negative (never). */
uint64_t rdmx_deadline(int timeout_ms);
/* Milliseconds left until @deadline_us, rounded up, for poll(): -1 for
 * UINT64_MAX, 0 once it has passed. */
int rdmx_ms_left(uint64_t deadline_us);
/* A thread of ours running @fn(@arg), with every signal blocked. */
rdmx_status rdmx_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg,
			      const char *what);
/* A transport's progress thread: named "rdmx-@name" (top -H shows it) and
 * pinned to progress.cpu when that is set. */
rdmx_status rdmx_progress_thread_start(struct rdmx_ctx *ctx, pthread_t *thread,
				       void *(*fn)(void *), void *arg,
				       const char *name);

#endif
