// SPDX-License-Identifier: MIT
/*
 * The transparent mapping: an anonymous range registered with userfaultfd
 * for missing and write-protect faults, and one handler thread that owns
 * everything below (page states, cache slots, staging chunks, its own
 * connection). Other threads reach it only through a command (sync, drop,
 * quit) and an eventfd.
 *
 * A missing fault READs the page (and, when faults run sequentially, the
 * pages after it: one READ for the run) into a staging chunk, then
 * UFFDIO_COPY installs it write-protected. A first write to a clean page is
 * a write-protect fault: the page turns dirty and writable. Write-back
 * (sync, or eviction of a dirty page) protects the page again before it
 * copies it out, so a write that races it faults and is seen: after a sync
 * the page is dirty again, after an eviction the writer is woken once the
 * page is gone, faults it back in and writes to the fresh copy.
 *
 * Cache slots are taken from a free stack and evicted by a hand that
 * sweeps them in order: in steady state, the oldest page fetched goes
 * first. No reference bits: a page hit a million times since it came is as
 * old as one never touched again (FIFO, as the man page says).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "page.h"
#include "page_uffd.h"

enum {
	PG_ABSENT = 0,
	PG_FETCHING = 1 << 0, /* a READ brings it; its slot is taken */
	PG_RESIDENT = 1 << 1,
	PG_DIRTY = 1 << 2, /* written since fetched or written back */
	PG_WB = 1 << 3, /* being written back: protected, not dirty */
	PG_REDIRTY = 1 << 4, /* a writer faulted during the write-back */
	PG_EVICT = 1 << 5, /* the write-back ends in eviction */
	PG_POISON = 1 << 6, /* could not be served: SIGBUS */
};

enum chunk_kind { CHUNK_FREE, CHUNK_FETCH, CHUNK_WB };

#define PAGE_CHUNKS 16
#define PAGE_NO_SLOT UINT32_MAX
/* The low half of a write-back's settling READ's id (page_link_settles) */
#define PAGE_SETTLE_J UINT32_MAX

struct page_chunk {
	enum chunk_kind kind;
	uint32_t n; /* pages */
	uint32_t pending; /* WB: WRITEs (and its READ) not yet completed */
	/* WB, where link.settles: the READ behind the WRITEs said they are
	 * placed. Only then are the pages written back, and the staging
	 * free for another transfer. */
	bool settled;
	bool write_first; /* FETCH: the fault that started it was a write */
	uint32_t tid; /* FETCH: the thread that took that fault */
	double posted_ms;
	uint64_t pages[]; /* FETCH: pages[0] is the first of a run */
};

enum cmd_kind { CMD_NONE, CMD_SYNC, CMD_DROP, CMD_QUIT };

struct page_mem {
	struct rdmx_page_map *map;
	uint8_t *base;
	uint64_t npages;
	int uffd, efd;
	bool poison; /* UFFDIO_POISON; else the faulting thread is signalled */
	struct page_link link;

	uint8_t *state; /* per page, PG_* */
	uint32_t *slot_of; /* per page */
	uint64_t *slot_page; /* per slot */
	uint32_t *free_slot, nfree, nslots, hand;
	uint32_t evicting; /* dirty pages written back to be evicted */
	uint64_t zap_first, zap_n; /* pages to unmap (page_zap) */
	uint32_t low_water; /* free slots eviction makes beyond the need */

	struct page_chunk *chunk[PAGE_CHUNKS];
	uint32_t chunk_pages; /* the most one READ brings */
	uint64_t last_fault; /* the page of the last missing fault */
	uint64_t window_end; /* the first page not yet fetched ahead */
	uint32_t ra, ra_max; /* pages fetched ahead now, and at most */

	pthread_t thread;
	pthread_mutex_t cmd_lock;
	pthread_cond_t cmd_done;
	atomic_int cmd; /* enum cmd_kind; CMD_NONE when done */
	atomic_bool quit; /* the handler has synced for the last time */
	uint64_t cmd_first, cmd_n;
	rdmx_status cmd_status;

	struct {
		_Atomic uint64_t faults, write_faults, fetches, pages_fetched,
			readahead, evicted, written_back, resident, sigbus;
	} stats;
};

#define STAT_ADD(m, f, v)                                                      \
	atomic_fetch_add_explicit(&(m)->stats.f, (v), memory_order_relaxed)

static double page_mem_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *page_addr(struct page_mem *m, uint64_t p)
{
	return m->base + p * PAGE_SIZE_BYTES;
}

static uint8_t *chunk_stage(struct page_mem *m, int c)
{
	return m->link.stage + (size_t)c * m->chunk_pages * PAGE_SIZE_BYTES;
}

/* ---- slots -------------------------------------------------------------- */

static void slot_take(struct page_mem *m, uint64_t p)
{
	uint32_t s = m->free_slot[--m->nfree];

	m->slot_page[s] = p;
	m->slot_of[p] = s;
}

static void slot_free(struct page_mem *m, uint64_t p)
{
	uint32_t s = m->slot_of[p];

	m->slot_page[s] = UINT64_MAX;
	m->slot_of[p] = PAGE_NO_SLOT;
	m->free_slot[m->nfree++] = s;
}

/* Unmap the pages page_zap collected (one madvise per run). */
static void page_zap_flush(struct page_mem *m)
{
	if (m->zap_n)
		madvise(page_addr(m, m->zap_first), m->zap_n * PAGE_SIZE_BYTES,
			MADV_DONTNEED);
	m->zap_n = 0;
}

/*
 * Give page @p's memory back: the next touch faults it in again. Pages
 * next to each other go in one madvise, at page_zap_flush(), which must
 * come before any page is installed again (the handler's own order).
 */
static void page_zap(struct page_mem *m, uint64_t p)
{
	if (m->zap_n && p != m->zap_first + m->zap_n)
		page_zap_flush(m);
	if (!m->zap_n)
		m->zap_first = p;
	m->zap_n++;
	m->state[p] = PG_ABSENT;
	slot_free(m, p);
	atomic_fetch_sub_explicit(&m->stats.resident, 1, memory_order_relaxed);
}

/* ---- failing faults ----------------------------------------------------- */

/*
 * The fault at absent page @p, taken by thread @tid, cannot be served:
 * SIGBUS in that thread. UFFDIO_POISON makes the page raise it for every
 * access from now on, as a truncated file does. Before Linux 6.6 the thread
 * is signalled instead; the signal ends its wait, and if its handler
 * returns, it faults again and is signalled again.
 */
static void page_sigbus(struct page_mem *m, uint64_t p, uint32_t tid)
{
	STAT_ADD(m, sigbus, 1);
	if (m->poison &&
	    page_uffd_poison(m->uffd, page_addr(m, p), PAGE_SIZE_BYTES) == 0) {
		m->state[p] = PG_POISON;
		return;
	}
	syscall(SYS_tgkill, getpid(), (pid_t)tid, SIGBUS);
}

/*
 * Copy out a page the program wrote until we write-protected it. The
 * protection's TLB flush orders those writes before these reads; TSan
 * cannot see a kernel's ordering, so the copy is left uninstrumented (and
 * is no memcpy, which TSan intercepts).
 */
__attribute__((no_sanitize("thread"))) static void
page_copy_out(uint8_t *dst, const uint8_t *src)
{
	const volatile uint64_t *s = (const volatile uint64_t *)src;
	uint64_t *d = (uint64_t *)dst;

	for (size_t i = 0; i < PAGE_SIZE_BYTES / 8; i++)
		d[i] = s[i];
}

/* ---- fetching ----------------------------------------------------------- */

static int chunk_get(struct page_mem *m)
{
	for (int c = 0; c < PAGE_CHUNKS; c++)
		if (m->chunk[c]->kind == CHUNK_FREE)
			return c;
	return -1;
}

static bool chunks_busy(struct page_mem *m)
{
	return m->link.outstanding > 0;
}

static void page_progress(struct page_mem *m);
static void fetch_done(struct page_mem *m, int c, rdmx_status st);
static void wb_done_page(struct page_mem *m, uint64_t p, bool ok);

static int page_chunk_wait_any(struct page_mem *m)
{
	int c;

	while ((c = chunk_get(m)) < 0)
		page_progress(m);
	return c;
}

static bool page_poll(struct page_mem *m);

/* page_link_post_wait's room: completions taken, the link's state. */
static rdmx_status page_room(void *arg)
{
	struct page_mem *m = arg;

	page_poll(m);
	return m->link.dead;
}

/*
 * Post @x, a full send queue waited out (page_link_post_wait). Any other
 * refusal loses the link, and the log says it (a connection that ended,
 * say); a link lost meanwhile answers its status.
 */
static rdmx_status page_post(struct page_mem *m, const struct page_xfer *x)
{
	rdmx_status st = page_link_post_wait(&m->link, x, page_room, m);

	if (st == RDMX_OK)
		return st;
	if (m->link.dead == RDMX_OK)
		page_link_fail(&m->link, st, "a transfer could not be posted");
	return m->link.dead;
}

/* Write-back chunk @c has nothing in flight any more. */
static void wb_chunk_done(struct page_mem *m, int c)
{
	struct page_chunk *ch = m->chunk[c];

	if (m->link.settles)
		for (uint32_t j = 0; j < ch->n; j++)
			wb_done_page(m, ch->pages[j], ch->settled);
	ch->kind = CHUNK_FREE;
}

/*
 * Post the WRITEs of the pages collected in chunk @c (already copied).
 * Where a WRITE completes once sent (iWARP), a READ follows them
 * (page_link_post_settle): the pages count as written back, and the
 * staging as free, once it completes.
 */
static void wb_post(struct page_mem *m, int c)
{
	struct page_chunk *ch = m->chunk[c];
	rdmx_status st;

	ch->kind = CHUNK_WB;
	ch->posted_ms = page_mem_now_ms();
	ch->pending = 1; /* held while posting: completions come meanwhile */
	ch->settled = false;
	for (uint32_t j = 0; j < ch->n; j++) {
		uint64_t id = (uint64_t)c << 32 | j;

		st = page_post(m,
			       &(struct page_xfer){
				       .op = RDMX_OP_WRITE,
				       .wr_id = id,
				       .stage_off = (size_t)(chunk_stage(m, c) -
							     m->link.stage) +
						    j * PAGE_SIZE_BYTES,
				       .off = ch->pages[j] * PAGE_SIZE_BYTES,
				       .len = PAGE_SIZE_BYTES });
		if (st == RDMX_OK)
			ch->pending++;
		else if (!m->link.settles)
			wb_done_page(m, ch->pages[j], false);
	}
	if (m->link.settles &&
	    page_post(m, &(struct page_xfer){ .settle = true,
					      .wr_id = (uint64_t)c << 32 |
						       PAGE_SETTLE_J }) ==
		    RDMX_OK)
		ch->pending++;
	if (--ch->pending == 0)
		wb_chunk_done(m, c);
}

/*
 * Start writing back dirty page @p into chunk *@c (taking a new chunk when
 * it is full or there is none): protect it, then copy it out.
 */
static void wb_add(struct page_mem *m, int *c, uint64_t p, bool evict)
{
	struct page_chunk *ch;

	if (*c >= 0 && m->chunk[*c]->n == m->chunk_pages) {
		wb_post(m, *c);
		*c = -1;
	}
	if (*c < 0) {
		*c = page_chunk_wait_any(m);
		m->chunk[*c]->kind = CHUNK_WB; /* claimed while it fills */
		m->chunk[*c]->n = 0;
		m->chunk[*c]->pending = 0;
	}
	ch = m->chunk[*c];
	page_uffd_protect(m->uffd, page_addr(m, p), PAGE_SIZE_BYTES, true);
	m->state[p] = PG_RESIDENT | PG_WB | (evict ? PG_EVICT : 0);
	m->evicting += evict;
	page_copy_out(chunk_stage(m, *c) + ch->n * PAGE_SIZE_BYTES,
		      page_addr(m, p));
	ch->pages[ch->n++] = p;
}

static void wb_done_page(struct page_mem *m, uint64_t p, bool ok)
{
	uint8_t s = m->state[p];

	m->evicting -= !!(s & PG_EVICT);
	if (!ok) {
		/* Keep the data: the page stays, dirty, and is not lost. */
		m->state[p] = PG_RESIDENT | PG_DIRTY;
		if (s & PG_REDIRTY)
			page_uffd_protect(m->uffd, page_addr(m, p),
					  PAGE_SIZE_BYTES, false);
		return;
	}
	STAT_ADD(m, written_back, 1);
	if (s & PG_EVICT) {
		page_zap(m, p);
		page_zap_flush(m); /* before waking a writer */
		STAT_ADD(m, evicted, 1);
		if (s & PG_REDIRTY) /* it faults the page in again */
			page_uffd_wake(m->uffd, page_addr(m, p),
				       PAGE_SIZE_BYTES);
		return;
	}
	m->state[p] = PG_RESIDENT;
	if (s & PG_REDIRTY) {
		m->state[p] |= PG_DIRTY;
		page_uffd_protect(m->uffd, page_addr(m, p), PAGE_SIZE_BYTES,
				  false);
	}
}

/*
 * Make room for @n more pages: evict from the hand on, clean pages at
 * once, dirty ones once their write-back completes. It frees a few chunks'
 * worth beyond @n, so write-backs overlap the faults that follow, and waits
 * only while fewer than @n slots are free. False when the server is lost
 * and dirty pages cannot leave.
 */
static bool cache_make_room(struct page_mem *m, uint32_t n)
{
	uint32_t want = n + m->low_water, swept = 0;
	int wb = -1;

	while (m->nfree + m->evicting < want && m->link.dead == RDMX_OK &&
	       swept++ < m->nslots) {
		uint64_t p = m->slot_page[m->hand];

		m->hand = (m->hand + 1) % m->nslots;
		if (p == UINT64_MAX || !(m->state[p] & PG_RESIDENT) ||
		    m->state[p] & PG_WB)
			continue;
		if (m->state[p] & PG_DIRTY) {
			wb_add(m, &wb, p, true);
		} else {
			page_zap(m, p);
			STAT_ADD(m, evicted, 1);
		}
	}
	page_zap_flush(m);
	if (wb >= 0)
		wb_post(m, wb);
	/* Still short (all in flight, or write-backs to land): wait. */
	while (m->nfree < n && m->link.dead == RDMX_OK) {
		if (!chunks_busy(m))
			return cache_make_room(m, n);
		page_progress(m);
	}
	return m->nfree >= n;
}

/*
 * Fetch the run of absent pages from @p, at most @max long, in one READ
 * into a chunk. @write and @tid: the fault that asked for @p, if one did.
 */
static void page_fetch_run(struct page_mem *m, uint64_t p, uint32_t max,
			   bool write, uint32_t tid)
{
	struct page_chunk *ch;
	uint32_t n = 1;
	int c;
	rdmx_status st;

	if (max > m->chunk_pages)
		max = m->chunk_pages;
	while (n < max && p + n < m->npages && m->state[p + n] == PG_ABSENT)
		n++;
	c = page_chunk_wait_any(m);
	ch = m->chunk[c];
	ch->kind = CHUNK_FETCH; /* ours while we make room */
	ch->n = 0;
	ch->write_first = write;
	ch->tid = tid;
	ch->pages[0] = p;
	if (m->state[p] != PG_ABSENT || !cache_make_room(m, n)) {
		ch->kind = CHUNK_FREE;
		if (m->state[p] == PG_ABSENT && tid)
			page_sigbus(m, p, tid);
		return;
	}
	/* Pages after it may have come in meanwhile: recount the run. */
	for (uint32_t j = 1; j < n; j++)
		if (m->state[p + j] != PG_ABSENT)
			n = j;
	ch->n = n;
	ch->posted_ms = page_mem_now_ms();
	for (uint32_t j = 0; j < n; j++) {
		m->state[p + j] = PG_FETCHING;
		slot_take(m, p + j);
	}
	STAT_ADD(m, fetches, 1);
	STAT_ADD(m, pages_fetched, n);
	STAT_ADD(m, readahead, tid ? n - 1 : n);
	st = page_post(m, &(struct page_xfer){
				  .op = RDMX_OP_READ,
				  .wr_id = (uint64_t)c << 32,
				  .stage_off = (size_t)(chunk_stage(m, c) -
							m->link.stage),
				  .off = p * PAGE_SIZE_BYTES,
				  .len = n * PAGE_SIZE_BYTES });
	if (st != RDMX_OK)
		fetch_done(m, c, RDMX_ERR_CONN_LOST);
}

/*
 * A missing fault at @p (absent, or on its way). Faults that move forward
 * through the window fetched ahead are sequential: they keep up to
 * attr.readahead pages requested beyond the fault (the window doubles from
 * 2 as the run goes on), in READs of a chunk each, so several are in
 * flight while the program works through the pages before them. Any other
 * fault fetches its page alone and closes the window.
 */
static void page_fetch(struct page_mem *m, uint64_t p, bool write, uint32_t tid)
{
	bool seq = m->ra_max && p > m->last_fault && p <= m->window_end;
	uint64_t end, q;

	m->ra = !seq ? 0 : m->ra ? m->ra * 2 : 2;
	if (m->ra > m->ra_max)
		m->ra = m->ra_max;
	end = p + 1 + m->ra;
	if (end > m->npages)
		end = m->npages;
	if (m->state[p] == PG_ABSENT)
		page_fetch_run(m, p, (uint32_t)(end - p), write, tid);
	for (q = p + 1 > m->window_end ? p + 1 : m->window_end; q < end;) {
		if (m->state[q] != PG_ABSENT || m->link.dead != RDMX_OK) {
			q++;
			continue;
		}
		page_fetch_run(m, q, (uint32_t)(end - q), false, 0);
		while (q < end && m->state[q] != PG_ABSENT)
			q++;
	}
	m->last_fault = p;
	m->window_end = end > m->window_end || !seq ? end : m->window_end;
}

static void fetch_done(struct page_mem *m, int c, rdmx_status st)
{
	struct page_chunk *ch = m->chunk[c];
	uint64_t p = ch->pages[0];
	uint8_t *src = chunk_stage(m, c);
	uint32_t n = ch->n, from = 0;

	if (st != RDMX_OK) {
		for (uint32_t j = 0; j < n; j++) {
			slot_free(m, p + j);
			m->state[p + j] = PG_ABSENT;
		}
		/*
		 * Threads may wait on any page of the run: they get SIGBUS.
		 * Poisoned, the pages raise it in them; else they are woken,
		 * fault again, and are signalled then (the link is dead).
		 */
		/* Counted before a thread can see the signal and ask. */
		STAT_ADD(m, sigbus, 1);
		if (!m->poison ||
		    page_uffd_poison(m->uffd, page_addr(m, p),
				     (uint64_t)n * PAGE_SIZE_BYTES) < 0) {
			/* page_sigbus counts them as they fault again. */
			atomic_fetch_sub_explicit(&m->stats.sigbus, 1,
						  memory_order_relaxed);
			page_uffd_wake(m->uffd, page_addr(m, p),
				       (uint64_t)n * PAGE_SIZE_BYTES);
		} else {
			memset(m->state + p, PG_POISON, n);
		}
		ch->kind = CHUNK_FREE;
		return;
	}
	if (ch->write_first) { /* written at once: no protection, dirty */
		page_uffd_copy(m->uffd, page_addr(m, p), src, PAGE_SIZE_BYTES,
			       false);
		m->state[p] = PG_RESIDENT | PG_DIRTY;
		from = 1;
	}
	if (from < n)
		page_uffd_copy(m->uffd, page_addr(m, p + from),
			       src + from * PAGE_SIZE_BYTES,
			       (uint64_t)(n - from) * PAGE_SIZE_BYTES, true);
	for (uint32_t j = from; j < n; j++)
		m->state[p + j] = PG_RESIDENT;
	STAT_ADD(m, resident, n);
	ch->kind = CHUNK_FREE;
}

static void page_complete(struct page_mem *m, const struct rdmx_completion *wc)
{
	int c = (int)(wc->wr_id >> 32);
	struct page_chunk *ch;

	if (wc->status != RDMX_OK && m->link.dead == RDMX_OK)
		page_link_fail(&m->link, wc->status, "a page transfer failed");
	ch = m->chunk[c];
	if (ch->kind == CHUNK_FETCH) {
		fetch_done(m, c, wc->status);
		return;
	}
	if (!m->link.settles)
		wb_done_page(m, ch->pages[(uint32_t)wc->wr_id],
			     wc->status == RDMX_OK);
	else if ((uint32_t)wc->wr_id == PAGE_SETTLE_J)
		ch->settled = wc->status == RDMX_OK;
	if (--ch->pending == 0)
		wb_chunk_done(m, c);
}

/* ---- the handler -------------------------------------------------------- */

static void page_check_timeouts(struct page_mem *m)
{
	double now = page_mem_now_ms();

	if (m->link.dead != RDMX_OK || !chunks_busy(m))
		return;
	for (int c = 0; c < PAGE_CHUNKS; c++) {
		struct page_chunk *ch = m->chunk[c];

		if (ch->kind != CHUNK_FREE && ch->n &&
		    now - ch->posted_ms > m->map->attr.timeout_ms) {
			page_link_fail(&m->link, RDMX_ERR_TIMEOUT,
				       "a page transfer took longer than "
				       "timeout_ms");
			return;
		}
	}
}

/* Serve completions; true if there were any. */
static bool page_poll(struct page_mem *m)
{
	struct rdmx_completion wc[32];
	int n = page_link_poll(&m->link, wc, 32);

	for (int i = 0; i < n; i++)
		page_complete(m, &wc[i]);
	if (n <= 0)
		page_check_timeouts(m);
	return n > 0;
}

/* One step of waiting inside the handler: completions only. */
static void page_progress(struct page_mem *m)
{
	page_poll(m);
}

static void page_fault(struct page_mem *m, const struct uffd_msg *msg)
{
	uint64_t addr = msg->arg.pagefault.address;
	uint64_t p = (addr - (uintptr_t)m->base) / PAGE_SIZE_BYTES;
	uint64_t flags = msg->arg.pagefault.flags;
	uint32_t tid = msg->arg.pagefault.feat.ptid;
	uint8_t s;

	if (msg->event != UFFD_EVENT_PAGEFAULT || p >= m->npages)
		return;
	s = m->state[p];
	if (flags & UFFD_PAGEFAULT_FLAG_WP) {
		if (s & PG_WB) {
			m->state[p] |= PG_REDIRTY; /* woken after the WRITE */
		} else if (s & PG_RESIDENT) {
			STAT_ADD(m, write_faults, 1);
			m->state[p] |= PG_DIRTY;
			page_uffd_protect(m->uffd, page_addr(m, p),
					  PAGE_SIZE_BYTES, false);
		} else {
			/* Evicted meanwhile: fault it in again. */
			page_uffd_wake(m->uffd, page_addr(m, p),
				       PAGE_SIZE_BYTES);
		}
		return;
	}
	if (s & (PG_RESIDENT | PG_POISON)) {
		page_uffd_wake(m->uffd, page_addr(m, p), PAGE_SIZE_BYTES);
		return;
	}
	STAT_ADD(m, faults, 1);
	if (m->link.dead != RDMX_OK) {
		if (!(s & PG_FETCHING)) /* else the failed READ answers it */
			page_sigbus(m, p, tid);
		return;
	}
	/* On its way already (the copy wakes every thread waiting on it),
	 * but it still says where the program goes next. */
	page_fetch(m, p, flags & UFFD_PAGEFAULT_FLAG_WRITE, tid);
}

/* Read and serve the faults waiting; true if there were any. */
static bool page_read_faults(struct page_mem *m)
{
	struct uffd_msg msg[32];
	ssize_t got = read(m->uffd, msg, sizeof(msg));

	if (got <= 0)
		return false;
	for (size_t i = 0; i < (size_t)got / sizeof(msg[0]); i++)
		page_fault(m, &msg[i]);
	return true;
}

/* Sync (and with @drop, forget) pages [first, first + n). */
static rdmx_status page_do_sync(struct page_mem *m, uint64_t first, uint64_t n,
				bool drop)
{
	rdmx_status st = RDMX_OK;
	int wb = -1;

	for (uint64_t p = first; p < first + n; p++)
		if ((m->state[p] & (PG_DIRTY | PG_WB)) == PG_DIRTY &&
		    m->link.dead == RDMX_OK)
			wb_add(m, &wb, p, drop);
	if (wb >= 0)
		wb_post(m, wb);
	while (chunks_busy(m))
		page_progress(m);
	/* Dirty again after the write-back is a new write; dirty with the
	 * link dead is one that could not leave. */
	for (uint64_t p = first; p < first + n; p++) {
		if (m->state[p] & PG_DIRTY && m->link.dead != RDMX_OK)
			st = RDMX_ERR_CONN_LOST;
		else if (drop && m->state[p] == PG_RESIDENT)
			page_zap(m, p);
	}
	page_zap_flush(m);
	return st;
}

static bool page_serve_cmd(struct page_mem *m)
{
	int cmd = atomic_load_explicit(&m->cmd, memory_order_acquire);
	uint64_t v;

	if (cmd == CMD_NONE)
		return false;
	if (read(m->efd, &v, sizeof(v)) < 0) { /* only clears the eventfd */
	}
	if (cmd == CMD_QUIT)
		m->cmd_status = page_do_sync(m, 0, m->npages, false);
	else
		m->cmd_status = page_do_sync(m, m->cmd_first, m->cmd_n,
					     cmd == CMD_DROP);
	pthread_mutex_lock(&m->cmd_lock);
	if (cmd == CMD_QUIT)
		atomic_store(&m->quit, true);
	atomic_store_explicit(&m->cmd, CMD_NONE, memory_order_release);
	pthread_cond_broadcast(&m->cmd_done);
	pthread_mutex_unlock(&m->cmd_lock);
	return true;
}

static void page_sleep(struct page_mem *m)
{
	int cqfd = m->link.cq ? rdmx_cq_fd(m->link.cq) : -1;
	struct pollfd fds[3] = { { m->uffd, POLLIN, 0 },
				 { m->efd, POLLIN, 0 },
				 { cqfd, POLLIN, 0 } };
	int timeout = -1;

	if (chunks_busy(m))
		timeout = cqfd < 0 ? 1 : 10; /* deadlines, or no cq fd */
	poll(fds, cqfd < 0 ? 2 : 3, timeout);
}

static void *page_handler(void *arg)
{
	struct page_mem *m = arg;
	double idle_since = page_mem_now_ms();
	sigset_t all;

	/* Signals belong to the application's threads, never to this one. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	while (!atomic_load(&m->quit)) {
		bool did = page_read_faults(m);

		did |= page_poll(m);
		if (page_serve_cmd(m))
			continue;
		if (did) {
			idle_since = page_mem_now_ms();
			continue;
		}
		if ((page_mem_now_ms() - idle_since) * 1000 <
		    m->map->attr.spin_us)
			continue;
		page_sleep(m);
		idle_since = page_mem_now_ms();
	}
	return NULL;
}

/* Ask the handler to run @cmd and wait for its status. */
static rdmx_status page_mem_cmd(struct page_mem *m, int cmd, uint64_t first,
				uint64_t n)
{
	uint64_t one = 1;
	rdmx_status st;

	pthread_mutex_lock(&m->cmd_lock);
	while (atomic_load(&m->cmd) != CMD_NONE)
		pthread_cond_wait(&m->cmd_done, &m->cmd_lock);
	m->cmd_first = first;
	m->cmd_n = n;
	atomic_store_explicit(&m->cmd, cmd, memory_order_release);
	if (write(m->efd, &one, sizeof(one)) < 0) { /* the handler polls too */
	}
	while (atomic_load(&m->cmd) == cmd)
		pthread_cond_wait(&m->cmd_done, &m->cmd_lock);
	st = m->cmd_status;
	pthread_mutex_unlock(&m->cmd_lock);
	return st;
}

rdmx_status page_mem_sync(struct page_mem *m, uint64_t first, uint64_t n,
			  bool drop)
{
	return page_mem_cmd(m, drop ? CMD_DROP : CMD_SYNC, first, n);
}

void *page_mem_base(const struct page_mem *m)
{
	return m->base;
}

void page_mem_stats(struct page_mem *m, struct rdmx_page_stats *s)
{
	s->faults = atomic_load(&m->stats.faults);
	s->write_faults = atomic_load(&m->stats.write_faults);
	s->fetches = atomic_load(&m->stats.fetches);
	s->pages_fetched = atomic_load(&m->stats.pages_fetched);
	s->readahead = atomic_load(&m->stats.readahead);
	s->evicted = atomic_load(&m->stats.evicted);
	s->written_back = atomic_load(&m->stats.written_back);
	s->resident = atomic_load(&m->stats.resident);
	s->sigbus = atomic_load(&m->stats.sigbus);
}

/* ---- making and ending it ----------------------------------------------- */

static void *page_mem_array(uint64_t bytes)
{
	/* Only the pages of it that get touched take memory. */
	void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void page_mem_free(struct page_mem *m)
{
	if (m->base)
		munmap(m->base, m->npages * PAGE_SIZE_BYTES);
	if (m->uffd >= 0)
		close(m->uffd);
	if (m->efd >= 0)
		close(m->efd);
	page_link_close(&m->link);
	if (m->state)
		munmap(m->state, m->npages);
	if (m->slot_of)
		munmap(m->slot_of, m->npages * sizeof(uint32_t));
	free(m->slot_page);
	free(m->free_slot);
	for (int c = 0; c < PAGE_CHUNKS; c++)
		free(m->chunk[c]);
	pthread_mutex_destroy(&m->cmd_lock);
	pthread_cond_destroy(&m->cmd_done);
	free(m);
}

static rdmx_status page_mem_alloc(struct page_mem *m)
{
	struct rdmx_page_map *map = m->map;

	m->nslots = (uint32_t)(map->attr.cache_bytes / PAGE_SIZE_BYTES);
	if (map->attr.cache_bytes / PAGE_SIZE_BYTES > m->npages)
		m->nslots = (uint32_t)m->npages;
	m->chunk_pages = 64;
	/*
	 * Evict in batches of 1/32 of the cache: each madvise that unmaps
	 * pages flushes the TLB of every core the program runs on, an IPI
	 * that costs tens of microseconds in a VM, so one per batch.
	 */
	m->low_water = m->nslots / 32 > 2 * m->chunk_pages ? m->nslots / 32
							   : 2 * m->chunk_pages;
	if (m->low_water > m->nslots / 2)
		m->low_water = m->nslots / 2;
	/* Half the cache at most: what is fetched ahead must fit beside
	 * what the program works on. */
	m->ra_max = map->attr.readahead < m->nslots / 2 ? map->attr.readahead
							: m->nslots / 2;
	m->state = page_mem_array(m->npages);
	m->slot_of = page_mem_array(m->npages * sizeof(uint32_t));
	m->slot_page = malloc(m->nslots * sizeof(uint64_t));
	m->free_slot = malloc(m->nslots * sizeof(uint32_t));
	if (!m->state || !m->slot_of || !m->slot_page || !m->free_slot)
		return RDMX_ERR_NOMEM;
	for (uint32_t s = 0; s < m->nslots; s++) {
		m->slot_page[s] = UINT64_MAX;
		m->free_slot[s] = m->nslots - 1 - s; /* slot 0 first */
	}
	m->nfree = m->nslots;
	for (int c = 0; c < PAGE_CHUNKS; c++) {
		m->chunk[c] =
			calloc(1, sizeof(struct page_chunk) +
					  m->chunk_pages * sizeof(uint64_t));
		if (!m->chunk[c])
			return RDMX_ERR_NOMEM;
	}
	return RDMX_OK;
}

static rdmx_status page_mem_open(struct page_mem *m)
{
	struct rdmx_page_map *map = m->map;
	size_t stage = (size_t)PAGE_CHUNKS * m->chunk_pages * PAGE_SIZE_BYTES;
	uint64_t len = m->npages * PAGE_SIZE_BYTES, features = 0;
	void *base;

	m->uffd = page_uffd_open(&features);
	if (m->uffd < 0)
		return errno == ENOMEM ? RDMX_ERR_NOMEM : RDMX_ERR_UNSUPPORTED;
	m->poison = page_uffd_has_poison(features);
	base = mmap(NULL, len, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (base == MAP_FAILED) {
		page_log(RDMX_LOG_ERROR, "mmap of %lu bytes: %m",
			 (unsigned long)len);
		return RDMX_ERR_NOMEM;
	}
	m->base = base;
	/* A fork child would see zeros where pages are absent: give it none;
	 * and 4 KiB pages only, as the cache counts them. */
	madvise(base, len, MADV_DONTFORK);
	madvise(base, len, MADV_NOHUGEPAGE);
	if (page_uffd_register(m->uffd, base, len) < 0)
		return RDMX_ERR_SYSTEM;
	m->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (m->efd < 0) {
		page_log(RDMX_LOG_ERROR, "eventfd: %m");
		return RDMX_ERR_SYSTEM;
	}
	if (map->local)
		return page_link_open_local(&m->link, map->local, map->length,
					    stage);
	return page_link_open(&m->link, map->ctx, map->addr, map->name,
			      (int)map->attr.timeout_ms, stage);
}

rdmx_status page_mem_create(struct rdmx_page_map *map, struct page_mem **m_p)
{
	struct page_mem *m = calloc(1, sizeof(*m));
	rdmx_status st;

	if (!m)
		return RDMX_ERR_NOMEM;
	m->map = map;
	m->npages = map->npages;
	m->uffd = m->efd = -1;
	m->last_fault = UINT64_MAX;
	pthread_mutex_init(&m->cmd_lock, NULL);
	pthread_cond_init(&m->cmd_done, NULL);
	st = page_mem_alloc(m);
	if (st == RDMX_OK)
		st = page_mem_open(m);
	if (st == RDMX_OK && pthread_create(&m->thread, NULL, page_handler, m))
		st = RDMX_ERR_SYSTEM;
	if (st != RDMX_OK) {
		page_mem_free(m);
		return st;
	}
	*m_p = m;
	return RDMX_OK;
}

rdmx_status page_mem_destroy(struct page_mem *m)
{
	rdmx_status st = page_mem_cmd(m, CMD_QUIT, 0, 0);

	pthread_join(m->thread, NULL);
	page_mem_free(m);
	return st;
}
