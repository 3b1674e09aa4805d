/* SPDX-License-Identifier: MIT */
/*
 * Mappable memory (rdmx_mem_alloc) and the grant table a context shows
 * same-host peers. Only this file knows the table's layout.
 *
 * Each block of rdmx_mem_alloc is a memfd of its own, sealed against
 * shrinking, mapped shared. A registration that lies in a block and allows
 * remote access is granted: its entry in the context's grant table (a
 * memfd too, which peers map read-only) says its rkey, range, access, and
 * which of our descriptors holds its block. A peer takes that descriptor
 * with pidfd_getfd(2), checks it is the block the entry names (inode,
 * seals, size), maps it once and then does one-sided requests on it with
 * loads and stores (shm_map.c).
 *
 * Orderings:
 *  - an entry is a seqlock: the owner makes `seq` odd, fills or clears the
 *    fields, makes it even again (release); a reader copies the fields
 *    between two loads of `seq` and keeps them only when both loads saw
 *    the same even value. A granted entry is never changed, only revoked:
 *    its seq, once it moves, never comes back.
 *  - revoking is a Dekker pair with the peer's busy flag (the ring's
 *    cma_busy): the owner stores the odd seq, then loads each peer's busy
 *    flag, both seq_cst; a peer stores busy, then loads seq, both seq_cst,
 *    and copies only when seq is still the one it read. So once the owner
 *    has seen every busy flag clear, no peer copies to or from the region.
 */
#ifndef RDMX_MEM_H
#define RDMX_MEM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "rdmx.h"

#define RDMX_MEM_MAGIC 0x52444d47u /* "RDMG" */
#define RDMX_MEM_VERSION 1
/* Entries; registrations past it are not granted (peers use the engine). */
#define RDMX_MEM_GRANTS 1024
#define RDMX_MEM_PROBE 8 /* an rkey's entry is within this many of its home */

struct rdmx_mem_grant {
	_Atomic uint64_t seq;
	uint64_t rkey; /* 0: free */
	uint64_t addr; /* the registration, in the owner's address space */
	uint64_t length;
	uint64_t off; /* addr's offset in the block's memfd */
	uint64_t ino; /* the block's memfd, as fstat names it */
	uint32_t access; /* enum rdmx_access */
	int32_t fd; /* the block's memfd, as a descriptor of the owner */
	uint64_t reserved;
};

struct rdmx_mem_table {
	uint32_t magic;
	uint32_t version;
	uint32_t nslots;
	uint32_t pad;
	_Alignas(64) struct rdmx_mem_grant g[RDMX_MEM_GRANTS];
};

_Static_assert(sizeof(struct rdmx_mem_grant) == 64, "a grant per line");

/* One block of rdmx_mem_alloc. */
struct rdmx_mem {
	struct rdmx_mem *next;
	uint8_t *addr;
	size_t length;
	int fd;
	uint64_t ino;
	unsigned nmrs; /* registrations in it (mr_lock) */
};

struct rdmx_ctx;
struct rdmx_mr;

/*
 * A memfd of @len bytes (memfd_create flags @mfd_flags besides close-on-
 * exec and sealing) sealed against shrinking, growing and further seals,
 * so that a peer may map it, mapped shared (mmap flags @map_flags
 * besides, MAP_POPULATE say) at *addr_p. Its descriptor, or -1 with errno
 * set. Blocks, the grant table and the shm rings are these.
 */
int rdmx_memfd_map(const char *name, size_t len, unsigned mfd_flags,
		   int map_flags, void **addr_p);

/*
 * Asymmetric fences between processes that share memory (membarrier(2)).
 * A flag protocol "store X, then load Y" against "store Y, then load X"
 * needs a full fence on both sides; where one side is rare (arming a
 * wake-up) it can instead issue rdmx_membarrier(), and the frequent side
 * (publishing each message) needs only a compiler barrier, provided both
 * processes are registered: rdmx_membarrier_ready() registers this one
 * (once) and says whether it is.
 */
bool rdmx_membarrier_ready(void);
void rdmx_membarrier(void);
/*
 * The same between this process's threads only (a cq's lane, cq.c): the
 * barrier interrupts the CPUs that run this process's threads, not every
 * registered process on the host.
 */
bool rdmx_membarrier_private_ready(void);
void rdmx_membarrier_private(void);

/*
 * The context's grant table, created on first use: its descriptor and
 * inode, for a peer to take. RDMX_ERR_SYSTEM (logged) when it cannot be.
 */
rdmx_status rdmx_mem_table(struct rdmx_ctx *ctx, int *fd_p, uint64_t *ino_p);
/* Close the table; the context is going. */
void rdmx_mem_table_close(struct rdmx_ctx *ctx);

/* mr.c, with mr_lock held for writing: note @mr's block and grant it. */
void rdmx_mem_grant(struct rdmx_ctx *ctx, struct rdmx_mr *mr);
/* The same, as @mr goes: revoke its grant (the peers' busy flags are the
 * transport's to wait out: the ops' mr_revoke). @mr->grant stays, saying
 * it was granted. */
void rdmx_mem_revoke(struct rdmx_ctx *ctx, struct rdmx_mr *mr);

/* A peer's grant, as read from its table. */
struct rdmx_mem_view {
	uint64_t seq, addr, length, off, ino;
	uint32_t access;
	int32_t fd;
	const struct rdmx_mem_grant *entry;
};

/*
 * Find @rkey in a peer's table @t (mapped read-only, its header checked). True
 * with a consistent copy in *v, false when it is not granted (or is being
 * changed right now: the caller sends the request the usual way).
 */
bool rdmx_mem_find(const struct rdmx_mem_table *t, uint64_t rkey,
		   struct rdmx_mem_view *v);
/* After storing busy (seq_cst): does the grant still stand? */
static inline bool rdmx_mem_still(const struct rdmx_mem_view *v)
{
	return atomic_load((_Atomic uint64_t *)&v->entry->seq) == v->seq;
}

#endif
