/* SPDX-License-Identifier: MIT */
/* The shm transport: the software RC engine over shared-memory rings. */
#ifndef RDMX_SHM_H
#define RDMX_SHM_H

#include <sys/types.h>

#include "mem.h"
#include "shm_proto.h"
#include "sw.h"

#define RDMX_SHM_MAPS 8 /* blocks of the peer's mapped at a time */
/* A peer's block larger than this is mapped without filling its tables. */
#define RDMX_SHM_POPULATE_MAX (16ull << 20)
/* Bytes of free ring whose stamp slots a producer keeps zeroed ahead. */
#define RDMX_SHM_ZERO_AHEAD 1024
_Static_assert(RDMX_SHM_ZERO_AHEAD <= 4096 / 4,
	       "a quarter of the smallest ring a peer may offer (4 KiB)");

/* One connection's pipe: the ring we read and the one we write. */
struct rdmx_shm_pipe {
	struct rdmx_shm_ring *rx; /* ours: the peer produces, we consume */
	struct rdmx_shm_ring *tx; /* the peer's: we produce */
	uint8_t *rx_data, *tx_data;
	uint64_t rx_size, tx_size; /* powers of two */
	/* Ours as tx's producer: the tail we published (the peer can write
	 * the shared one), and the head we last read. */
	uint64_t tx_tail, tx_head;
	/*
	 * Ours as tx's producer: every line from tx_tail up to here starts
	 * with a zero stamp slot (shm_proto.h), zeroed ahead after a
	 * publish rather than before its stamp.
	 */
	uint64_t tx_zeroed;
	/* Ours as rx's consumer: the next byte to read and the end of its
	 * chunk (shm_proto.h). Changed under the connection's lock; ready()
	 * reads them without it. */
	_Atomic uint64_t rx_pos, rx_end;
	/*
	 * ready() looked for the next chunk and found none since our last
	 * read: the producer is not ahead of us. A read then takes the one
	 * chunk that came and does not look for another: that look would
	 * wait for the line the producer wrote last (~100 ns here) before
	 * our answer could go, and finds nothing; the poller that called
	 * ready() looks again. A producer that is ahead (the first look
	 * found its chunk), or a ring armed for the doorbell, is read chunk
	 * after chunk.
	 */
	_Atomic bool rx_idle;
	int door; /* our doorbell (the engine's c->fd) */
	int peer_door; /* the peer's doorbell */
	int ctl; /* the control socket: liveness (the engine's c->fd2) */
	int pidfd; /* the peer process, as SO_PEERCRED named it */
	pid_t peer_pid;
	bool peer_gone;
	bool fenced; /* both processes use rdmx_membarrier (shm_proto.h) */

	/* Mapped one-sided access to the peer's memory (shm_map.c). */
	struct rdmx_ctx *ctx;
	struct rdmx_shm_pipe *all_next; /* in the process's list of pipes */
	const struct rdmx_mem_table *grants; /* the peer's, read-only */
	bool direct_off; /* it cannot be had: the engine serves all */
	struct rdmx_shm_map {
		uint64_t ino;
		uint8_t *base;
		size_t len;
	} maps[RDMX_SHM_MAPS]; /* the peer's blocks we mapped */
	unsigned nmaps, evict;
	/*
	 * The grant the last request went by, and its block: the next one
	 * with the same rkey takes them while the grant's seq is unchanged,
	 * instead of a search of the peer's table and of the maps (a mapped
	 * 8-byte READ posted: 24.0 -> 22.0 ns here). Bounds and access are
	 * still checked per request, and rdmx_mem_still after copy_begin, as
	 * before. seen_base NULL: none. Under the connection's lock, as maps.
	 */
	uint64_t seen_rkey;
	struct rdmx_mem_view seen;
	uint8_t *seen_base;
};

extern const struct rdmx_sw_pipe rdmx_shm_pipe;

/* shm_conn.c: may this process use shm at all (see there)? */
bool rdmx_shm_usable(struct rdmx_ctx *ctx, int fd);
/* shm_conn.c: set up both rings over the control socket. */
rdmx_status rdmx_shm_pipe_setup(struct rdmx_ctx *ctx, int ctl, bool accepting,
				uint64_t deadline,
				struct rdmx_shm_pipe **pipe_p);
/*
 * What a peer hands over, checked before use: a memfd sealed against
 * shrinking that holds a ring of @size; an eventfd. RDMX_ERR_PROTOCOL,
 * logged, when not.
 */
rdmx_status rdmx_shm_ring_check(int fd, uint64_t size);
rdmx_status rdmx_shm_door_check(int fd);
void rdmx_shm_pipe_free(struct rdmx_shm_pipe *p);

static inline struct rdmx_shm_pipe *to_shm_pipe(struct rdmx_sw_conn *c)
{
	return c->pipe_priv;
}

/* shm_map.c */
/* The pipe's peer may copy into our memory now: list it for dereg. */
void rdmx_shm_map_join(struct rdmx_shm_pipe *p);
/* Off the list, the peer's blocks unmapped: the pipe goes. */
void rdmx_shm_map_leave(struct rdmx_shm_pipe *p);
/*
 * Map the peer's grant table, once, at connect: true when one-sided
 * requests on the memory it grants can be done here (RDMX_CONN_MAPPED);
 * false, logged once, and direct_off for good when not.
 */
bool rdmx_shm_map_peer(struct rdmx_shm_pipe *p);
/* The transport's remote_attach op: map the peer's block of @remote. */
void rdmx_shm_remote_attach(struct rdmx_conn *conn,
			    const struct rdmx_remote *remote);
/* The pipe's direct op (struct rdmx_sw_pipe). */
bool rdmx_shm_direct(struct rdmx_sw_conn *c, const struct rdmx_wr *wr,
		     uint64_t total);
/*
 * We start copying to or from the peer's memory: store cma_busy, fenced
 * so that the loads that follow (closed, sealed, a grant's seq) pair with
 * the peer's store then rdmx_shm_copy_wait. rdmx_shm_copy_end clears it.
 */
void rdmx_shm_copy_begin(struct rdmx_shm_pipe *p);
static inline void rdmx_shm_copy_end(struct rdmx_shm_pipe *p)
{
	atomic_store_explicit(&p->rx->cma_busy, 0, memory_order_release);
}
/*
 * Wait until the peer of @p copies nothing to or from our memory, or is
 * dead, or RDMX_SHM_COPY_WAIT_US passed (logged, naming @what).
 */
void rdmx_shm_copy_wait(struct rdmx_shm_pipe *p, const char *peer,
			const char *what);
/* The ops' mr_revoke: wait out peers that mapped @mr, then the engine's. */
void rdmx_shm_mr_revoke(void *priv, struct rdmx_mr *mr);

#endif
