/* SPDX-License-Identifier: MIT */
/*
 * lib/page internals. A map has one connection for the explicit calls
 * (page_link, serialized by map->lock) and, once rdmx_page_mmap made the
 * mapping, a second one that only the fault handler thread uses
 * (page_mem.c), so the two never take each other's completions.
 */
#ifndef RDMX_LIB_PAGE_H
#define RDMX_LIB_PAGE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "page_proto.h"
#include "rdmx.h"
#include "rdmx_page.h"

#define PAGE_SIZE_BYTES 4096u
#define page_log(level, ...) rdmx_log(level, "page: " __VA_ARGS__)
/* A line a client's doing causes: in moderation (rdmx_log_peer). */
#define page_log_peer(level, ...) rdmx_log_peer(level, "page: " __VA_ARGS__)

/* One connection to a memory server and a registered staging area. */
struct page_link {
	struct rdmx_cq *cq;
	struct rdmx_conn *conn; /* NULL once closed */
	struct rdmx_remote region;
	uint8_t *stage; /* page-aligned, registered as stage_mr */
	size_t stage_len;
	struct rdmx_mr *stage_mr;
	uint8_t *msg; /* 2 * PAGE_MSG: lookup out, reply in */
	struct rdmx_mr *msg_mr;
	int outstanding; /* posted, not yet completed */
	bool settles; /* WRITEs complete once sent: page_link_post_settle */
	rdmx_status dead; /* RDMX_OK while usable */
	const uint8_t *local; /* page_link over a local buffer: no conn */
	uint64_t local_len;
};

/*
 * Open @l: connect to @addr ("host:port"), look @name up, and register
 * @stage_len bytes of staging. On failure @l is closed and the log says why.
 */
rdmx_status page_link_open(struct page_link *l, struct rdmx_ctx *ctx,
			   const char *addr, const char *name, int timeout_ms,
			   size_t stage_len);
/* The same over @src, @len bytes of local memory (rdmx_page_map_local). */
rdmx_status page_link_open_local(struct page_link *l, const uint8_t *src,
				 uint64_t len, size_t stage_len);
void page_link_close(struct page_link *l);

/*
 * Move @len bytes between stage + @stage_off and region offset @off: a
 * READ (into the stage) or a WRITE (from it), completing with @wr_id. A
 * local link copies at once and queues the completion for page_link_poll.
 */
rdmx_status page_link_post(struct page_link *l, enum rdmx_opcode op,
			   uint64_t wr_id, size_t stage_off, uint64_t off,
			   uint32_t len);
/*
 * Where a WRITE completes once sent rather than once placed (iWARP:
 * RDMX_CONN_COMPLETES_LOCALLY, l->settles), post the proof that the
 * WRITEs before it are placed: an 8-byte READ of the region, which the
 * server answers only after them. It completes with @wr_id. Others need
 * none: their WRITEs complete once placed.
 */
rdmx_status page_link_post_settle(struct page_link *l, uint64_t wr_id);
/* A transfer for page_link_post_wait: page_link_post's, or with @settle
 * page_link_post_settle's (op and the offsets unused). */
struct page_xfer {
	bool settle;
	enum rdmx_opcode op;
	uint64_t wr_id;
	size_t stage_off;
	uint64_t off;
	uint32_t len;
};
/*
 * Post @x. While the send queue is full and something is in flight,
 * @room(@arg) takes completions, which make room, and the post is tried
 * again; a status of @room's other than RDMX_OK ends it.
 */
rdmx_status page_link_post_wait(struct page_link *l, const struct page_xfer *x,
				rdmx_status (*room)(void *arg), void *arg);
/* Take up to @max completions without blocking (rdmx_poll). */
int page_link_poll(struct page_link *l, struct rdmx_completion *wc, int max);
/*
 * The link failed (@why, logged once with @st): close the connection, which
 * completes all that is outstanding with errors, and fail all later posts.
 */
void page_link_fail(struct page_link *l, rdmx_status st, const char *why);

struct page_mem;

struct rdmx_page_map {
	struct rdmx_ctx *ctx; /* NULL for a local map */
	char addr[256]; /* "host:port" */
	char name[RDMX_PAGE_NAME_MAX + 1];
	uint64_t length, npages;
	struct rdmx_page_attr attr; /* every field set */
	pthread_mutex_t lock; /* explicit calls, and making the mapping */
	struct page_link io;
	const uint8_t *local; /* rdmx_page_map_local's source */
	struct page_mem *mem; /* the mapping, once made */
};

/* page_mem.c */
rdmx_status page_mem_create(struct rdmx_page_map *map, struct page_mem **m_p);
rdmx_status page_mem_destroy(struct page_mem *m);
void *page_mem_base(const struct page_mem *m);
rdmx_status page_mem_sync(struct page_mem *m, uint64_t first, uint64_t n,
			  bool drop);
void page_mem_stats(struct page_mem *m, struct rdmx_page_stats *stats_p);

#endif
