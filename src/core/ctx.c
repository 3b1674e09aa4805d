/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "mem.h"

/* The registry: every transport this build has, best first. */
static const struct rdmx_transport_ops *const rdmx_transports[] = {
#ifdef RDMX_HAVE_VERBS
	&rdmx_verbs_ops,
#endif
	&rdmx_shm_ops,
	&rdmx_tcp_ops,
};

#define RDMX_NTRANSPORTS (sizeof(rdmx_transports) / sizeof(rdmx_transports[0]))

const struct rdmx_transport_ops *rdmx_transport_by_id(unsigned id)
{
	for (size_t i = 0; i < RDMX_NTRANSPORTS; i++)
		if (rdmx_transports[i]->id == id)
			return rdmx_transports[i];
	return NULL;
}

unsigned rdmx_transports_built(void)
{
	unsigned bits = 0;

	for (unsigned i = 0; i < RDMX_TRANSPORT_MAX; i++)
		if (rdmx_transport_by_id(i))
			bits |= 1u << i;
	return bits;
}

rdmx_status rdmx_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg,
			      const char *what)
{
	sigset_t all, old;
	int rc;

	/* Signals belong to the application's threads: ours start with
	 * all of them blocked (the mask is inherited). */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(thread, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		errno = rc;
		rdmx_error("pthread_create for %s progress: %m", what);
		return RDMX_ERR_SYSTEM;
	}
	return RDMX_OK;
}

rdmx_status rdmx_progress_thread_start(struct rdmx_ctx *ctx, pthread_t *thread,
				       void *(*fn)(void *), void *arg,
				       const char *name)
{
	/*
	 * Unpinned, it may run where the context's creator could: not
	 * where the thread that opens the transport has since pinned itself
	 * (rdmx bench --cpu pins its caller after rdmx_ctx_create).
	 */
	cpu_set_t set = ctx->cpus;
	char comm[16];
	rdmx_status st;
	int rc;

	st = rdmx_thread_start(thread, fn, arg, name);
	if (st)
		return st;
	snprintf(comm, sizeof(comm), "rdmx-%s", name);
	pthread_setname_np(*thread, comm);
	if (ctx->cfg.progress_cpu >= 0) {
		CPU_ZERO(&set);
		CPU_SET(ctx->cfg.progress_cpu, &set);
	}
	rc = pthread_setaffinity_np(*thread, sizeof(set), &set);
	if (rc) /* progress.cpu was checked at rdmx_ctx_create */
		rdmx_warn("the %s progress thread cannot be placed (%s); it "
			  "runs where it started",
			  name, strerror(rc));
	return RDMX_OK;
}

/*
 * progress.cpu names a CPU this process may run on, or the pinning would
 * fail later in a thread nobody watches: say so now, with the ones it may.
 */
static rdmx_status rdmx_ctx_check_cpu(const struct rdmx_ctx *ctx)
{
	int cpu = ctx->cfg.progress_cpu, n = 0;
	const cpu_set_t *set = &ctx->cpus;
	char may[128] = "";

	if (cpu < 0 || CPU_ISSET(cpu, set))
		return RDMX_OK;
	for (int i = 0; i < CPU_SETSIZE && n < (int)sizeof(may) - 8; i++)
		if (CPU_ISSET(i, set))
			n += snprintf(may + n, sizeof(may) - (size_t)n, "%s%d",
				      n ? "," : "", i);
	rdmx_error("progress.cpu (RDMX_PROGRESS_CPU) %d is not a CPU this "
		   "process may run on (it may use %s)",
		   cpu, may);
	return RDMX_ERR_CONFIG;
}

uint64_t rdmx_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t rdmx_deadline(int timeout_ms)
{
	return timeout_ms < 0 ? UINT64_MAX
			      : rdmx_now_us() + (uint64_t)timeout_ms * 1000;
}

int rdmx_ms_left(uint64_t deadline_us)
{
	uint64_t now = rdmx_now_us(), ms;

	if (deadline_us == UINT64_MAX)
		return -1;
	if (now >= deadline_us)
		return 0;
	ms = (deadline_us - now + 999) / 1000;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

uint64_t rdmx_ctx_transport_mask(struct rdmx_ctx *ctx, int fd)
{
	uint64_t mask = 0;

	for (size_t i = 0; i < RDMX_NTRANSPORTS; i++) {
		const struct rdmx_transport_ops *ops = rdmx_transports[i];

		if (strcmp(ctx->cfg.transport, "auto") &&
		    strcmp(ctx->cfg.transport, ops->name))
			continue;
		if (ops->usable && !ops->usable(ctx, fd))
			continue;
		mask |= 1ull << ops->id;
	}
	return mask;
}

static rdmx_status rdmx_ctx_load_key(struct rdmx_ctx *ctx)
{
	const char *path = ctx->cfg.auth_key_file;
	size_t n;
	FILE *f;

	if (!*path)
		return RDMX_OK;
	f = fopen(path, "rb");
	if (!f) {
		rdmx_error("cannot open auth.key_file %s: %m", path);
		return RDMX_ERR_CONFIG;
	}
	n = fread(ctx->auth_key, 1, sizeof(ctx->auth_key), f);
	if (!feof(f)) {
		rdmx_error("auth.key_file %s is larger than %d bytes", path,
			   RDMX_AUTH_KEY_MAX - 1);
		fclose(f);
		return RDMX_ERR_CONFIG;
	}
	fclose(f);
	/* A key written with echo ends in a newline the peer may lack. */
	while (n &&
	       (ctx->auth_key[n - 1] == '\n' || ctx->auth_key[n - 1] == '\r' ||
		ctx->auth_key[n - 1] == ' '))
		n--;
	if (n < 16) {
		rdmx_error("auth.key_file %s holds %zu bytes; a pre-shared key "
			   "needs at least 16 (try: head -c 32 /dev/urandom | "
			   "base64 > %s)",
			   path, n, path);
		return RDMX_ERR_CONFIG;
	}
	ctx->auth_key_len = n;
	return RDMX_OK;
}

/*
 * Two processes may use a same-host transport when they share the kernel
 * (boot id), the network namespace (else they are two hosts to the user),
 * the pid namespace (to name each other) and the user (to reach memory).
 */
static void rdmx_ctx_host_id(struct rdmx_ctx *ctx)
{
	crypto_hash_sha256_state h;
	uint8_t digest[crypto_hash_sha256_BYTES];
	char buf[256];
	uid_t uid = getuid();
	FILE *f;
	ssize_t n;

	crypto_hash_sha256_init(&h);
	f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (f) {
		if (fgets(buf, sizeof(buf), f))
			crypto_hash_sha256_update(&h, (uint8_t *)buf,
						  strlen(buf));
		fclose(f);
	}
	n = readlink("/proc/self/ns/net", buf, sizeof(buf));
	if (n > 0)
		crypto_hash_sha256_update(&h, (uint8_t *)buf, (size_t)n);
	n = readlink("/proc/self/ns/pid", buf, sizeof(buf));
	if (n > 0)
		crypto_hash_sha256_update(&h, (uint8_t *)buf, (size_t)n);
	crypto_hash_sha256_update(&h, (uint8_t *)&uid, sizeof(uid));
	crypto_hash_sha256_final(&h, digest);
	memcpy(ctx->host_id, digest, sizeof(ctx->host_id));
}

/* The live contexts, for rdmx_ctx_sleeps (below). */
static pthread_mutex_t rdmx_ctx_all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdmx_ctx *rdmx_ctx_all;

rdmx_status rdmx_ctx_create(const struct rdmx_ctx_attr *attr,
			    struct rdmx_ctx **ctx_p)
{
	const char *file = NULL;
	struct rdmx_ctx *ctx;
	rdmx_status st;

	if (!ctx_p)
		return rdmx_invalid("rdmx_ctx_create", "NULL output pointer");
	if (sodium_init() < 0) {
		rdmx_error("libsodium failed to initialize");
		return RDMX_ERR_SYSTEM;
	}
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return RDMX_ERR_NOMEM;
	if (attr && (attr->mask & RDMX_CTX_ATTR_CONFIG_FILE))
		file = attr->config_file;
	st = rdmx_config_load(file, &ctx->cfg, NULL);
	if (st)
		goto err_free;
	atomic_store_explicit(&rdmx_log_level, ctx->cfg.log_level,
			      memory_order_relaxed);
	if (sched_getaffinity(0, sizeof(ctx->cpus), &ctx->cpus)) {
		CPU_ZERO(&ctx->cpus); /* cannot fail for ourselves; be safe */
		for (int i = 0; i < CPU_SETSIZE; i++)
			CPU_SET(i, &ctx->cpus);
	}
	st = rdmx_ctx_check_cpu(ctx);
	if (!st)
		st = rdmx_ctx_load_key(ctx);
	if (!st)
		st = rdmx_cidr_parse(ctx->cfg.auth_allowed_peers, ctx->allowed,
				     RDMX_CIDR_MAX, &ctx->nallowed);
	if (st)
		goto err_free;
	rdmx_ctx_host_id(ctx);
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_rwlock_init(&ctx->mr_lock, NULL);
	rdmx_stats_init(ctx);
	ctx->mem_table_fd = -1;
	for (size_t i = 0; i < RDMX_NTRANSPORTS; i++)
		ctx->tp[rdmx_transports[i]->id].ops = rdmx_transports[i];
	pthread_mutex_lock(&rdmx_ctx_all_lock);
	ctx->all_next = rdmx_ctx_all;
	rdmx_ctx_all = ctx;
	pthread_mutex_unlock(&rdmx_ctx_all_lock);
	*ctx_p = ctx;
	return RDMX_OK;

err_free:
	sodium_memzero(ctx->auth_key, sizeof(ctx->auth_key));
	free(ctx);
	return st;
}

rdmx_status rdmx_ctx_destroy(struct rdmx_ctx *ctx)
{
	if (!ctx)
		return RDMX_OK;
	pthread_mutex_lock(&ctx->lock);
	if (ctx->nconns || ctx->ncqs || ctx->nlisteners || ctx->nmrs ||
	    ctx->nsrqs || ctx->nmems) {
		rdmx_error("rdmx_ctx_destroy: context still has %u "
			   "connections, %u cqs, %u srqs, %u listeners, %u "
			   "registrations and %u blocks of rdmx_mem_alloc",
			   ctx->nconns, ctx->ncqs, ctx->nsrqs, ctx->nlisteners,
			   ctx->nmrs, ctx->nmems);
		pthread_mutex_unlock(&ctx->lock);
		return RDMX_ERR_BUSY;
	}
	pthread_mutex_unlock(&ctx->lock);
	/* First: a sleeper that spun on us may be telling us idle. */
	pthread_mutex_lock(&rdmx_ctx_all_lock);
	for (struct rdmx_ctx **pp = &rdmx_ctx_all; *pp; pp = &(*pp)->all_next)
		if (*pp == ctx) {
			*pp = ctx->all_next;
			break;
		}
	pthread_mutex_unlock(&rdmx_ctx_all_lock);
	for (int i = 0; i < RDMX_TRANSPORT_MAX; i++) {
		void *priv = atomic_load(&ctx->tp[i].priv);

		if (priv)
			ctx->tp[i].ops->close(priv);
	}
	rdmx_mem_table_close(ctx);
	rdmx_stats_fini(ctx);
	pthread_rwlock_destroy(&ctx->mr_lock);
	pthread_mutex_destroy(&ctx->lock);
	sodium_memzero(ctx->auth_key, sizeof(ctx->auth_key));
	free(ctx);
	return RDMX_OK;
}

void rdmx_ctx_child(struct rdmx_ctx *ctx, unsigned *counter, int delta)
{
	pthread_mutex_lock(&ctx->lock);
	*counter += (unsigned)delta;
	pthread_mutex_unlock(&ctx->lock);
}

rdmx_status rdmx_ctx_transport(struct rdmx_ctx *ctx, enum rdmx_transport_id id,
			       void **priv_p)
{
	rdmx_status st = RDMX_OK;
	void *priv;

	if (id >= RDMX_TRANSPORT_MAX || !ctx->tp[id].ops)
		return RDMX_ERR_UNSUPPORTED;
	priv = atomic_load_explicit(&ctx->tp[id].priv, memory_order_acquire);
	if (priv) {
		*priv_p = priv;
		return RDMX_OK;
	}
	pthread_mutex_lock(&ctx->lock);
	priv = atomic_load(&ctx->tp[id].priv);
	if (!priv && ctx->tp[id].absent) {
		st = RDMX_ERR_UNSUPPORTED;
	} else if (!priv) {
		st = ctx->tp[id].ops->open(ctx, &priv);
		ctx->tp[id].absent = st == RDMX_ERR_UNSUPPORTED;
		if (!st)
			atomic_store_explicit(&ctx->tp[id].priv, priv,
					      memory_order_release);
		if (!st && ctx->tp[id].ops->progress)
			atomic_store_explicit(&ctx->progress_only,
					      atomic_load(&ctx->progress_only)
						      ? -1
						      : (int)id + 1,
					      memory_order_release);
	}
	pthread_mutex_unlock(&ctx->lock);
	if (!st)
		*priv_p = priv;
	return st;
}

int rdmx_ctx_progress(struct rdmx_ctx *ctx, bool spinning)
{
	int only = atomic_load_explicit(&ctx->progress_only,
					memory_order_acquire),
	    n = 0;

	/* A second transport opening meanwhile waits for the next call. */
	if (only > 0)
		return ctx->tp[only - 1].ops->progress(
			atomic_load_explicit(&ctx->tp[only - 1].priv,
					     memory_order_relaxed),
			spinning);

	for (int i = 0; i < RDMX_TRANSPORT_MAX; i++) {
		void *priv = atomic_load_explicit(&ctx->tp[i].priv,
						  memory_order_acquire);

		if (priv && ctx->tp[i].ops->progress)
			n += ctx->tp[i].ops->progress(priv, spinning);
	}
	return n;
}

/* Call the idle (@idle) or polled op of every open transport that has it. */
static void rdmx_ctx_tell(struct rdmx_ctx *ctx, bool idle)
{
	for (int i = 0; i < RDMX_TRANSPORT_MAX; i++) {
		void *priv = atomic_load_explicit(&ctx->tp[i].priv,
						  memory_order_acquire);
		void (*op)(void *);

		if (!priv)
			continue;
		op = idle ? ctx->tp[i].ops->idle : ctx->tp[i].ops->polled;
		if (op)
			op(priv);
	}
}

void rdmx_ctx_polled(struct rdmx_ctx *ctx)
{
	rdmx_ctx_tell(ctx, false);
}

/*
 * A thread that spins on a context's cq keeps its progress thread backed
 * off, and its ACKs held for the requests it posts next (sw_progress.c).
 * If that thread then sleeps on a cq of another context, nothing serves
 * the first until its progress thread looks again (RDMX_SW_LOOK_US,
 * 50 ms), or ever without one: one thread driving both ends of a
 * connection through two contexts, waiting in rdmx_cq_wait on each in
 * turn, took 20 ms a round over shm and tcp. So each thread notes the
 * contexts it spun on since it last slept (the last RDMX_SPUN_MAX: an
 * older one waits for its thread's look), and tells them idle when it goes
 * to sleep on another's cq.
 *
 * The notes are ids, not pointers: another thread may destroy a context
 * this one noted. A note is acted on only for a context still among the
 * live ones (ids are never reused), under the lock that rdmx_ctx_destroy
 * takes first.
 */
#define RDMX_SPUN_MAX 4

_Thread_local RDMX_TLS_FAST uint64_t rdmx_spun_last;
static _Thread_local uint64_t rdmx_spun[RDMX_SPUN_MAX];
static _Thread_local unsigned rdmx_nspun;

void rdmx_ctx_spun_note(const struct rdmx_ctx *ctx)
{
	rdmx_spun_last = ctx->id;
	for (unsigned i = 0; i < rdmx_nspun; i++)
		if (rdmx_spun[i] == ctx->id)
			return;
	if (rdmx_nspun == RDMX_SPUN_MAX) {
		memmove(rdmx_spun, rdmx_spun + 1,
			sizeof(rdmx_spun[0]) * (RDMX_SPUN_MAX - 1));
		rdmx_nspun--;
	}
	rdmx_spun[rdmx_nspun++] = ctx->id;
}

void rdmx_ctx_sleeps(const struct rdmx_ctx *ctx)
{
	if (!rdmx_nspun)
		return;
	pthread_mutex_lock(&rdmx_ctx_all_lock);
	for (unsigned i = 0; i < rdmx_nspun; i++) {
		if (rdmx_spun[i] == ctx->id)
			continue; /* served by the sleeper (rdmx_ctx_served) */
		for (struct rdmx_ctx *c = rdmx_ctx_all; c; c = c->all_next)
			if (c->id == rdmx_spun[i]) {
				rdmx_ctx_idle(c);
				break;
			}
	}
	pthread_mutex_unlock(&rdmx_ctx_all_lock);
	rdmx_nspun = 0;
	rdmx_spun_last = 0; /* no context's: ids start at 1 */
}

void rdmx_ctx_idle(struct rdmx_ctx *ctx)
{
	rdmx_ctx_tell(ctx, true);
}

unsigned rdmx_ctx_served(struct rdmx_ctx *ctx, int sleeping, unsigned told)
{
	for (int i = 0; i < RDMX_TRANSPORT_MAX; i++) {
		void *priv = atomic_load_explicit(&ctx->tp[i].priv,
						  memory_order_acquire);
		const struct rdmx_transport_ops *ops = ctx->tp[i].ops;

		/* Woken: only those told of the sleep (one may have opened
		 * since). */
		if (!priv || (sleeping < 0 && !(told & (1u << i))))
			continue;
		if (ops->served) {
			ops->served(priv, sleeping);
			if (sleeping > 0)
				told |= 1u << i;
		} else if (sleeping > 0 && ops->idle) {
			ops->idle(priv);
		}
	}
	return told;
}

rdmx_status rdmx_ctx_config(const struct rdmx_ctx *ctx, const char *key,
			    char *buf, size_t len)
{
	if (!ctx || !key || !buf) {
		rdmx_error("rdmx_ctx_config: NULL %s", !ctx   ? "context"
						       : !key ? "key"
							      : "buffer");
		return RDMX_ERR_INVALID;
	}
	return rdmx_config_get(&ctx->cfg, key, buf, len);
}

void rdmx_ctx_set_resolver(struct rdmx_ctx *ctx, rdmx_resolve_fn fn, void *arg)
{
	pthread_mutex_lock(&ctx->lock);
	ctx->resolver.fn = fn;
	ctx->resolver.arg = arg;
	pthread_mutex_unlock(&ctx->lock);
}

rdmx_status rdmx_ctx_resolve(struct rdmx_ctx *ctx, const char *name, char *addr,
			     size_t len)
{
	rdmx_resolve_fn fn;
	void *arg;
	rdmx_status st;

	pthread_mutex_lock(&ctx->lock);
	fn = ctx->resolver.fn;
	arg = ctx->resolver.arg;
	pthread_mutex_unlock(&ctx->lock);
	if (!fn) {
		rdmx_error("connect to @%s: a name needs a resolver on the "
			   "context (rdmx_registry_attach, or "
			   "rdmx_ctx_set_resolver)",
			   name);
		return RDMX_ERR_INVALID;
	}
	/* The resolver says why it failed: one line. */
	st = fn(arg, name, addr, len);
	if (!st)
		rdmx_info("@%s is %s", name, addr);
	return st;
}
