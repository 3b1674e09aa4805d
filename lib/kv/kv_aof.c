// SPDX-License-Identifier: MIT
/*
 * The append-only file: every PUT and DELETE, in the order the store
 * applied them, replayed into an empty store at start. Records:
 *
 *   op u8 ('P' or 'D') | key_len u16 | value_len u64 | key | value
 *
 * big-endian, after an 8-byte header "RDMXAOF1". A crash can leave a
 * record cut short at the end: replay stops before it and cuts the file
 * there, so the next append starts whole. The file only grows (there is
 * no rewrite yet): a store that overwrites much wants it off.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kv.h"

#define KV_AOF_MAGIC "RDMXAOF1"
#define KV_AOF_HDR 11

struct kv_aof {
	int fd;
	enum rdmx_kv_fsync fsync;
	char path[256];
	pthread_mutex_t lock;
	time_t last_sync;
	bool unsynced; /* appended since the last fdatasync */
	uint64_t records;
};

static int kv_aof_write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int kv_aof_read_all(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = read(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* One record into the store; false when the store cannot take it. */
static bool kv_aof_apply(struct kv_store *s, uint8_t op, const uint8_t *key,
			 uint16_t klen, const uint8_t *val, uint64_t vlen,
			 uint8_t *pool)
{
	struct kv_item *it;

	if (op == 'D') {
		kv_del(s, key, klen);
		return true;
	}
	it = kv_prepare(s, key, klen, vlen);
	if (!it)
		return false;
	rdmx_memcpy(pool + it->off, val, vlen);
	kv_publish(s, it);
	return true;
}

/* Replay @a's records into @s; cut a torn tail. */
static int kv_aof_replay(struct kv_aof *a, struct kv_store *s)
{
	uint64_t pool_len, good = sizeof(KV_AOF_MAGIC) - 1;
	uint8_t *pool = kv_store_pool(s, &pool_len), *val = NULL;
	uint8_t h[KV_AOF_HDR], key[RDMX_KV_KEY_MAX];
	int rc = 0;

	for (;;) {
		uint16_t klen;
		uint64_t vlen = 0;

		if (kv_aof_read_all(a->fd, h, sizeof(h)))
			break;
		klen = (uint16_t)(h[1] << 8 | h[2]);
		for (int i = 0; i < 8; i++)
			vlen = vlen << 8 | h[3 + i];
		if ((h[0] != 'P' && h[0] != 'D') || !klen ||
		    klen > RDMX_KV_KEY_MAX || vlen > pool_len ||
		    (h[0] == 'D' && vlen))
			break;
		if (kv_aof_read_all(a->fd, key, klen))
			break;
		free(val);
		val = vlen ? malloc(vlen) : NULL;
		if (vlen && (!val || kv_aof_read_all(a->fd, val, vlen)))
			break;
		if (!kv_aof_apply(s, h[0], key, klen, val, vlen, pool)) {
			kv_log(RDMX_LOG_ERROR,
			       "%s: the pool is too small to replay it "
			       "(record %llu): give --memory-mb more",
			       a->path, (unsigned long long)a->records);
			rc = -1;
			break;
		}
		a->records++;
		good += sizeof(h) + klen + vlen;
	}
	free(val);
	if (!rc && lseek(a->fd, 0, SEEK_END) != (off_t)good) {
		kv_log(RDMX_LOG_WARN,
		       "%s: a record cut short at byte %llu (a crash while "
		       "it was written): replayed %llu records before it",
		       a->path, (unsigned long long)good,
		       (unsigned long long)a->records);
		if (ftruncate(a->fd, (off_t)good))
			rc = -1;
	}
	if (!rc && lseek(a->fd, (off_t)good, SEEK_SET) < 0)
		rc = -1;
	return rc;
}

int kv_aof_open(const char *path, enum rdmx_kv_fsync fsync, struct kv_store *s,
		struct kv_aof **a_p)
{
	struct kv_aof *a = calloc(1, sizeof(*a));
	char magic[sizeof(KV_AOF_MAGIC) - 1];
	struct stat st;

	if (!a)
		return -1;
	a->fsync = fsync;
	snprintf(a->path, sizeof(a->path), "%s", path);
	pthread_mutex_init(&a->lock, NULL);
	a->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (a->fd < 0 || fstat(a->fd, &st)) {
		kv_log(RDMX_LOG_ERROR, "%s: %m", path);
		goto err;
	}
	if (st.st_size == 0) {
		if (kv_aof_write_all(a->fd, KV_AOF_MAGIC, sizeof(magic)) ||
		    fdatasync(a->fd))
			goto err_io;
	} else if (kv_aof_read_all(a->fd, magic, sizeof(magic)) ||
		   memcmp(magic, KV_AOF_MAGIC, sizeof(magic))) {
		kv_log(RDMX_LOG_ERROR, "%s is not an rdmx kv append-only file",
		       path);
		goto err;
	} else if (kv_aof_replay(a, s)) {
		goto err;
	}
	a->last_sync = time(NULL);
	*a_p = a;
	return 0;
err_io:
	kv_log(RDMX_LOG_ERROR, "%s: %m", path);
err:
	kv_aof_close(a);
	return -1;
}

void kv_aof_close(struct kv_aof *a)
{
	if (!a)
		return;
	if (a->fd >= 0) {
		fdatasync(a->fd);
		close(a->fd);
	}
	pthread_mutex_destroy(&a->lock);
	free(a);
}

uint64_t kv_aof_records(const struct kv_aof *a)
{
	return a ? a->records : 0;
}

void kv_aof_lock(struct kv_aof *a)
{
	if (a)
		pthread_mutex_lock(&a->lock);
}

void kv_aof_unlock(struct kv_aof *a)
{
	if (a)
		pthread_mutex_unlock(&a->lock);
}

/* Under a->lock. */
static int kv_aof_sync(struct kv_aof *a, time_t now)
{
	if (fdatasync(a->fd)) {
		kv_log(RDMX_LOG_ERROR, "%s: fdatasync: %m", a->path);
		return -1;
	}
	a->last_sync = now;
	a->unsynced = false;
	return 0;
}

int kv_aof_append(struct kv_aof *a, uint8_t op, const void *key, uint16_t klen,
		  const void *val, uint64_t vlen)
{
	uint8_t h[KV_AOF_HDR];
	time_t now;

	if (!a)
		return 0;
	h[0] = op;
	h[1] = (uint8_t)(klen >> 8);
	h[2] = (uint8_t)klen;
	for (int i = 7, v = 0; i >= 0; i--, v += 8)
		h[3 + i] = (uint8_t)(vlen >> v);
	if (kv_aof_write_all(a->fd, h, sizeof(h)) ||
	    kv_aof_write_all(a->fd, key, klen) ||
	    kv_aof_write_all(a->fd, val, vlen)) {
		kv_log(RDMX_LOG_ERROR, "%s: append: %m", a->path);
		return -1;
	}
	a->records++;
	a->unsynced = true;
	now = time(NULL);
	if (a->fsync == RDMX_KV_FSYNC_ALWAYS ||
	    (a->fsync == RDMX_KV_FSYNC_EVERYSEC && now != a->last_sync))
		return kv_aof_sync(a, now);
	return 0;
}

void kv_aof_tick(struct kv_aof *a)
{
	time_t now = time(NULL);

	if (!a || a->fsync != RDMX_KV_FSYNC_EVERYSEC || now == a->last_sync)
		return;
	pthread_mutex_lock(&a->lock);
	if (a->unsynced)
		kv_aof_sync(a, now);
	pthread_mutex_unlock(&a->lock);
}
