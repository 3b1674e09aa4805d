/* SPDX-License-Identifier: MIT */
/*
 * The verbs transport: RC queue pairs on an RDMA device (InfiniBand, RoCE,
 * iWARP), connected with librdmacm from the control connection's addresses.
 *
 * A connection goes through the device that owns its address (rdma_cm
 * says which); a context opens each device when a connection first needs
 * it, with its protection domain and completion channel (verbs.device
 * limits it to one). Registrations are made on the first device at once
 * and on each other one when a request or a peer first names them there:
 * the rkey's low half is the first device's key, so a connection on
 * another one tells its peer to ask for the key that device uses
 * (verbs_proto.h). Each connection has its own CQ (send and receive) and
 * QP; every user work request is signaled, so completions arrive in
 * posting order per queue.
 *
 * Flow control is by credits, never RNR retry (iWARP has none): each side
 * RDMA-WRITEs the running count of RECVs it has posted into an 8-byte word
 * the peer registered; a SEND or WRITE_IMM goes to the NIC only while that
 * count exceeds what we consumed, and waits (with all work behind it) in a
 * software queue otherwise. A connection whose RECVs come from a shared
 * receive queue is the exception (verbs_srq.c): the NIC's RNR retry.
 *
 * Locking: `lock` of a connection guards its QP posting and its queues;
 * the context's `lock` guards the connection list. Order: context, then
 * connection, then cq.
 */
#ifndef RDMX_VERBS_H
#define RDMX_VERBS_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "core.h"
#include "sock.h"

struct rdmx_verbs_conn;

/* An open device of a context. */
struct rdmx_verbs_dev {
	unsigned idx; /* in rdmx_verbs_ctx.devs; 0 holds the rkeys' low half */
	struct ibv_context *dev; /* librdmacm's */
	struct ibv_pd *pd;
	struct ibv_comp_channel *chan;
	struct ibv_device_attr attr;
	/* Grants no remote access: its key answers a peer's ask for a key
	 * we refuse, so the peer's NIC fails that request as ours would. */
	struct ibv_mr *refuse_mr;
	uint64_t refuse_word;
	char name[IBV_SYSFS_NAME_MAX];
};

#define RDMX_VERBS_MAX_DEVS 8

/* A registration's own per device: tp_mr[RDMX_TRANSPORT_VERBS]. */
struct rdmx_verbs_mr {
	struct ibv_mr *imr[RDMX_VERBS_MAX_DEVS]; /* atomic: made lazily */
};

struct rdmx_verbs_ctx {
	struct rdmx_ctx *ctx;
	struct ibv_context **list; /* librdmacm's, freed at close */
	int nlist;
	/* Opened ones: devs[i] is set before ndevs counts it, never freed
	 * before close. dev_lock: opening one, and lazy registrations. */
	struct rdmx_verbs_dev *devs[RDMX_VERBS_MAX_DEVS];
	atomic_uint ndevs;
	pthread_mutex_t dev_lock;

	int epfd; /* channels, async fds, each connection's control socket,
		   * stop */
	int stop_efd;
	pthread_t thread;
	bool thread_running;
	atomic_bool stopping;

	pthread_mutex_t lock; /* the list */
	struct rdmx_verbs_conn *conns;
};

/* What a completion reports, kept per posted work request. */
struct rdmx_verbs_rec {
	uint64_t wr_id;
	enum rdmx_opcode opcode;
	uint32_t len;
	bool internal; /* a credit update: not the user's */
	bool signaled; /* the NIC reports it (else only if it fails) */
	bool report; /* the user wants its completion (not RDMX_WR_UNSIGNALED)
		      */
	bool done; /* send queue: finished, waiting for those before it */
	rdmx_status status; /* when done */
};

/* A work request waiting for a credit, copied with its sges. */
struct rdmx_verbs_pending {
	struct rdmx_verbs_pending *next;
	struct rdmx_wr wr;
	struct rdmx_sge sg[RDMX_MAX_SGE];
};

/* wr_id of a receive: the ring slot, tagged apart from send slots. */
#define RDMX_VERBS_RQ_TAG (1ull << 32)
/* wr_id of a shared receive queue's RECV: its slot in the srq. */
#define RDMX_VERBS_SRQ_TAG (1ull << 33)

/*
 * A shared receive queue on the device (InfiniBand and RoCE only: iWARP
 * has no RNR retry for a SEND to wait on). A SEND that finds it empty is
 * RNR-NAKed and retried by the sender's NIC without limit. Completions
 * come in the CQ of whichever connection consumed the RECV; the slot in
 * the wr_id finds its record.
 */
struct rdmx_verbs_srq {
	struct rdmx_verbs_ctx *vctx;
	struct rdmx_verbs_dev *d; /* the first: connections on it may use it */
	struct ibv_srq *ibsrq;
	pthread_mutex_t lock; /* the slots; nests inside connection locks */
	uint32_t size, nfree;
	uint32_t *free; /* stack of free slots */
	struct rdmx_verbs_srq_slot {
		uint64_t wr_id;
		uint64_t seq; /* posting order, for the flush at destroy */
		bool used;
	} * slot;
	uint64_t seq;
};

/* A FIFO of records: completions pop them in posting order. */
struct rdmx_verbs_ring {
	struct rdmx_verbs_rec *rec;
	uint32_t size, head, count;
	uint32_t signaled; /* how many of count will have a completion */
};

/* A peer's key on its device of a connection, for one of its rkeys. */
struct rdmx_verbs_key {
	uint64_t rkey;
	uint32_t key;
};

#define RDMX_VERBS_KEYS 256 /* a direct-mapped cache: a miss asks again */

struct rdmx_verbs_conn {
	struct rdmx_conn base;
	struct rdmx_verbs_ctx *vctx;
	struct rdmx_verbs_dev *d; /* the device that owns our address */
	struct rdmx_verbs_conn *next; /* in vctx->conns */
	int ctl; /* the control socket: liveness */

	struct rdma_event_channel *ech;
	struct rdma_cm_id *id;
	/* Accepting, between conn_create and conn_start: our rdma_cm
	 * listener and the peer's CONNECT_REQUEST, not yet answered. */
	struct rdma_cm_id *lid, *req;
	struct ibv_qp *qp;
	bool own_qp; /* created and moved through its states by us (verbs.mtu)
		      */
	uint32_t mtu; /* the smaller MTU both sides want, bytes; 0: the route's
		       */
	struct ibv_cq *cq;
	uint32_t max_inline;
	struct rdmx_verbs_srq *srq; /* our RECVs come from it: no credits */
	bool peer_srq; /* the peer's do: no credits to wait for */

	pthread_mutex_t lock;
	bool started; /* in vctx->conns: conn_start was called */
	/* Accepting on iWARP, until RDMX_VERBS_UP arrives: nothing goes on
	 * the wire (verbs_proto.h); since quiet_since (us). */
	bool quiet;
	uint64_t quiet_since;
	uint64_t pinged_us; /* RDMX_VERBS_PING last sent on ctl */
	bool dead; /* QP moved to error: flushing */
	rdmx_status flush_status;
	uint64_t dead_since; /* us: the device's grace to flush starts */
	bool sw_flushed; /* we completed what the device did not flush */
	/* An asynchronous QP error the device reported (an ibv_event_type),
	 * for the connection's own progress to act on. */
	atomic_int qp_event;
	struct rdmx_verbs_conn *qp_next; /* in the process's list of QPs */
	struct rdmx_verbs_ring sq, rq;
	struct rdmx_verbs_pending *pend_head, *pend_tail;
	uint32_t npending;

	/*
	 * The peer's connection is not on its first device: one-sided
	 * requests take their key from keys[], asked for on the control
	 * socket (one ask in flight: the pending head's, since asked_us).
	 */
	struct rdmx_verbs_key *keys;
	uint64_t key_asked; /* the rkey asked for; 0: none */
	uint64_t key_asked_us;
	struct rdmx_verbs_key key_answer; /* the last answer, for the head */
	uint8_t ctl_in[24]; /* a control message read in part */
	uint8_t ctl_in_len;

	/* credits */
	uint64_t *credit_in; /* the peer writes its RECVs posted here */
	uint64_t *credit_out; /* the source of our writes to the peer */
	struct ibv_mr *credit_mr;
	uint64_t peer_credit_addr;
	uint32_t peer_credit_rkey;
	uint64_t consumed; /* SENDs and WRITE_IMMs we gave the NIC */
	uint64_t recvs_posted; /* RECVs we posted */
	uint64_t recvs_told; /* the count our last credit write carried */
	bool credit_busy; /* a credit write is in flight */
	uint64_t busy_since; /* last completion, or first post after idle */
};

static inline struct rdmx_verbs_conn *to_verbs_conn(struct rdmx_conn *conn)
{
	return rdmx_container_of(conn, struct rdmx_verbs_conn, base);
}

/* verbs_dev.c */
rdmx_status rdmx_verbs_open(struct rdmx_ctx *ctx, void **priv_p);
void rdmx_verbs_close(void *priv);
bool rdmx_verbs_usable(struct rdmx_ctx *ctx, int fd);
/* Our address of control socket @fd, port 0: what rdma_cm binds to. */
int rdmx_verbs_local_addr(int fd, struct sockaddr_storage *ss);
/*
 * The device that owns our address of control socket @fd, opened if it
 * was not (and verbs.device allows it): RDMX_ERR_NO_TRANSPORT, logged,
 * when no device may serve it.
 */
rdmx_status rdmx_verbs_dev_of(struct rdmx_verbs_ctx *v, int fd,
			      struct rdmx_verbs_dev **d_p);
rdmx_status rdmx_verbs_reg_mr(void *priv, struct rdmx_mr *mr, uint32_t *rkey_p);
void rdmx_verbs_dereg_mr(void *priv, struct rdmx_mr *mr);
/*
 * @mr's registration on @d, made now if it was not; NULL for a zero-length
 * one, or when the device refuses (logged).
 */
struct ibv_mr *rdmx_verbs_mr_on(struct rdmx_verbs_ctx *v,
				struct rdmx_verbs_dev *d,
				const struct rdmx_mr *mr);

/*
 * Wake the progress thread so it recomputes how long it may sleep: a send
 * deferred for a credit, or a new connection, raises no event of its own.
 */
void rdmx_verbs_wake(struct rdmx_verbs_ctx *v);

static inline bool rdmx_verbs_iwarp(const struct rdmx_verbs_dev *d)
{
	return d->dev->device->transport_type == IBV_TRANSPORT_IWARP;
}

#define RDMX_VERBS_SIW_VENDOR 0x626d74 /* "bmt": Linux's siw.h */

/*
 * siw transmits inside ibv_post_send (and may send a Terminate inside
 * ibv_modify_qp), on a kernel TCP socket it writes without MSG_NOSIGNAL:
 * once the peer is gone, the kernel raises SIGPIPE on the calling thread.
 * Around such a call: rdmx_sigpipe_hold on siw (true), nothing elsewhere
 * (false); rdmx_sigpipe_release after it when held.
 */
static inline bool rdmx_verbs_sigpipe_hold(const struct rdmx_verbs_dev *d,
					   struct rdmx_sigpipe *sp)
{
	if (d->attr.vendor_id != RDMX_VERBS_SIW_VENDOR)
		return false;
	rdmx_sigpipe_hold(sp);
	return true;
}

/* verbs_conn.c */
rdmx_status rdmx_verbs_conn_create(void *priv, int fd, bool accepting,
				   const struct rdmx_conn_attr *attr,
				   uint64_t deadline,
				   struct rdmx_conn **conn_p);
rdmx_status rdmx_verbs_conn_start(struct rdmx_conn *conn);
void rdmx_verbs_conn_close(struct rdmx_conn *conn);
rdmx_status rdmx_verbs_conn_check(struct rdmx_conn *conn);
/* Move the QP to error: everything posted flushes with @st. */
void rdmx_verbs_conn_fail(struct rdmx_verbs_conn *c, rdmx_status st);
/* The connection is over (the device or we said so): what is posted will
 * complete with @st. Lock held. */
void rdmx_verbs_mark_dead(struct rdmx_verbs_conn *c, rdmx_status st);
/*
 * Asynchronous events name a QP, and every context on a device reads the
 * device's one event fd: the process's list of live QPs finds the
 * connection an event is about, whichever context read it.
 */
void rdmx_verbs_qp_list(struct rdmx_verbs_conn *c, bool add);
void rdmx_verbs_async(struct rdmx_verbs_dev *d);

/* verbs_srq.c */
extern const struct rdmx_srq_ops rdmx_verbs_srq_ops;
/* The record of the srq RECV in @slot, which completed; frees the slot. */
struct rdmx_verbs_rec rdmx_verbs_srq_take(struct rdmx_verbs_srq *s,
					  uint32_t slot);

/* verbs_post.c */
/* A RECV's sges for the device (zero-length ones left out); the count. */
int rdmx_verbs_recv_sges(struct rdmx_verbs_ctx *v, struct rdmx_verbs_dev *d,
			 const struct rdmx_sge *sg, int num_sge,
			 struct ibv_sge *out);
rdmx_status rdmx_verbs_post_send(struct rdmx_conn *conn,
				 const struct rdmx_wr *wr);
rdmx_status rdmx_verbs_post_list(struct rdmx_conn *conn,
				 const struct rdmx_wr *wrs, int n,
				 int *posted_p);
rdmx_status rdmx_verbs_post_recv(struct rdmx_conn *conn,
				 const struct rdmx_sge *sg, int num_sge,
				 uint64_t wr_id);
/* Post what credits now allow, and a credit update if one is due. */
void rdmx_verbs_kick(struct rdmx_verbs_conn *c);
void rdmx_verbs_flush_pending(struct rdmx_verbs_conn *c, rdmx_status st);
/* The peer's answer to our ask for @rkey's key: @key. Lock held. */
void rdmx_verbs_key_told(struct rdmx_verbs_conn *c, uint64_t rkey, uint32_t key,
			 bool ok);

/* verbs_progress.c */
/* Poll @c's CQ and deliver; returns completions handled. Lock held. */
int rdmx_verbs_poll_conn(struct rdmx_verbs_conn *c);
/*
 * Fail @c if the device completed nothing for verbs.request_timeout or
 * reported its QP in error; complete in software what a dead connection's
 * device has not flushed within RDMX_VERBS_FLUSH_GRACE_US. Lock held.
 */
void rdmx_verbs_watchdog(struct rdmx_verbs_conn *c, uint64_t now);
/* Complete every request still posted on dead @c with its flush status,
 * and ignore what the device reports for them later. Lock held. */
void rdmx_verbs_flush_sw(struct rdmx_verbs_conn *c);
#define RDMX_VERBS_FLUSH_GRACE_US 1000000
int rdmx_verbs_progress(void *priv, bool spinning);
int rdmx_verbs_progress_fd(void *priv);
void *rdmx_verbs_thread(void *arg);

#endif
