/* SPDX-License-Identifier: MIT */
/* Description: an etcd for a test: Debian's, on loopback ports. */
#include <curl/curl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd_rig.h"
#include "harness.h"
#include "rdmx_registry.h"

#define ETCD_BIN "/usr/bin/etcd"

/*
 * What is running, for the exit handler: a failed assertion leaves its
 * test before etcd_stop, and its members would outlive the test program.
 * Each entry names the process that started it: a forked child that
 * exits leaves its parent's members alone.
 */
static struct etcd_live {
	pid_t pid, owner;
	char dir[64];
} etcd_live[16];

static void etcd_reap_all(void)
{
	char cmd[128];

	for (int i = 0; i < 16; i++) {
		struct etcd_live *l = &etcd_live[i];

		if (l->owner != getpid())
			continue;
		if (l->pid > 0) {
			kill(l->pid, SIGKILL);
			waitpid(l->pid, NULL, 0);
		}
		snprintf(cmd, sizeof(cmd), "rm -rf %s", l->dir);
		if (l->dir[0] && system(cmd))
			fprintf(stderr, "etcd rig: cannot remove %s\n", l->dir);
		memset(l, 0, sizeof(*l));
	}
}

/* Note a member @pid or a data directory @dir (the other 0 / NULL). */
static void etcd_note(pid_t pid, const char *dir)
{
	static bool registered;

	if (!registered) {
		atexit(etcd_reap_all);
		registered = true;
	}
	for (int i = 0; i < 16; i++)
		if (!etcd_live[i].owner) {
			etcd_live[i] = (struct etcd_live){ .pid = pid,
							   .owner = getpid() };
			snprintf(etcd_live[i].dir, sizeof(etcd_live[i].dir),
				 "%s", dir ? dir : "");
			return;
		}
}

/* Forget what etcd_kill or etcd_stop ended. */
static void etcd_forget(pid_t pid, const char *dir)
{
	for (int i = 0; i < 16; i++)
		if (etcd_live[i].owner == getpid() &&
		    (pid ? etcd_live[i].pid == pid
			 : !strcmp(etcd_live[i].dir, dir)))
			memset(&etcd_live[i], 0, sizeof(etcd_live[i]));
}

static void etcd_member_start(struct etcd *e, int i)
{
	char name[16], data[128], curl[64], purl[64], cluster[256] = "",
						      log[160];
	size_t len = 0;

	snprintf(name, sizeof(name), "m%d", i);
	snprintf(data, sizeof(data), "%s/%s", e->dir, name);
	snprintf(curl, sizeof(curl), "http://127.0.0.1:%d", e->client[i]);
	snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", e->peer[i]);
	snprintf(log, sizeof(log), "%s/%s.log", e->dir, name);
	for (int j = 0; j < e->n; j++)
		len += (size_t)snprintf(cluster + len, sizeof(cluster) - len,
					"%sm%d=http://127.0.0.1:%d",
					j ? "," : "", j, e->peer[j]);
	e->pid[i] = harness_fork();
	if (!e->pid[i]) {
		FILE *f = freopen(log, "w", stdout);

		(void)f;
		dup2(1, 2);
		execl(ETCD_BIN, ETCD_BIN, "--name", name, "--data-dir", data,
		      "--listen-client-urls", curl, "--advertise-client-urls",
		      curl, "--listen-peer-urls", purl,
		      "--initial-advertise-peer-urls", purl,
		      "--initial-cluster", cluster, "--initial-cluster-state",
		      "new", "--heartbeat-interval", "50", "--election-timeout",
		      "500", (char *)NULL);
		_exit(127);
	}
	etcd_note(e->pid[i], NULL);
}

/* Wait until the URL's registry answers (@url: one member or all). */
void etcd_wait(const char *url)
{
	struct rdmx_registry *reg;

	assert_int_equal(rdmx_registry_open(NULL, url, &reg), RDMX_OK);
	for (int i = 0; rdmx_registry_ping(reg) != RDMX_OK; i++) {
		if (i > 100 * time_scale())
			fail_msg("etcd at %s did not answer in 10 s", url);
		usleep(100000);
	}
	rdmx_registry_close(reg);
}

void etcd_start(struct etcd *e, int n)
{
	size_t len;

	if (access(ETCD_BIN, X_OK))
		fail_msg("%s is missing: scripts/install-deps.sh installs "
			 "etcd-server",
			 ETCD_BIN);
	memset(e, 0, sizeof(*e));
	e->n = n;
	snprintf(e->dir, sizeof(e->dir), "/tmp/rdmx-etcd-XXXXXX");
	assert_non_null(mkdtemp(e->dir));
	etcd_note(0, e->dir);
	for (int i = 0; i < n; i++) {
		e->client[i] = harness_free_port();
		e->peer[i] = harness_free_port();
	}
	len = (size_t)snprintf(e->url, sizeof(e->url), "etcd://");
	for (int i = 0; i < n; i++)
		len += (size_t)snprintf(e->url + len, sizeof(e->url) - len,
					"%s127.0.0.1:%d", i ? "," : "",
					e->client[i]);
	snprintf(e->url + len, sizeof(e->url) - len, "/test");
	for (int i = 0; i < n; i++)
		etcd_member_start(e, i);
	/* Every member: a cluster short of one would lose its quorum at
	 * the first kill, and the test would blame the registry. */
	for (int i = 0; i < n; i++) {
		char url[64];

		snprintf(url, sizeof(url), "etcd://127.0.0.1:%d/test",
			 e->client[i]);
		etcd_wait(url);
	}
}

void etcd_kill(struct etcd *e, int i)
{
	if (e->pid[i] > 0) {
		kill(e->pid[i], SIGKILL);
		waitpid(e->pid[i], NULL, 0);
		etcd_forget(e->pid[i], NULL);
		e->pid[i] = 0;
	}
}

static size_t etcd_rig_collect(char *p, size_t size, size_t n, void *arg)
{
	char *buf = arg;
	size_t have = strlen(buf), add = size * n;

	if (have + add >= 4096)
		add = 4095 - have;
	memcpy(buf + have, p, add);
	buf[have + add] = 0;
	return size * n;
}

/* POST @body to member @i's /v3/@path; its JSON answer, or NULL. */
static struct json_object *etcd_rig_post(const struct etcd *e, int i,
					 const char *path, const char *body)
{
	char url[128], buf[4096] = "";
	CURL *c = curl_easy_init();
	long code = 0;
	CURLcode rc;

	assert_non_null(c);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/v3/%s", e->client[i],
		 path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 3000L);
	curl_easy_setopt(c, CURLOPT_PROXY, "");
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, etcd_rig_collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, buf);
	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(c);
	return rc == CURLE_OK && code == 200 ? json_tokener_parse(buf) : NULL;
}

/* A uint64 etcd sends as a string, at @a.@b (@b NULL: at @a). */
static uint64_t etcd_rig_id(struct json_object *o, const char *a, const char *b)
{
	struct json_object *v = NULL;

	if (!json_object_object_get_ex(o, a, &v) ||
	    (b && !json_object_object_get_ex(v, b, &v)))
		return 0;
	return strtoull(json_object_get_string(v), NULL, 10);
}

/* Member @i's id and the leader it knows (0: none); false if no answer. */
static bool etcd_rig_status(const struct etcd *e, int i, uint64_t *id,
			    uint64_t *leader)
{
	struct json_object *o = etcd_rig_post(e, i, "maintenance/status", "{}");

	if (!o)
		return false;
	*id = etcd_rig_id(o, "header", "member_id");
	*leader = etcd_rig_id(o, "leader", NULL);
	json_object_put(o);
	return *id != 0;
}

void etcd_lead(struct etcd *e, int i)
{
	uint64_t id, leader, lid, l2;
	char body[64];

	for (int tries = 0;; tries++) {
		if (tries > 100 * time_scale())
			fail_msg("etcd member %d did not become leader", i);
		if (!etcd_rig_status(e, i, &id, &leader) || !leader) {
			usleep(100000);
			continue;
		}
		if (leader == id)
			return;
		/* Ask the leader to hand over. */
		for (int j = 0; j < e->n; j++)
			if (e->pid[j] > 0 && etcd_rig_status(e, j, &lid, &l2) &&
			    lid == leader) {
				snprintf(body, sizeof(body),
					 "{\"targetID\":\"%" PRIu64 "\"}", id);
				json_object_put(etcd_rig_post(
					e, j, "maintenance/transfer-leadership",
					body));
			}
		usleep(100000);
	}
}

void etcd_restart(struct etcd *e, int i)
{
	etcd_member_start(e, i);
}

void etcd_stop(struct etcd *e)
{
	char cmd[128];

	for (int i = 0; i < e->n; i++)
		etcd_kill(e, i);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", e->dir);
	assert_int_equal(system(cmd), 0);
	etcd_forget(0, e->dir);
}
