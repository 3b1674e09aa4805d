/* SPDX-License-Identifier: MIT */
/* TCP socket helpers for the control connection (and the tcp transport). */
#ifndef RDMX_SOCK_H
#define RDMX_SOCK_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdmx.h"

#define RDMX_DEFAULT_PORT "18515"

/* rdmx_addr_split is public: rdmx.h. */
rdmx_status rdmx_sock_listen(const char *addr, int *fd_p, int *port_p);
/* @src: the local address to connect from ("" or NULL: the kernel's). */
rdmx_status rdmx_sock_connect(const char *addr, const char *src, int timeout_ms,
			      int *fd_p);

/* Wait for @events on @fd until @deadline_us: poll()'s count, 0 timed out. */
int rdmx_sock_wait(int fd, short events, uint64_t deadline_us);

/* Blocking-style I/O on a non-blocking socket until @deadline_us. */
rdmx_status rdmx_sock_read_full(int fd, void *buf, size_t len,
				uint64_t deadline_us);
rdmx_status rdmx_sock_write_full(int fd, const void *buf, size_t len,
				 uint64_t deadline_us);

/* "ip:port" of either end of a connected socket. */
void rdmx_sock_name(int fd, bool peer, char *buf, size_t len);
/* O_NONBLOCK on @fd; 0 or -1. */
int rdmx_set_nonblock(int fd);

/*
 * A control socket: TCP_NODELAY, and keepalive that ends it after about
 * twice @timeout_ms of silence from the peer's host, a probe a second, so
 * that one lost probe does not (sock.c).
 */
void rdmx_sock_liveness(int fd, unsigned timeout_ms);
/* TCP_USER_TIMEOUT: data of ours unacknowledged for @ms ends the socket. */
void rdmx_sock_user_timeout(int fd, unsigned ms);

/*
 * Around a kernel send made on our behalf without MSG_NOSIGNAL (siw
 * transmits inside ibv_post_send, on a kernel TCP socket): SIGPIPE is
 * blocked in this thread from hold to release, and one raised in between
 * is taken there, never delivered; its default would end the process.
 * Where the caller blocks SIGPIPE itself, one raised stays pending, as
 * after its own write: three system calls a call, else one.
 */
struct rdmx_sigpipe {
	sigset_t old;
};
void rdmx_sigpipe_hold(struct rdmx_sigpipe *s);
void rdmx_sigpipe_release(struct rdmx_sigpipe *s);

struct sockaddr;

/* An address block: the first @bits bits of @ip (IPv4 as ::ffff:a.b.c.d). */
struct rdmx_cidr {
	uint8_t ip[16];
	unsigned bits;
};

#define RDMX_CIDR_MAX 32
#define RDMX_CIDR_LIST_MAX 256

/*
 * Parse "10.0.0.0/8, 192.168.1.7, ::1": at most @max entries into @out.
 * RDMX_ERR_CONFIG, logged with the culprit, when one is malformed.
 */
rdmx_status rdmx_cidr_parse(const char *list, struct rdmx_cidr *out, int max,
			    int *n_p);
/* Is @sa (AF_INET or AF_INET6) inside one of the @n blocks? */
bool rdmx_cidr_match(const struct rdmx_cidr *list, int n,
		     const struct sockaddr *sa);
/* 127.0.0.0/8 or ::1 (also as ::ffff:127.x.y.z). */
bool rdmx_sock_is_loopback(const struct sockaddr *sa);

#endif
