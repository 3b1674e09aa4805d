/* SPDX-License-Identifier: MIT */
/*
 * rdmx_copy: memcpy for the data paths, without a slow case of some CPUs.
 *
 * glibc (2.36 here, Debian 12) copies 2 KiB and more with rep movsb where
 * the CPU has FSRM. On AMD's (the EPYC hosts of these VMs) that runs 15-25
 * times slower when the destination lies 1 to 31 bytes past the source
 * modulo 4096 (glibc bug 30994): a 4 KiB copy took 1.7 us, not 0.07, and
 * a 64 KiB one 1.5-3 GB/s against 40. Whether a copy meets it depends on
 * where its buffers lie, so one run of a benchmark met it for every
 * message and the next for none. There we copy backwards, 64 bytes a
 * step: no load then reads an address whose low 12 bits a store just
 * wrote, and it goes at 25-30 GB/s.
 */
#ifndef RDMX_COPY_H
#define RDMX_COPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define RDMX_COPY_SLOW_MIN 2048
/*
 * glibc takes rep movsb from about 2.1 KiB on where the CPU has FSRM, and
 * on the AMD hosts it is slower than a loop of 32-byte moves up to about
 * here even where nothing aliases (the figures: rdmx_memcpy(3)); from
 * 16 KiB on they are even.
 */
#define RDMX_COPY_VEC_MAX (16 * 1024)

/* The backward copy (copy.c); @dst and @src must not overlap. */
void rdmx_copy_back(void *dst, const void *src, size_t n);
/* rdmx_copy of RDMX_COPY_SLOW_MIN bytes and more (copy.c). */
void rdmx_copy_mid(void *dst, const void *src, size_t n);
/* Tests: whether rdmx_copy_mid may take its AVX2 loops (where the CPU
 * has AVX2; the default). */
void rdmx_copy_vector(bool on);

/* Is @dst 1..31 bytes past @src modulo 4096? */
static inline int rdmx_copy_aliased(const void *dst, const void *src)
{
	return (((uintptr_t)dst - (uintptr_t)src) & 4095) - 1 < 31;
}

static inline void rdmx_copy(void *dst, const void *src, size_t n)
{
	if (n >= RDMX_COPY_SLOW_MIN)
		rdmx_copy_mid(dst, src, n);
	else
		memcpy(dst, src, n);
}

#endif
