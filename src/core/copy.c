/* SPDX-License-Identifier: MIT */
#include "copy.h"

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
