/* SPDX-License-Identifier: MIT */
/*
 * The etcd backend: etcd v3 through its HTTP/JSON gateway (/v3/...), with
 * libcurl and json-c. Keys are PREFIX/NAME; keys and values travel in
 * base64, as the gateway wants. A published entry lives under a lease of
 * its TTL that the registry's keeper renews a third of the way through;
 * when the publisher dies the lease expires and etcd deletes the key. A
 * lease found expired at renewal (a long pause, etcd restored) is replaced
 * and the key written again. Every request goes to the member that
 * answered last, then to the others in turn. A watch is a streaming POST
 * read by its own thread; after a break it resumes from the revision
 * after the last one seen, on whichever member answers.
 */
#include <curl/curl.h>
#include <json-c/json.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "registry.h"

#define ETCD_CONNECT_MS 1000L
#define ETCD_REQUEST_MS 3000L
/*
 * A member that answers 5xx is up but its cluster cannot serve: it is
 * electing a leader (one was lost), which takes a few election timeouts.
 * Such a round is tried again this long, ETCD_RETRY_MS apart.
 */
#define ETCD_ELECTION_MS 5000L
#define ETCD_RETRY_MS 100L

static pthread_once_t etcd_once = PTHREAD_ONCE_INIT;

static void etcd_global_init(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct etcd_buf {
	char *p;
	size_t n;
};

static size_t etcd_collect(char *data, size_t size, size_t nmemb, void *arg)
{
	struct etcd_buf *b = arg;
	size_t len = size * nmemb;
	char *p = realloc(b->p, b->n + len + 1);

	if (!p)
		return 0;
	memcpy(p + b->n, data, len);
	b->n += len;
	p[b->n] = 0;
	b->p = p;
	return len;
}

static char *etcd_b64(const void *data, size_t len)
{
	size_t cap =
		sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL);
	char *out = malloc(cap);

	if (out)
		sodium_bin2base64(out, cap, data, len,
				  sodium_base64_VARIANT_ORIGINAL);
	return out;
}

/* A base64 string of the gateway's, decoded and NUL-terminated. */
static char *etcd_unb64(const char *s)
{
	size_t cap = strlen(s) + 1, len = 0;
	char *out = malloc(cap);

	if (out &&
	    sodium_base642bin((unsigned char *)out, cap - 1, s, strlen(s), NULL,
			      &len, NULL, sodium_base64_VARIANT_ORIGINAL)) {
		free(out);
		return NULL;
	}
	if (out)
		out[len] = 0;
	return out;
}

static CURL *etcd_handle(const char *ep, const char *path, const char *body,
			 struct curl_slist *hdr)
{
	char url[256];
	CURL *c;

	pthread_once(&etcd_once, etcd_global_init);
	c = curl_easy_init();
	if (!c)
		return NULL;
	snprintf(url, sizeof(url), "http://%s/v3/%s", ep, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, ETCD_CONNECT_MS);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROXY, ""); /* loopback, never a proxy */
	return c;
}

static long etcd_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/*
 * One round of etcd_call: every member in turn from @first. *@busy is set
 * when one answered 5xx (up, but its cluster cannot serve yet).
 */
static rdmx_status etcd_round(struct rdmx_registry *reg, int first,
			      const char *path, const char *body,
			      struct curl_slist *hdr, char *why,
			      struct json_object **resp, bool *busy)
{
	rdmx_status st = RDMX_ERR_UNREACHABLE;

	for (int i = 0; i < reg->nendpoints; i++) {
		int ep = (first + i) % reg->nendpoints;
		struct etcd_buf b = { 0 };
		long code = 0;
		CURLcode rc;
		CURL *c = etcd_handle(reg->endpoints[ep], path, body, hdr);

		if (!c)
			break;
		curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, ETCD_REQUEST_MS);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, etcd_collect);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
		curl_easy_setopt(c, CURLOPT_ERRORBUFFER, why);
		rc = curl_easy_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
		curl_easy_cleanup(c);
		if (rc != CURLE_OK || code >= 500) {
			if (rc == CURLE_OK) {
				snprintf(why, CURL_ERROR_SIZE,
					 "HTTP %ld: %.200s", code,
					 b.p ? b.p : "");
				*busy = true;
			}
			free(b.p);
			continue;
		}
		atomic_store(&reg->good, ep);
		*resp = b.p ? json_tokener_parse(b.p) : NULL;
		if (code != 200 || !*resp) {
			rdmx_log(RDMX_LOG_ERROR,
				 "registry: etcd at %s refused /v3/%s: HTTP "
				 "%ld: %.200s",
				 reg->endpoints[ep], path, code,
				 b.p ? b.p : "");
			json_object_put(*resp);
			*resp = NULL;
			st = RDMX_ERR_PROTOCOL;
		} else {
			st = RDMX_OK;
		}
		free(b.p);
		break;
	}
	return st;
}

/*
 * POST @body to /v3/@path on the member that answered last, else the
 * others in turn; the parsed answer in @resp. While members answer but
 * cannot serve (an election), again for up to ETCD_ELECTION_MS.
 * RDMX_ERR_UNREACHABLE when none answered, RDMX_ERR_PROTOCOL when one
 * refused (both logged).
 */
static rdmx_status etcd_call(struct rdmx_registry *reg, const char *path,
			     const char *body, struct json_object **resp)
{
	struct curl_slist *hdr =
		curl_slist_append(NULL, "Content-Type: application/json");
	char why[CURL_ERROR_SIZE] = "";
	long until = etcd_now_ms() + ETCD_ELECTION_MS;
	rdmx_status st;
	bool busy;

	for (;;) {
		busy = false;
		st = etcd_round(reg, atomic_load(&reg->good), path, body, hdr,
				why, resp, &busy);
		if (st != RDMX_ERR_UNREACHABLE || !busy ||
		    etcd_now_ms() + ETCD_RETRY_MS > until)
			break;
		nanosleep(&(struct timespec){ .tv_nsec = ETCD_RETRY_MS *
							 1000000L },
			  NULL);
	}
	curl_slist_free_all(hdr);
	/* Once an outage, not once a try: the keeper tries every tenth of a
	 * TTL while it lasts. */
	if (st == RDMX_ERR_UNREACHABLE)
		rdmx_log(atomic_exchange(&reg->unreachable, true)
				 ? RDMX_LOG_DEBUG
				 : RDMX_LOG_ERROR,
			 "registry: no etcd member of %s answers (%s)",
			 reg->url, why);
	else if (atomic_exchange(&reg->unreachable, false))
		rdmx_log(RDMX_LOG_INFO, "registry: etcd at %s answers again",
			 reg->endpoints[atomic_load(&reg->good)]);
	return st;
}

/* A JSON request body of string fields; NULL values are left out. */
static char *etcd_body(const char *k1, const char *v1, const char *k2,
		       const char *v2, const char *k3, const char *v3)
{
	struct json_object *o = json_object_new_object();
	char *out;

	if (k1 && v1)
		json_object_object_add(o, k1, json_object_new_string(v1));
	if (k2 && v2)
		json_object_object_add(o, k2, json_object_new_string(v2));
	if (k3 && v3)
		json_object_object_add(o, k3, json_object_new_string(v3));
	out = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	return out;
}

static int64_t etcd_int(struct json_object *o, const char *key)
{
	struct json_object *v;

	return json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v)
						     : 0;
}

static rdmx_status etcd_ping(struct rdmx_registry *reg)
{
	struct json_object *r = NULL;
	rdmx_status st = etcd_call(reg, "maintenance/status", "{}", &r);

	json_object_put(r);
	return st;
}

static void etcd_key(const struct rdmx_registry *reg, const char *name,
		     char *key, size_t len)
{
	snprintf(key, len, "%s/%s", reg->prefix, name);
}

static rdmx_status etcd_put(struct rdmx_registry *reg, struct reg_pub *p)
{
	char body[64], lease[32], key[2 * RDMX_REGISTRY_NAME_MAX];
	char *k, *v, *req;
	struct json_object *r = NULL;
	rdmx_status st;

	snprintf(body, sizeof(body), "{\"TTL\":%u}", (p->ttl_ms + 999) / 1000);
	st = etcd_call(reg, "lease/grant", body, &r);
	if (st)
		return st;
	p->lease = etcd_int(r, "ID");
	json_object_put(r);
	if (!p->lease)
		return RDMX_ERR_PROTOCOL;
	etcd_key(reg, p->name, key, sizeof(key));
	snprintf(lease, sizeof(lease), "%lld", (long long)p->lease);
	k = etcd_b64(key, strlen(key));
	v = etcd_b64(p->json, strlen(p->json));
	req = k && v ? etcd_body("key", k, "value", v, "lease", lease) : NULL;
	st = req ? etcd_call(reg, "kv/put", req, &r) : RDMX_ERR_NOMEM;
	if (!st)
		json_object_put(r);
	free(k);
	free(v);
	free(req);
	return st;
}

static rdmx_status etcd_renew(struct rdmx_registry *reg, struct reg_pub *p)
{
	struct json_object *r = NULL, *res;
	char body[64];
	rdmx_status st;
	int64_t ttl = 0;

	snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", (long long)p->lease);
	st = etcd_call(reg, "lease/keepalive", body, &r);
	if (st)
		return st;
	if (json_object_object_get_ex(r, "result", &res))
		ttl = etcd_int(res, "TTL");
	json_object_put(r);
	if (ttl > 0)
		return RDMX_OK;
	rdmx_log(RDMX_LOG_WARN,
		 "registry: the lease of %s had expired; publishing it again",
		 p->name);
	return etcd_put(reg, p);
}

static rdmx_status etcd_del(struct rdmx_registry *reg, struct reg_pub *p)
{
	struct json_object *r = NULL;
	char body[64];
	rdmx_status st;

	/* Revoking the lease deletes the key with it. */
	snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", (long long)p->lease);
	st = etcd_call(reg, "lease/revoke", body, &r);
	json_object_put(r);
	return st;
}

/* The key range of names starting with @key: [PREFIX/key, end). */
static char *etcd_range_body(const struct rdmx_registry *reg, const char *key,
			     bool exact, const char *extra_key,
			     const char *extra_val)
{
	char k[2 * RDMX_REGISTRY_NAME_MAX], end[sizeof(k)];
	char *kb, *eb = NULL, *body;

	etcd_key(reg, key, k, sizeof(k));
	kb = etcd_b64(k, strlen(k));
	if (!exact) {
		/* Every key with this prefix: the same bytes with the last
		 * one raised (names never end in 0xff). */
		snprintf(end, sizeof(end), "%s", k);
		end[strlen(end) - 1]++;
		eb = etcd_b64(end, strlen(end));
	}
	body = kb ? etcd_body("key", kb, "range_end", eb, extra_key, extra_val)
		  : NULL;
	free(kb);
	free(eb);
	return body;
}

/* The name a stored key stands for: PREFIX/ removed. */
static bool etcd_name(const struct rdmx_registry *reg, const char *key,
		      char *name, size_t len)
{
	size_t n = strlen(reg->prefix);

	if (strncmp(key, reg->prefix, n) || key[n] != '/')
		return false;
	snprintf(name, len, "%s", key + n + 1);
	return true;
}

static rdmx_status etcd_range(struct rdmx_registry *reg, const char *key,
			      bool exact, struct reg_kvs *out)
{
	struct json_object *r = NULL, *kvs;
	char *body = etcd_range_body(reg, key, exact, NULL, NULL);
	rdmx_status st = body ? etcd_call(reg, "kv/range", body, &r)
			      : RDMX_ERR_NOMEM;

	free(body);
	if (st)
		return st;
	if (json_object_object_get_ex(r, "kvs", &kvs))
		for (size_t i = 0; i < json_object_array_length(kvs); i++) {
			struct json_object *kv =
				json_object_array_get_idx(kvs, i);
			struct json_object *kj, *vj;
			char name[RDMX_REGISTRY_NAME_MAX], *k = NULL, *v = NULL;

			if (json_object_object_get_ex(kv, "key", &kj) &&
			    json_object_object_get_ex(kv, "value", &vj)) {
				k = etcd_unb64(json_object_get_string(kj));
				v = etcd_unb64(json_object_get_string(vj));
			}
			if (k && v && etcd_name(reg, k, name, sizeof(name)))
				reg_kvs_add(out, name, v);
			free(k);
			free(v);
		}
	json_object_put(r);
	return RDMX_OK;
}

/* ------------------------------------------------------------------------ */
/* Watch: a streaming POST; each message is one JSON object.               */

struct etcd_watch {
	struct rdmx_registry_watch *w;
	struct json_tokener *tok;
	int64_t next_rev; /* resume from here after a break */
};

static void etcd_watch_message(struct etcd_watch *ew, struct json_object *m)
{
	struct rdmx_registry *reg = ew->w->reg;
	struct json_object *res, *hdr, *evs;

	if (!json_object_object_get_ex(m, "result", &res))
		return;
	if (json_object_object_get_ex(res, "header", &hdr) &&
	    etcd_int(hdr, "revision") >= ew->next_rev)
		ew->next_rev = etcd_int(hdr, "revision") + 1;
	if (!json_object_object_get_ex(res, "events", &evs))
		return;
	for (size_t i = 0; i < json_object_array_length(evs); i++) {
		struct json_object *e = json_object_array_get_idx(evs, i);
		struct json_object *kv, *t, *kj, *vj;
		char name[RDMX_REGISTRY_NAME_MAX], *k, *v = NULL;
		bool del;

		if (!json_object_object_get_ex(e, "kv", &kv) ||
		    !json_object_object_get_ex(kv, "key", &kj))
			continue;
		/* PUT is the default: the gateway leaves its type out. */
		del = json_object_object_get_ex(e, "type", &t) &&
		      !strcmp(json_object_get_string(t), "DELETE");
		if (etcd_int(kv, "mod_revision") >= ew->next_rev)
			ew->next_rev = etcd_int(kv, "mod_revision") + 1;
		k = etcd_unb64(json_object_get_string(kj));
		if (!del && json_object_object_get_ex(kv, "value", &vj))
			v = etcd_unb64(json_object_get_string(vj));
		if (k && etcd_name(reg, k, name, sizeof(name)) && (del || v))
			reg_watch_push(ew->w,
				       del ? RDMX_REGISTRY_DELETE
					   : RDMX_REGISTRY_PUT,
				       name, del ? NULL : v);
		free(k);
		free(v);
	}
}

static size_t etcd_watch_data(char *data, size_t size, size_t nmemb, void *arg)
{
	struct etcd_watch *ew = arg;
	size_t len = size * nmemb, off = 0;

	while (off < len) {
		struct json_object *m = json_tokener_parse_ex(
			ew->tok, data + off, (int)(len - off));
		enum json_tokener_error err = json_tokener_get_error(ew->tok);
		size_t used = json_tokener_get_parse_end(ew->tok);

		if (m) {
			etcd_watch_message(ew, m);
			json_object_put(m);
		} else if (err != json_tokener_continue) {
			json_tokener_reset(ew->tok); /* skip what we cannot read
						      */
			return len;
		}
		if (!used)
			break;
		off += used;
	}
	return len;
}

static int etcd_watch_progress(void *arg, curl_off_t a, curl_off_t b,
			       curl_off_t c, curl_off_t d)
{
	struct etcd_watch *ew = arg;

	(void)a, (void)b, (void)c, (void)d;
	return atomic_load(&ew->w->stop) ? 1 : 0;
}

static void *etcd_watch_run(void *arg)
{
	struct rdmx_registry_watch *w = arg;
	struct rdmx_registry *reg = w->reg;
	struct curl_slist *hdr =
		curl_slist_append(NULL, "Content-Type: application/json");
	struct etcd_watch ew = { .w = w, .tok = json_tokener_new() };
	struct json_object *r = NULL;
	int ep = atomic_load(&reg->good);
	char *body;

	/* From the revision after now: nothing already there is replayed. */
	body = etcd_range_body(reg, w->prefix, false, "limit", "1");
	if (body && !etcd_call(reg, "kv/range", body, &r)) {
		struct json_object *h;

		if (json_object_object_get_ex(r, "header", &h))
			ew.next_rev = etcd_int(h, "revision") + 1;
		json_object_put(r);
	}
	free(body);
	sem_post(&w->ready);
	while (!atomic_load(&w->stop)) {
		char rev[32], *req, *range;
		struct json_object *o, *create;
		CURL *c;

		snprintf(rev, sizeof(rev), "%lld", (long long)ew.next_rev);
		range = etcd_range_body(reg, w->prefix, false,
					ew.next_rev ? "start_revision" : NULL,
					ew.next_rev ? rev : NULL);
		o = range ? json_tokener_parse(range) : NULL;
		free(range);
		if (!o)
			break;
		create = json_object_new_object();
		json_object_object_add(create, "create_request", o);
		req = strdup(json_object_to_json_string_ext(
			create, JSON_C_TO_STRING_PLAIN));
		json_object_put(create);
		c = req ? etcd_handle(reg->endpoints[ep], "watch", req, hdr)
			: NULL;
		if (c) {
			json_tokener_reset(ew.tok);
			curl_easy_setopt(c, CURLOPT_WRITEFUNCTION,
					 etcd_watch_data);
			curl_easy_setopt(c, CURLOPT_WRITEDATA, &ew);
			curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
			curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION,
					 etcd_watch_progress);
			curl_easy_setopt(c, CURLOPT_XFERINFODATA, &ew);
			/* A member gone quiet: the watch moves on. */
			curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
			curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 2L);
			curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 1L);
			curl_easy_perform(c);
			curl_easy_cleanup(c);
		}
		free(req);
		if (!atomic_load(&w->stop))
			rdmx_log(RDMX_LOG_INFO,
				 "registry: watch on %s broke; resuming from "
				 "revision %lld",
				 reg->endpoints[ep], (long long)ew.next_rev);
		ep = (ep + 1) % reg->nendpoints;
		reg_watch_sleep(w, 200);
	}
	json_tokener_free(ew.tok);
	curl_slist_free_all(hdr);
	return NULL;
}

const struct reg_ops reg_etcd_ops = {
	.ping = etcd_ping,
	.put = etcd_put,
	.renew = etcd_renew,
	.del = etcd_del,
	.range = etcd_range,
	.watch_run = etcd_watch_run,
};
