/* SPDX-License-Identifier: MIT */
/* The shm transport: the software RC engine over shared-memory rings. */
#ifndef RDMX_SHM_H
#define RDMX_SHM_H

#include <sys/types.h>

#include "shm_proto.h"
#include "sw.h"

/* One connection's pipe: the ring we read and the one we write. */
struct rdmx_shm_pipe {
	struct rdmx_shm_ring *rx; /* ours: the peer produces, we consume */
	struct rdmx_shm_ring *tx; /* the peer's: we produce */
	uint8_t *rx_data, *tx_data;
	uint64_t rx_size, tx_size; /* powers of two */
	int door; /* our doorbell (the engine's c->fd) */
	int peer_door; /* the peer's doorbell */
	int ctl; /* the control socket: liveness (the engine's c->fd2) */
	int pidfd; /* the peer process, as SO_PEERCRED named it */
	pid_t peer_pid;
	bool peer_gone;
};

extern const struct rdmx_sw_pipe rdmx_shm_pipe;

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

#endif
