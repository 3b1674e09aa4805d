/* SPDX-License-Identifier: MIT */
/*
 * The directory backend: one host, no server. An entry is a file named
 * after it ('/' as "%2F"), written to a temporary name and renamed, so a
 * reader sees the old entry or the new one. The publisher's pid, boot id
 * and start time are in it: an entry whose process is gone (or whose pid
 * is another process now, or from an earlier boot) is not live, and the
 * first reader that finds it removes it. No TTL: an entry lives as long
 * as its process. A watch compares listings every 100 ms.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "registry.h"

#define REG_DIR_POLL_MS 100

static void reg_dir_file(const struct rdmx_registry *reg, const char *name,
			 char *path, size_t len)
{
	size_t n = (size_t)snprintf(path, len, "%s/", reg->dir);

	for (const char *c = name; *c && n + 4 < len; c++)
		n += (size_t)(*c == '/'
				      ? snprintf(path + n, len - n, "%%2F")
				      : snprintf(path + n, len - n, "%c", *c));
}

static void reg_dir_unescape(const char *file, char *name, size_t len)
{
	size_t n = 0;

	for (const char *c = file; *c && n + 1 < len; c++) {
		if (!strncmp(c, "%2F", 3)) {
			name[n++] = '/';
			c += 2;
		} else {
			name[n++] = *c;
		}
	}
	name[n] = 0;
}

static rdmx_status reg_dir_mkdir(struct rdmx_registry *reg)
{
	struct stat sb;

	if (mkdir(reg->dir, 0700) && errno != EEXIST) {
		rdmx_log(RDMX_LOG_ERROR, "registry: cannot create %s: %s",
			 reg->dir, strerror(errno));
		return RDMX_ERR_SYSTEM;
	}
	/* Another user's directory would let them plant entries. */
	if (stat(reg->dir, &sb) || !S_ISDIR(sb.st_mode) ||
	    sb.st_uid != geteuid()) {
		rdmx_log(RDMX_LOG_ERROR,
			 "registry: %s is not a directory of this user",
			 reg->dir);
		return RDMX_ERR_SYSTEM;
	}
	return RDMX_OK;
}

static rdmx_status reg_dir_ping(struct rdmx_registry *reg)
{
	return reg_dir_mkdir(reg);
}

static rdmx_status reg_dir_put(struct rdmx_registry *reg, struct reg_pub *p)
{
	char path[REG_URL_MAX + 3 * RDMX_REGISTRY_NAME_MAX],
		tmp[sizeof(path) + 32];
	rdmx_status st = reg_dir_mkdir(reg);
	size_t len = strlen(p->json);
	int fd;

	if (st)
		return st;
	reg_dir_file(reg, p->name, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s/.tmp.%d", reg->dir, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, p->json, len) != (ssize_t)len || fsync(fd) ||
	    close(fd) || rename(tmp, path)) {
		rdmx_log(RDMX_LOG_ERROR, "registry: cannot write %s: %s", path,
			 strerror(errno));
		if (fd >= 0)
			unlink(tmp);
		return RDMX_ERR_SYSTEM;
	}
	return RDMX_OK;
}

/* The file might have been removed by hand: put it back. */
static rdmx_status reg_dir_renew(struct rdmx_registry *reg, struct reg_pub *p)
{
	char path[REG_URL_MAX + 3 * RDMX_REGISTRY_NAME_MAX];

	reg_dir_file(reg, p->name, path, sizeof(path));
	return access(path, F_OK) ? reg_dir_put(reg, p) : RDMX_OK;
}

static char *reg_dir_read(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t cap = 0, n;

	if (!f)
		return NULL;
	/* An entry is a few KiB at most: the payload is bounded. */
	cap = 4 * RDMX_REGISTRY_PAYLOAD_MAX + 1024;
	buf = malloc(cap);
	if (buf) {
		n = fread(buf, 1, cap - 1, f);
		buf[n] = 0;
	}
	fclose(f);
	return buf;
}

/* Is the entry in @json from a process that still runs? */
static bool reg_dir_live(const char *json)
{
	struct rdmx_registry_entry e;
	char boot[64];
	uint64_t start;

	if (!reg_entry_parse(json, &e, boot, sizeof(boot), &start))
		return false;
	if (strcmp(boot, reg_boot_id()) || e.pid <= 0)
		return false;
	if (kill((pid_t)e.pid, 0) && errno == ESRCH)
		return false;
	return reg_start_time(e.pid) == start;
}

static rdmx_status reg_dir_del(struct rdmx_registry *reg, struct reg_pub *p)
{
	char path[REG_URL_MAX + 3 * RDMX_REGISTRY_NAME_MAX];
	struct rdmx_registry_entry e;
	char *json;

	reg_dir_file(reg, p->name, path, sizeof(path));
	json = reg_dir_read(path);
	/* Only ours: another process may have published the name since. */
	if (json && reg_entry_parse(json, &e, NULL, 0, NULL) &&
	    e.pid == getpid())
		unlink(path);
	free(json);
	return RDMX_OK;
}

static rdmx_status reg_dir_range(struct rdmx_registry *reg, const char *key,
				 bool exact, struct reg_kvs *out)
{
	char path[REG_URL_MAX + 3 * RDMX_REGISTRY_NAME_MAX];
	char name[RDMX_REGISTRY_NAME_MAX];
	struct dirent *d;
	DIR *dir = opendir(reg->dir);

	if (!dir)
		return errno == ENOENT ? RDMX_OK : RDMX_ERR_SYSTEM;
	while ((d = readdir(dir))) {
		char *json;

		if (d->d_name[0] == '.')
			continue;
		reg_dir_unescape(d->d_name, name, sizeof(name));
		if (exact ? strcmp(name, key) : strncmp(name, key, strlen(key)))
			continue;
		snprintf(path, sizeof(path), "%s/%s", reg->dir, d->d_name);
		json = reg_dir_read(path);
		if (!json)
			continue;
		if (reg_dir_live(json)) {
			reg_kvs_add(out, name, json);
		} else {
			rdmx_log(RDMX_LOG_INFO,
				 "registry: %s: its publisher is gone; "
				 "removed",
				 name);
			unlink(path);
		}
		free(json);
	}
	closedir(dir);
	return RDMX_OK;
}

static const struct reg_kv *reg_dir_find(const struct reg_kvs *kvs,
					 const char *name)
{
	for (size_t i = 0; i < kvs->n; i++)
		if (!strcmp(kvs->v[i].name, name))
			return &kvs->v[i];
	return NULL;
}

static void *reg_dir_watch(void *arg)
{
	struct rdmx_registry_watch *w = arg;
	struct reg_kvs was = { 0 }, now = { 0 };

	reg_dir_range(w->reg, w->prefix, false, &was);
	sem_post(&w->ready);
	while (reg_watch_sleep(w, REG_DIR_POLL_MS)) {
		if (reg_dir_range(w->reg, w->prefix, false, &now))
			continue;
		for (size_t i = 0; i < now.n; i++) {
			const struct reg_kv *o =
				reg_dir_find(&was, now.v[i].name);

			if (!o || strcmp(o->json, now.v[i].json))
				reg_watch_push(w, RDMX_REGISTRY_PUT,
					       now.v[i].name, now.v[i].json);
		}
		for (size_t i = 0; i < was.n; i++)
			if (!reg_dir_find(&now, was.v[i].name))
				reg_watch_push(w, RDMX_REGISTRY_DELETE,
					       was.v[i].name, NULL);
		reg_kvs_free(&was);
		was = now;
		memset(&now, 0, sizeof(now));
	}
	reg_kvs_free(&was);
	return NULL;
}

const struct reg_ops reg_dir_ops = {
	.ping = reg_dir_ping,
	.put = reg_dir_put,
	.renew = reg_dir_renew,
	.del = reg_dir_del,
	.range = reg_dir_range,
	.watch_run = reg_dir_watch,
};
