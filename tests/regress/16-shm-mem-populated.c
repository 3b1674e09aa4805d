/* SPDX-License-Identifier: MIT */
/*
 * Description: memory from rdmx_mem_alloc is resident from the start, and
 * a shm peer maps it with its page tables filled, as a NIC's registered
 * memory is pinned: no request pays a page fault. Each first touch of a
 * page was a fault (~2 us on these VMs, a page cache allocation at the
 * target, a table entry at the initiator): `rdmx bench --op write --bw`
 * of 1 MiB over 16 slots spent ~8 ms of a 1000-WRITE run in them, 23
 * against 37 GB/s at 300 WRITEs.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

#define LEN (1u << 20)

static void test_mem_resident_from_alloc(void **state)
{
	struct side s;
	size_t pg = (size_t)sysconf(_SC_PAGESIZE), resident = 0;
	unsigned char vec[LEN / 4096];
	void *p;

	(void)state;
	side_open(&s);
	assert_int_equal(rdmx_mem_alloc(s.ctx, LEN, 0, &p), RDMX_OK);
	assert_int_equal(mincore(p, LEN, vec), 0);
	for (size_t i = 0; i < LEN / pg; i++)
		resident += vec[i] & 1;
	print_message("%zu of %zu pages resident before a touch\n", resident,
		      LEN / pg);
	assert_int_equal(resident, LEN / pg);
	assert_int_equal(rdmx_mem_free(s.ctx, p), RDMX_OK);
	side_close(&s);
}

/*
 * A pair over @tp, and two blocks from rdmx_mem_alloc: @dst (@len bytes,
 * the server's, remote write) and @src (the client's); dst's descriptor.
 */
static struct rdmx_remote pair_dst_src(struct pair *p, const char *tp,
				       struct buf *dst, size_t len,
				       struct buf *src, size_t src_len)
{
	setenv("RDMX_TRANSPORT", tp, 1);
	pair_open(p);
	buf_alloc_from(&p->s, dst, len,
		       RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE,
		       true);
	buf_alloc_from(&p->c, src, src_len, 0, true);
	return share_remote(p, dst);
}

/* @want rdmx-mem mappings in this process, each resident whole. */
static void assert_maps_whole(int want)
{
	long rss[8], size[8];
	int n = harness_maps("rdmx-mem", size, rss, 8);

	for (int i = 0; i < n; i++)
		print_message("rdmx-mem mapping %d: %ld of %ld kB resident\n",
			      i, rss[i], size[i]);
	assert_int_equal(n, want);
	for (int i = 0; i < n; i++)
		assert_int_equal(rss[i], size[i]);
}

/* A WRITE of @len bytes of @byte from src to the start of dst lands. */
static void write_lands(struct pair *p, struct buf *src, struct buf *dst,
			struct rdmx_remote rem, uint32_t len, int byte)
{
	struct rdmx_sge sg = sge_of(src, 0, len);

	memset(src->p, byte, len);
	assert_int_equal(rdmx_post_write(p->cconn, &sg, rem.addr, rem.rkey, 1),
			 RDMX_OK);
	expect_wc(p->c.cq, RDMX_OK, RDMX_OP_WRITE);
	assert_memory_equal(dst->p, src->p, len);
}

static void test_peer_maps_populated(void **state)
{
	struct pair p;
	struct buf dst, src;
	struct rdmx_remote rem;

	(void)state;
	rem = pair_dst_src(&p, "shm", &dst, LEN, &src, LEN);
	/* One WRITE of 8 bytes: the client maps dst, whole. */
	write_lands(&p, &src, &dst, rem, 8, 0x11);
	/* dst and src, each by its owner, and dst by the client. */
	assert_maps_whole(3);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

/*
 * rdmx_remote_attach maps the peer's block before any request, whole and
 * resident, so the first WRITE pays nothing for it; a WRITE then lands.
 */
static void test_attach_maps_before_requests(void **state)
{
	struct pair p;
	struct buf dst, src;
	struct rdmx_remote rem;

	(void)state;
	rem = pair_dst_src(&p, "shm", &dst, LEN, &src, LEN);
	assert_maps_whole(2);
	assert_int_equal(rdmx_remote_attach(p.cconn, &rem), RDMX_OK);
	/* dst and src, each by its owner, and dst by the client. */
	assert_maps_whole(3);
	/* Again, and a WRITE: nothing more mapped. */
	assert_int_equal(rdmx_remote_attach(p.cconn, &rem), RDMX_OK);
	write_lands(&p, &src, &dst, rem, 64, 0x3c);
	assert_maps_whole(3);
	assert_int_equal(rdmx_remote_attach(NULL, &rem), RDMX_ERR_INVALID);
	assert_int_equal(rdmx_remote_attach(p.cconn, NULL), RDMX_ERR_INVALID);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

/* Over tcp there is nothing to map: a hint that changes nothing. */
static void test_attach_tcp_nothing_to_do(void **state)
{
	struct pair p;
	struct buf dst, src;
	struct rdmx_remote rem;

	(void)state;
	rem = pair_dst_src(&p, "tcp", &dst, 4096, &src, 4096);
	assert_int_equal(rdmx_remote_attach(p.cconn, &rem), RDMX_OK);
	assert_maps_whole(2);
	write_lands(&p, &src, &dst, rem, 64, 0x7e);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

/*
 * Resident kB of the mapping of the server's block (@len bytes) other
 * than the server's own (at @own): the client's; -1 when there is none.
 */
static long peer_map_rss(const void *own, size_t len)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	bool theirs = false;
	long rss = -1, kb;
	uintptr_t lo, hi;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 &&
		    strchr(line, '-') < strchr(line, ' '))
			theirs = strstr(line, "rdmx-mem") &&
				 lo != (uintptr_t)own && hi - lo == len;
		else if (theirs && sscanf(line, "Rss: %ld kB", &kb) == 1)
			rss = kb;
	}
	fclose(f);
	return rss;
}

/*
 * One WRITE of 8 bytes into a block of the server's that the client
 * should not fill its tables for: @sparse, whose pages are gone (as a
 * hostile peer's sealed memfd may be, of any size: filling allocated them
 * in the client, all of them), or larger than RDMX_SHM_POPULATE_MAX
 * (filling held the client's thread ~0.05 ms a MiB). The WRITE is still
 * done directly, and lands.
 */
static void write_into_unfilled(size_t len, bool sparse)
{
	struct pair p;
	struct buf dst, src;
	struct rdmx_remote rem;
	long rss;

	rem = pair_dst_src(&p, "shm", &dst, len, &src, 4096);
	if (sparse)
		assert_int_equal(madvise(dst.p, len, MADV_REMOVE), 0);
	write_lands(&p, &src, &dst, rem, 8, 0x5a);
	rss = peer_map_rss(dst.p, len);
	print_message("%zu kB block%s: the client's mapping holds %ld kB\n",
		      len >> 10, sparse ? ", sparse" : "", rss);
	assert_true(rss >= 0 && rss <= 64);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

static void test_sparse_block_not_filled(void **state)
{
	(void)state;
	write_into_unfilled(4u << 20, true);
}

static void test_large_block_not_filled(void **state)
{
	(void)state;
	write_into_unfilled(32u << 20, false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_peer_maps_populated),
		cmocka_unit_test(test_attach_maps_before_requests),
		cmocka_unit_test(test_attach_tcp_nothing_to_do),
		cmocka_unit_test(test_sparse_block_not_filled),
		cmocka_unit_test(test_large_block_not_filled),
		cmocka_unit_test(test_mem_resident_from_alloc),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
