/* SPDX-License-Identifier: MIT */
/* Big-endian field access for every wire format rdmx defines. */
#ifndef RDMX_BYTES_H
#define RDMX_BYTES_H

#include <stdint.h>

static inline void rdmx_put_be(uint8_t *p, uint64_t v, int n)
{
	for (int i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static inline uint64_t rdmx_get_be(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

#endif
