/* SPDX-License-Identifier: MIT */
/*
 * Shared-memory layout of the shm transport, and the setup message that
 * travels on the control socket. Only this file knows these layouts.
 *
 * Each side owns the ring it reads from: a memfd of RDMX_SHM_RING_HDR bytes
 * of header, then `size` bytes (a power of two) of byte stream. The peer
 * maps it and is its only producer; the owner is its only consumer. The
 * stream carries the software RC engine's frames unchanged.
 *
 * Orderings (C11 atomics):
 *  - the producer copies bytes, then stores `tail` with release; the
 *    consumer loads `tail` with acquire before reading those bytes;
 *  - the consumer stores `head` with release after copying bytes out; the
 *    producer loads `head` with acquire before overwriting them;
 *  - `producer_waiting` and `head`, and `consumer_waiting` and `tail`, are
 *    Dekker pairs: each side stores its own word, then loads the other's,
 *    both seq_cst, so a freed slot and a waiting producer, or new input
 *    and a sleeping consumer, are never both missed. While its consumer
 *    spins (consumer_waiting 0) a producer makes no system call.
 */
#ifndef RDMX_SHM_PROTO_H
#define RDMX_SHM_PROTO_H

#include <stdatomic.h>
#include <stdint.h>

#include "bytes.h"

#define RDMX_SHM_MAGIC 0x52444d53u /* "RDMS" */
#define RDMX_SHM_VERSION 1
#define RDMX_SHM_RING_HDR 4096

struct rdmx_shm_ring {
	uint32_t magic;
	uint32_t version;
	uint64_t size;
	uint64_t id; /* random; names the ring for ThreadSanitizer */
	/* Producer's line. */
	_Alignas(64) _Atomic uint64_t tail; /* bytes ever written */
	_Atomic uint32_t producer_waiting; /* set and cleared by the producer:
					    * wake it whenever space frees */
	/* Consumer's line. */
	_Alignas(64) _Atomic uint64_t head; /* bytes ever read */
	_Atomic uint32_t consumer_waiting; /* ring the doorbell on input */
	_Atomic uint32_t closed; /* either side shut down */
};

_Static_assert(sizeof(struct rdmx_shm_ring) <= RDMX_SHM_RING_HDR,
	       "ring header fits its page");

/*
 * Setup message, each way, on the control socket after the handshake:
 * be32 magic, be32 version, be32 pid, be32 ring fd, be32 doorbell fd,
 * be32 reserved, be64 ring size. The receiver takes both fds from the
 * sender with pidfd_getfd(); then each side sends one byte, 'R', once it
 * has mapped the other's ring.
 */
#define RDMX_SHM_HELLO_LEN 32

struct rdmx_shm_hello {
	uint32_t pid;
	uint32_t ring_fd;
	uint32_t door_fd;
	uint64_t size;
};

_Static_assert(RDMX_SHM_HELLO_LEN == 6 * 4 + 8, "setup message size");

static inline void rdmx_shm_hello_pack(const struct rdmx_shm_hello *h,
				       uint8_t b[RDMX_SHM_HELLO_LEN])
{
	rdmx_put_be(b, RDMX_SHM_MAGIC, 4);
	rdmx_put_be(b + 4, RDMX_SHM_VERSION, 4);
	rdmx_put_be(b + 8, h->pid, 4);
	rdmx_put_be(b + 12, h->ring_fd, 4);
	rdmx_put_be(b + 16, h->door_fd, 4);
	rdmx_put_be(b + 20, 0, 4);
	rdmx_put_be(b + 24, h->size, 8);
}

/* Returns 0, or -1 for a bad magic, version or reserved field. */
static inline int rdmx_shm_hello_unpack(const uint8_t b[RDMX_SHM_HELLO_LEN],
					struct rdmx_shm_hello *h)
{
	if (rdmx_get_be(b, 4) != RDMX_SHM_MAGIC ||
	    rdmx_get_be(b + 4, 4) != RDMX_SHM_VERSION || rdmx_get_be(b + 20, 4))
		return -1;
	h->pid = (uint32_t)rdmx_get_be(b + 8, 4);
	h->ring_fd = (uint32_t)rdmx_get_be(b + 12, 4);
	h->door_fd = (uint32_t)rdmx_get_be(b + 16, 4);
	h->size = rdmx_get_be(b + 24, 8);
	return 0;
}

#endif
