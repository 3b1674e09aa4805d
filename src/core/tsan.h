/* SPDX-License-Identifier: MIT */
/*
 * ThreadSanitizer builds: RDMX_TSAN, and the annotations that tell TSan of
 * an order it cannot see (through sockets, or through one memory mapped at
 * two addresses). Nothing of this exists in other builds.
 */
#ifndef RDMX_TSAN_H
#define RDMX_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define RDMX_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RDMX_TSAN 1
#endif
#endif

#ifdef RDMX_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#endif

#endif
