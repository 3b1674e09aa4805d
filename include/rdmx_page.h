/* SPDX-License-Identifier: MIT */
/*
 * rdmx_page.h - remote memory on rdmx: pages that live in another node's
 * memory, fetched by one-sided READ and written back by one-sided WRITE.
 *
 * A memory server exports regions by name (rdmx_page_server_*); on verbs its
 * CPU does nothing per page. A client maps one region by "HOST:PORT/NAME"
 * (rdmx_page_map) and then either
 *   - moves pages explicitly: rdmx_page_fetch / rdmx_page_store and their
 *     batched forms, which keep many pages in flight; or
 *   - asks for a local address range as large as the region
 *     (rdmx_page_mmap): the first touch of each page faults, a handler
 *     thread fetches it (userfaultfd) and maps it, and from then on reads
 *     and writes are ordinary memory accesses. A cache bound evicts pages,
 *     dirty ones written back first.
 *
 * The library uses only rdmx.h, like any user. man rdmx_page(7) has the
 * coherence rules, the fault path, its figures and its limits.
 */
#ifndef RDMX_PAGE_H
#define RDMX_PAGE_H

#include <stddef.h>
#include <stdint.h>

#include "rdmx.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Region names: 1 to RDMX_PAGE_NAME_MAX characters of [A-Za-z0-9._-]. */
#define RDMX_PAGE_NAME_MAX 63
/* The port a memory server listens on when none is given. */
#define RDMX_PAGE_PORT 7480

/* ------------------------------------------------------------------------ */
/* Memory server                                                            */

struct rdmx_page_server;

/*
 * rdmx_page_server_create - listen on @addr (as rdmx_listen) and serve the
 * regions exported to any number of clients at once, from threads of its
 * own, until rdmx_page_server_destroy(). Errors: as rdmx_listen,
 * RDMX_ERR_NOMEM, RDMX_ERR_SYSTEM (a thread could not start).
 */
rdmx_status rdmx_page_server_create(struct rdmx_ctx *ctx, const char *addr,
				    struct rdmx_page_server **srv_p);

/*
 * rdmx_page_server_export - offer [addr, addr + length) under @name for
 * remote read and write. @length is a multiple of the page size (4 KiB);
 * the memory stays the caller's and must outlive the server. Errors:
 * RDMX_ERR_INVALID (bad name, length or alignment, or the name is taken),
 * and those of rdmx_mr_reg.
 */
rdmx_status rdmx_page_server_export(struct rdmx_page_server *srv,
				    const char *name, void *addr,
				    uint64_t length);

/* The port the server listens on. */
int rdmx_page_server_port(const struct rdmx_page_server *srv);

/*
 * rdmx_page_server_region - the descriptor of exported region @name, as
 * clients READ and WRITE it (to publish it, rdmx_registry(7)).
 * RDMX_ERR_NOT_FOUND if no region has that name.
 */
rdmx_status rdmx_page_server_region(struct rdmx_page_server *srv,
				    const char *name,
				    struct rdmx_remote *remote_p);

/* What a server has done since it was created. */
struct rdmx_page_server_stats {
	uint64_t clients_open, clients_total;
	uint64_t lookups, lookups_failed;
};
void rdmx_page_server_stats(struct rdmx_page_server *srv,
			    struct rdmx_page_server_stats *stats_p);

/*
 * rdmx_page_server_destroy - stop serving: close every client (their
 * outstanding work fails with RDMX_ERR_CONN_LOST), end the registrations
 * and free. NULL is a no-op.
 */
void rdmx_page_server_destroy(struct rdmx_page_server *srv);

/* ------------------------------------------------------------------------ */
/* Client                                                                   */

struct rdmx_page_map;

enum {
	RDMX_PAGE_ATTR_SIZE = 1 << 0,
	RDMX_PAGE_ATTR_CACHE_BYTES = 1 << 1,
	RDMX_PAGE_ATTR_READAHEAD = 1 << 2,
	RDMX_PAGE_ATTR_SPIN_US = 1 << 3,
	RDMX_PAGE_ATTR_TIMEOUT_MS = 1 << 4,
	RDMX_PAGE_ATTR_DEPTH = 1 << 5,
};

struct rdmx_page_attr {
	uint64_t mask; /* RDMX_PAGE_ATTR_* bits of valid fields */
	uint64_t size; /* bytes to map; default (and at most) the region */
	/* Local pages the mapping holds at once; default min(size, 256m). */
	uint64_t cache_bytes;
	/* Pages kept fetched ahead of sequential faults; 0: none (512). */
	uint32_t readahead;
	/* How long the fault handler spins for work before it sleeps (50). */
	uint32_t spin_us;
	/*
	 * Connect, lookup, and the bound on one fetch or write-back: past it
	 * the connection is declared dead (5000).
	 */
	uint32_t timeout_ms;
	/* Pages in flight at once in the batched calls (64). */
	uint32_t depth;
};

/*
 * rdmx_page_map - connect to the memory server at "HOST[:PORT]/NAME"
 * (RDMX_PAGE_PORT when none is given) and look region NAME up. "@NAME"
 * connects to the server published under NAME (the context's resolver,
 * rdmx_registry_attach), "@SERVER/NAME" to another's region. @attr may be
 * NULL. The map owns a connection and a cq of @ctx until rdmx_page_unmap().
 * Errors: RDMX_ERR_INVALID (malformed address or attr, a size larger than
 * the region, a cache smaller than a page), RDMX_ERR_NOT_FOUND (the server
 * has no region NAME), and those of rdmx_connect.
 */
rdmx_status rdmx_page_map(struct rdmx_ctx *ctx, const char *url,
			  const struct rdmx_page_attr *attr,
			  struct rdmx_page_map **map_p);

/*
 * rdmx_page_map_local - the same handle over a local buffer instead of a
 * server: faults are resolved by the same handler from @src (which must
 * stay valid until unmap). For tests, and the floor that rdmx page bench
 * reports beside a remote map.
 */
rdmx_status rdmx_page_map_local(void *src, uint64_t length,
				const struct rdmx_page_attr *attr,
				struct rdmx_page_map **map_p);

/*
 * rdmx_page_unmap - sync the mapping (if any), remove it, close the
 * connection and free. Returns the sync's status (RDMX_ERR_CONN_LOST when
 * dirty pages could not be written back); the map is freed either way.
 * NULL is a no-op.
 */
rdmx_status rdmx_page_unmap(struct rdmx_page_map *map);

/* The page size (4096) and the mapped size in bytes. */
size_t rdmx_page_size(const struct rdmx_page_map *map);
uint64_t rdmx_page_length(const struct rdmx_page_map *map);

/* The connection of the explicit calls: transport and why ("local"). */
void rdmx_page_conn_info(const struct rdmx_page_map *map,
			 struct rdmx_conn_info *info_p);

/*
 * rdmx_page_fetch - read page @index of the region into @buf (page size
 * bytes, any memory) by one READ. rdmx_page_store writes one back by one
 * WRITE. Both wait for their completion; a store returns once the page is
 * at the server, for every client to see (where a WRITE completes once
 * sent, iWARP, an 8-byte READ after it says so). Thread-safe; calls on one
 * map run one at a time. Errors: RDMX_ERR_INVALID (index past the map),
 * RDMX_ERR_CONN_LOST (the server is gone, or did not answer within
 * timeout_ms), RDMX_ERR_REMOTE_ACCESS.
 */
rdmx_status rdmx_page_fetch(struct rdmx_page_map *map, uint64_t index,
			    void *buf);
rdmx_status rdmx_page_store(struct rdmx_page_map *map, uint64_t index,
			    const void *buf);

/*
 * rdmx_page_fetchv - fetch the @n pages @index[i] into @bufs[i], with up to
 * attr.depth READs in flight (posted as lists). rdmx_page_storev writes
 * them back. All or nothing as far as the status goes: on an error some
 * pages may have moved. Errors as rdmx_page_fetch.
 */
rdmx_status rdmx_page_fetchv(struct rdmx_page_map *map, const uint64_t *index,
			     void *const *bufs, size_t n);
rdmx_status rdmx_page_storev(struct rdmx_page_map *map, const uint64_t *index,
			     const void *const *bufs, size_t n);

/*
 * rdmx_page_mmap - the local address range of the region (made on the
 * first call; later calls return the same). Pages are fetched on first
 * touch, from any thread; at most cache_bytes of them are held, the oldest
 * fetched evicted first, dirty ones written back first. A fault that
 * cannot be served (the server died, the connection was lost, or a fetch
 * took longer than timeout_ms) raises SIGBUS in the faulting thread, as a
 * truncated file mapping does, and logs why once.
 *
 * The mapping needs userfaultfd: root, a /dev/userfaultfd the caller may
 * open, or (for faults in user mode only) any user. Pages not yet fetched
 * cannot be handed to system calls in the last case: read(2) into one
 * fails with EFAULT. Errors: RDMX_ERR_UNSUPPORTED (no userfaultfd here:
 * the log names the sysctl or device to change; the explicit calls still
 * work), RDMX_ERR_NOMEM, RDMX_ERR_SYSTEM, and those of rdmx_page_map.
 */
rdmx_status rdmx_page_mmap(struct rdmx_page_map *map, void **addr_p);

/*
 * rdmx_page_sync - write the dirty pages of [addr, addr + len) back to the
 * server and wait, as msync(2) does, until they are there for every client
 * to see (as rdmx_page_store); the pages stay cached. addr and len
 * need not be page aligned. Errors: RDMX_ERR_INVALID (outside the mapping,
 * or no mapping), RDMX_ERR_CONN_LOST.
 */
rdmx_status rdmx_page_sync(struct rdmx_page_map *map, void *addr, size_t len);

/*
 * rdmx_page_drop - forget the cached pages of [addr, addr + len): dirty
 * ones are written back first (nothing is lost), then all are unmapped, so
 * the next touch fetches what the server holds now. Errors as
 * rdmx_page_sync.
 */
rdmx_status rdmx_page_drop(struct rdmx_page_map *map, void *addr, size_t len);

/* Counters of one map since it was made. */
struct rdmx_page_stats {
	uint64_t faults; /* missing-page faults served */
	uint64_t write_faults; /* first writes to a clean cached page */
	uint64_t fetches; /* READs the mapping posted (read-ahead in one) */
	uint64_t pages_fetched; /* pages they brought, read-ahead included */
	uint64_t readahead; /* pages fetched ahead of a fault */
	uint64_t evicted, written_back;
	uint64_t resident; /* pages cached now */
	uint64_t sigbus; /* faults answered with SIGBUS */
};
void rdmx_page_stats(struct rdmx_page_map *map,
		     struct rdmx_page_stats *stats_p);

#ifdef __cplusplus
}
#endif

#endif /* RDMX_PAGE_H */
