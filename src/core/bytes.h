/* SPDX-License-Identifier: MIT */
/* Big-endian field access for every wire format rdmx defines. */
#ifndef RDMX_BYTES_H
#define RDMX_BYTES_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

/*
 * @n is a constant at every call: the 8-, 4- and 2-byte cases compile to
 * one swap and one store (or load). A loop of byte stores would make the
 * copy that reads the field back (a frame header into a ring) wait for
 * every older store to leave the core, a peer's line among them.
 */
static inline void rdmx_put_be(uint8_t *p, uint64_t v, int n)
{
	if (n == 8) {
		uint64_t x = htobe64(v);

		memcpy(p, &x, 8);
	} else if (n == 4) {
		uint32_t x = htobe32((uint32_t)v);

		memcpy(p, &x, 4);
	} else if (n == 2) {
		uint16_t x = htobe16((uint16_t)v);

		memcpy(p, &x, 2);
	} else {
		for (int i = n - 1; i >= 0; i--, v >>= 8)
			p[i] = (uint8_t)v;
	}
}

static inline uint64_t rdmx_get_be(const uint8_t *p, int n)
{
	uint64_t v = 0;

	if (n == 8) {
		memcpy(&v, p, 8);
		return be64toh(v);
	}
	if (n == 4) {
		uint32_t x;

		memcpy(&x, p, 4);
		return be32toh(x);
	}
	if (n == 2) {
		uint16_t x;

		memcpy(&x, p, 2);
		return be16toh(x);
	}
	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

#endif
