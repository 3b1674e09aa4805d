/* SPDX-License-Identifier: MIT */
/* The registry's common part: URLs, names, entries, keep-alive, watches. */
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "registry.h"

static uint64_t reg_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

bool reg_name_ok(const char *name, bool prefix)
{
	size_t n = strlen(name);

	if ((!n && !prefix) || n >= RDMX_REGISTRY_NAME_MAX ||
	    strstr(name, ".."))
		return false;
	for (const char *c = name; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || strchr("._:-/", *c)))
			return false;
	return true;
}

void reg_kvs_add(struct reg_kvs *kvs, const char *name, const char *json)
{
	if (kvs->n == kvs->cap) {
		size_t cap = kvs->cap ? kvs->cap * 2 : 16;
		struct reg_kv *v = realloc(kvs->v, cap * sizeof(*v));

		if (!v)
			return;
		kvs->v = v;
		kvs->cap = cap;
	}
	snprintf(kvs->v[kvs->n].name, sizeof(kvs->v[0].name), "%s", name);
	kvs->v[kvs->n].json = strdup(json);
	if (kvs->v[kvs->n].json)
		kvs->n++;
}

void reg_kvs_free(struct reg_kvs *kvs)
{
	for (size_t i = 0; i < kvs->n; i++)
		free(kvs->v[i].json);
	free(kvs->v);
	memset(kvs, 0, sizeof(*kvs));
}

static char reg_boot[64];

static void reg_read_boot_id(void)
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");

	if (!f || !fgets(reg_boot, sizeof(reg_boot), f))
		snprintf(reg_boot, sizeof(reg_boot), "unknown");
	reg_boot[strcspn(reg_boot, "\n")] = 0;
	if (f)
		fclose(f);
}

const char *reg_boot_id(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, reg_read_boot_id);
	return reg_boot;
}

uint64_t reg_start_time(int64_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long start = 0;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%" PRId64 "/stat", pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* After the command's ')': state is field 3, starttime field 22. */
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2,
			 "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u "
			 "%*u %*d %*d %*d %*d %*d %*d %llu",
			 &start) != 1)
		return 0;
	return start;
}

static char *reg_entry_json(const struct rdmx_registry_entry *e)
{
	char b64[sodium_base64_ENCODED_LEN(RDMX_REGISTRY_PAYLOAD_MAX,
					   sodium_base64_VARIANT_ORIGINAL)];
	struct json_object *o = json_object_new_object();
	char *out;

	sodium_bin2base64(b64, sizeof(b64), e->payload, e->payload_len,
			  sodium_base64_VARIANT_ORIGINAL);
	json_object_object_add(o, "addr", json_object_new_string(e->addr));
	json_object_object_add(o, "payload", json_object_new_string(b64));
	json_object_object_add(o, "pid", json_object_new_int64(e->pid));
	json_object_object_add(o, "host", json_object_new_string(e->host));
	json_object_object_add(o, "boot",
			       json_object_new_string(reg_boot_id()));
	json_object_object_add(
		o, "start",
		json_object_new_int64((int64_t)reg_start_time(e->pid)));
	out = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	return out;
}

static const char *reg_json_str(struct json_object *o, const char *key)
{
	struct json_object *v;

	if (!json_object_object_get_ex(o, key, &v) ||
	    !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

bool reg_entry_parse(const char *json, struct rdmx_registry_entry *e,
		     char *boot, size_t boot_len, uint64_t *start)
{
	struct json_object *o = json_tokener_parse(json), *v;
	const char *addr, *payload, *host, *b;
	size_t len = 0;
	bool ok = false;

	if (!o)
		return false;
	addr = reg_json_str(o, "addr");
	payload = reg_json_str(o, "payload");
	host = reg_json_str(o, "host");
	b = reg_json_str(o, "boot");
	if (!addr || !payload || strlen(addr) >= sizeof(e->addr) ||
	    sodium_base642bin(e->payload, sizeof(e->payload), payload,
			      strlen(payload), NULL, &len, NULL,
			      sodium_base64_VARIANT_ORIGINAL))
		goto out;
	snprintf(e->addr, sizeof(e->addr), "%s", addr);
	e->payload_len = len;
	snprintf(e->host, sizeof(e->host), "%s", host ? host : "");
	e->pid = json_object_object_get_ex(o, "pid", &v)
			 ? json_object_get_int64(v)
			 : 0;
	if (boot)
		snprintf(boot, boot_len, "%s", b ? b : "");
	if (start)
		*start = json_object_object_get_ex(o, "start", &v)
				 ? (uint64_t)json_object_get_int64(v)
				 : 0;
	ok = true;
out:
	json_object_put(o);
	return ok;
}

/* ------------------------------------------------------------------------ */

/* etcd://H:P[,H:P...][/PREFIX] */
static rdmx_status reg_parse_etcd(struct rdmx_registry *reg, const char *rest)
{
	char hosts[REG_URL_MAX], *save = NULL, *tok;
	const char *slash = strchr(rest, '/');
	size_t n = slash ? (size_t)(slash - rest) : strlen(rest);

	if (!n || n >= sizeof(hosts))
		return RDMX_ERR_INVALID;
	memcpy(hosts, rest, n);
	hosts[n] = 0;
	for (tok = strtok_r(hosts, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (reg->nendpoints == REG_ENDPOINTS_MAX || !strchr(tok, ':') ||
		    strlen(tok) >= sizeof(reg->endpoints[0]))
			return RDMX_ERR_INVALID;
		snprintf(reg->endpoints[reg->nendpoints++],
			 sizeof(reg->endpoints[0]), "%s", tok);
	}
	snprintf(reg->prefix, sizeof(reg->prefix), "%s",
		 slash && slash[1] ? slash + 1 : "rdmx");
	if (!reg->nendpoints || !reg_name_ok(reg->prefix, false))
		return RDMX_ERR_INVALID;
	reg->ops = &reg_etcd_ops;
	return RDMX_OK;
}

rdmx_status rdmx_registry_open(struct rdmx_ctx *ctx, const char *url,
			       struct rdmx_registry **reg_p)
{
	char cfg[REG_URL_MAX] = "";
	struct rdmx_registry *reg;
	rdmx_status st = RDMX_ERR_INVALID;

	if (!reg_p)
		return RDMX_ERR_INVALID;
	if ((!url || !*url) && ctx &&
	    rdmx_ctx_config(ctx, "registry.url", cfg, sizeof(cfg)) == RDMX_OK)
		url = cfg;
	if (!url || !*url) {
		snprintf(cfg, sizeof(cfg), "dir:/tmp/rdmx-registry-%u",
			 (unsigned)getuid());
		url = cfg;
	}
	if (sodium_init() < 0)
		return RDMX_ERR_SYSTEM;
	reg = calloc(1, sizeof(*reg));
	if (!reg)
		return RDMX_ERR_NOMEM;
	snprintf(reg->url, sizeof(reg->url), "%s", url);
	if (!strncmp(url, "dir:", 4) && url[4] &&
	    strlen(url + 4) < sizeof(reg->dir)) {
		snprintf(reg->dir, sizeof(reg->dir), "%s", url + 4);
		reg->ops = &reg_dir_ops;
		st = RDMX_OK;
	} else if (!strncmp(url, "etcd://", 7)) {
		st = reg_parse_etcd(reg, url + 7);
	}
	if (st) {
		rdmx_log(
			RDMX_LOG_ERROR,
			"registry: '%s' is neither "
			"etcd://HOST:PORT[,HOST:PORT...][/PREFIX] nor dir:PATH",
			url);
		free(reg);
		return st;
	}
	pthread_mutex_init(&reg->lock, NULL);
	pthread_cond_init(&reg->cond, NULL);
	*reg_p = reg;
	return RDMX_OK;
}

const char *rdmx_registry_url(const struct rdmx_registry *reg)
{
	return reg->url;
}

rdmx_status rdmx_registry_ping(struct rdmx_registry *reg)
{
	return reg->ops->ping(reg);
}

/*
 * After a renewal (or a first put) of @p that returned @st: when the next
 * is due, and what to say. A failure is said once, at the first of a run
 * (the keeper tries again every tenth of the TTL, and an outage of etcd
 * printed two lines a try); the end of the run is said too.
 */
static void reg_kept(struct rdmx_registry *reg, struct reg_pub *p,
		     rdmx_status st)
{
	/* A third of the TTL; sooner after a failure. */
	p->renew_at = reg_now_us() + (uint64_t)p->ttl_ms * 1000 / (st ? 10 : 3);
	if (st) {
		rdmx_log(p->fails++ ? RDMX_LOG_DEBUG : RDMX_LOG_WARN,
			 "registry: cannot %s %s: %s; trying again every %u ms",
			 p->stored ? "renew" : "publish", p->name,
			 rdmx_strerror(st), p->ttl_ms / 10);
		return;
	}
	if (!p->stored)
		rdmx_log(RDMX_LOG_INFO, "registry: published %s in %s at last",
			 p->name, reg->url);
	else if (p->fails)
		rdmx_log(RDMX_LOG_WARN,
			 "registry: renewed %s in %s again, after %u failed "
			 "tries",
			 p->name, reg->url, p->fails);
	p->stored = true;
	p->fails = 0;
}

/* Renew what is due, sleep until the next is (lock held throughout). */
static void *reg_keeper(void *arg)
{
	struct rdmx_registry *reg = arg;

	pthread_mutex_lock(&reg->lock);
	while (!reg->stopping) {
		uint64_t now = reg_now_us(), next = now + 1000000;
		struct timespec ts;

		for (struct reg_pub *p = reg->pubs; p; p = p->next) {
			if (p->renew_at <= now) {
				rdmx_status st =
					p->stored ? reg->ops->renew(reg, p)
						  : reg->ops->put(reg, p);

				reg_kept(reg, p, st);
			}
			if (p->renew_at < next)
				next = p->renew_at;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		now = reg_now_us();
		if (next > now) {
			uint64_t ns =
				(uint64_t)ts.tv_nsec + (next - now) * 1000;

			ts.tv_sec += (time_t)(ns / 1000000000);
			ts.tv_nsec = (long)(ns % 1000000000);
			pthread_cond_timedwait(&reg->cond, &reg->lock, &ts);
		}
	}
	pthread_mutex_unlock(&reg->lock);
	return NULL;
}

static struct reg_pub **reg_pub_find(struct rdmx_registry *reg,
				     const char *name)
{
	struct reg_pub **pp = &reg->pubs;

	while (*pp && strcmp((*pp)->name, name))
		pp = &(*pp)->next;
	return pp;
}

static void reg_pub_free(struct reg_pub *p)
{
	free(p->json);
	free(p);
}

rdmx_status rdmx_registry_publish(struct rdmx_registry *reg,
				  const struct rdmx_registry_entry *e,
				  unsigned ttl_ms)
{
	struct rdmx_registry_entry mine;
	struct reg_pub *p, **old;
	rdmx_status st;

	if (!reg || !e || !reg_name_ok(e->name, false) || !*e->addr ||
	    e->payload_len > RDMX_REGISTRY_PAYLOAD_MAX) {
		rdmx_log(RDMX_LOG_ERROR,
			 "registry: cannot publish '%s': names are letters, "
			 "digits and ._:-/ (at most %d), with an address",
			 e ? e->name : "(null)", RDMX_REGISTRY_NAME_MAX - 1);
		return RDMX_ERR_INVALID;
	}
	mine = *e;
	mine.pid = getpid();
	if (gethostname(mine.host, sizeof(mine.host)))
		snprintf(mine.host, sizeof(mine.host), "?");
	mine.host[sizeof(mine.host) - 1] = 0;
	p = calloc(1, sizeof(*p));
	if (!p || !(p->json = reg_entry_json(&mine))) {
		free(p);
		return RDMX_ERR_NOMEM;
	}
	snprintf(p->name, sizeof(p->name), "%s", e->name);
	p->ttl_ms = ttl_ms ? ttl_ms : RDMX_REGISTRY_TTL_MS;
	pthread_mutex_lock(&reg->lock);
	old = reg_pub_find(reg, e->name);
	if (*old) { /* replaced: the old one goes first */
		struct reg_pub *o = *old;

		*old = o->next;
		if (o->stored)
			reg->ops->del(reg, o);
		reg_pub_free(o);
	}
	st = reg->ops->put(reg, p);
	p->stored = !st;
	/* No member answered: kept, and the keeper stores it when one does. */
	if ((!st || st == RDMX_ERR_UNREACHABLE) && !reg->keeper_running) {
		reg->keeper_running =
			!pthread_create(&reg->keeper, NULL, reg_keeper, reg);
		if (!reg->keeper_running) {
			if (p->stored)
				reg->ops->del(reg, p);
			st = RDMX_ERR_SYSTEM;
		}
	}
	if (st && st != RDMX_ERR_UNREACHABLE) {
		pthread_mutex_unlock(&reg->lock);
		reg_pub_free(p);
		return st;
	}
	p->renew_at = reg_now_us() +
		      (uint64_t)p->ttl_ms * 1000 / (p->stored ? 3 : 10);
	p->next = reg->pubs;
	reg->pubs = p;
	pthread_cond_signal(&reg->cond);
	pthread_mutex_unlock(&reg->lock);
	if (st)
		return st;
	rdmx_log(RDMX_LOG_INFO, "registry: published %s as %s in %s", e->name,
		 e->addr, reg->url);
	return RDMX_OK;
}

rdmx_status rdmx_registry_unpublish(struct rdmx_registry *reg, const char *name)
{
	struct reg_pub **pp, *p;
	rdmx_status st;

	pthread_mutex_lock(&reg->lock);
	pp = reg_pub_find(reg, name);
	p = *pp;
	if (p)
		*pp = p->next;
	pthread_mutex_unlock(&reg->lock);
	if (!p)
		return RDMX_ERR_NOT_FOUND;
	st = p->stored ? reg->ops->del(reg, p) : RDMX_OK;
	reg_pub_free(p);
	return st;
}

/* NULL is ""; false (logged) for one that no name can start with. */
static bool reg_prefix_ok(const char **prefix)
{
	if (!*prefix)
		*prefix = "";
	if (reg_name_ok(*prefix, true))
		return true;
	rdmx_log(RDMX_LOG_ERROR, "registry: '%s' is not a name prefix",
		 *prefix);
	return false;
}

static int reg_entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct rdmx_registry_entry *)a)->name,
		      ((const struct rdmx_registry_entry *)b)->name);
}

rdmx_status rdmx_registry_list(struct rdmx_registry *reg, const char *prefix,
			       struct rdmx_registry_entry **es_p, size_t *n_p)
{
	struct reg_kvs kvs = { 0 };
	struct rdmx_registry_entry *es;
	rdmx_status st;
	size_t n = 0;

	if (!reg_prefix_ok(&prefix))
		return RDMX_ERR_INVALID;
	st = reg->ops->range(reg, prefix, false, &kvs);
	if (st)
		return st;
	es = calloc(kvs.n ? kvs.n : 1, sizeof(*es));
	if (!es) {
		reg_kvs_free(&kvs);
		return RDMX_ERR_NOMEM;
	}
	for (size_t i = 0; i < kvs.n; i++) {
		if (!reg_entry_parse(kvs.v[i].json, &es[n], NULL, 0, NULL))
			continue;
		snprintf(es[n].name, sizeof(es[n].name), "%s", kvs.v[i].name);
		n++;
	}
	reg_kvs_free(&kvs);
	qsort(es, n, sizeof(*es), reg_entry_cmp);
	*es_p = es;
	*n_p = n;
	return RDMX_OK;
}

rdmx_status rdmx_registry_lookup(struct rdmx_registry *reg, const char *name,
				 struct rdmx_registry_entry *e)
{
	struct reg_kvs kvs = { 0 };
	rdmx_status st;

	if (!reg_name_ok(name, false)) {
		rdmx_log(RDMX_LOG_ERROR, "registry: '%s' is not a name", name);
		return RDMX_ERR_INVALID;
	}
	st = reg->ops->range(reg, name, true, &kvs);
	if (st)
		return st;
	st = RDMX_ERR_NOT_FOUND;
	memset(e, 0, sizeof(*e));
	if (kvs.n && reg_entry_parse(kvs.v[0].json, e, NULL, 0, NULL)) {
		snprintf(e->name, sizeof(e->name), "%s", name);
		st = RDMX_OK;
	}
	reg_kvs_free(&kvs);
	return st;
}

void rdmx_registry_close(struct rdmx_registry *reg)
{
	struct reg_pub *p;

	if (!reg)
		return;
	pthread_mutex_lock(&reg->lock);
	reg->stopping = true;
	pthread_cond_signal(&reg->cond);
	pthread_mutex_unlock(&reg->lock);
	if (reg->keeper_running)
		pthread_join(reg->keeper, NULL);
	while ((p = reg->pubs)) {
		reg->pubs = p->next;
		if (p->stored)
			reg->ops->del(reg, p);
		reg_pub_free(p);
	}
	if (reg->ops->close)
		reg->ops->close(reg);
	pthread_cond_destroy(&reg->cond);
	pthread_mutex_destroy(&reg->lock);
	free(reg);
}

/* ------------------------------------------------------------------------ */
/* Watches                                                                  */

void reg_watch_push(struct rdmx_registry_watch *w,
		    enum rdmx_registry_event_type type, const char *name,
		    const char *json)
{
	struct reg_event *e = calloc(1, sizeof(*e));
	uint64_t one = 1;

	if (!e)
		return;
	e->ev.type = type;
	if (json && !reg_entry_parse(json, &e->ev.entry, NULL, 0, NULL)) {
		free(e);
		return;
	}
	snprintf(e->ev.entry.name, sizeof(e->ev.entry.name), "%s", name);
	pthread_mutex_lock(&w->lock);
	if (w->tail)
		w->tail->next = e;
	else
		w->head = e;
	w->tail = e;
	pthread_mutex_unlock(&w->lock);
	if (write(w->efd, &one, sizeof(one)) != sizeof(one))
		rdmx_log(RDMX_LOG_DEBUG, "registry: eventfd: %s",
			 strerror(errno));
}

bool reg_watch_sleep(struct rdmx_registry_watch *w, int ms)
{
	for (int i = 0; i < ms / 10 && !atomic_load(&w->stop); i++)
		usleep(10000);
	return !atomic_load(&w->stop);
}

rdmx_status rdmx_registry_watch(struct rdmx_registry *reg, const char *prefix,
				struct rdmx_registry_watch **w_p)
{
	struct rdmx_registry_watch *w;

	if (!reg_prefix_ok(&prefix))
		return RDMX_ERR_INVALID;
	w = calloc(1, sizeof(*w));
	if (!w)
		return RDMX_ERR_NOMEM;
	w->reg = reg;
	snprintf(w->prefix, sizeof(w->prefix), "%s", prefix);
	w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&w->lock, NULL);
	sem_init(&w->ready, 0, 0);
	if (w->efd < 0 ||
	    pthread_create(&w->thread, NULL, reg->ops->watch_run, w)) {
		if (w->efd >= 0)
			close(w->efd);
		sem_destroy(&w->ready);
		pthread_mutex_destroy(&w->lock);
		free(w);
		return RDMX_ERR_SYSTEM;
	}
	/* Every change after this call returns is reported. */
	while (sem_wait(&w->ready) && errno == EINTR)
		;
	*w_p = w;
	return RDMX_OK;
}

int rdmx_registry_watch_fd(const struct rdmx_registry_watch *w)
{
	return w->efd;
}

int rdmx_registry_watch_next(struct rdmx_registry_watch *w,
			     struct rdmx_registry_event *ev, int timeout_ms)
{
	struct reg_event *e;
	uint64_t val;

	for (;;) {
		pthread_mutex_lock(&w->lock);
		e = w->head;
		if (e) {
			w->head = e->next;
			if (!w->head)
				w->tail = NULL;
		}
		/* Drained: the fd stops being readable until the next push. */
		if (!w->head && read(w->efd, &val, sizeof(val)) < 0 &&
		    errno != EAGAIN)
			rdmx_log(RDMX_LOG_DEBUG, "registry: eventfd: %s",
				 strerror(errno));
		pthread_mutex_unlock(&w->lock);
		if (e) {
			*ev = e->ev;
			free(e);
			return 1;
		}
		if (!timeout_ms)
			return 0;
		struct pollfd pfd = { .fd = w->efd, .events = POLLIN };

		if (poll(&pfd, 1, timeout_ms) == 0)
			return RDMX_ERR_TIMEOUT;
	}
}

void rdmx_registry_watch_close(struct rdmx_registry_watch *w)
{
	struct reg_event *e;

	if (!w)
		return;
	atomic_store(&w->stop, true);
	pthread_join(w->thread, NULL);
	while ((e = w->head)) {
		w->head = e->next;
		free(e);
	}
	close(w->efd);
	sem_destroy(&w->ready);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

static rdmx_status reg_resolve(void *arg, const char *name, char *addr,
			       size_t len)
{
	struct rdmx_registry_entry e;
	struct rdmx_registry *reg = arg;
	rdmx_status st = rdmx_registry_lookup(reg, name, &e);

	if (st == RDMX_ERR_NOT_FOUND)
		rdmx_log(RDMX_LOG_ERROR, "no @%s in the registry %s", name,
			 reg->url);
	if (st)
		return st;
	if (strlen(e.addr) >= len)
		return RDMX_ERR_INVALID;
	memcpy(addr, e.addr, strlen(e.addr) + 1);
	return RDMX_OK;
}

void rdmx_registry_attach(struct rdmx_registry *reg, struct rdmx_ctx *ctx)
{
	rdmx_ctx_set_resolver(ctx, reg_resolve, reg);
}
