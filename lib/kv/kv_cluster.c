/* SPDX-License-Identifier: MIT */
/*
 * A client of a KV cluster: the servers published under
 * kv/cluster/NAME/ in a registry, keys placed by rendezvous hashing (the
 * member with the highest hash of member name and key), membership kept
 * by a watch whose events are applied before each call. A member's client
 * connects on first use. A member that fails a call is marked down: its
 * keys fail with RDMX_ERR_CONN_LOST (one reconnect tried per
 * KV_CLUSTER_RETRY_US) until the registry drops it.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rdmx_kv.h"
#include "rdmx_registry.h"

#define KV_CLUSTER_RETRY_US 500000

struct kv_member {
	char name[RDMX_REGISTRY_NAME_MAX]; /* the member's part of the name */
	char addr[RDMX_REGISTRY_ADDR_MAX];
	struct rdmx_kv_client *c;
	bool down;
	uint64_t retry_at;
};

struct rdmx_kv_cluster {
	struct rdmx_ctx *ctx;
	struct rdmx_registry *reg;
	struct rdmx_kv_attr attr;
	char name[RDMX_REGISTRY_NAME_MAX];
	char prefix[RDMX_REGISTRY_NAME_MAX]; /* kv/cluster/NAME/ */
	struct rdmx_registry_watch *w;
	struct kv_member *m;
	unsigned n, cap;
};

static uint64_t kv_cluster_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* FNV-1a over member and key, then a 64-bit finalizer (splitmix64). */
static uint64_t kv_cluster_score(const char *member, const void *key,
				 size_t klen)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const char *p = member; *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
	h = (h ^ 0xff) * 0x100000001b3ull; /* "ab"+"c" is not "a"+"bc" */
	for (size_t i = 0; i < klen; i++)
		h = (h ^ ((const uint8_t *)key)[i]) * 0x100000001b3ull;
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ull;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebull;
	return h ^ (h >> 31);
}

rdmx_status rdmx_kv_cluster_publish(struct rdmx_registry *reg,
				    const char *cluster, const char *member,
				    const char *addr, unsigned ttl_ms)
{
	struct rdmx_registry_entry e = { .payload_len = 0 };

	if ((size_t)snprintf(e.name, sizeof(e.name), "%s%s/%s",
			     RDMX_KV_CLUSTER_PREFIX, cluster,
			     member) >= sizeof(e.name) ||
	    strchr(cluster, '/') || strchr(member, '/')) {
		rdmx_log(RDMX_LOG_ERROR,
			 "kv: cluster '%s' and member '%s': names without '/'",
			 cluster, member);
		return RDMX_ERR_INVALID;
	}
	snprintf(e.addr, sizeof(e.addr), "%s", addr);
	return rdmx_registry_publish(reg, &e, ttl_ms);
}

static struct kv_member *kv_cluster_find(struct rdmx_kv_cluster *cl,
					 const char *member)
{
	for (unsigned i = 0; i < cl->n; i++)
		if (!strcmp(cl->m[i].name, member))
			return &cl->m[i];
	return NULL;
}

static void kv_cluster_drop(struct rdmx_kv_cluster *cl, struct kv_member *m)
{
	rdmx_kv_close(m->c);
	*m = cl->m[--cl->n];
}

/* A full registry name to its member's part; NULL if not ours. */
static const char *kv_cluster_member(const struct rdmx_kv_cluster *cl,
				     const char *name)
{
	size_t n = strlen(cl->prefix);

	return strncmp(name, cl->prefix, n) || !name[n] ? NULL : name + n;
}

static void kv_cluster_put_member(struct rdmx_kv_cluster *cl,
				  const struct rdmx_registry_entry *e)
{
	const char *name = kv_cluster_member(cl, e->name);
	struct kv_member *m;

	if (!name)
		return;
	m = kv_cluster_find(cl, name);
	if (m && !strcmp(m->addr, e->addr))
		return;
	if (m) { /* the same member at a new address: a restart */
		rdmx_kv_close(m->c);
	} else {
		if (cl->n == cl->cap) {
			unsigned cap = cl->cap ? cl->cap * 2 : 8;
			struct kv_member *v = realloc(cl->m, cap * sizeof(*v));

			if (!v)
				return;
			cl->m = v;
			cl->cap = cap;
		}
		m = &cl->m[cl->n++];
	}
	memset(m, 0, sizeof(*m));
	snprintf(m->name, sizeof(m->name), "%s", name);
	snprintf(m->addr, sizeof(m->addr), "%s", e->addr);
	rdmx_log(RDMX_LOG_INFO, "kv: cluster %s: member %s at %s", cl->name,
		 m->name, m->addr);
}

/* Apply the membership changes the watch has queued. */
static void kv_cluster_refresh(struct rdmx_kv_cluster *cl)
{
	struct rdmx_registry_event ev;

	while (rdmx_registry_watch_next(cl->w, &ev, 0) == 1) {
		const char *name;
		struct kv_member *m;

		if (ev.type == RDMX_REGISTRY_PUT) {
			kv_cluster_put_member(cl, &ev.entry);
			continue;
		}
		name = kv_cluster_member(cl, ev.entry.name);
		m = name ? kv_cluster_find(cl, name) : NULL;
		if (m) {
			rdmx_log(RDMX_LOG_INFO,
				 "kv: cluster %s: member %s left; its keys go "
				 "to the others",
				 cl->name, m->name);
			kv_cluster_drop(cl, m);
		}
	}
}

rdmx_status rdmx_kv_cluster_open(struct rdmx_ctx *ctx,
				 struct rdmx_registry *reg, const char *cluster,
				 const struct rdmx_kv_attr *attr,
				 struct rdmx_kv_cluster **cl_p)
{
	struct rdmx_kv_cluster *cl;
	struct rdmx_registry_entry *es;
	size_t n;
	rdmx_status st;

	if (!ctx || !reg || !cluster || !*cluster || strchr(cluster, '/') ||
	    !cl_p) {
		rdmx_log(RDMX_LOG_ERROR,
			 "kv: a cluster client needs a context, a registry "
			 "and a cluster name without '/'");
		return RDMX_ERR_INVALID;
	}
	cl = calloc(1, sizeof(*cl));
	if (!cl)
		return RDMX_ERR_NOMEM;
	cl->ctx = ctx;
	cl->reg = reg;
	if (attr)
		cl->attr = *attr;
	snprintf(cl->name, sizeof(cl->name), "%s", cluster);
	snprintf(cl->prefix, sizeof(cl->prefix), "%s%s/",
		 RDMX_KV_CLUSTER_PREFIX, cluster);
	/* Watch first: a member that joins between the two is not missed
	 * (a PUT of a member already listed changes nothing). */
	st = rdmx_registry_watch(reg, cl->prefix, &cl->w);
	if (!st)
		st = rdmx_registry_list(reg, cl->prefix, &es, &n);
	if (st) {
		rdmx_kv_cluster_close(cl);
		return st;
	}
	for (size_t i = 0; i < n; i++)
		kv_cluster_put_member(cl, &es[i]);
	free(es);
	*cl_p = cl;
	return RDMX_OK;
}

void rdmx_kv_cluster_close(struct rdmx_kv_cluster *cl)
{
	if (!cl)
		return;
	while (cl->n)
		kv_cluster_drop(cl, &cl->m[0]);
	rdmx_registry_watch_close(cl->w);
	free(cl->m);
	free(cl);
}

static struct kv_member *kv_cluster_owner(struct rdmx_kv_cluster *cl,
					  const void *key, size_t klen)
{
	struct kv_member *best = NULL;
	uint64_t top = 0;

	kv_cluster_refresh(cl);
	for (unsigned i = 0; i < cl->n; i++) {
		uint64_t s = kv_cluster_score(cl->m[i].name, key, klen);

		if (!best || s > top) {
			best = &cl->m[i];
			top = s;
		}
	}
	return best;
}

rdmx_status rdmx_kv_cluster_owner(struct rdmx_kv_cluster *cl, const void *key,
				  size_t klen, char *member, size_t len,
				  char *addr, size_t addr_len)
{
	struct kv_member *m = kv_cluster_owner(cl, key, klen);

	if (!m)
		return RDMX_ERR_UNREACHABLE;
	snprintf(member, len, "%s", m->name);
	if (addr)
		snprintf(addr, addr_len, "%s", m->addr);
	return RDMX_OK;
}

unsigned rdmx_kv_cluster_size(struct rdmx_kv_cluster *cl)
{
	kv_cluster_refresh(cl);
	return cl->n;
}

/* The client of @key's member, connected; NULL with *st_p why not. */
static struct rdmx_kv_client *kv_cluster_client(struct rdmx_kv_cluster *cl,
						const void *key, size_t klen,
						struct kv_member **m_p,
						rdmx_status *st_p)
{
	struct kv_member *m = kv_cluster_owner(cl, key, klen);
	uint64_t now = kv_cluster_now_us();

	*m_p = m;
	if (!m) {
		rdmx_log(RDMX_LOG_ERROR, "kv: cluster %s has no live member",
			 cl->name);
		*st_p = RDMX_ERR_UNREACHABLE;
		return NULL;
	}
	if (m->c)
		return m->c;
	*st_p = RDMX_ERR_CONN_LOST;
	if (m->down && now < m->retry_at)
		return NULL;
	if (rdmx_kv_connect(cl->ctx, m->addr, &cl->attr, &m->c)) {
		if (!m->down)
			rdmx_log(RDMX_LOG_WARN,
				 "kv: cluster %s: member %s at %s cannot be "
				 "reached; its keys fail until it answers or "
				 "its entry expires",
				 cl->name, m->name, m->addr);
		m->down = true;
		m->retry_at = now + KV_CLUSTER_RETRY_US;
		m->c = NULL;
		return NULL;
	}
	m->down = false;
	return m->c;
}

/* After a call: a lost connection marks its member down. */
static rdmx_status kv_cluster_after(struct rdmx_kv_cluster *cl,
				    struct kv_member *m, rdmx_status st)
{
	if (st != RDMX_ERR_CONN_LOST)
		return st;
	rdmx_log(RDMX_LOG_WARN,
		 "kv: cluster %s: member %s at %s is gone; its keys fail until "
		 "it answers or its entry expires",
		 cl->name, m->name, m->addr);
	rdmx_kv_close(m->c);
	m->c = NULL;
	m->down = true;
	m->retry_at = kv_cluster_now_us() + KV_CLUSTER_RETRY_US;
	return st;
}

rdmx_status rdmx_kv_cluster_put(struct rdmx_kv_cluster *cl, const void *key,
				size_t klen, const void *val, uint64_t vlen)
{
	struct kv_member *m;
	rdmx_status st;
	struct rdmx_kv_client *c = kv_cluster_client(cl, key, klen, &m, &st);

	return c ? kv_cluster_after(cl, m, rdmx_kv_put(c, key, klen, val, vlen))
		 : st;
}

rdmx_status rdmx_kv_cluster_get(struct rdmx_kv_cluster *cl, const void *key,
				size_t klen, void *out, uint64_t room,
				uint64_t *len_p)
{
	struct kv_member *m;
	rdmx_status st;
	struct rdmx_kv_client *c = kv_cluster_client(cl, key, klen, &m, &st);

	return c ? kv_cluster_after(cl, m,
				    rdmx_kv_get(c, key, klen, out, room, len_p))
		 : st;
}

rdmx_status rdmx_kv_cluster_del(struct rdmx_kv_cluster *cl, const void *key,
				size_t klen)
{
	struct kv_member *m;
	rdmx_status st;
	struct rdmx_kv_client *c = kv_cluster_client(cl, key, klen, &m, &st);

	return c ? kv_cluster_after(cl, m, rdmx_kv_del(c, key, klen)) : st;
}
