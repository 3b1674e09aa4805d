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
 * Each publish is a chunk at a 64-byte aligned position t: 8 bytes of
 * stamp, then n > 0 bytes of stream; the next chunk starts at t + 8 + n
 * rounded up to 64, on a line of its own, so a chunk of up to 56 bytes
 * (a small SEND and the ACK it carries) crosses the cores as one line.
 * The stamp holds t + 8 + n, the end of the chunk's bytes; before it, the
 * producer has zeroed the next chunk's stamp slot, which may hold bytes of
 * the last lap (it zeroes the slots of free lines ahead after a publish,
 * and this one just before the stamp when it ran out). So the slot after
 * the last chunk reads 0 until that chunk is stamped, and a stamp above
 * its position says "new" (positions only grow). The consumer spins on
 * the stamp where the next chunk will be, on the line the bytes come on,
 * instead of on `tail`: one line crosses the cores per message, not two
 * (~100 ns here). A stamp past t + size is wild: the pipe is closed.
 *
 * Orderings (C11 atomics):
 *  - the producer copies bytes, then stores the chunk's stamp with
 *    release, then `tail` (the end of the chunk, padding included); the
 *    consumer loads the stamp with acquire before reading those bytes,
 *    and `tail` only to sleep (below);
 *  - the consumer stores `head` with release after copying bytes out; the
 *    producer loads `head` with acquire before overwriting them (it keeps
 *    the value, and loads again only when that says the ring is full);
 *  - `producer_waiting` and `head`, and `consumer_waiting` and the stamp
 *    (then `tail`), are Dekker pairs: each side stores its own word, then
 *    loads the other's,
 *    both seq_cst, so a freed slot and a waiting producer, or new input
 *    and a sleeping consumer, are never both missed. While its consumer
 *    spins (consumer_waiting 0) a producer makes no system call.
 */
#ifndef RDMX_SHM_PROTO_H
#define RDMX_SHM_PROTO_H

#include <ctype.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "bytes.h"

#define RDMX_SHM_MAGIC 0x52444d53u /* "RDMS" */
#define RDMX_SHM_VERSION 5 /* 4: chunks 8-byte aligned */
#define RDMX_SHM_RING_HDR 4096

struct rdmx_shm_ring {
	uint32_t magic;
	uint32_t version;
	uint64_t size;
	uint64_t id; /* random; names the ring for ThreadSanitizer */
	/* The owner's grant table (core/mem.h) for mapped one-sided access:
	 * its descriptor in the owner (-1: none) and its inode. */
	int32_t grants_fd;
	uint64_t grants_ino;
	/*
	 * Written by the owner at creation: its process is registered for
	 * rdmx_membarrier (core/mem.h). With both owners' set, each side
	 * publishes tail and head without a full fence, and issues
	 * rdmx_membarrier after it sets a waiting flag. 0 (an older peer, or
	 * no membarrier): full fences, as before.
	 */
	uint32_t owner_fenced;
	/*
	 * One line per writer and rate: a line the other side reads for
	 * every message must not be one it writes for every message, or each
	 * message costs a transfer of that line between the cores (~100 ns
	 * here) on the way. The producer keeps its own copy of head and
	 * reads this one only when its copy says the ring is full.
	 */
	/* The producer's, every publish. */
	_Alignas(64) _Atomic uint64_t tail; /* bytes ever written */
	/* The consumer's, every read. */
	_Alignas(64) _Atomic uint64_t head; /* bytes ever read */
	/*
	 * The consumer is copying to or from the producer's memory: as the
	 * target of a single-copy request (CMA), or as an initiator that
	 * mapped the producer's memory (shm_map.c). With `closed`, a Dekker
	 * pair: the copier stores busy, then loads closed; the producer,
	 * shutting down, stores closed, then waits for busy to clear. So
	 * once the producer's close returns, no copy into its memory is
	 * running or will start. With a grant's seq, the same for
	 * rdmx_mr_dereg (core/mem.h).
	 */
	_Atomic uint32_t cma_busy;
	/* Each side's, once a stall or a sleep; the other reads it at every
	 * publish. */
	_Alignas(64) _Atomic uint32_t producer_waiting; /* wake it whenever
							 * space frees */
	_Alignas(64) _Atomic uint32_t consumer_waiting; /* ring the doorbell on
							 * input */
	/* Either side's, once; read at every send and copy. */
	_Alignas(64) _Atomic uint32_t closed; /* either side shut down */
	/* The producer ends the connection (it cut the consumer off): no
	 * more mapped access to its memory, though frames still come. */
	_Atomic uint32_t sealed;
};

_Static_assert(sizeof(struct rdmx_shm_ring) <= RDMX_SHM_RING_HDR,
	       "ring header fits its page");

#define RDMX_SHM_STAMP 8 /* bytes of a chunk's stamp */
#define RDMX_SHM_ALIGN 64 /* where chunks start */
/*
 * Room a chunk needs beyond its bytes, in a ring whose free part starts
 * on a line (rdmx_shm_line): its stamp, and the next chunk's stamp slot
 * after the padding.
 */
#define RDMX_SHM_RESERVE (RDMX_SHM_STAMP + RDMX_SHM_ALIGN)

/* The start of the line @pos lies in. */
static inline uint64_t rdmx_shm_line(uint64_t pos)
{
	return pos & ~(uint64_t)(RDMX_SHM_ALIGN - 1);
}

/* Where the chunk after one whose bytes end at @end starts. */
static inline uint64_t rdmx_shm_next_chunk(uint64_t end)
{
	return rdmx_shm_line(end + RDMX_SHM_ALIGN - 1);
}

/* The stamp slot of the chunk at @pos (8-byte aligned) in @data. */
static inline _Atomic uint64_t *rdmx_shm_stamp(uint8_t *data, uint64_t size,
					       uint64_t pos)
{
	return (_Atomic uint64_t *)(void *)(data + (pos & (size - 1)));
}

/*
 * Setup. The handshake chose shm; the accepting side proves nothing yet.
 *
 * 1. On the control connection the acceptor sends an OFFER: be32 magic,
 *    be32 version, the name of a unix socket it listens on (in the
 *    abstract namespace, so only processes of its network namespace can
 *    reach it) and a random token.
 * 2. The connector connects to that socket and sends the token first;
 *    the acceptor takes the first connection that presents it. Each side
 *    now knows the other's pid and uid from the kernel (SO_PEERCRED), and
 *    refuses a peer that runs as another user.
 * 3. Over the unix socket each side sends a HELLO (be32 magic, be32
 *    version, be64 ring size) carrying two descriptors by SCM_RIGHTS: the
 *    memfd of the ring it reads, sealed against shrinking, and its
 *    doorbell eventfd. The receiver checks the seals, the size and the
 *    kind of each before mapping anything.
 * 4. Each side sends one byte, 'R', once it has mapped the other's ring.
 */
#define RDMX_SHM_NAME_LEN 32 /* hex characters after "rdmx-shm-" */
#define RDMX_SHM_TOKEN_LEN 32
#define RDMX_SHM_OFFER_LEN (8 + RDMX_SHM_NAME_LEN + RDMX_SHM_TOKEN_LEN)
#define RDMX_SHM_HELLO_LEN 16

struct rdmx_shm_offer {
	char name[RDMX_SHM_NAME_LEN];
	uint8_t token[RDMX_SHM_TOKEN_LEN];
};

_Static_assert(RDMX_SHM_OFFER_LEN == 72, "offer size");

static inline void rdmx_shm_offer_pack(const struct rdmx_shm_offer *o,
				       uint8_t b[RDMX_SHM_OFFER_LEN])
{
	rdmx_put_be(b, RDMX_SHM_MAGIC, 4);
	rdmx_put_be(b + 4, RDMX_SHM_VERSION, 4);
	memcpy(b + 8, o->name, RDMX_SHM_NAME_LEN);
	memcpy(b + 8 + RDMX_SHM_NAME_LEN, o->token, RDMX_SHM_TOKEN_LEN);
}

/* Returns 0, or -1 for a bad magic, version or name. */
static inline int rdmx_shm_offer_unpack(const uint8_t b[RDMX_SHM_OFFER_LEN],
					struct rdmx_shm_offer *o)
{
	if (rdmx_get_be(b, 4) != RDMX_SHM_MAGIC ||
	    rdmx_get_be(b + 4, 4) != RDMX_SHM_VERSION)
		return -1;
	memcpy(o->name, b + 8, RDMX_SHM_NAME_LEN);
	memcpy(o->token, b + 8 + RDMX_SHM_NAME_LEN, RDMX_SHM_TOKEN_LEN);
	for (int i = 0; i < RDMX_SHM_NAME_LEN; i++)
		if (!isxdigit((unsigned char)o->name[i]))
			return -1;
	return 0;
}

static inline void rdmx_shm_hello_pack(uint64_t size,
				       uint8_t b[RDMX_SHM_HELLO_LEN])
{
	rdmx_put_be(b, RDMX_SHM_MAGIC, 4);
	rdmx_put_be(b + 4, RDMX_SHM_VERSION, 4);
	rdmx_put_be(b + 8, size, 8);
}

/* Returns 0, or -1 for a bad magic or version. */
static inline int rdmx_shm_hello_unpack(const uint8_t b[RDMX_SHM_HELLO_LEN],
					uint64_t *size_p)
{
	if (rdmx_get_be(b, 4) != RDMX_SHM_MAGIC ||
	    rdmx_get_be(b + 4, 4) != RDMX_SHM_VERSION)
		return -1;
	*size_p = rdmx_get_be(b + 8, 8);
	return 0;
}

#endif
