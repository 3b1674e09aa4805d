/* SPDX-License-Identifier: MIT */
/* lib/kv internals: the store (kv_store.c), shared by the server's workers. */
#ifndef RDMX_LIB_KV_H
#define RDMX_LIB_KV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "kv_proto.h"
#include "rdmx.h"
#include "rdmx_kv.h"

#define kv_log(level, ...) rdmx_log(level, "kv: " __VA_ARGS__)
/* A line a client's doing causes: in moderation (rdmx_log_peer). */
#define kv_log_peer(level, ...) rdmx_log_peer(level, "kv: " __VA_ARGS__)

struct kv_item {
	struct kv_item *hnext, *lprev, *lnext;
	uint64_t hash, off, vlen;
	uint32_t refs; /* GETs WRITing from it, and an unpublished PUT */
	uint16_t klen;
	int8_t order; /* its buddy block; -1: none (an empty value) */
	bool dead; /* out of the index: freed at the last unref */
	uint8_t key[];
};

struct kv_store_stats {
	uint64_t keys, bytes_used, pool_bytes;
	uint64_t gets, hits, puts, dels, refused_nomem, evicted;
};

struct kv_store;

/* A pool of @pool_len bytes; with @evict_lru, a full pool evicts. */
int kv_store_create(uint64_t pool_len, bool evict_lru, struct kv_store **s_p);
void kv_store_destroy(struct kv_store *s);
uint8_t *kv_store_pool(struct kv_store *s, uint64_t *len_p);

/* Everything below runs under the store's lock. */
void kv_store_lock(struct kv_store *s);
void kv_store_unlock(struct kv_store *s);
/*
 * Start loading what lookups of @n keys (at most KV_PREFETCH) will touch:
 * their buckets, then the first item of each (and the next, where the
 * first is of another hash), then, where @value[i], the first
 * KV_PREFETCH_VALUE bytes of its value (a GET's, which its WRITE copies). A
 * batch of requests then waits for its cache misses together, not one after
 * another.
 */
#define KV_PREFETCH 32
#define KV_PREFETCH_VALUE 512
void kv_store_prefetch(struct kv_store *s, const uint8_t *const *keys,
		       const uint16_t *klens, const bool *value, int n);
/* The item of @key with a reference taken (kv_unref it), or NULL. */
struct kv_item *kv_get(struct kv_store *s, const void *key, size_t klen);
/*
 * A new item with a block for @vlen bytes, not yet in the index: fill
 * the pool at item->off, then kv_publish (or kv_abandon). NULL when the
 * pool is full (after eviction, with it).
 */
struct kv_item *kv_prepare(struct kv_store *s, const void *key, size_t klen,
			   uint64_t vlen);
/* Make @it the key's value; the old one goes once no GET reads it. */
void kv_publish(struct kv_store *s, struct kv_item *it);
void kv_abandon(struct kv_store *s, struct kv_item *it);
void kv_unref(struct kv_store *s, struct kv_item *it);
bool kv_del(struct kv_store *s, const void *key, size_t klen);
void kv_store_stats(struct kv_store *s, struct kv_store_stats *st_p);

/* The append-only file (kv_aof.c); a NULL aof does nothing. */
struct kv_aof;

/* Open (or create) @path and replay it into @s; -1 and a log line. */
int kv_aof_open(const char *path, enum rdmx_kv_fsync fsync, struct kv_store *s,
		struct kv_aof **a_p);
void kv_aof_close(struct kv_aof *a);
uint64_t kv_aof_records(const struct kv_aof *a);
/* Appends and the store changes they log go in one order: hold this. */
void kv_aof_lock(struct kv_aof *a);
void kv_aof_unlock(struct kv_aof *a);
/* One record, 'P' or 'D', synced as the policy says; -1 on an error. */
int kv_aof_append(struct kv_aof *a, uint8_t op, const void *key, uint16_t klen,
		  const void *val, uint64_t vlen);
/* everysec: sync what an idle second left unsynced. */
void kv_aof_tick(struct kv_aof *a);

/* The server's store, for the Redis port (kv_server.c). */
struct kv_store *kv_server_store(struct rdmx_kv_server *srv);
/* As a client's PUT, DELETE: an enum kv_status. */
uint8_t kv_server_put(struct rdmx_kv_server *srv, const void *key, size_t klen,
		      const void *val, uint64_t vlen);
uint8_t kv_server_del(struct rdmx_kv_server *srv, const void *key, size_t klen);
bool kv_server_exists(struct rdmx_kv_server *srv, const void *key, size_t klen);
/* Whether it keeps an append-only file. */
bool kv_server_persists(const struct rdmx_kv_server *srv);

/* The Redis port (kv_resp.c): a thread serving @addr ("[IPV4:]PORT"). */
struct kv_resp;
int kv_resp_start(struct rdmx_kv_server *srv, const char *addr,
		  struct kv_resp **r_p);
int kv_resp_port(const struct kv_resp *r);
void kv_resp_stop(struct kv_resp *r);

#endif
