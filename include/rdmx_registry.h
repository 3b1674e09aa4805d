/* SPDX-License-Identifier: MIT */
/*
 * rdmx_registry - find peers by name: nodes publish how to reach them
 * ("host:port") and an opaque payload (a packed remote descriptor, a size)
 * under a name; others look the name up, list a prefix or watch it.
 *
 * Two backends, one API, chosen by URL (config key registry.url, env
 * RDMX_REGISTRY_URL):
 *   etcd://HOST:PORT[,HOST:PORT...][/PREFIX]  etcd v3 through its HTTP/JSON
 *       gateway; an entry lives under a lease that a background thread
 *       renews, so it disappears within its TTL when its process dies;
 *       requests fail over between the listed members.
 *   dir:PATH  one host, no server: a file per entry, written atomically,
 *       naming its publisher's pid and boot; entries of dead processes are
 *       ignored and removed. The default (empty URL) is
 *       dir:/tmp/rdmx-registry-UID.
 *
 * With rdmx_registry_attach, rdmx_connect(ctx, "@NAME", ...) connects to
 * the address published under NAME. See rdmx_registry(7).
 */
#ifndef RDMX_REGISTRY_H
#define RDMX_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "rdmx.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Names: letters, digits and "._:-/", at most this long with the NUL. */
#define RDMX_REGISTRY_NAME_MAX 128
#define RDMX_REGISTRY_ADDR_MAX 128
#define RDMX_REGISTRY_PAYLOAD_MAX 1024
/* The time-to-live of a published entry when the caller gives 0. */
#define RDMX_REGISTRY_TTL_MS 5000

struct rdmx_registry;

struct rdmx_registry_entry {
	char name[RDMX_REGISTRY_NAME_MAX];
	char addr[RDMX_REGISTRY_ADDR_MAX]; /* "host:port" */
	uint8_t payload[RDMX_REGISTRY_PAYLOAD_MAX];
	size_t payload_len;
	int64_t pid; /* the publisher's (filled in by publish) */
	char host[64]; /* the publisher's host name (filled in by publish) */
};

/*
 * rdmx_registry_open - open the registry at @url; NULL or "" takes @ctx's
 * registry.url, and an empty one the per-user directory. @ctx may be NULL
 * when @url is given. Nothing is asked of the backend here: an etcd that
 * does not answer fails the first call that needs it.
 * RDMX_ERR_INVALID: a URL that is neither form (logged).
 */
rdmx_status rdmx_registry_open(struct rdmx_ctx *ctx, const char *url,
			       struct rdmx_registry **reg_p);

/* Unpublish what this registry published, stop its threads, free it. */
void rdmx_registry_close(struct rdmx_registry *reg);

/* The URL in use, normalized ("dir:/tmp/rdmx-registry-0"). */
const char *rdmx_registry_url(const struct rdmx_registry *reg);

/* RDMX_OK if the backend answers; else why not (logged). */
rdmx_status rdmx_registry_ping(struct rdmx_registry *reg);

/*
 * rdmx_registry_publish - publish @e (name, addr, payload) for @ttl_ms
 * (0: RDMX_REGISTRY_TTL_MS; etcd rounds up to whole seconds), renewed in
 * the background until unpublished or closed. Publishing a name again
 * replaces the entry. Errors: RDMX_ERR_INVALID (a bad name or sizes),
 * RDMX_ERR_SYSTEM, and RDMX_ERR_UNREACHABLE: no etcd member answered; the
 * publication is kept and stored as soon as one does (a server started
 * before its etcd joins when it comes up), until unpublished.
 */
rdmx_status rdmx_registry_publish(struct rdmx_registry *reg,
				  const struct rdmx_registry_entry *e,
				  unsigned ttl_ms);

/* Remove @name, published by this registry. RDMX_ERR_NOT_FOUND if not. */
rdmx_status rdmx_registry_unpublish(struct rdmx_registry *reg,
				    const char *name);

/* The live entry of @name. RDMX_ERR_NOT_FOUND, RDMX_ERR_UNREACHABLE. */
rdmx_status rdmx_registry_lookup(struct rdmx_registry *reg, const char *name,
				 struct rdmx_registry_entry *e);

/*
 * rdmx_registry_list - the live entries whose names start with @prefix
 * ("" for all), sorted by name, in a malloc'd array to free with free().
 */
rdmx_status rdmx_registry_list(struct rdmx_registry *reg, const char *prefix,
			       struct rdmx_registry_entry **es_p, size_t *n_p);

/* ------------------------------------------------------------------------ */
/* Watches                                                                  */

struct rdmx_registry_watch;

enum rdmx_registry_event_type {
	RDMX_REGISTRY_PUT = 1, /* published or replaced: the whole entry */
	RDMX_REGISTRY_DELETE, /* unpublished or expired: the name only */
};

struct rdmx_registry_event {
	enum rdmx_registry_event_type type;
	struct rdmx_registry_entry entry;
};

/*
 * rdmx_registry_watch - follow changes under @prefix from now on. Events
 * queue until taken with rdmx_registry_watch_next; the fd is readable
 * while some are queued (for poll or epoll). Entries already there are not
 * replayed: list first, then watch, and apply events in order.
 */
rdmx_status rdmx_registry_watch(struct rdmx_registry *reg, const char *prefix,
				struct rdmx_registry_watch **w_p);
int rdmx_registry_watch_fd(const struct rdmx_registry_watch *w);
/*
 * Take the next event: 1 (one taken), 0 (none now), or, waiting up to
 * @timeout_ms (-1: forever, 0: not at all) for one, RDMX_ERR_TIMEOUT.
 */
int rdmx_registry_watch_next(struct rdmx_registry_watch *w,
			     struct rdmx_registry_event *ev, int timeout_ms);
void rdmx_registry_watch_close(struct rdmx_registry_watch *w);

/*
 * rdmx_registry_attach - resolve @ctx's "@NAME" addresses through @reg
 * (rdmx_ctx_set_resolver). @reg must outlive the connects that use it.
 */
void rdmx_registry_attach(struct rdmx_registry *reg, struct rdmx_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif
