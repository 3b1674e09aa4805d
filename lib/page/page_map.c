// SPDX-License-Identifier: MIT
/*
 * rdmx_page_map and the explicit calls: pages moved on request through one
 * connection, many in flight, one caller at a time (map->lock).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "page.h"

#define PAGE_DEFAULT_CACHE (256ull << 20)

static double page_map_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/*
 * "HOST[:PORT]/NAME" into map->addr ("host:port") and map->name. "@NAME"
 * is a server published under the region's name: rdmx_connect asks the
 * context's resolver; "@SERVER/NAME" names both.
 */
static rdmx_status page_parse_url(struct rdmx_page_map *map, const char *url)
{
	const char *slash = url ? strrchr(url, '/') : NULL;
	size_t hlen, nlen;
	const char *colon, *bracket;

	if (url && url[0] == '@' && url[1] && !slash) {
		if (!page_name_ok(url + 1, strlen(url + 1)) ||
		    strlen(url) >= sizeof(map->addr)) {
			page_log(RDMX_LOG_ERROR,
				 "region name '%s' is not 1 to %d of "
				 "[A-Za-z0-9._-]",
				 url + 1, RDMX_PAGE_NAME_MAX);
			return RDMX_ERR_INVALID;
		}
		snprintf(map->name, sizeof(map->name), "%s", url + 1);
		snprintf(map->addr, sizeof(map->addr), "%s", url);
		return RDMX_OK;
	}
	if (!slash || slash == url) {
		page_log(RDMX_LOG_ERROR,
			 "'%s' is not HOST[:PORT]/NAME (the region's name "
			 "after a slash)",
			 url ? url : "(null)");
		return RDMX_ERR_INVALID;
	}
	hlen = (size_t)(slash - url);
	nlen = strlen(slash + 1);
	if (!page_name_ok(slash + 1, nlen)) {
		page_log(RDMX_LOG_ERROR,
			 "region name '%s' is not 1 to %d of [A-Za-z0-9._-]",
			 slash + 1, RDMX_PAGE_NAME_MAX);
		return RDMX_ERR_INVALID;
	}
	memcpy(map->name, slash + 1, nlen + 1);
	if (url[0] == '@') { /* "@SERVER/NAME": the resolver's */
		if (hlen >= sizeof(map->addr))
			return RDMX_ERR_INVALID;
		snprintf(map->addr, sizeof(map->addr), "%.*s", (int)hlen, url);
		return RDMX_OK;
	}
	/* A port after the host, or after an IPv6 literal's bracket. */
	bracket = memchr(url, ']', hlen);
	colon = memchr(bracket ? bracket : url, ':',
		       hlen - (size_t)(bracket ? bracket - url : 0));
	if (hlen + 8 > sizeof(map->addr))
		return RDMX_ERR_INVALID;
	if (colon)
		snprintf(map->addr, sizeof(map->addr), "%.*s", (int)hlen, url);
	else
		snprintf(map->addr, sizeof(map->addr), "%.*s:%d", (int)hlen,
			 url, RDMX_PAGE_PORT);
	return RDMX_OK;
}

/* Fill every field of map->attr from @attr and the region's size. */
static rdmx_status page_attr_resolve(struct rdmx_page_map *map,
				     const struct rdmx_page_attr *attr,
				     uint64_t region)
{
	struct rdmx_page_attr *a = &map->attr;
	uint64_t mask = attr ? attr->mask : 0;

	a->size = mask & RDMX_PAGE_ATTR_SIZE ? attr->size : region;
	a->readahead = mask & RDMX_PAGE_ATTR_READAHEAD ? attr->readahead : 512;
	a->spin_us = mask & RDMX_PAGE_ATTR_SPIN_US ? attr->spin_us : 50;
	a->timeout_ms = mask & RDMX_PAGE_ATTR_TIMEOUT_MS ? attr->timeout_ms
							 : 5000;
	a->depth = mask & RDMX_PAGE_ATTR_DEPTH ? attr->depth : 64;
	a->cache_bytes = mask & RDMX_PAGE_ATTR_CACHE_BYTES ? attr->cache_bytes
			 : a->size < PAGE_DEFAULT_CACHE	   ? a->size
							   : PAGE_DEFAULT_CACHE;
	if (!a->size || a->size % PAGE_SIZE_BYTES || a->size > region) {
		page_log(RDMX_LOG_ERROR,
			 "a map of %" PRIu64 " bytes of region %s (%" PRIu64
			 " bytes): the size must be a multiple of %u and at "
			 "most the region's",
			 a->size, map->name, region, PAGE_SIZE_BYTES);
		return RDMX_ERR_INVALID;
	}
	if (a->cache_bytes < PAGE_SIZE_BYTES) {
		page_log(RDMX_LOG_ERROR,
			 "a cache of %" PRIu64
			 " bytes cannot hold one page of %u bytes",
			 a->cache_bytes, PAGE_SIZE_BYTES);
		return RDMX_ERR_INVALID;
	}
	if (!a->depth || a->depth > 4096 || a->readahead > 4096 ||
	    !a->timeout_ms) {
		page_log(RDMX_LOG_ERROR,
			 "depth must be 1 to 4096, readahead at most 4096 "
			 "pages, timeout_ms above 0");
		return RDMX_ERR_INVALID;
	}
	map->length = a->size;
	map->npages = a->size / PAGE_SIZE_BYTES;
	return RDMX_OK;
}

static rdmx_status page_map_new(struct rdmx_page_map **map_p)
{
	struct rdmx_page_map *map = calloc(1, sizeof(*map));

	if (!map)
		return RDMX_ERR_NOMEM;
	pthread_mutex_init(&map->lock, NULL);
	*map_p = map;
	return RDMX_OK;
}

static size_t page_stage_len(const struct rdmx_page_attr *attr)
{
	uint32_t depth = attr && attr->mask & RDMX_PAGE_ATTR_DEPTH ? attr->depth
								   : 64;

	return (size_t)(depth ? depth : 1) * PAGE_SIZE_BYTES;
}

rdmx_status rdmx_page_map(struct rdmx_ctx *ctx, const char *url,
			  const struct rdmx_page_attr *attr,
			  struct rdmx_page_map **map_p)
{
	struct rdmx_page_map *map;
	int timeout = attr && attr->mask & RDMX_PAGE_ATTR_TIMEOUT_MS
			      ? (int)attr->timeout_ms
			      : 5000;
	rdmx_status st;

	if (!ctx || !map_p)
		return RDMX_ERR_INVALID;
	st = page_map_new(&map);
	if (st != RDMX_OK)
		return st;
	map->ctx = ctx;
	st = page_parse_url(map, url);
	if (st == RDMX_OK)
		st = page_link_open(&map->io, ctx, map->addr, map->name,
				    timeout, page_stage_len(attr));
	if (st == RDMX_OK)
		st = page_attr_resolve(map, attr, map->io.region.length);
	if (st != RDMX_OK) {
		rdmx_page_unmap(map);
		return st;
	}
	*map_p = map;
	return RDMX_OK;
}

rdmx_status rdmx_page_map_local(void *src, uint64_t length,
				const struct rdmx_page_attr *attr,
				struct rdmx_page_map **map_p)
{
	struct rdmx_page_map *map;
	rdmx_status st;

	if (!src || !map_p)
		return RDMX_ERR_INVALID;
	st = page_map_new(&map);
	if (st != RDMX_OK)
		return st;
	snprintf(map->addr, sizeof(map->addr), "local");
	snprintf(map->name, sizeof(map->name), "local");
	map->local = src;
	st = page_link_open_local(&map->io, src, length, page_stage_len(attr));
	if (st == RDMX_OK)
		st = page_attr_resolve(map, attr, length);
	if (st != RDMX_OK) {
		rdmx_page_unmap(map);
		return st;
	}
	*map_p = map;
	return RDMX_OK;
}

rdmx_status rdmx_page_unmap(struct rdmx_page_map *map)
{
	rdmx_status st = RDMX_OK;

	if (!map)
		return RDMX_OK;
	if (map->mem)
		st = page_mem_destroy(map->mem);
	page_link_close(&map->io);
	pthread_mutex_destroy(&map->lock);
	free(map);
	return st;
}

size_t rdmx_page_size(const struct rdmx_page_map *map)
{
	(void)map;
	return PAGE_SIZE_BYTES;
}

uint64_t rdmx_page_length(const struct rdmx_page_map *map)
{
	return map->length;
}

void rdmx_page_conn_info(const struct rdmx_page_map *map,
			 struct rdmx_conn_info *info_p)
{
	memset(info_p, 0, sizeof(*info_p));
	if (map->io.conn) {
		rdmx_conn_info(map->io.conn, info_p);
		return;
	}
	snprintf(info_p->transport, sizeof(info_p->transport), "%s",
		 map->local ? "local" : "none");
	snprintf(info_p->reason, sizeof(info_p->reason), "%s",
		 map->local ? "rdmx_page_map_local" : "the connection ended");
}

/* Wait until nothing is outstanding on @l; the first error, if any. */
static rdmx_status page_link_drain(struct page_link *l, double deadline)
{
	struct rdmx_completion wc[32];
	rdmx_status first = RDMX_OK;

	while (l->outstanding > 0) {
		int n = page_link_poll(l, wc, 32);

		if (n < 0)
			return n;
		for (int i = 0; i < n; i++)
			if (first == RDMX_OK && wc[i].status != RDMX_OK)
				first = wc[i].status;
		if (n)
			continue;
		if (page_map_now_ms() > deadline) {
			page_link_fail(l, RDMX_ERR_TIMEOUT,
				       "no completion within timeout_ms");
			first = RDMX_ERR_CONN_LOST;
		}
	}
	if (first == RDMX_ERR_FLUSHED || first == RDMX_ERR_CONN_LOST)
		page_link_fail(l, first, "a transfer failed");
	return l->dead != RDMX_OK ? l->dead : first;
}

struct page_drain {
	struct page_link *l;
	double deadline;
};

/* page_link_post_wait's room: a send queue shorter than the depth is
 * waited out, all in flight completing. */
static rdmx_status page_drain_room(void *arg)
{
	struct page_drain *d = arg;

	return page_link_drain(d->l, d->deadline);
}

/* Move @n pages through the stage, depth at a time, READ or WRITE. */
static rdmx_status page_move(struct rdmx_page_map *map, enum rdmx_opcode op,
			     const uint64_t *index, void *const *bufs, size_t n)
{
	struct page_link *l = &map->io;
	size_t depth = l->stage_len / PAGE_SIZE_BYTES;
	rdmx_status st = RDMX_OK;

	for (size_t i = 0; i < n; i++)
		if (index[i] >= map->npages) {
			page_log(RDMX_LOG_ERROR,
				 "page %" PRIu64 " is past the map's %" PRIu64,
				 index[i], map->npages);
			return RDMX_ERR_INVALID;
		}
	pthread_mutex_lock(&map->lock);
	for (size_t at = 0; at < n && st == RDMX_OK; at += depth) {
		size_t k = n - at < depth ? n - at : depth;
		struct page_drain drain = { l, page_map_now_ms() +
						       map->attr.timeout_ms };

		for (size_t j = 0; j < k && st == RDMX_OK; j++) {
			size_t so = j * PAGE_SIZE_BYTES;

			if (op == RDMX_OP_WRITE)
				rdmx_memcpy(l->stage + so, bufs[at + j],
					    PAGE_SIZE_BYTES);
			st = page_link_post_wait(
				l,
				&(struct page_xfer){ .op = op,
						     .wr_id = at + j,
						     .stage_off = so,
						     .off = index[at + j] *
							    PAGE_SIZE_BYTES,
						     .len = PAGE_SIZE_BYTES },
				page_drain_room, &drain);
		}
		/* Stored means at the server, for every client to see. */
		if (st == RDMX_OK && op == RDMX_OP_WRITE && l->settles)
			st = page_link_post_wait(
				l,
				&(struct page_xfer){ .settle = true,
						     .wr_id = UINT64_MAX },
				page_drain_room, &drain);
		rdmx_status done = page_link_drain(l, drain.deadline);

		if (st == RDMX_OK)
			st = done;
		for (size_t j = 0; j < k && st == RDMX_OK && op == RDMX_OP_READ;
		     j++)
			rdmx_memcpy(bufs[at + j],
				    l->stage + j * PAGE_SIZE_BYTES,
				    PAGE_SIZE_BYTES);
	}
	pthread_mutex_unlock(&map->lock);
	return st;
}

rdmx_status rdmx_page_fetch(struct rdmx_page_map *map, uint64_t index,
			    void *buf)
{
	return page_move(map, RDMX_OP_READ, &index, &buf, 1);
}

rdmx_status rdmx_page_store(struct rdmx_page_map *map, uint64_t index,
			    const void *buf)
{
	void *b = (void *)buf; /* only read: the stage is written from it */

	return page_move(map, RDMX_OP_WRITE, &index, &b, 1);
}

rdmx_status rdmx_page_fetchv(struct rdmx_page_map *map, const uint64_t *index,
			     void *const *bufs, size_t n)
{
	return page_move(map, RDMX_OP_READ, index, bufs, n);
}

rdmx_status rdmx_page_storev(struct rdmx_page_map *map, const uint64_t *index,
			     const void *const *bufs, size_t n)
{
	return page_move(map, RDMX_OP_WRITE, index, (void *const *)bufs, n);
}

rdmx_status rdmx_page_mmap(struct rdmx_page_map *map, void **addr_p)
{
	rdmx_status st = RDMX_OK;

	if (!map || !addr_p)
		return RDMX_ERR_INVALID;
	pthread_mutex_lock(&map->lock);
	if (!map->mem)
		st = page_mem_create(map, &map->mem);
	pthread_mutex_unlock(&map->lock);
	if (st == RDMX_OK)
		*addr_p = page_mem_base(map->mem);
	return st;
}

/* The pages [*first, *first + *n) that cover [addr, addr + len). */
static rdmx_status page_range(struct rdmx_page_map *map, void *addr, size_t len,
			      uint64_t *first, uint64_t *n)
{
	uintptr_t base, a = (uintptr_t)addr;

	if (!map || !map->mem) {
		page_log(RDMX_LOG_ERROR,
			 "no mapping: call rdmx_page_mmap first");
		return RDMX_ERR_INVALID;
	}
	base = (uintptr_t)page_mem_base(map->mem);
	if (a < base || len > map->length || a - base > map->length - len) {
		page_log(RDMX_LOG_ERROR, "[%p, +%zu) is outside the mapping",
			 addr, len);
		return RDMX_ERR_INVALID;
	}
	*first = (a - base) / PAGE_SIZE_BYTES;
	*n = len ? (a - base + len - 1) / PAGE_SIZE_BYTES + 1 - *first : 0;
	return RDMX_OK;
}

rdmx_status rdmx_page_sync(struct rdmx_page_map *map, void *addr, size_t len)
{
	uint64_t first, n;
	rdmx_status st = page_range(map, addr, len, &first, &n);

	return st != RDMX_OK ? st : page_mem_sync(map->mem, first, n, false);
}

rdmx_status rdmx_page_drop(struct rdmx_page_map *map, void *addr, size_t len)
{
	uint64_t first, n;
	rdmx_status st = page_range(map, addr, len, &first, &n);

	return st != RDMX_OK ? st : page_mem_sync(map->mem, first, n, true);
}

void rdmx_page_stats(struct rdmx_page_map *map, struct rdmx_page_stats *stats_p)
{
	memset(stats_p, 0, sizeof(*stats_p));
	if (map->mem)
		page_mem_stats(map->mem, stats_p);
}
