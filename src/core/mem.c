/* SPDX-License-Identifier: MIT */
/* rdmx_mem_alloc's blocks and the grant table (the layout is in mem.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core.h"
#include "mem.h"

#define RDMX_MEM_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

int rdmx_memfd_map(const char *name, size_t len, unsigned mfd_flags,
		   int map_flags, void **addr_p)
{
	int fd =
		memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | mfd_flags);
	void *p;
	int err;

	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)len) || fcntl(fd, F_ADD_SEALS, RDMX_MEM_SEALS))
		goto fail;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | map_flags, fd,
		 0);
	if (p == MAP_FAILED)
		goto fail;
	*addr_p = p;
	return fd;
fail:
	err = errno;
	close(fd);
	errno = err;
	return -1;
}

/* One kind of expedited barrier: its command, and whether this process is
 * registered for it (0 not asked yet, 1 yes, -1 no). */
struct rdmx_membarrier_kind {
	const char *name, *without;
	int cmd, reg;
	_Atomic int state;
};

static struct rdmx_membarrier_kind rdmx_membarrier_global = {
	"global", "shm keeps full fences", MEMBARRIER_CMD_GLOBAL_EXPEDITED,
	MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0
};
static struct rdmx_membarrier_kind rdmx_membarrier_own = {
	"private", "a cq's poller takes its lock",
	MEMBARRIER_CMD_PRIVATE_EXPEDITED,
	MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0
};

/*
 * Registered for @k's barrier (the first call registers). Threads that
 * race to the first call each register: registering again is harmless,
 * and each has registered before it answers yes. A seccomp filter may
 * refuse it: then what needs it does without.
 */
static bool rdmx_membarrier_kind_ready(struct rdmx_membarrier_kind *k)
{
	int state = atomic_load_explicit(&k->state, memory_order_acquire);
	long cmds;
	bool on;

	if (state)
		return state > 0;
	cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
	on = cmds > 0 && (cmds & k->cmd) &&
	     !syscall(SYS_membarrier, k->reg, 0, 0);
	if (!on)
		rdmx_debug("membarrier, %s: not available; %s", k->name,
			   k->without);
	atomic_store_explicit(&k->state, on ? 1 : -1, memory_order_release);
	return on;
}

static void rdmx_membarrier_issue(const struct rdmx_membarrier_kind *k)
{
	/* Cannot fail once registered; if it did, log it. */
	if (syscall(SYS_membarrier, k->cmd, 0, 0))
		rdmx_error("membarrier: %m");
}

bool rdmx_membarrier_ready(void)
{
	return rdmx_membarrier_kind_ready(&rdmx_membarrier_global);
}

void rdmx_membarrier(void)
{
	rdmx_membarrier_issue(&rdmx_membarrier_global);
}

bool rdmx_membarrier_private_ready(void)
{
	return rdmx_membarrier_kind_ready(&rdmx_membarrier_own);
}

void rdmx_membarrier_private(void)
{
	rdmx_membarrier_issue(&rdmx_membarrier_own);
}

static uint64_t rdmx_mem_ino(int fd)
{
	struct stat st;

	return fstat(fd, &st) ? 0 : (uint64_t)st.st_ino;
}

/* Huge pages: the length rounded up to one, or 0 when there are none. */
static size_t rdmx_mem_huge_len(size_t length)
{
	long hp = 0;
	FILE *f = fopen("/proc/meminfo", "re");
	char line[128];

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Hugepagesize: %ld kB", &hp) == 1)
			break;
	if (f)
		fclose(f);
	if (hp <= 0)
		return 0;
	hp *= 1024;
	return (length + (size_t)hp - 1) / (size_t)hp * (size_t)hp;
}

/*
 * Resident from the start (MAP_POPULATE), as a NIC's registered memory is
 * pinned: otherwise each page's first touch, by us or through a shm
 * peer's mapping, was a fault in some request (~2 us on these VMs; ~8 ms
 * of a 1000-WRITE run of 1 MiB over 16 slots). A peer maps it populated
 * too (rdmx_shm_map).
 */
rdmx_status rdmx_mem_alloc(struct rdmx_ctx *ctx, size_t length, unsigned flags,
			   void **addr_p)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = 0;
	struct rdmx_mem *b;
	void *addr = NULL;
	int fd = -1;

	if (!ctx || !addr_p)
		return rdmx_invalid("rdmx_mem_alloc", "NULL %s",
				    !ctx ? "context" : "output pointer");
	if (!length || length > SIZE_MAX - (2u << 30))
		return rdmx_invalid("rdmx_mem_alloc", "a length of %zu bytes",
				    length);
	if (flags & ~(unsigned)RDMX_MEM_HUGE)
		return rdmx_invalid("rdmx_mem_alloc",
				    "unknown flags 0x%x (RDMX_MEM_*)",
				    flags & ~(unsigned)RDMX_MEM_HUGE);
	b = calloc(1, sizeof(*b));
	if (!b)
		return RDMX_ERR_NOMEM;
	if (flags & RDMX_MEM_HUGE) {
		len = rdmx_mem_huge_len(length);
		fd = len ? rdmx_memfd_map("rdmx-mem", len, MFD_HUGETLB,
					  MAP_POPULATE, &addr)
			 : -1;
		if (fd < 0)
			rdmx_info("rdmx_mem_alloc: no huge pages for %zu bytes "
				  "(%m; see /proc/sys/vm/nr_hugepages): "
				  "ordinary pages instead",
				  length);
	}
	if (fd < 0) {
		len = (length + pg - 1) / pg * pg;
		fd = rdmx_memfd_map("rdmx-mem", len, 0, MAP_POPULATE, &addr);
	}
	if (fd < 0) {
		rdmx_error("rdmx_mem_alloc: %zu bytes: %m", length);
		free(b);
		return RDMX_ERR_NOMEM;
	}
	b->addr = addr;
	b->length = len;
	b->fd = fd;
	b->ino = rdmx_mem_ino(fd);
	pthread_rwlock_wrlock(&ctx->mr_lock);
	b->next = ctx->mems;
	ctx->mems = b;
	pthread_rwlock_unlock(&ctx->mr_lock);
	rdmx_ctx_child(ctx, &ctx->nmems, 1);
	*addr_p = addr;
	return RDMX_OK;
}

rdmx_status rdmx_mem_free(struct rdmx_ctx *ctx, void *addr)
{
	struct rdmx_mem **pp, *b;

	if (!addr)
		return RDMX_OK;
	if (!ctx)
		return rdmx_invalid("rdmx_mem_free", "NULL context");
	pthread_rwlock_wrlock(&ctx->mr_lock);
	for (pp = &ctx->mems; (b = *pp) && b->addr != addr; pp = &b->next)
		;
	if (!b || b->nmrs) {
		pthread_rwlock_unlock(&ctx->mr_lock);
		if (!b)
			return rdmx_invalid("rdmx_mem_free",
					    "%p is not memory rdmx_mem_alloc "
					    "returned",
					    addr);
		rdmx_error("rdmx_mem_free: %u registrations still lie in %p",
			   b->nmrs, addr);
		return RDMX_ERR_BUSY;
	}
	*pp = b->next;
	pthread_rwlock_unlock(&ctx->mr_lock);
	munmap(b->addr, b->length);
	close(b->fd);
	free(b);
	rdmx_ctx_child(ctx, &ctx->nmems, -1);
	return RDMX_OK;
}

/* Call with mr_lock held for writing. */
static rdmx_status rdmx_mem_table_locked(struct rdmx_ctx *ctx)
{
	void *p;
	int fd;

	if (ctx->mem_table)
		return RDMX_OK;
	fd = rdmx_memfd_map("rdmx-grants", sizeof(struct rdmx_mem_table), 0, 0,
			    &p);
	if (fd < 0) {
		rdmx_error("the grant table of mappable memory: %m");
		return RDMX_ERR_SYSTEM;
	}
	ctx->mem_table = p;
	ctx->mem_table->magic = RDMX_MEM_MAGIC;
	ctx->mem_table->version = RDMX_MEM_VERSION;
	ctx->mem_table->nslots = RDMX_MEM_GRANTS;
	ctx->mem_table_fd = fd;
	ctx->mem_table_ino = rdmx_mem_ino(fd);
	return RDMX_OK;
}

rdmx_status rdmx_mem_table(struct rdmx_ctx *ctx, int *fd_p, uint64_t *ino_p)
{
	rdmx_status st;

	pthread_rwlock_wrlock(&ctx->mr_lock);
	st = rdmx_mem_table_locked(ctx);
	*fd_p = ctx->mem_table_fd;
	*ino_p = ctx->mem_table_ino;
	pthread_rwlock_unlock(&ctx->mr_lock);
	return st;
}

void rdmx_mem_table_close(struct rdmx_ctx *ctx)
{
	if (!ctx->mem_table)
		return;
	munmap(ctx->mem_table, sizeof(*ctx->mem_table));
	close(ctx->mem_table_fd);
	ctx->mem_table = NULL;
	ctx->mem_table_fd = -1;
}

static uint32_t rdmx_mem_home(uint64_t rkey)
{
	return (uint32_t)((rkey ^ (rkey >> 32)) % RDMX_MEM_GRANTS);
}

#define rdmx_mem_set(field, v) __atomic_store_n(&(field), (v), __ATOMIC_RELAXED)
#define rdmx_mem_get(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

void rdmx_mem_grant(struct rdmx_ctx *ctx, struct rdmx_mr *mr)
{
	const unsigned remote = RDMX_ACCESS_REMOTE_WRITE |
				RDMX_ACCESS_REMOTE_READ |
				RDMX_ACCESS_REMOTE_ATOMIC;
	uintptr_t a = (uintptr_t)mr->addr;
	struct rdmx_mem *b;

	mr->grant = -1;
	for (b = ctx->mems; b; b = b->next)
		if (a >= (uintptr_t)b->addr &&
		    a - (uintptr_t)b->addr <= b->length &&
		    mr->length <= b->length - (a - (uintptr_t)b->addr))
			break;
	if (!b)
		return;
	mr->mem = b;
	b->nmrs++;
	if (!(mr->access & remote) || !mr->length || rdmx_mem_table_locked(ctx))
		return;
	for (uint32_t i = 0; i < RDMX_MEM_PROBE; i++) {
		uint32_t slot = (rdmx_mem_home(mr->rkey) + i) % RDMX_MEM_GRANTS;
		struct rdmx_mem_grant *g = &ctx->mem_table->g[slot];
		uint64_t s =
			atomic_load_explicit(&g->seq, memory_order_relaxed);

		if (g->rkey)
			continue;
		atomic_store_explicit(&g->seq, s + 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_release);
		rdmx_mem_set(g->addr, (uint64_t)a);
		rdmx_mem_set(g->length, (uint64_t)mr->length);
		rdmx_mem_set(g->off, (uint64_t)(a - (uintptr_t)b->addr));
		rdmx_mem_set(g->ino, b->ino);
		rdmx_mem_set(g->access, mr->access);
		rdmx_mem_set(g->fd, b->fd);
		rdmx_mem_set(g->rkey, mr->rkey);
		atomic_store_explicit(&g->seq, s + 2, memory_order_release);
		mr->grant = (int)slot;
		return;
	}
	rdmx_debug("rkey 0x%llx: no room in the grant table; same-host peers "
		   "reach it through the engine",
		   (unsigned long long)mr->rkey);
}

void rdmx_mem_revoke(struct rdmx_ctx *ctx, struct rdmx_mr *mr)
{
	struct rdmx_mem_grant *g;
	uint64_t s;

	if (mr->mem)
		mr->mem->nmrs--;
	mr->mem = NULL;
	if (mr->grant < 0)
		return;
	g = &ctx->mem_table->g[mr->grant];
	s = atomic_load_explicit(&g->seq, memory_order_relaxed);
	/* seq_cst: the Dekker store against the peers' busy flags. */
	atomic_store(&g->seq, s + 1);
	rdmx_mem_set(g->rkey, 0);
	atomic_store_explicit(&g->seq, s + 2, memory_order_release);
}

bool rdmx_mem_find(const struct rdmx_mem_table *t, uint64_t rkey,
		   struct rdmx_mem_view *v)
{
	uint32_t home = rdmx_mem_home(rkey);

	for (uint32_t i = 0; i < RDMX_MEM_PROBE; i++) {
		struct rdmx_mem_grant *g =
			(struct rdmx_mem_grant *)&t
				->g[(home + i) % RDMX_MEM_GRANTS];
		uint64_t s1 =
			atomic_load_explicit(&g->seq, memory_order_acquire);

		if ((s1 & 1) || rdmx_mem_get(g->rkey) != rkey)
			continue;
		v->addr = rdmx_mem_get(g->addr);
		v->length = rdmx_mem_get(g->length);
		v->off = rdmx_mem_get(g->off);
		v->ino = rdmx_mem_get(g->ino);
		v->access = rdmx_mem_get(g->access);
		v->fd = rdmx_mem_get(g->fd);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&g->seq, memory_order_relaxed) != s1)
			continue;
		v->seq = s1;
		v->entry = g;
		return true;
	}
	return false;
}
