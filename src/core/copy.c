/* SPDX-License-Identifier: MIT */
#include "copy.h"

#include <stdatomic.h>

#include "rdmx.h"

void *rdmx_memcpy(void *dst, const void *src, size_t n)
{
	rdmx_copy(dst, src, n);
	return dst;
}

#ifdef __SSE2__
#include <emmintrin.h>

void rdmx_copy_back(void *dst, const void *src, size_t n)
{
	uint8_t *d = dst;
	const uint8_t *s = src;

	while (n >= 64) {
		__m128i a, b, c, e;

		n -= 64;
		a = _mm_loadu_si128((const __m128i *)(s + n));
		b = _mm_loadu_si128((const __m128i *)(s + n + 16));
		c = _mm_loadu_si128((const __m128i *)(s + n + 32));
		e = _mm_loadu_si128((const __m128i *)(s + n + 48));
		_mm_storeu_si128((__m128i *)(d + n), a);
		_mm_storeu_si128((__m128i *)(d + n + 16), b);
		_mm_storeu_si128((__m128i *)(d + n + 32), c);
		_mm_storeu_si128((__m128i *)(d + n + 48), e);
	}
	memcpy(d, s, n);
}
#else
void rdmx_copy_back(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}
#endif

/*
 * The AVX2 loops of rdmx_copy_mid, 128 bytes a step: forward where
 * nothing aliases (RDMX_COPY_VEC_MAX), backward where it would (as
 * rdmx_copy_back, at 32 bytes a move: a 4 KiB copy ~77 ns against ~108).
 * Chosen at run time: the library is built for any x86-64.
 */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define RDMX_COPY_AVX2 1

static atomic_bool rdmx_copy_avx2_off;

/* @n >= 32: the first 32 bytes, then 128 a step to 32-byte aligned
 * destinations (unaligned ones were slower than rep movsb at 4 KiB and up
 * where @dst lay 40 bytes into a line), then the rest. */
__attribute__((target("avx2"))) static void
rdmx_copy_fwd_avx2(uint8_t *d, const uint8_t *s, size_t n)
{
	size_t i = 32 - ((uintptr_t)d & 31);

	_mm256_storeu_si256((__m256i *)d,
			    _mm256_loadu_si256((const __m256i *)s));
	for (; i + 128 <= n; i += 128) {
		__m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
		__m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
		__m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
		__m256i e = _mm256_loadu_si256((const __m256i *)(s + i + 96));

		_mm256_store_si256((__m256i *)(d + i), a);
		_mm256_store_si256((__m256i *)(d + i + 32), b);
		_mm256_store_si256((__m256i *)(d + i + 64), c);
		_mm256_store_si256((__m256i *)(d + i + 96), e);
	}
	memcpy(d + i, s + i, n - i);
}

__attribute__((target("avx2"))) static void
rdmx_copy_back_avx2(uint8_t *d, const uint8_t *s, size_t n)
{
	while (n >= 128) {
		__m256i a, b, c, e;

		n -= 128;
		a = _mm256_loadu_si256((const __m256i *)(s + n));
		b = _mm256_loadu_si256((const __m256i *)(s + n + 32));
		c = _mm256_loadu_si256((const __m256i *)(s + n + 64));
		e = _mm256_loadu_si256((const __m256i *)(s + n + 96));
		_mm256_storeu_si256((__m256i *)(d + n), a);
		_mm256_storeu_si256((__m256i *)(d + n + 32), b);
		_mm256_storeu_si256((__m256i *)(d + n + 64), c);
		_mm256_storeu_si256((__m256i *)(d + n + 96), e);
	}
	memcpy(d, s, n);
}
#endif

void rdmx_copy_vector(bool on)
{
#ifdef RDMX_COPY_AVX2
	atomic_store_explicit(&rdmx_copy_avx2_off, !on, memory_order_relaxed);
#else
	(void)on;
#endif
}

void rdmx_copy_mid(void *dst, const void *src, size_t n)
{
	bool aliased = rdmx_copy_aliased(dst, src);

#ifdef RDMX_COPY_AVX2
	if (__builtin_cpu_supports("avx2") &&
	    !atomic_load_explicit(&rdmx_copy_avx2_off, memory_order_relaxed)) {
		if (aliased)
			rdmx_copy_back_avx2(dst, src, n);
		else if (n <= RDMX_COPY_VEC_MAX)
			rdmx_copy_fwd_avx2(dst, src, n);
		else
			memcpy(dst, src, n);
		return;
	}
#endif
	if (aliased)
		rdmx_copy_back(dst, src, n);
	else
		memcpy(dst, src, n);
}
