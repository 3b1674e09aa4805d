/* SPDX-License-Identifier: MIT */
/*
 * Logging: one line per event on stderr, "rdmx: <level>: <message>".
 * Style (UCX LoggingStyle): lowercase, no '=', %m on every syscall error,
 * logged where first detected, with the numbers a user needs.
 */
#ifndef RDMX_LOG_H
#define RDMX_LOG_H

enum rdmx_log_level {
	RDMX_LOG_ERROR = 0,
	RDMX_LOG_WARN,
	RDMX_LOG_INFO,
	RDMX_LOG_DEBUG,
};

/* Set by rdmx_ctx_create from log.level; the last context created wins. */
extern int rdmx_log_level;

void rdmx_log(enum rdmx_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define rdmx_log_at(lvl, ...)                                                  \
	do {                                                                   \
		if ((lvl) <= rdmx_log_level)                                   \
			rdmx_log(lvl, __VA_ARGS__);                            \
	} while (0)
#define rdmx_error(...) rdmx_log_at(RDMX_LOG_ERROR, __VA_ARGS__)
#define rdmx_warn(...) rdmx_log_at(RDMX_LOG_WARN, __VA_ARGS__)
#define rdmx_info(...) rdmx_log_at(RDMX_LOG_INFO, __VA_ARGS__)
#define rdmx_debug(...) rdmx_log_at(RDMX_LOG_DEBUG, __VA_ARGS__)

#endif
