/* SPDX-License-Identifier: MIT */
/*
 * rdmx_kv.h - a key-value store for large values on rdmx: the server keeps
 * values in one registered pool and RDMA-WRITEs each GET's value straight
 * into the client's registered buffer; large PUTs are pulled by the server
 * with one READ from the client's buffer, small ones travel inline.
 *
 * A client owns a registered buffer (attr.buffer_bytes). A GET reserves
 * room in it, the server writes the value there and answers with the
 * length: the value is then read where it landed (zero copy) until the
 * caller releases it, or copied out by the simple form. PUT takes any
 * memory, and memory inside the client's buffer without a copy.
 *
 * The library uses only rdmx.h. man rdmx_kv(7) has the protocol, the
 * allocator, what concurrent GETs and PUTs see, and the limits.
 */
#ifndef RDMX_KV_H
#define RDMX_KV_H

#include <stddef.h>
#include <stdint.h>

#include "rdmx.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RDMX_KV_PORT 7490
#define RDMX_KV_KEY_MAX 250 /* bytes; keys are binary-safe */

/* ------------------------------------------------------------------------ */
/* Server                                                                   */

struct rdmx_kv_server;

enum {
	RDMX_KV_SERVER_ATTR_MEMORY = 1 << 0,
	RDMX_KV_SERVER_ATTR_THREADS = 1 << 1,
	RDMX_KV_SERVER_ATTR_EVICT = 1 << 2,
	RDMX_KV_SERVER_ATTR_AOF = 1 << 3,
	RDMX_KV_SERVER_ATTR_RESP = 1 << 4,
};

/* When the append-only file reaches the disk (as Redis's appendfsync). */
enum rdmx_kv_fsync {
	RDMX_KV_FSYNC_NO = 0, /* when the kernel writes it back */
	RDMX_KV_FSYNC_EVERYSEC, /* at most a second after the PUT */
	RDMX_KV_FSYNC_ALWAYS, /* before the PUT or DELETE is answered */
};

/* What a PUT into a full pool does. */
enum rdmx_kv_evict {
	RDMX_KV_EVICT_NONE = 0, /* fails: out of memory (the default) */
	RDMX_KV_EVICT_LRU, /* the least recently used values go */
};

struct rdmx_kv_server_attr {
	uint64_t mask; /* RDMX_KV_SERVER_ATTR_* bits of valid fields */
	uint64_t memory; /* the value pool, bytes (1 GiB) */
	/* Workers, each with a srq and a loop (half the cores: the rest
	 * for rdmx's progress threads and the clients on this host). */
	uint32_t threads;
	enum rdmx_kv_evict evict;
	/*
	 * RDMX_KV_SERVER_ATTR_AOF: append every PUT and DELETE to this file,
	 * and replay it at create (the pool must hold what it stores).
	 */
	const char *aof_path;
	enum rdmx_kv_fsync fsync;
	/*
	 * RDMX_KV_SERVER_ATTR_RESP: also serve the same store over the Redis
	 * protocol on plain TCP at "[IPV4:]PORT" (port 0: any), so redis-cli
	 * and redis-benchmark work against it: GET, SET, DEL, EXISTS, PING,
	 * ECHO, INFO, SELECT 0, QUIT.
	 */
	const char *resp_addr;
};

/*
 * rdmx_kv_server_create - allocate and register the pool, listen on @addr
 * (as rdmx_listen) and serve from worker threads until destroyed.
 * Errors: RDMX_ERR_INVALID (attr), RDMX_ERR_NOMEM, those of rdmx_listen and
 * rdmx_srq_create.
 */
rdmx_status rdmx_kv_server_create(struct rdmx_ctx *ctx, const char *addr,
				  const struct rdmx_kv_server_attr *attr,
				  struct rdmx_kv_server **srv_p);

int rdmx_kv_server_port(const struct rdmx_kv_server *srv);
/* The Redis protocol's port, or 0 when it is not served. */
int rdmx_kv_server_resp_port(const struct rdmx_kv_server *srv);

struct rdmx_kv_server_stats {
	uint64_t keys, bytes_used, pool_bytes;
	uint64_t gets, hits, puts, dels, refused_nomem, evicted;
	uint64_t clients_open, clients_total;
	uint64_t aof_records; /* replayed and appended */
	/* RECVs the workers have posted for requests: 1024 each, and 1024
	 * more for every 32 clients past the first 32 of a worker (fewer
	 * again as their clients leave and the RECVs come back). */
	uint64_t request_buffers;
	/* Clients the server closed, each for a reason it logs (a malformed
	 * request, more in flight than allowed, no memory for it): not those
	 * that left. A flood of hostile clients shows here in full, where
	 * the log says 10 a second (rdmx_log_peer). */
	uint64_t clients_ejected;
};
void rdmx_kv_server_stats(struct rdmx_kv_server *srv,
			  struct rdmx_kv_server_stats *stats_p);

/* Stop: close every client, free the pool. NULL is a no-op. */
void rdmx_kv_server_destroy(struct rdmx_kv_server *srv);

/* ------------------------------------------------------------------------ */
/* Client                                                                   */

struct rdmx_kv_client;

enum {
	RDMX_KV_ATTR_BUFFER_BYTES = 1 << 0,
	RDMX_KV_ATTR_TIMEOUT_MS = 1 << 1,
	RDMX_KV_ATTR_GET_ROOM = 1 << 2,
	RDMX_KV_ATTR_FLAGS = 1 << 3,
};

/* rdmx_kv_attr.flags */
enum {
	/*
	 * Every request waits for rdmx_kv_flush, a poll or a synchronous
	 * call, the one posted when none is in flight too: a caller that
	 * posts in batches and flushes each sends it whole (its first
	 * request would otherwise leave alone: over tcp, one more system
	 * call on each side per batch).
	 */
	RDMX_KV_FLUSH_EXPLICIT = 1 << 0,
};

struct rdmx_kv_attr {
	uint64_t mask; /* RDMX_KV_ATTR_* bits of valid fields */
	uint64_t buffer_bytes; /* the registered buffer (64 MiB) */
	uint32_t timeout_ms; /* connect, and each synchronous call (5000) */
	/* Room a GET reserves when the caller names none (1 MiB). */
	uint64_t get_room;
	uint64_t flags; /* RDMX_KV_FLUSH_EXPLICIT (none) */
};

/*
 * rdmx_kv_connect - connect to "HOST[:PORT]" (RDMX_KV_PORT when none is
 * given) and register the buffer. Errors: those of rdmx_connect and
 * rdmx_mr_reg, RDMX_ERR_INVALID.
 */
rdmx_status rdmx_kv_connect(struct rdmx_ctx *ctx, const char *addr,
			    const struct rdmx_kv_attr *attr,
			    struct rdmx_kv_client **c_p);

/* Close and free; outstanding requests are dropped. NULL is a no-op. */
void rdmx_kv_close(struct rdmx_kv_client *c);

/*
 * The client's registered buffer: a PUT of a value that lies inside it is
 * pulled from there with no copy.
 */
void rdmx_kv_buffer(const struct rdmx_kv_client *c, void **addr_p,
		    size_t *len_p);

/* A value that landed in the client's buffer; valid until released. */
struct rdmx_kv_value {
	const void *data;
	uint64_t len;
	uint64_t off, room; /* its reservation in the buffer */
};

/*
 * Synchronous calls. Each waits for its answer (at most timeout_ms).
 * Errors: RDMX_ERR_NOT_FOUND (no such key), RDMX_ERR_LOCAL_LENGTH (the
 * value is larger than the room offered: *len_p says how large),
 * RDMX_ERR_NOMEM (the server's pool is full, or no room in the client's
 * buffer), RDMX_ERR_INVALID (key empty or longer than RDMX_KV_KEY_MAX),
 * RDMX_ERR_CONN_LOST (the server is gone or did not answer).
 */
rdmx_status rdmx_kv_put(struct rdmx_kv_client *c, const void *key, size_t klen,
			const void *val, uint64_t vlen);
/* Copy the value into @out (@room bytes); *len_p gets its length. */
rdmx_status rdmx_kv_get(struct rdmx_kv_client *c, const void *key, size_t klen,
			void *out, uint64_t room, uint64_t *len_p);
/* Zero copy: *v points into the client's buffer until rdmx_kv_release. */
rdmx_status rdmx_kv_get_ref(struct rdmx_kv_client *c, const void *key,
			    size_t klen, struct rdmx_kv_value *v);
void rdmx_kv_release(struct rdmx_kv_client *c, struct rdmx_kv_value *v);
rdmx_status rdmx_kv_del(struct rdmx_kv_client *c, const void *key, size_t klen);

/*
 * Asynchronous forms: post many, then poll for their results, in any
 * order. A GET's value stays in the buffer until released (result.value).
 * @room 0: attr.get_room. A PUT's value is copied into the client's
 * buffer when posted (or used in place when it lies there already), so
 * the caller's memory is free at once. Returns RDMX_ERR_AGAIN when the
 * pipe or the buffer is full: poll, then retry.
 *
 * A request posted when none is in flight leaves at once (unless the
 * client was connected with RDMX_KV_FLUSH_EXPLICIT); those posted while
 * others are in flight wait for rdmx_kv_flush or the next poll (or
 * synchronous call), and leave together: one frame train, as pipelining
 * clients of Redis send theirs (a caller with requests in flight polls
 * for them anyway). Call rdmx_kv_flush after posting a batch.
 */
enum rdmx_kv_op { RDMX_KV_GET = 1, RDMX_KV_PUT, RDMX_KV_DEL };

struct rdmx_kv_result {
	uint64_t tag; /* as posted */
	enum rdmx_kv_op op;
	rdmx_status status;
	struct rdmx_kv_value value; /* GET: RDMX_OK; len also on LOCAL_LENGTH */
};

rdmx_status rdmx_kv_post_get(struct rdmx_kv_client *c, const void *key,
			     size_t klen, uint64_t room, uint64_t tag);
rdmx_status rdmx_kv_post_put(struct rdmx_kv_client *c, const void *key,
			     size_t klen, const void *val, uint64_t vlen,
			     uint64_t tag);
rdmx_status rdmx_kv_post_del(struct rdmx_kv_client *c, const void *key,
			     size_t klen, uint64_t tag);
/*
 * Take up to @max results, waiting up to @timeout_ms (0: not at all) for
 * the first: it spins progress.wait_spin, then sleeps. Returns the number
 * taken (0 at the timeout; the requests stay in flight) or a negative
 * status. A server that dies fails what is in flight with
 * RDMX_ERR_CONN_LOST; one that hangs is the caller's to give up on
 * (rdmx_kv_close), or the synchronous calls' after timeout_ms.
 */
int rdmx_kv_poll(struct rdmx_kv_client *c, struct rdmx_kv_result *res, int max,
		 int timeout_ms);
/* Send the requests posted and still waiting (see above). */
void rdmx_kv_flush(struct rdmx_kv_client *c);

/* ------------------------------------------------------------------------ */
/* Cluster: keys spread over the servers of a name (lib/registry)          */

struct rdmx_registry;
struct rdmx_kv_cluster;

/* Members of cluster NAME are published as "kv/cluster/NAME/MEMBER". */
#define RDMX_KV_CLUSTER_PREFIX "kv/cluster/"

/*
 * rdmx_kv_cluster_publish - make the server at @addr ("host:port") member
 * @member of cluster @cluster in @reg, until unpublished or @reg closes.
 */
rdmx_status rdmx_kv_cluster_publish(struct rdmx_registry *reg,
				    const char *cluster, const char *member,
				    const char *addr, unsigned ttl_ms);

/*
 * rdmx_kv_cluster_open - a client of the live members of @cluster in @reg
 * (which must outlive it). A key lives on the member with the highest
 * rendezvous hash of (member, key): a member that joins takes about 1/n
 * of the keys, one that leaves gives its keys to the others. Membership
 * follows a watch of the registry. No replication: the values of a
 * member that dies are lost. Until its entry expires (its TTL), the keys
 * of a member that died or cannot be reached fail with
 * RDMX_ERR_CONN_LOST; after, they belong to the others, and read as
 * RDMX_ERR_NOT_FOUND until written again. With no live member, calls
 * fail with RDMX_ERR_UNREACHABLE. One thread at a time.
 */
rdmx_status rdmx_kv_cluster_open(struct rdmx_ctx *ctx,
				 struct rdmx_registry *reg, const char *cluster,
				 const struct rdmx_kv_attr *attr,
				 struct rdmx_kv_cluster **cl_p);
void rdmx_kv_cluster_close(struct rdmx_kv_cluster *cl);

/* As rdmx_kv_put, rdmx_kv_get and rdmx_kv_del, on the key's member. */
rdmx_status rdmx_kv_cluster_put(struct rdmx_kv_cluster *cl, const void *key,
				size_t klen, const void *val, uint64_t vlen);
rdmx_status rdmx_kv_cluster_get(struct rdmx_kv_cluster *cl, const void *key,
				size_t klen, void *out, uint64_t room,
				uint64_t *len_p);
rdmx_status rdmx_kv_cluster_del(struct rdmx_kv_cluster *cl, const void *key,
				size_t klen);

/*
 * The member @key belongs to now: its name into @member (@len bytes) and,
 * when @addr is not NULL, its "host:port" (@addr_len bytes);
 * RDMX_ERR_UNREACHABLE when there is none. Applies membership changes.
 */
rdmx_status rdmx_kv_cluster_owner(struct rdmx_kv_cluster *cl, const void *key,
				  size_t klen, char *member, size_t len,
				  char *addr, size_t addr_len);
/* Members known now (membership changes applied first). */
unsigned rdmx_kv_cluster_size(struct rdmx_kv_cluster *cl);

#ifdef __cplusplus
}
#endif

#endif /* RDMX_KV_H */
