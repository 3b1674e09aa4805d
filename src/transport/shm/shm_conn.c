/* SPDX-License-Identifier: MIT */
/*
 * Setting up a shm connection: each side creates the ring it will read and
 * a doorbell, tells the peer their fd numbers and its pid over the control
 * socket, and takes the peer's with pidfd_getfd(). The handshake chose shm
 * only for two processes of one host, pid namespace and user, so the peer
 * may reach our fds, and we its.
 */
#include <errno.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shm.h"
#include "sock.h"

#define RDMX_SHM_MAX_RING (64ull << 20)

static int rdmx_shm_pidfd_open(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

static int rdmx_shm_pidfd_getfd(int pidfd, int fd)
{
	return (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
}

static void *rdmx_shm_map(int fd, uint64_t size)
{
	void *p = mmap(NULL, RDMX_SHM_RING_HDR + size, PROT_READ | PROT_WRITE,
		       MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* Our ring: a memfd of header + @size bytes, mapped. Returns its fd. */
static int rdmx_shm_ring_create(uint64_t size, struct rdmx_shm_ring **ring_p)
{
	struct rdmx_shm_ring *r;
	int fd;

	fd = memfd_create("rdmx-shm-ring", MFD_CLOEXEC);
	if (fd < 0) {
		rdmx_error("shm: memfd_create: %m");
		return -1;
	}
	if (ftruncate(fd, (off_t)(RDMX_SHM_RING_HDR + size))) {
		rdmx_error("shm: ftruncate ring of %llu bytes: %m",
			   (unsigned long long)size);
		close(fd);
		return -1;
	}
	r = rdmx_shm_map(fd, size);
	if (!r) {
		rdmx_error("shm: mmap ring: %m");
		close(fd);
		return -1;
	}
	r->magic = RDMX_SHM_MAGIC;
	r->version = RDMX_SHM_VERSION;
	r->size = size;
	r->id = (uint64_t)randombytes_random() << 32 | randombytes_random();
	/* Armed from the start: the consumer may be asleep already. */
	atomic_store(&r->consumer_waiting, 1);
	*ring_p = r;
	return fd;
}

void rdmx_shm_pipe_free(struct rdmx_shm_pipe *p)
{
	if (!p)
		return;
	if (p->rx)
		munmap(p->rx, RDMX_SHM_RING_HDR + p->rx_size);
	if (p->tx)
		munmap(p->tx, RDMX_SHM_RING_HDR + p->tx_size);
	if (p->door >= 0)
		close(p->door);
	if (p->peer_door >= 0)
		close(p->peer_door);
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (p->ctl >= 0)
		close(p->ctl);
	free(p);
}

/* Take the peer's ring and doorbell, as its hello names them. */
static rdmx_status rdmx_shm_attach(struct rdmx_shm_pipe *p,
				   const struct rdmx_shm_hello *h)
{
	int ring_fd;

	if (h->size < 4096 || h->size > RDMX_SHM_MAX_RING ||
	    (h->size & (h->size - 1))) {
		rdmx_error("shm: peer offers a ring of %llu bytes",
			   (unsigned long long)h->size);
		return RDMX_ERR_PROTOCOL;
	}
	p->peer_pid = (pid_t)h->pid;
	p->pidfd = rdmx_shm_pidfd_open(p->peer_pid);
	if (p->pidfd < 0)
		goto err_reach;
	ring_fd = rdmx_shm_pidfd_getfd(p->pidfd, (int)h->ring_fd);
	if (ring_fd < 0)
		goto err_reach;
	p->peer_door = rdmx_shm_pidfd_getfd(p->pidfd, (int)h->door_fd);
	p->tx = p->peer_door < 0 ? NULL : rdmx_shm_map(ring_fd, h->size);
	close(ring_fd);
	if (!p->tx)
		goto err_reach;
	p->tx_size = h->size;
	p->tx_data = (uint8_t *)p->tx + RDMX_SHM_RING_HDR;
	if (p->tx->magic != RDMX_SHM_MAGIC || p->tx->size != h->size) {
		rdmx_error("shm: the peer's ring header is not an rdmx ring");
		return RDMX_ERR_PROTOCOL;
	}
	return RDMX_OK;

err_reach:
	rdmx_error("shm: cannot reach process %d's ring (%m); same-host "
		   "transports need one user and no ptrace restriction "
		   "(RDMX_TRANSPORT=tcp avoids shm)",
		   (int)h->pid);
	return RDMX_ERR_SYSTEM;
}

rdmx_status rdmx_shm_pipe_setup(struct rdmx_ctx *ctx, int ctl,
				struct rdmx_shm_pipe **pipe_p)
{
	uint64_t deadline =
		rdmx_now_us() + ctx->cfg.handshake_timeout_ms * 1000;
	struct rdmx_shm_hello mine = { .pid = (uint32_t)getpid(),
				       .size = 4096 },
			      theirs;
	uint8_t out[RDMX_SHM_HELLO_LEN], in[RDMX_SHM_HELLO_LEN], ready = 'R';
	struct rdmx_shm_pipe *p;
	rdmx_status st = RDMX_ERR_SYSTEM;
	int ring_fd;

	while (mine.size < ctx->cfg.shm_ring_size)
		mine.size <<= 1;
	p = calloc(1, sizeof(*p));
	if (!p) {
		close(ctl);
		return RDMX_ERR_NOMEM;
	}
	p->ctl = ctl;
	p->door = p->peer_door = p->pidfd = -1;
	ring_fd = rdmx_shm_ring_create(mine.size, &p->rx);
	if (ring_fd < 0)
		goto err;
	p->rx_size = mine.size;
	p->rx_data = (uint8_t *)p->rx + RDMX_SHM_RING_HDR;
	p->door = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->door < 0) {
		rdmx_error("shm: eventfd: %m");
		goto err_ring;
	}
	mine.ring_fd = (uint32_t)ring_fd;
	mine.door_fd = (uint32_t)p->door;
	rdmx_shm_hello_pack(&mine, out);
	/* The peer takes our fds while we wait for its 'R': keep ring_fd. */
	st = rdmx_sock_write_full(ctl, out, sizeof(out), deadline);
	if (!st)
		st = rdmx_sock_read_full(ctl, in, sizeof(in), deadline);
	if (!st && rdmx_shm_hello_unpack(in, &theirs))
		st = RDMX_ERR_PROTOCOL;
	if (!st)
		st = rdmx_shm_attach(p, &theirs);
	if (!st)
		st = rdmx_sock_write_full(ctl, &ready, 1, deadline);
	if (!st)
		st = rdmx_sock_read_full(ctl, &ready, 1, deadline);
	if (!st && ready != 'R')
		st = RDMX_ERR_PROTOCOL;
	if (st)
		goto err_ring;
	close(ring_fd);
	*pipe_p = p;
	return RDMX_OK;

err_ring:
	close(ring_fd);
err:
	rdmx_shm_pipe_free(p);
	return st ? st : RDMX_ERR_SYSTEM;
}
