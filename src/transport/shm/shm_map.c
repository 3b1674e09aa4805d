/* SPDX-License-Identifier: MIT */
/*
 * Mapped one-sided access: an initiator maps the blocks of rdmx_mem_alloc
 * its peer granted (core/mem.h) and does WRITE, READ and atomics on them
 * itself, with memcpy and the CPU's atomics; the target's CPU takes no
 * part. The checks are the target's: the grant says the rkey, the range
 * and the access, and a request outside them goes to the target as usual,
 * which refuses it (and counts it) as always. What a hostile peer can do
 * with its table is name memory of its own to us: every block is checked
 * to be a sealed memfd of the inode and size the grant says, and every
 * copy stays inside the mapping.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "copy.h"
#include "shm.h"

/* How long dereg or close waits for a peer's copy in our memory to end. */
#define RDMX_SHM_COPY_WAIT_US (1000 * 1000)

/* The process's pipes whose peers may copy into our memory. */
static pthread_mutex_t rdmx_shm_all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdmx_shm_pipe *rdmx_shm_all;

void rdmx_shm_map_join(struct rdmx_shm_pipe *p)
{
	pthread_mutex_lock(&rdmx_shm_all_lock);
	p->all_next = rdmx_shm_all;
	rdmx_shm_all = p;
	pthread_mutex_unlock(&rdmx_shm_all_lock);
}

void rdmx_shm_map_leave(struct rdmx_shm_pipe *p)
{
	struct rdmx_shm_pipe **pp;

	pthread_mutex_lock(&rdmx_shm_all_lock);
	for (pp = &rdmx_shm_all; *pp; pp = &(*pp)->all_next)
		if (*pp == p) {
			*pp = p->all_next;
			break;
		}
	pthread_mutex_unlock(&rdmx_shm_all_lock);
	for (unsigned i = 0; i < p->nmaps; i++)
		munmap(p->maps[i].base, p->maps[i].len);
	p->nmaps = 0;
	p->seen_base = NULL;
	if (p->grants)
		munmap((void *)p->grants, sizeof(*p->grants));
	p->grants = NULL;
}

void rdmx_shm_copy_begin(struct rdmx_shm_pipe *p)
{
	/* On a fenced pipe the peer issues rdmx_membarrier before it looks
	 * (rdmx_shm_copy_wait): a compiler barrier serves here, ~5 ns less
	 * per request. Else both sides fence (seq_cst). */
	if (p->fenced) {
		atomic_store_explicit(&p->rx->cma_busy, 1,
				      memory_order_relaxed);
		atomic_signal_fence(memory_order_seq_cst);
	} else {
		atomic_store(&p->rx->cma_busy, 1);
	}
}

void rdmx_shm_copy_wait(struct rdmx_shm_pipe *p, const char *peer,
			const char *what)
{
	uint64_t until = rdmx_now_us() + RDMX_SHM_COPY_WAIT_US;
	struct pollfd pfd = { .fd = p->pidfd, .events = POLLIN };

	/* A fenced copier stores busy with no fence (copy_begin). */
	if (p->fenced)
		rdmx_membarrier();
	while (atomic_load(&p->tx->cma_busy) && poll(&pfd, 1, 0) == 0) {
		if (rdmx_now_us() > until) {
			rdmx_peer_warn(
				"shm connection to %s: the peer still copies "
				"to or from this process's memory %d ms "
				"after %s; giving up on it",
				peer, RDMX_SHM_COPY_WAIT_US / 1000, what);
			return;
		}
		sched_yield();
	}
}

void rdmx_shm_mr_revoke(void *priv, struct rdmx_mr *mr)
{
	/* Granted: the grant's seq moved (seq_cst) before this; now every
	 * peer's busy flag, seq_cst, so no copy of the region runs on. */
	if (mr->grant >= 0) {
		pthread_mutex_lock(&rdmx_shm_all_lock);
		for (struct rdmx_shm_pipe *p = rdmx_shm_all; p; p = p->all_next)
			if (p->ctx == mr->ctx)
				rdmx_shm_copy_wait(p, "a peer",
						   "deregistration");
		pthread_mutex_unlock(&rdmx_shm_all_lock);
	}
	rdmx_sw_mr_revoke(priv, mr);
}

/* The peer's descriptor @fd, taken from it, or -1 (errno set). */
static int rdmx_shm_take_fd(struct rdmx_shm_pipe *p, int fd)
{
	return (int)syscall(SYS_pidfd_getfd, p->pidfd, fd, 0);
}

/* Is @fd a memfd sealed against shrinking, of inode @ino, @min bytes or
 * more? Its size in *size_p; in *whole_p (unless NULL), whether every page
 * of it is allocated. */
static bool rdmx_shm_fd_is(int fd, uint64_t ino, uint64_t min, uint64_t *size_p,
			   bool *whole_p)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fd, &st) ||
	    (uint64_t)st.st_ino != ino || (uint64_t)st.st_size < min)
		return false;
	*size_p = (uint64_t)st.st_size;
	if (whole_p) /* st_blocks: 512-byte units */
		*whole_p = (uint64_t)st.st_blocks * 512 >= (uint64_t)st.st_size;
	return true;
}

/* Give up on mapping the peer's memory, once, saying why. */
static bool rdmx_shm_direct_off(struct rdmx_shm_pipe *p, const char *why)
{
	p->direct_off = true;
	rdmx_info("shm: one-sided requests to process %d go through its "
		  "engine: %s",
		  (int)p->peer_pid, why);
	return false;
}

/* Map the peer's grant table, read-only (shm.h). */
bool rdmx_shm_map_peer(struct rdmx_shm_pipe *p)
{
	int32_t pfd = p->tx->grants_fd;
	uint64_t size;
	void *m;
	int fd;

	if (pfd < 0)
		return rdmx_shm_direct_off(p, "it has no grant table");
	fd = rdmx_shm_take_fd(p, pfd);
	if (fd < 0)
		return rdmx_shm_direct_off(p, errno == EPERM
						      ? "pidfd_getfd: not "
							"permitted (ptrace "
							"rules)"
						      : "pidfd_getfd failed");
	if (!rdmx_shm_fd_is(fd, p->tx->grants_ino, sizeof(*p->grants), &size,
			    NULL)) {
		close(fd);
		return rdmx_shm_direct_off(p, "its grant table is not one");
	}
	m = mmap(NULL, sizeof(*p->grants), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return rdmx_shm_direct_off(p, "cannot map its grant table");
	p->grants = m;
	if (p->grants->magic != RDMX_MEM_MAGIC ||
	    p->grants->version != RDMX_MEM_VERSION ||
	    p->grants->nslots != RDMX_MEM_GRANTS)
		return rdmx_shm_direct_off(p, "its grant table is of another "
					      "version");
	return true;
}

/* The peer's block of grant @v, mapped; NULL when it cannot be. */
static uint8_t *rdmx_shm_block(struct rdmx_shm_pipe *p,
			       const struct rdmx_mem_view *v)
{
	struct rdmx_shm_map *m;
	uint64_t size;
	bool whole;
	void *base;
	int fd, flags = MAP_SHARED;

	if (v->off + v->length < v->off)
		return NULL;
	/* A mapped inode stays alive, so its number names no other file. */
	for (unsigned i = 0; i < p->nmaps; i++)
		if (p->maps[i].ino == v->ino)
			return v->off + v->length <= p->maps[i].len
				       ? p->maps[i].base
				       : NULL;
	fd = rdmx_shm_take_fd(p, v->fd);
	if (fd < 0)
		return NULL; /* freed meanwhile */
	if (!rdmx_shm_fd_is(fd, v->ino, v->off + v->length, &size, &whole)) {
		close(fd);
		return NULL;
	}
	/*
	 * Its pages are there (rdmx_mem_alloc): fill our tables at once, not a
	 * fault per page in the requests to come. Not where pages are missing:
	 * filling would allocate them here, as much as the peer's sealed size
	 * says (a hostile one's sparse terabyte). Nor past
	 * RDMX_SHM_POPULATE_MAX: the caller's thread stops ~0.05 ms a MiB, and
	 * with it every peer it serves (an rdmx kv client's 64 MiB buffer
	 * held a server's worker ~4 ms at its first request).
	 */
	if (whole && size <= RDMX_SHM_POPULATE_MAX)
		flags |= MAP_POPULATE;
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, flags, fd, 0);
	close(fd);
	if (base == MAP_FAILED)
		return NULL;
	if (p->nmaps < RDMX_SHM_MAPS) {
		m = &p->maps[p->nmaps++];
	} else {
		m = &p->maps[p->evict++ % RDMX_SHM_MAPS];
		munmap(m->base, m->len);
		p->seen_base = NULL; /* it may have been this one */
	}
	m->ino = v->ino;
	m->base = base;
	m->len = size;
	return base;
}

/* What a request needs of its grant. */
static unsigned rdmx_shm_needs(enum rdmx_opcode op)
{
	switch (op) {
	case RDMX_OP_WRITE:
		return RDMX_ACCESS_REMOTE_WRITE;
	case RDMX_OP_READ:
		return RDMX_ACCESS_REMOTE_READ;
	default:
		return RDMX_ACCESS_REMOTE_ATOMIC;
	}
}

/* Move the data of @wr to or from @dst, the peer's memory. */
static void rdmx_shm_copy(const struct rdmx_wr *wr, uint8_t *dst)
{
	uint64_t old;
	const uint8_t *src = (const uint8_t *)&old;

	switch (wr->opcode) {
	case RDMX_OP_WRITE:
		for (int i = 0; i < wr->num_sge; i++) {
			rdmx_copy(dst, wr->sg_list[i].addr,
				  wr->sg_list[i].length);
			dst += wr->sg_list[i].length;
		}
		return;
	case RDMX_OP_READ:
		for (int i = 0; i < wr->num_sge; i++) {
			rdmx_copy(wr->sg_list[i].addr, dst,
				  wr->sg_list[i].length);
			dst += wr->sg_list[i].length;
		}
		return;
	default:
		old = rdmx_sw_atomic((uint64_t *)dst,
				     wr->opcode == RDMX_OP_FETCH_ADD,
				     wr->compare_add, wr->swap);
		break;
	}
	for (int i = 0; i < wr->num_sge; i++) {
		memcpy(wr->sg_list[i].addr, src, wr->sg_list[i].length);
		src += wr->sg_list[i].length;
	}
}

/*
 * The peer's grant of @rkey, in *v_p, while this pipe may map the peer's
 * memory: its grant table is mapped at connect (rdmx_shm_map_peer), or
 * never (a pipe made otherwise, the fuzzer's, has none).
 */
static bool rdmx_shm_grant(struct rdmx_shm_pipe *p, uint64_t rkey,
			   struct rdmx_mem_view *v_p)
{
	return !p->direct_off && !p->peer_gone && p->grants &&
	       rdmx_mem_find(p->grants, rkey, v_p);
}

/*
 * The block is mapped under the connection's lock, as by the first request
 * on it (rdmx_shm_direct), so the two never race for the table of maps.
 */
void rdmx_shm_remote_attach(struct rdmx_conn *conn,
			    const struct rdmx_remote *remote)
{
	struct rdmx_sw_conn *c = to_sw_conn(conn);
	struct rdmx_shm_pipe *p = to_shm_pipe(c);
	struct rdmx_mem_view v;

	rdmx_spin_lock(&c->lock);
	if (!c->dead && rdmx_shm_grant(p, remote->rkey, &v))
		(void)rdmx_shm_block(p, &v);
	rdmx_sw_unlock(c);
}

bool rdmx_shm_direct(struct rdmx_sw_conn *c, const struct rdmx_wr *wr,
		     uint64_t total)
{
	struct rdmx_shm_pipe *p = to_shm_pipe(c);
	bool atomic = wr->opcode != RDMX_OP_WRITE && wr->opcode != RDMX_OP_READ;
	uint64_t len = atomic ? 8 : total, at = wr->remote_addr;
	unsigned need = rdmx_shm_needs(wr->opcode);
	const struct rdmx_mem_view *v = &p->seen;
	uint8_t *dst;

	if (!p->seen_base || p->seen_rkey != wr->rkey || p->peer_gone ||
	    !rdmx_mem_still(v)) {
		p->seen_base = NULL;
		if (!rdmx_shm_grant(p, wr->rkey, &p->seen))
			return false;
		p->seen_rkey = wr->rkey;
	}
	/* Outside the grant: the target refuses it, and counts it. */
	if (at < v->addr || len > v->length || at - v->addr > v->length - len ||
	    (v->access & need) != need)
		return false;
	if (!p->seen_base && !(p->seen_base = rdmx_shm_block(p, v)))
		return false;
	dst = p->seen_base + v->off + (at - v->addr);
	if (atomic && ((uintptr_t)dst & 7))
		return false;
	rdmx_shm_copy_begin(p);
	if (atomic_load(&p->rx->closed) || atomic_load(&p->rx->sealed) ||
	    !rdmx_mem_still(v)) {
		rdmx_shm_copy_end(p);
		return false;
	}
	rdmx_shm_copy(wr, dst);
	rdmx_shm_copy_end(p);
	return true;
}
