/* SPDX-License-Identifier: MIT */
/*
 * Logging: one line per event on stderr, "rdmx: <level>: <message>".
 * Style (UCX LoggingStyle): lowercase, no '=', %m on every syscall error,
 * logged where first detected, with the numbers a user needs.
 */
#ifndef RDMX_LOG_H
#define RDMX_LOG_H

#include <stdatomic.h>

#include "rdmx.h" /* enum rdmx_log_level, rdmx_log() */

/*
 * Set by rdmx_ctx_create from log.level; the last context created wins.
 * Atomic: a context may be created while other contexts' threads log.
 */
extern _Atomic int rdmx_log_level;

#define rdmx_log_at(lvl, ...)                                                  \
	do {                                                                   \
		if ((int)(lvl) <= atomic_load_explicit(&rdmx_log_level,        \
						       memory_order_relaxed))  \
			rdmx_log(lvl, __VA_ARGS__);                            \
	} while (0)
#define rdmx_error(...) rdmx_log_at(RDMX_LOG_ERROR, __VA_ARGS__)
#define rdmx_warn(...) rdmx_log_at(RDMX_LOG_WARN, __VA_ARGS__)
#define rdmx_info(...) rdmx_log_at(RDMX_LOG_INFO, __VA_ARGS__)
#define rdmx_debug(...) rdmx_log_at(RDMX_LOG_DEBUG, __VA_ARGS__)
/* Lines a peer's doing causes, in moderation (rdmx_log_peer, log.c). */
#define rdmx_peer_error(...) rdmx_log_peer(RDMX_LOG_ERROR, __VA_ARGS__)
#define rdmx_peer_warn(...) rdmx_log_peer(RDMX_LOG_WARN, __VA_ARGS__)
#define rdmx_peer_info(...) rdmx_log_peer(RDMX_LOG_INFO, __VA_ARGS__)

/*
 * A public call refuses an argument: "@call: @why" in the log, as the
 * header promises for RDMX_ERR_INVALID; returns RDMX_ERR_INVALID.
 */
#define rdmx_invalid(call, ...)                                                \
	(rdmx_log(RDMX_LOG_ERROR, call ": " __VA_ARGS__), RDMX_ERR_INVALID)

#endif
