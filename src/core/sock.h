/* SPDX-License-Identifier: MIT */
/* TCP socket helpers for the control connection (and the tcp transport). */
#ifndef RDMX_SOCK_H
#define RDMX_SOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdmx.h"

#define RDMX_DEFAULT_PORT "18515"

/*
 * Split "host:port", "[v6]:port", ":port", "port" or "host" into parts.
 * A missing host is "" (any address when listening); a missing port is
 * RDMX_DEFAULT_PORT. RDMX_ERR_INVALID, logged, when malformed.
 */
rdmx_status rdmx_addr_split(const char *addr, char *host, size_t host_len,
			    char *port, size_t port_len);

rdmx_status rdmx_sock_listen(const char *addr, int *fd_p, int *port_p);
rdmx_status rdmx_sock_accept(int lfd, int timeout_ms, int *fd_p);
/* @src: the local address to connect from ("" or NULL: the kernel's). */
rdmx_status rdmx_sock_connect(const char *addr, const char *src, int timeout_ms,
			      int *fd_p);

/* Blocking-style I/O on a non-blocking socket until @deadline_us. */
rdmx_status rdmx_sock_read_full(int fd, void *buf, size_t len,
				uint64_t deadline_us);
rdmx_status rdmx_sock_write_full(int fd, const void *buf, size_t len,
				 uint64_t deadline_us);

/* "ip:port" of either end of a connected socket. */
void rdmx_sock_name(int fd, bool peer, char *buf, size_t len);

/* TCP_NODELAY, keepalive and TCP_USER_TIMEOUT bounded by @timeout_ms. */
void rdmx_sock_liveness(int fd, unsigned timeout_ms);

#endif
