/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bytes.h"
#include "core.h"
#include "mem.h"
#include "tsan.h"

#define RDMX_ACCESS_ALL                                                        \
	(RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE |                  \
	 RDMX_ACCESS_REMOTE_READ | RDMX_ACCESS_REMOTE_ATOMIC)

static struct rdmx_mr **rdmx_mr_bucket(struct rdmx_ctx *ctx, uint64_t rkey)
{
	return &ctx->mr_buckets[(rkey ^ (rkey >> 32)) % RDMX_MR_BUCKETS];
}

/* Call with mr_lock held. */
static struct rdmx_mr *rdmx_mr_find(struct rdmx_ctx *ctx, uint64_t rkey)
{
	struct rdmx_mr *mr;

	for (mr = *rdmx_mr_bucket(ctx, rkey); mr; mr = mr->next)
		if (mr->rkey == rkey)
			return mr;
	return NULL;
}

/* Let every transport that registers with hardware do so. */
static rdmx_status rdmx_mr_reg_hw(struct rdmx_ctx *ctx, struct rdmx_mr *mr,
				  uint32_t *rkey_p)
{
	for (unsigned i = 0; i < RDMX_TRANSPORT_MAX; i++) {
		const struct rdmx_transport_ops *ops = rdmx_transport_by_id(i);
		void *priv;
		rdmx_status st;

		if (!ops || !ops->reg_mr ||
		    (ops->usable && !ops->usable(ctx, -1)) ||
		    rdmx_ctx_transport(ctx, ops->id, &priv))
			continue;
		st = ops->reg_mr(priv, mr, rkey_p);
		if (st)
			return st;
	}
	return RDMX_OK;
}

static void rdmx_mr_dereg_hw(struct rdmx_ctx *ctx, struct rdmx_mr *mr)
{
	for (unsigned i = 0; i < RDMX_TRANSPORT_MAX; i++) {
		void *priv = atomic_load(&ctx->tp[i].priv);

		if (mr->tp_mr[i] && priv && ctx->tp[i].ops->dereg_mr)
			ctx->tp[i].ops->dereg_mr(priv, mr);
	}
}

static void rdmx_mr_revoke(struct rdmx_ctx *ctx, struct rdmx_mr *mr)
{
	for (unsigned i = 0; i < RDMX_TRANSPORT_MAX; i++) {
		void *priv = atomic_load(&ctx->tp[i].priv);

		if (priv && ctx->tp[i].ops->mr_revoke)
			ctx->tp[i].ops->mr_revoke(priv, mr);
	}
}

/*
 * Is [addr, addr + length) mapped, every page of it? The same answer on
 * every transport (a NIC's registration would fail on a hole, a software
 * one would not until a peer touched it). mincore says ENOMEM at a hole;
 * it is asked 16 MiB at a time, so its vector stays small.
 */
static bool rdmx_mr_mapped(const void *addr, size_t length)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)addr & ~(pg - 1);
	uintptr_t end = (uintptr_t)addr + length;
	unsigned char vec[4096];

	while (length && a < end) {
		uintptr_t n = end - a < sizeof(vec) * pg ? end - a
							 : sizeof(vec) * pg;

		if (mincore((void *)a, n, vec) && errno == ENOMEM)
			return false;
		a += n;
	}
	return true;
}

rdmx_status rdmx_mr_reg(struct rdmx_ctx *ctx, void *addr, size_t length,
			unsigned access, struct rdmx_mr **mr_p)
{
	struct rdmx_mr *mr;
	rdmx_status st;
	uint32_t hw = 0;
	uint64_t rkey;

	if (!ctx || !mr_p)
		return rdmx_invalid("rdmx_mr_reg", "NULL %s",
				    !ctx ? "context" : "output pointer");
	if (!addr && length)
		return rdmx_invalid("rdmx_mr_reg", "NULL address, %zu bytes",
				    length);
	if (access & ~RDMX_ACCESS_ALL)
		return rdmx_invalid("rdmx_mr_reg",
				    "unknown access bits 0x%x (RDMX_ACCESS_*)",
				    access & ~RDMX_ACCESS_ALL);
	if ((access & (RDMX_ACCESS_REMOTE_WRITE | RDMX_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & RDMX_ACCESS_LOCAL_WRITE)) {
		rdmx_error("rdmx_mr_reg: remote write and atomic access need "
			   "RDMX_ACCESS_LOCAL_WRITE too");
		return RDMX_ERR_INVALID;
	}
	if ((uintptr_t)addr + length < (uintptr_t)addr)
		return rdmx_invalid("rdmx_mr_reg",
				    "%p + %zu bytes wraps the address space",
				    addr, length);
	if (!rdmx_mr_mapped(addr, length))
		return rdmx_invalid("rdmx_mr_reg",
				    "%p + %zu bytes is not all mapped memory",
				    addr, length);
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return RDMX_ERR_NOMEM;
	mr->ctx = ctx;
	mr->addr = addr;
	mr->length = length;
	mr->access = access;

	st = rdmx_mr_reg_hw(ctx, mr, &hw);
	if (st) {
		free(mr);
		return st;
	}
	pthread_rwlock_wrlock(&ctx->mr_lock);
	/*
	 * The high half is ours and unpredictable, the low half a NIC's key
	 * when a transport registered it with one (a NIC reads only those 32
	 * bits), else unpredictable too: a NIC's keys are an index and a few
	 * bits, and the software transports check all 64. Both halves
	 * nonzero, unique among live ones.
	 */
	do {
		randombytes_buf(&rkey, sizeof(rkey));
		if (hw)
			rkey = (rkey << 32) | hw;
	} while (!(rkey >> 32) || !(uint32_t)rkey || rdmx_mr_find(ctx, rkey));
	mr->rkey = rkey;
	mr->next = *rdmx_mr_bucket(ctx, rkey);
	*rdmx_mr_bucket(ctx, rkey) = mr;
	rdmx_mem_grant(ctx, mr);
	pthread_rwlock_unlock(&ctx->mr_lock);

	rdmx_ctx_child(ctx, &ctx->nmrs, 1);
	*mr_p = mr;
	return RDMX_OK;
}

rdmx_status rdmx_mr_dereg(struct rdmx_mr *mr)
{
	struct rdmx_ctx *ctx;
	struct rdmx_mr **pp;
	struct timespec nap = { 0, 100000 };

	if (!mr)
		return RDMX_OK;
	ctx = mr->ctx;
	pthread_rwlock_wrlock(&ctx->mr_lock);
	for (pp = rdmx_mr_bucket(ctx, mr->rkey); *pp != mr; pp = &(*pp)->next)
		;
	*pp = mr->next;
	rdmx_mem_revoke(ctx, mr);
	pthread_rwlock_unlock(&ctx->mr_lock);
	/*
	 * No new transfer can find it now (nor can a same-host peer that
	 * mapped it start one: the transports wait out those running).
	 * Transfers already placing or sending its bytes end by themselves (or
	 * when their connection dies); the caller may free the memory only
	 * after they have. Our own requests may wait forever (a SEND for the
	 * peer's RECV): the transports end their connections first. They look
	 * it up at dereg rather than count uses on every post.
	 */
	rdmx_mr_revoke(ctx, mr);
	while (atomic_load_explicit(&mr->refs, memory_order_acquire))
		nanosleep(&nap, NULL);
	rdmx_mr_dereg_hw(ctx, mr);
	rdmx_ctx_child(ctx, &ctx->nmrs, -1);
	free(mr);
	return RDMX_OK;
}

void rdmx_mr_remote(const struct rdmx_mr *mr, struct rdmx_remote *remote_p)
{
	remote_p->addr = (uintptr_t)mr->addr;
	remote_p->length = mr->length;
	remote_p->rkey = mr->rkey;
}

/*
 * ThreadSanitizer: a registration's memory is the NIC's to touch, and in
 * the software transports the engine touches it from whichever thread
 * makes progress (the progress thread, or a caller in rdmx_poll or
 * rdmx_cq_wait). Two transfers on one registration are ordered by the
 * peers' requests, which travel through sockets TSan does not see, so it
 * would report a WRITE's copy in and a later READ's send out as a race.
 * Each transfer acquires the registration when it starts and releases it
 * when it ends: the order a NIC's pipeline gives them. The application's
 * own accesses are not annotated, so its races are still reported.
 */
#ifdef RDMX_TSAN
#define rdmx_mr_tsan(mr, fn) fn(mr)
#else
#define rdmx_mr_tsan(mr, fn) ((void)(mr))
#endif

struct rdmx_mr *rdmx_mr_acquire(struct rdmx_ctx *ctx, uint64_t rkey,
				uint64_t addr, uint64_t len, unsigned access,
				enum rdmx_refusal *why_p)
{
	struct rdmx_mr *mr;
	uint64_t start;

	pthread_rwlock_rdlock(&ctx->mr_lock);
	mr = rdmx_mr_find(ctx, rkey);
	if (!mr) {
		rdmx_debug("remote access with unknown rkey 0x%llx",
			   (unsigned long long)rkey);
		*why_p = RDMX_REFUSED_RKEY;
		goto err;
	}
	start = (uintptr_t)mr->addr;
	if (addr < start || len > mr->length ||
	    addr - start > mr->length - len) {
		rdmx_debug("remote access [0x%llx, +%llu) outside rkey 0x%llx",
			   (unsigned long long)addr, (unsigned long long)len,
			   (unsigned long long)rkey);
		*why_p = RDMX_REFUSED_BOUNDS;
		goto err;
	}
	if ((mr->access & access) != access) {
		rdmx_debug("remote access 0x%x not granted by rkey 0x%llx",
			   access, (unsigned long long)rkey);
		*why_p = RDMX_REFUSED_ACCESS;
		goto err;
	}
	atomic_fetch_add_explicit(&mr->refs, 1, memory_order_relaxed);
	pthread_rwlock_unlock(&ctx->mr_lock);
	rdmx_mr_tsan(mr, __tsan_acquire);
	return mr;
err:
	pthread_rwlock_unlock(&ctx->mr_lock);
	return NULL;
}

void rdmx_mr_release(struct rdmx_mr *mr)
{
	if (!mr)
		return;
	rdmx_mr_tsan(mr, __tsan_release);
	atomic_fetch_sub_explicit(&mr->refs, 1, memory_order_release);
}

rdmx_status rdmx_sge_refuse(const struct rdmx_sge *sg, int num_sge, int max,
			    int i, bool write)
{
	if (i < 0)
		rdmx_error("post: num_sge %d out of range 0..%d (conn.max_sge)",
			   num_sge, max);
	else if (!write)
		rdmx_error("post: sge %d (%p, %u bytes) is not inside "
			   "its registration",
			   i, sg[i].addr, sg[i].length);
	else
		rdmx_error("post: sge %d receives data but its "
			   "registration lacks RDMX_ACCESS_LOCAL_WRITE",
			   i);
	return RDMX_ERR_INVALID;
}

rdmx_status rdmx_recv_check(const struct rdmx_ctx *ctx,
			    const struct rdmx_sge *sg, int num_sge)
{
	uint64_t total;

	return rdmx_sge_check(sg, num_sge, (int)ctx->cfg.conn_max_sge, true,
			      &total);
}

/*
 * Packed descriptor: be64 addr, be64 rkey, be48 length, be16 version. A
 * region is far below 2^48 bytes (a process's address space is smaller).
 * Version 1 had a 32-bit rkey.
 */
#define RDMX_REMOTE_PACK_VERSION 2

void rdmx_remote_pack(const struct rdmx_remote *remote,
		      uint8_t buf[RDMX_REMOTE_PACKED_LEN])
{
	rdmx_put_be(buf, remote->addr, 8);
	rdmx_put_be(buf + 8, remote->rkey, 8);
	rdmx_put_be(buf + 16, remote->length, 6);
	rdmx_put_be(buf + 22, RDMX_REMOTE_PACK_VERSION, 2);
}

rdmx_status rdmx_remote_unpack(const void *buf, size_t len,
			       struct rdmx_remote *remote_p)
{
	const uint8_t *p = buf;

	if (!buf || !remote_p)
		return rdmx_invalid("rdmx_remote_unpack", "NULL %s",
				    !buf ? "buffer" : "output pointer");
	/* The bytes come from a peer: a hostile one sends many. */
	if (len < RDMX_REMOTE_PACKED_LEN ||
	    rdmx_get_be(p + 22, 2) != RDMX_REMOTE_PACK_VERSION) {
		rdmx_peer_error("rdmx_remote_unpack: %zu bytes that are not a "
				"packed descriptor (%d bytes from "
				"rdmx_remote_pack)",
				len, RDMX_REMOTE_PACKED_LEN);
		return RDMX_ERR_INVALID;
	}
	remote_p->addr = rdmx_get_be(p, 8);
	remote_p->rkey = rdmx_get_be(p + 8, 8);
	remote_p->length = rdmx_get_be(p + 16, 6);
	return RDMX_OK;
}
