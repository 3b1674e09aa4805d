/* SPDX-License-Identifier: MIT */
/*
 * The registry's insides: the common part (registry.c: names, entries as
 * JSON, publications kept alive by one thread, watches as event queues)
 * and two backends behind struct reg_ops (reg_dir.c, reg_etcd.c).
 *
 * An entry is stored as one JSON object:
 *   {"addr":"10.0.0.1:7480","payload":"<base64>","pid":123,"host":"n1",
 *    "boot":"<boot id>","start":<the publisher's start time in ticks>}
 * pid, boot and start let the directory backend tell a dead publisher's
 * entry from a live one; etcd has leases for that.
 */
#ifndef RDMX_REG_H
#define RDMX_REG_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "rdmx_registry.h"

#define REG_URL_MAX 512
#define REG_ENDPOINTS_MAX 8

/* One name this registry published, kept alive until unpublished. */
struct reg_pub {
	struct reg_pub *next;
	char name[RDMX_REGISTRY_NAME_MAX];
	char *json; /* the stored value */
	unsigned ttl_ms;
	int64_t lease; /* etcd: the lease the key lives under */
	bool stored; /* put once; else the keeper tries until it is */
	uint64_t renew_at; /* us, monotonic */
	unsigned fails; /* failed tries in a row (said at the first) */
};

/* A name and its stored value, as a backend lists them. */
struct reg_kv {
	char name[RDMX_REGISTRY_NAME_MAX];
	char *json;
};

struct reg_kvs {
	struct reg_kv *v;
	size_t n, cap;
};

struct rdmx_registry;
struct rdmx_registry_watch;

struct reg_ops {
	rdmx_status (*ping)(struct rdmx_registry *reg);
	/* Store @p (a new lease where there is one); renew it; remove it. */
	rdmx_status (*put)(struct rdmx_registry *reg, struct reg_pub *p);
	rdmx_status (*renew)(struct rdmx_registry *reg, struct reg_pub *p);
	rdmx_status (*del)(struct rdmx_registry *reg, struct reg_pub *p);
	/* Live names equal to @key (@exact) or starting with it. */
	rdmx_status (*range)(struct rdmx_registry *reg, const char *key,
			     bool exact, struct reg_kvs *out);
	/* A watch's thread: fix where "now" is (a revision, a listing),
	 * post w->ready, then push events until w->stop. */
	void *(*watch_run)(void *w);
	void (*close)(struct rdmx_registry *reg);
};

struct rdmx_registry {
	const struct reg_ops *ops;
	char url[REG_URL_MAX];
	/* dir: */
	char dir[REG_URL_MAX];
	/* etcd: */
	char endpoints[REG_ENDPOINTS_MAX][128];
	int nendpoints;
	atomic_int good; /* the member that answered last */
	atomic_bool unreachable; /* no member answered the last call */
	char prefix[RDMX_REGISTRY_NAME_MAX]; /* keys are PREFIX/NAME */

	pthread_mutex_t lock; /* pubs */
	pthread_cond_t cond;
	struct reg_pub *pubs;
	pthread_t keeper;
	bool keeper_running, stopping;
};

struct reg_event {
	struct reg_event *next;
	struct rdmx_registry_event ev;
};

struct rdmx_registry_watch {
	struct rdmx_registry *reg;
	char prefix[RDMX_REGISTRY_NAME_MAX];
	int efd; /* readable while events are queued */
	pthread_mutex_t lock;
	struct reg_event *head, *tail;
	pthread_t thread;
	atomic_bool stop;
	sem_t ready; /* posted by the thread once "now" is fixed */
};

extern const struct reg_ops reg_dir_ops;
extern const struct reg_ops reg_etcd_ops;

/* registry.c */
bool reg_name_ok(const char *name, bool prefix);
void reg_kvs_add(struct reg_kvs *kvs, const char *name, const char *json);
void reg_kvs_free(struct reg_kvs *kvs);
/* Parse a stored value into @e (name set by the caller); the liveness
 * facts into @boot/@start when not NULL. false: not an entry. */
bool reg_entry_parse(const char *json, struct rdmx_registry_entry *e,
		     char *boot, size_t boot_len, uint64_t *start);
/* This host's boot id; this process's start time (ticks since boot). */
const char *reg_boot_id(void);
uint64_t reg_start_time(int64_t pid);
/* Queue an event for the watch's reader (DELETE: @json NULL). */
void reg_watch_push(struct rdmx_registry_watch *w,
		    enum rdmx_registry_event_type type, const char *name,
		    const char *json);
/* Sleep @ms unless the watch stops meanwhile; false once it stops. */
bool reg_watch_sleep(struct rdmx_registry_watch *w, int ms);

#endif
