/* SPDX-License-Identifier: MIT */
/*
 * Private types of the tcp transport: a software RC queue pair over one TCP
 * socket (the control connection, after its handshake).
 *
 * Locking: each connection has one mutex, `lock`, that guards all of its
 * state, the socket I/O included; every rdmx_tcp_* function below that takes
 * a `struct rdmx_tcp_conn *` expects it held unless it says otherwise. The
 * cq lock nests inside it. The per-context `slots_lock` guards the table
 * that maps epoll keys to connections and nests outside no other lock.
 */
#ifndef RDMX_TCP_H
#define RDMX_TCP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core.h"
#include "tcp_proto.h"

/* Per-context state: one epoll set and, by default, one progress thread. */
struct rdmx_tcp_ctx {
	struct rdmx_ctx *ctx;
	int epfd;
	int stop_efd; /* tells the progress thread to exit */
	pthread_t thread;
	bool thread_running;

	/*
	 * epoll carries a key (generation << 32 | slot + 1), never a pointer:
	 * a connection closed while another thread holds its epoll event
	 * simply fails to look up.
	 */
	pthread_mutex_t slots_lock;
	struct rdmx_tcp_conn **slots;
	uint32_t *gens;
	uint32_t nslots;
};

/* A frame to transmit: a request (kept until answered) or an answer. */
struct rdmx_tcp_op {
	struct rdmx_tcp_op *next; /* sq or inflight queue */
	struct rdmx_tcp_op *tx_next; /* transmit queue */
	uint8_t hdr[RDMX_TCP_HDR_LEN];
	struct rdmx_tcp_hdr h; /* decoded copy; packed on commit */
	struct iovec iov[1 + RDMX_MAX_SGE]; /* iov[0] is hdr */
	int iovcnt;
	size_t tx_len; /* sum of iov lengths */
	bool in_q; /* in sq or inflight */
	bool in_tx; /* in the transmit queue */
	bool needs_credit; /* SEND, WRITE_IMM */
	/* requests */
	uint64_t wr_id;
	enum rdmx_opcode opcode;
	uint32_t len;
	struct iovec local[RDMX_MAX_SGE]; /* where READ / atomic data land */
	int nlocal;
	/* READ_RESP: the registration its payload comes from */
	struct rdmx_mr *mr;
};

struct rdmx_tcp_queue {
	struct rdmx_tcp_op *head, *tail;
};

struct rdmx_tcp_recv {
	struct rdmx_tcp_recv *next;
	uint64_t wr_id;
	uint64_t cap;
	struct iovec iov[RDMX_MAX_SGE];
	int niov;
};

#define RDMX_TCP_RXBUF (64 * 1024)

struct rdmx_tcp_conn {
	struct rdmx_conn base;
	struct rdmx_tcp_ctx *tctx;
	int fd;
	uint64_t key;
	atomic_int refs; /* the user's, plus one per progress call inside */

	pthread_mutex_t lock;
	bool dead;
	bool want_out; /* EPOLLOUT is armed */

	/* initiator */
	uint64_t next_seq;
	uint32_t outstanding; /* in sq + inflight */
	uint32_t peer_credits; /* RECVs the peer posted that we may consume */
	struct rdmx_tcp_queue sq; /* posted, not yet committed */
	struct rdmx_tcp_queue inflight; /* committed, awaiting an answer */

	/* transmit */
	struct rdmx_tcp_op *tx_head, *tx_tail;
	size_t tx_off; /* bytes of tx_head already sent */

	/* target */
	struct rdmx_tcp_recv *rq_head, *rq_tail;
	uint32_t rq_count;
	uint32_t grant; /* RECVs posted but not yet told to the peer */

	/* receive state: a header, then its payload */
	uint8_t rxbuf[RDMX_TCP_RXBUF];
	size_t rx_pos, rx_len;
	bool rx_in_payload;
	struct rdmx_tcp_hdr rx_h;
	struct iovec rx_iov[RDMX_MAX_SGE]; /* where payload goes; none: drop */
	int rx_niov, rx_iov_i;
	uint64_t rx_left;
	uint16_t rx_nak; /* answer with this NAK when placed */
	struct rdmx_mr *rx_mr; /* WRITE target, held while placing */
	struct rdmx_tcp_recv *rx_recv; /* RECV a SEND is filling */
};

static inline struct rdmx_tcp_conn *to_tcp_conn(struct rdmx_conn *conn)
{
	return rdmx_container_of(conn, struct rdmx_tcp_conn, base);
}

/* tcp_conn.c */
rdmx_status rdmx_tcp_open(struct rdmx_ctx *ctx, void **priv_p);
void rdmx_tcp_close(void *priv);
rdmx_status rdmx_tcp_conn_create(void *priv, int fd,
				 const struct rdmx_conn_attr *attr,
				 struct rdmx_conn **conn_p);
void rdmx_tcp_conn_close(struct rdmx_conn *conn);
/* Look up by epoll key and take a reference; NULL if closed. No lock. */
struct rdmx_tcp_conn *rdmx_tcp_conn_get(struct rdmx_tcp_ctx *tctx,
					uint64_t key);
void rdmx_tcp_conn_put(struct rdmx_tcp_conn *c); /* no lock held */
/* Kill the connection: every queued request and RECV completes with @st. */
void rdmx_tcp_conn_fail(struct rdmx_tcp_conn *c, rdmx_status st);
void rdmx_tcp_complete(struct rdmx_tcp_conn *c, uint64_t wr_id,
		       enum rdmx_opcode op, rdmx_status st, uint32_t len,
		       uint32_t imm);

/* tcp_post.c */
rdmx_status rdmx_tcp_post_send(struct rdmx_conn *conn,
			       const struct rdmx_wr *wr);
rdmx_status rdmx_tcp_post_recv(struct rdmx_conn *conn,
			       const struct rdmx_sge *sg, int num_sge,
			       uint64_t wr_id);
/* Queue an answer frame (ACK, NAK, READ_RESP, ATOMIC_RESP). */
rdmx_status rdmx_tcp_answer(struct rdmx_tcp_conn *c, struct rdmx_tcp_hdr *h,
			    struct rdmx_mr *mr, const struct iovec *payload);
/* Acknowledge request @seq, merged into a queued ACK where order allows. */
rdmx_status rdmx_tcp_ack(struct rdmx_tcp_conn *c, uint64_t seq);
/* Commit what credits allow, then send what the socket takes. */
void rdmx_tcp_tx_progress(struct rdmx_tcp_conn *c);
/* Free @op once it is in neither the transmit nor a request queue. */
void rdmx_tcp_op_drop(struct rdmx_tcp_op *op);

/* tcp_progress.c */
/* Read and act on everything the socket has. */
void rdmx_tcp_rx_progress(struct rdmx_tcp_conn *c);
/* Handle ready connections without blocking; returns the number. */
int rdmx_tcp_progress(void *priv);
int rdmx_tcp_progress_fd(void *priv);
void *rdmx_tcp_thread(void *arg);

#endif
