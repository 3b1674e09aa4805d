/* SPDX-License-Identifier: MIT */
/* Description: rdmx_memcpy (rdmx_copy inside) copies exactly, whichever way
 * it goes: every size around its thresholds, every distance around the
 * aliased range, with its AVX2 loops and without; it returns dst. */
#include <stdlib.h>
#include <string.h>

#include "copy.h"
#include "harness.h"

enum { GUARD = 64 };

static void copy_one(uint8_t *area, size_t src_at, size_t dst_at, size_t n)
{
	uint8_t *src = area + src_at, *dst = area + dst_at;

	for (size_t i = 0; i < n; i++)
		src[i] = (uint8_t)(i * 7 + n);
	memset(dst - GUARD, 0xee, n + 2 * GUARD);
	assert_ptr_equal(rdmx_memcpy(dst, src, n), dst);
	if (memcmp(dst, src, n))
		fail_msg("%zu bytes, dst - src %zd: wrong bytes", n,
			 (ssize_t)(dst_at - src_at));
	for (size_t i = 0; i < GUARD; i++)
		if (dst[-1 - (ssize_t)i] != 0xee || dst[n + i] != 0xee)
			fail_msg("%zu bytes, dst - src %zd: wrote outside", n,
				 (ssize_t)(dst_at - src_at));
}

static void test_copy_sizes_and_distances(void **state)
{
	static const size_t sizes[] = { 0,     1,     63,	64,    65,
					2047,  2048,  2049,	2100,  3000,
					4096,  4097,  8191,	16383, 16384,
					16385, 20000, 65536 + 5 };
	const size_t nsizes = sizeof(sizes) / sizeof(sizes[0]);
	const size_t span = 1 << 20;
	uint8_t *area = malloc(span);

	(void)state;
	assert_non_null(area);
	for (int vector = 0; vector < 2; vector++) {
		int aliased = 0;

		rdmx_copy_vector(vector);
		for (size_t z = 0; z < nsizes; z++)
			for (size_t d = 0; d <= 40; d++)
				for (size_t lap = 0; lap < 2; lap++) {
					/* dst d bytes past src, modulo
					 * 4096; src at an odd offset of its
					 * page on one lap. */
					size_t src_at = 4096 + lap * 3;
					size_t dst_at = src_at + 4096 * 33 + d;

					aliased += rdmx_copy_aliased(
						area + dst_at, area + src_at);
					copy_one(area, src_at, dst_at,
						 sizes[z]);
					copy_one(area, dst_at, src_at,
						 sizes[z]);
				}
		/* Distances 1..31 take the backward copy: 31 of 41, both
		 * laps. */
		assert_int_equal(aliased, 31 * 2 * (int)nsizes);
	}
	rdmx_copy_vector(true);
	free(area);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copy_sizes_and_distances),
	};

	return cmocka_run_group_tests_name("copy", tests, NULL, NULL);
}
