/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

#include "log.h"

_Atomic int rdmx_log_level = RDMX_LOG_WARN;

static const char *const rdmx_log_names[] = {
	[RDMX_LOG_ERROR] = "error",
	[RDMX_LOG_WARN] = "warn",
	[RDMX_LOG_INFO] = "info",
	[RDMX_LOG_DEBUG] = "debug",
};

static bool rdmx_log_on(enum rdmx_log_level level)
{
	return (int)level <=
	       atomic_load_explicit(&rdmx_log_level, memory_order_relaxed);
}

static void rdmx_log_line(enum rdmx_log_level level, int saved, const char *fmt,
			  va_list ap)
{
	char line[512];

	errno = saved;
	vsnprintf(line, sizeof(line), fmt, ap);
	/* One fprintf per line, so lines from threads do not interleave. */
	fprintf(stderr, "rdmx: %s: %s\n", rdmx_log_names[level], line);
	errno = saved;
}

void rdmx_log(enum rdmx_log_level level, const char *fmt, ...)
{
	int saved = errno; /* keep %m intact for the caller's format */
	va_list ap;

	if (!rdmx_log_on(level))
		return;
	va_start(ap, fmt);
	rdmx_log_line(level, saved, fmt, ap);
	va_end(ap);
}

/*
 * Lines that peers cause, RDMX_LOG_PEER_LINES a second at most in the
 * process: a flood of failing or hostile peers (a port scan, clients with
 * the wrong key or garbage for requests) cost a server a line each, ~100
 * a second in a chaos run against rdmx kv, burying everything else and
 * filling disks. The rest are counted and told with the next line said.
 */
#define RDMX_LOG_PEER_LINES 10

void rdmx_log_peer(enum rdmx_log_level level, const char *fmt, ...)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static struct timespec since;
	static unsigned said, unsaid;
	int saved = errno;
	struct timespec now;
	unsigned missed = 0;
	double gap;
	bool say;
	va_list ap;

	if (!rdmx_log_on(level))
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	pthread_mutex_lock(&lock);
	gap = (double)(now.tv_sec - since.tv_sec) +
	      (double)(now.tv_nsec - since.tv_nsec) / 1e9;
	if (gap >= 1.0) {
		missed = unsaid;
		said = unsaid = 0;
		since = now;
	}
	say = said < RDMX_LOG_PEER_LINES;
	if (say)
		said++;
	else
		unsaid++;
	pthread_mutex_unlock(&lock);
	if (missed)
		rdmx_log(RDMX_LOG_WARN,
			 "%u more lines about peers went unsaid in the %.1f s "
			 "before (at most %d a second are said)",
			 missed, gap, RDMX_LOG_PEER_LINES);
	if (!say)
		return;
	va_start(ap, fmt);
	rdmx_log_line(level, saved, fmt, ap);
	va_end(ap);
}
