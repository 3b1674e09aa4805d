// SPDX-License-Identifier: MIT
/*
 * The store: a hash index of items whose values live in one pool, carved
 * by a buddy allocator. Buddies because values run from bytes to tens of
 * MiB: any size gets a block in O(log n), freed blocks merge back, and
 * nothing needs moving; the price is up to 2x internal fragmentation (a
 * 5 KiB value takes 8 KiB), which the stats report as bytes used.
 *
 * An item's block is freed only when the item is gone from the index AND
 * no GET is still WRITing from it (refs): a GET racing a PUT or DELETE
 * of its key sends the old value whole, never a block being rewritten.
 * All of it runs under store->lock.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kv.h"

#define KV_MIN_SHIFT 6 /* 64-byte blocks */
#define KV_ORDERS 40
/*
 * A freed block of a small order waits in its order's stack (offsets,
 * outside the pool), and the next allocation of that order takes the last
 * one: a PUT that replaces a value of the same size reuses the block the
 * old one left, touching neither the pool's free-list links nor a buddy's
 * (lines of the pool, cold: kv_free_push alone was 9% of a kv server's
 * time on 4 KiB SETs). The stacks go back to the buddy lists, merging,
 * when an allocation finds nothing else. Deep enough for the PUTs of many
 * clients' pipelines at once: 32 clients x 16 free 512 blocks in a row,
 * and a stack of 64 sent 448 of them to the lists (5.6% of the server's
 * time in kv_free_push again; 1024: SETs/s +8%, p99 -20%). 128 KiB.
 */
#define KV_QUICK 1024
#define KV_QUICK_ORDERS 16 /* blocks up to 2 MiB */

struct kv_free {
	struct kv_free *next, *prev;
};

struct kv_store {
	pthread_mutex_t lock;
	uint8_t *pool;
	uint64_t pool_len;
	bool evict_lru;
	/* buddy allocator: free lists and bitmaps per order */
	struct kv_free *free[KV_ORDERS];
	uint64_t *bits[KV_ORDERS];
	int max_order;
	uint64_t quick[KV_QUICK_ORDERS][KV_QUICK];
	uint32_t nquick[KV_QUICK_ORDERS];
	/* index */
	struct kv_item **bucket;
	uint64_t nbuckets, count, used;
	struct kv_item *lru_head, *lru_tail; /* head: most recent */
	struct kv_store_stats st;
};

/* ---- buddy allocator ---------------------------------------------------- */

static uint64_t kv_block_size(int k)
{
	return (uint64_t)1 << (KV_MIN_SHIFT + k);
}

static bool kv_bit(struct kv_store *s, int k, uint64_t off)
{
	uint64_t i = off >> (KV_MIN_SHIFT + k);

	return s->bits[k][i / 64] >> (i % 64) & 1;
}

static void kv_bit_set(struct kv_store *s, int k, uint64_t off, bool v)
{
	uint64_t i = off >> (KV_MIN_SHIFT + k);

	if (v)
		s->bits[k][i / 64] |= 1ull << (i % 64);
	else
		s->bits[k][i / 64] &= ~(1ull << (i % 64));
}

static void kv_free_push(struct kv_store *s, int k, uint64_t off)
{
	struct kv_free *f = (struct kv_free *)(s->pool + off);

	f->prev = NULL;
	f->next = s->free[k];
	if (f->next)
		f->next->prev = f;
	s->free[k] = f;
	kv_bit_set(s, k, off, true);
}

static void kv_free_unlink(struct kv_store *s, int k, uint64_t off)
{
	struct kv_free *f = (struct kv_free *)(s->pool + off);

	if (f->prev)
		f->prev->next = f->next;
	else
		s->free[k] = f->next;
	if (f->next)
		f->next->prev = f->prev;
	kv_bit_set(s, k, off, false);
}

static int kv_order_of(uint64_t len)
{
	int k = 0;

	while (kv_block_size(k) < len)
		k++;
	return k;
}

/* A block of order @k from the buddy lists: its offset, or UINT64_MAX. */
static uint64_t kv_buddy_alloc(struct kv_store *s, int k)
{
	int j = k;
	uint64_t off;

	while (j <= s->max_order && !s->free[j])
		j++;
	if (j > s->max_order)
		return UINT64_MAX;
	off = (uint64_t)((uint8_t *)s->free[j] - s->pool);
	kv_free_unlink(s, j, off);
	while (j > k) { /* split: the upper half goes back free */
		j--;
		kv_free_push(s, j, off + kv_block_size(j));
	}
	return off;
}

static void kv_buddy_free(struct kv_store *s, uint64_t off, int k)
{
	while (k < s->max_order) {
		uint64_t buddy = off ^ kv_block_size(k);

		if (buddy + kv_block_size(k) > s->pool_len ||
		    !kv_bit(s, k, buddy))
			break;
		kv_free_unlink(s, k, buddy);
		off &= ~kv_block_size(k);
		k++;
	}
	kv_free_push(s, k, off);
}

/* Empty the stacks into the buddy lists; false if they were empty. */
static bool kv_quick_flush(struct kv_store *s)
{
	bool any = false;

	for (int k = 0; k < KV_QUICK_ORDERS; k++)
		while (s->nquick[k]) {
			kv_buddy_free(s, s->quick[k][--s->nquick[k]], k);
			any = true;
		}
	return any;
}

/* A block of at least @len bytes: its offset, or UINT64_MAX. */
static uint64_t kv_block_alloc(struct kv_store *s, uint64_t len, int *order_p)
{
	int k = kv_order_of(len ? len : 1);
	uint64_t off;

	*order_p = k;
	if (k < KV_QUICK_ORDERS && s->nquick[k])
		return s->quick[k][--s->nquick[k]];
	off = kv_buddy_alloc(s, k);
	if (off == UINT64_MAX && kv_quick_flush(s))
		off = kv_buddy_alloc(s, k);
	return off;
}

static void kv_block_free(struct kv_store *s, uint64_t off, int k)
{
	if (k < KV_QUICK_ORDERS && s->nquick[k] < KV_QUICK)
		s->quick[k][s->nquick[k]++] = off;
	else
		kv_buddy_free(s, off, k);
}

static int kv_buddy_init(struct kv_store *s)
{
	uint64_t off = 0;

	s->max_order = 0;
	while (s->max_order + 1 < KV_ORDERS &&
	       kv_block_size(s->max_order + 1) <= s->pool_len)
		s->max_order++;
	for (int k = 0; k <= s->max_order; k++) {
		uint64_t n = s->pool_len / kv_block_size(k) + 1;

		s->bits[k] = calloc((n + 63) / 64, sizeof(uint64_t));
		if (!s->bits[k])
			return -1;
	}
	/* The pool in the largest aligned blocks that fit. */
	while (off + kv_block_size(0) <= s->pool_len) {
		int k = s->max_order;

		while (k && (off % kv_block_size(k) ||
			     off + kv_block_size(k) > s->pool_len))
			k--;
		kv_free_push(s, k, off);
		off += kv_block_size(k);
	}
	return 0;
}

/* ---- index -------------------------------------------------------------- */

static uint64_t kv_hash(const void *key, size_t len)
{
	const uint8_t *p = key;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static struct kv_item **kv_slot(struct kv_store *s, const void *key,
				size_t klen, uint64_t h)
{
	struct kv_item **pp = &s->bucket[h & (s->nbuckets - 1)];

	for (; *pp; pp = &(*pp)->hnext)
		if ((*pp)->hash == h && (*pp)->klen == klen &&
		    !memcmp((*pp)->key, key, klen))
			break;
	return pp;
}

void kv_store_prefetch(struct kv_store *s, const uint8_t *const *keys,
		       const uint16_t *klens, const bool *value, int n)
{
	struct kv_item **b[KV_PREFETCH];
	const struct kv_item *it;
	uint64_t h[KV_PREFETCH];

	for (int i = 0; i < n && i < KV_PREFETCH; i++) {
		h[i] = kv_hash(keys[i], klens[i]);
		b[i] = &s->bucket[h[i] & (s->nbuckets - 1)];
		__builtin_prefetch(b[i]);
	}
	for (int i = 0; i < n && i < KV_PREFETCH; i++) {
		it = *b[i];
		if (it) { /* its hash, and its key, which may cross a line */
			__builtin_prefetch(&it->hash);
			__builtin_prefetch(it->key + klens[i]);
		}
	}
	/* A bucket's first item of another hash: the next one too (10,000
	 * keys in 16,384 buckets: a quarter of the lookups go past the
	 * first). */
	for (int i = 0; i < n && i < KV_PREFETCH; i++) {
		it = *b[i];
		if (it && it->hash != h[i] && it->hnext) {
			__builtin_prefetch(&it->hnext->hash);
			__builtin_prefetch(it->hnext->key + klens[i]);
		}
	}
	for (int i = 0; i < n && i < KV_PREFETCH; i++) {
		uint64_t len;

		for (it = value[i] ? *b[i] : NULL; it && it->hash != h[i];
		     it = it->hnext)
			;
		if (!it || it->off >= s->pool_len)
			continue;
		len = it->vlen < KV_PREFETCH_VALUE ? it->vlen
						   : KV_PREFETCH_VALUE;
		for (uint64_t k = 0; k < len; k += 64)
			__builtin_prefetch(s->pool + it->off + k);
	}
}

static void kv_grow(struct kv_store *s)
{
	uint64_t n = s->nbuckets * 2;
	struct kv_item **b = calloc(n, sizeof(*b));

	if (!b)
		return; /* longer chains, still correct */
	for (uint64_t i = 0; i < s->nbuckets; i++)
		while (s->bucket[i]) {
			struct kv_item *it = s->bucket[i];

			s->bucket[i] = it->hnext;
			it->hnext = b[it->hash & (n - 1)];
			b[it->hash & (n - 1)] = it;
		}
	free(s->bucket);
	s->bucket = b;
	s->nbuckets = n;
}

/*
 * Recency is kept only for --evict lru: each relink writes two neighbours'
 * lines and the head's, misses all.
 */
static void kv_lru_unlink(struct kv_store *s, struct kv_item *it)
{
	if (!s->evict_lru)
		return;
	if (it->lprev)
		it->lprev->lnext = it->lnext;
	else
		s->lru_head = it->lnext;
	if (it->lnext)
		it->lnext->lprev = it->lprev;
	else
		s->lru_tail = it->lprev;
	it->lprev = it->lnext = NULL;
}

static void kv_lru_front(struct kv_store *s, struct kv_item *it)
{
	if (!s->evict_lru)
		return;
	it->lnext = s->lru_head;
	it->lprev = NULL;
	if (s->lru_head)
		s->lru_head->lprev = it;
	s->lru_head = it;
	if (!s->lru_tail)
		s->lru_tail = it;
}

static void kv_item_free(struct kv_store *s, struct kv_item *it)
{
	if (it->order >= 0) {
		kv_block_free(s, it->off, it->order);
		s->used -= kv_block_size(it->order);
	}
	free(it);
}

/* Take @it out of the index; its block goes once no GET reads it. */
static void kv_retire(struct kv_store *s, struct kv_item *it)
{
	struct kv_item **pp = kv_slot(s, it->key, it->klen, it->hash);

	if (*pp == it)
		*pp = it->hnext;
	kv_lru_unlink(s, it);
	s->count--;
	it->dead = true;
	if (!it->refs)
		kv_item_free(s, it);
}

/* ---- the store's calls -------------------------------------------------- */

int kv_store_create(uint64_t pool_len, bool evict_lru, struct kv_store **s_p)
{
	struct kv_store *s = calloc(1, sizeof(*s));

	if (!s)
		return -1;
	pthread_mutex_init(&s->lock, NULL);
	s->evict_lru = evict_lru;
	s->pool_len = pool_len & ~(kv_block_size(0) - 1);
	s->pool = mmap(NULL, s->pool_len ? s->pool_len : 1,
		       PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	s->nbuckets = 1024;
	s->bucket = calloc(s->nbuckets, sizeof(*s->bucket));
	if (s->pool == MAP_FAILED || !s->bucket || kv_buddy_init(s)) {
		if (s->pool == MAP_FAILED)
			s->pool = NULL;
		kv_store_destroy(s);
		return -1;
	}
	s->st.pool_bytes = s->pool_len;
	*s_p = s;
	return 0;
}

void kv_store_destroy(struct kv_store *s)
{
	if (!s)
		return;
	for (uint64_t i = 0; s->bucket && i < s->nbuckets; i++)
		while (s->bucket[i]) {
			struct kv_item *it = s->bucket[i];

			s->bucket[i] = it->hnext;
			free(it);
		}
	free(s->bucket);
	for (int k = 0; k < KV_ORDERS; k++)
		free(s->bits[k]);
	if (s->pool)
		munmap(s->pool, s->pool_len ? s->pool_len : 1);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

uint8_t *kv_store_pool(struct kv_store *s, uint64_t *len_p)
{
	*len_p = s->pool_len;
	return s->pool;
}

void kv_store_lock(struct kv_store *s)
{
	pthread_mutex_lock(&s->lock);
}

void kv_store_unlock(struct kv_store *s)
{
	pthread_mutex_unlock(&s->lock);
}

struct kv_item *kv_get(struct kv_store *s, const void *key, size_t klen)
{
	struct kv_item *it = *kv_slot(s, key, klen, kv_hash(key, klen));

	s->st.gets++;
	if (!it)
		return NULL;
	s->st.hits++;
	kv_lru_unlink(s, it);
	kv_lru_front(s, it);
	it->refs++;
	return it;
}

struct kv_item *kv_prepare(struct kv_store *s, const void *key, size_t klen,
			   uint64_t vlen)
{
	/* Not calloc: glibc's takes nothing from the thread's cache of freed
	 * chunks, so each item freed went the slow way (_int_free, ~8% of a
	 * kv server's time on SETs). */
	struct kv_item *it = malloc(sizeof(*it) + klen);

	if (!it)
		return NULL;
	*it = (struct kv_item){ .klen = (uint16_t)klen,
				.hash = kv_hash(key, klen),
				.vlen = vlen,
				.order = -1,
				.refs = 1 }; /* the PUT's own, until published
					      */
	memcpy(it->key, key, klen);
	if (!vlen)
		return it;
	for (;;) {
		int order;
		uint64_t off = kv_block_alloc(s, vlen, &order);

		if (off != UINT64_MAX) {
			it->off = off;
			it->order = order;
			s->used += kv_block_size(order);
			return it;
		}
		/* Full: the least recently used go, with --evict lru. */
		if (!s->evict_lru || !s->lru_tail || vlen > s->pool_len) {
			s->st.refused_nomem++;
			free(it);
			return NULL;
		}
		s->st.evicted++;
		kv_retire(s, s->lru_tail);
	}
}

void kv_publish(struct kv_store *s, struct kv_item *it)
{
	struct kv_item **pp = kv_slot(s, it->key, it->klen, it->hash);

	s->st.puts++;
	if (*pp)
		kv_retire(s, *pp);
	pp = kv_slot(s, it->key, it->klen, it->hash);
	it->hnext = NULL;
	*pp = it;
	kv_lru_front(s, it);
	if (++s->count > s->nbuckets)
		kv_grow(s);
	kv_unref(s, it);
}

void kv_unref(struct kv_store *s, struct kv_item *it)
{
	if (--it->refs == 0 && it->dead)
		kv_item_free(s, it);
}

void kv_abandon(struct kv_store *s, struct kv_item *it)
{
	it->dead = true;
	kv_unref(s, it);
}

bool kv_del(struct kv_store *s, const void *key, size_t klen)
{
	struct kv_item *it = *kv_slot(s, key, klen, kv_hash(key, klen));

	s->st.dels++;
	if (!it)
		return false;
	kv_retire(s, it);
	return true;
}

void kv_store_stats(struct kv_store *s, struct kv_store_stats *st_p)
{
	*st_p = s->st;
	st_p->keys = s->count;
	st_p->bytes_used = s->used;
}
