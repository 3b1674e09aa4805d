/* SPDX-License-Identifier: MIT */
/*
 * Description: the floor of a shared-memory ping-pong on this host, for
 * bench/compare.sh to set beside rdmx shm: two processes (fork) on two
 * CPUs share a mapping; each message is SIZE bytes written into the
 * other's slot, then a sequence number stored beside it (one cache line
 * for 8 bytes);
 * the other side spins on it, copies the message out and answers the same
 * way. Nothing sleeps.
 *
 *   shm_pingpong SIZE ITERS CPU_A CPU_B
 *
 * Prints one JSON line: one-way latency (half the round trip) in
 * microseconds, min / median / p99 / p99.9 / max.
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* The sequence number shares its cache line with the message's start: an
 * 8-byte message moves as one line. */
struct slot {
	_Alignas(64) _Atomic uint64_t seq;
	unsigned char data[];
};

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		perror("shm_pingpong: sched_setaffinity");
}

/* Send message @seq from @out, then wait for @seq in @in and take it. */
static void hop(struct slot *out, struct slot *in, unsigned char *mine,
		size_t size, uint64_t seq, int send_first)
{
	if (send_first) {
		memcpy(out->data, mine, size);
		atomic_store_explicit(&out->seq, seq, memory_order_release);
	}
	while (atomic_load_explicit(&in->seq, memory_order_acquire) != seq)
		;
	memcpy(mine, in->data, size);
	if (!send_first) {
		memcpy(out->data, mine, size);
		atomic_store_explicit(&out->seq, seq, memory_order_release);
	}
}

int main(int argc, char **argv)
{
	size_t size, slot_len;
	long iters, warm;
	struct slot *a, *b;
	unsigned char *mine;
	double *lat;
	pid_t child;
	void *map;

	if (argc != 5 || (size = (size_t)atol(argv[1])) == 0 ||
	    (iters = atol(argv[2])) < 10) {
		fprintf(stderr, "usage: shm_pingpong SIZE ITERS CPU_A CPU_B\n");
		return 2;
	}
	warm = iters / 10;
	slot_len = (sizeof(struct slot) + size + 63) & ~(size_t)63;
	map = mmap(NULL, 2 * slot_len, PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	mine = calloc(1, size);
	lat = calloc((size_t)iters, sizeof(*lat));
	if (map == MAP_FAILED || !mine || !lat)
		return 1;
	a = map;
	b = (struct slot *)((char *)map + slot_len);
	child = fork();
	if (child < 0)
		return 1;
	if (child == 0) { /* the echo side */
		pin(atoi(argv[4]));
		for (long i = 1; i <= warm + iters; i++)
			hop(b, a, mine, size, (uint64_t)i, 0);
		_exit(0);
	}
	pin(atoi(argv[3]));
	for (long i = 1; i <= warm + iters; i++) {
		double t0 = bench_now_us();

		hop(a, b, mine, size, (uint64_t)i, 1);
		if (i > warm)
			lat[i - warm - 1] = (bench_now_us() - t0) / 2;
	}
	waitpid(child, NULL, 0);
	qsort(lat, (size_t)iters, sizeof(*lat), bench_cmp_double);
	printf("{\"tool\":\"shm_pingpong\",\"wait\":\"spin\",\"size\":%zu,"
	       "\"iters\":%ld,\"lat_us\":{\"min\":%.3f,\"median\":%.3f,"
	       "\"p99\":%.3f,\"p99_9\":%.3f,\"max\":%.3f}}\n",
	       size, iters, lat[0], lat[iters / 2], lat[iters * 99 / 100],
	       lat[iters * 999 / 1000], lat[iters - 1]);
	free(mine);
	free(lat);
	munmap(map, 2 * slot_len);
	return 0;
}
