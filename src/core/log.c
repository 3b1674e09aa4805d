/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "log.h"

_Atomic int rdmx_log_level = RDMX_LOG_WARN;

static const char *const rdmx_log_names[] = {
	[RDMX_LOG_ERROR] = "error",
	[RDMX_LOG_WARN] = "warn",
	[RDMX_LOG_INFO] = "info",
	[RDMX_LOG_DEBUG] = "debug",
};

void rdmx_log(enum rdmx_log_level level, const char *fmt, ...)
{
	char line[512];
	int saved = errno; /* keep %m intact for the caller's format */
	va_list ap;

	if ((int)level >
	    atomic_load_explicit(&rdmx_log_level, memory_order_relaxed))
		return;
	va_start(ap, fmt);
	errno = saved;
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One fprintf per line, so lines from threads do not interleave. */
	fprintf(stderr, "rdmx: %s: %s\n", rdmx_log_names[level], line);
	errno = saved;
}
