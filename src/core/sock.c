/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "sock.h"

rdmx_status rdmx_addr_split(const char *addr, char *host, size_t host_len,
			    char *port, size_t port_len)
{
	const char *colon, *h = addr, *p = NULL;
	size_t hl;
	char *end;
	long num;

	if (!addr || !host || !port)
		goto err;
	if (*addr == '[') { /* [v6]:port */
		colon = strchr(addr, ']');
		if (!colon)
			goto err;
		h = addr + 1;
		hl = (size_t)(colon - h);
		if (colon[1] == ':')
			p = colon + 2;
		else if (colon[1])
			goto err;
	} else {
		colon = strrchr(addr, ':');
		if (colon && strchr(addr, ':') != colon)
			goto err; /* bare v6 needs brackets */
		if (colon) {
			hl = (size_t)(colon - addr);
			p = colon + 1;
		} else if (*addr &&
			   strspn(addr, "0123456789") == strlen(addr)) {
			hl = 0; /* "7000" is a port */
			p = addr;
		} else {
			hl = strlen(addr);
		}
	}
	if (hl >= host_len)
		goto err;
	memcpy(host, h, hl);
	host[hl] = '\0';
	if (!p || !*p)
		p = RDMX_DEFAULT_PORT;
	errno = 0;
	num = strtol(p, &end, 10);
	if (*end || errno || num < 0 || num > 65535 || strlen(p) >= port_len)
		goto err;
	strcpy(port, p);
	return RDMX_OK;
err:
	rdmx_error("invalid address '%s': expected host:port, [ipv6]:port, "
		   ":port or port (port 0..65535)",
		   addr ? addr : "(null)");
	return RDMX_ERR_INVALID;
}

static rdmx_status rdmx_resolve(const char *addr, bool passive,
				struct addrinfo **res_p)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM };
	char host[256], port[16];
	rdmx_status st;
	int rc;

	st = rdmx_addr_split(addr, host, sizeof(host), port, sizeof(port));
	if (st)
		return st;
	if (passive)
		hints.ai_flags = AI_PASSIVE;
	if (!*host && !passive)
		strcpy(host, "localhost");
	rc = getaddrinfo(*host ? host : NULL, port, &hints, res_p);
	if (rc) {
		rdmx_error("cannot resolve '%s': %s", host, gai_strerror(rc));
		return RDMX_ERR_UNREACHABLE;
	}
	return RDMX_OK;
}

int rdmx_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

rdmx_status rdmx_sock_listen(const char *addr, int *fd_p, int *port_p)
{
	struct addrinfo *res, *ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	rdmx_status st;
	int fd = -1, one = 1, err = 0;

	st = rdmx_resolve(addr, true, &res);
	if (st)
		return st;
	/* Prefer IPv6 wildcard sockets: they take IPv4 peers too. */
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, 128))
			break;
		err = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		errno = err;
		rdmx_error("cannot listen on '%s': %m", addr);
		return RDMX_ERR_SYSTEM;
	}
	rdmx_set_nonblock(fd);
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	*port_p = ntohs(ss.ss_family == AF_INET6
				? ((struct sockaddr_in6 *)&ss)->sin6_port
				: ((struct sockaddr_in *)&ss)->sin_port);
	*fd_p = fd;
	return RDMX_OK;
}

int rdmx_sock_wait(int fd, short events, uint64_t deadline_us)
{
	struct pollfd pfd = { .fd = fd, .events = events };
	int ms = rdmx_ms_left(deadline_us), rc;

	if (!ms)
		return 0;
	do {
		rc = poll(&pfd, 1, ms);
	} while (rc < 0 && errno == EINTR);
	return rc;
}

/* Bind @fd to the host part of @src before connecting; 0 or -1. */
static int rdmx_sock_bind_src(int fd, const char *src, int family)
{
	struct addrinfo hints = { .ai_family = family,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST },
			*res;
	int rc;

	if (!src || !*src)
		return 0;
	if (getaddrinfo(src, NULL, &hints, &res)) {
		rdmx_error("source address '%s' (conn.source_addr, or the "
			   "connection's attr) is not a numeric address of "
			   "this family",
			   src);
		return -1;
	}
	rc = bind(fd, res->ai_addr, res->ai_addrlen);
	if (rc)
		rdmx_error(
			"cannot bind to source address %s (conn.source_addr, "
			"or the connection's attr): %m",
			src);
	freeaddrinfo(res);
	return rc;
}

rdmx_status rdmx_sock_connect(const char *addr, const char *src, int timeout_ms,
			      int *fd_p)
{
	uint64_t deadline = rdmx_deadline(timeout_ms);
	struct addrinfo *res, *ai;
	rdmx_status st = RDMX_ERR_UNREACHABLE;
	int fd, err = 0;
	socklen_t el = sizeof(err);

	st = rdmx_resolve(addr, false, &res);
	if (st)
		return st;
	st = RDMX_ERR_UNREACHABLE;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family,
			    ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		if (rdmx_sock_bind_src(fd, src, ai->ai_family)) {
			close(fd);
			freeaddrinfo(res);
			return RDMX_ERR_INVALID;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) &&
		    errno != EINPROGRESS) {
			err = errno;
		} else if (rdmx_sock_wait(fd, POLLOUT, deadline) == 0) {
			close(fd);
			st = RDMX_ERR_TIMEOUT;
			continue;
		} else {
			getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
		}
		if (!err) {
			freeaddrinfo(res);
			*fd_p = fd;
			return RDMX_OK;
		}
		close(fd);
		st = err == ECONNREFUSED ? RDMX_ERR_CONN_REFUSED
					 : RDMX_ERR_UNREACHABLE;
	}
	freeaddrinfo(res);
	if (st == RDMX_ERR_TIMEOUT) {
		rdmx_error("connect to %s: no answer within %d ms", addr,
			   timeout_ms);
	} else {
		errno = err;
		rdmx_error("connect to %s: %m", addr);
	}
	return st;
}

rdmx_status rdmx_sock_read_full(int fd, void *buf, size_t len,
				uint64_t deadline_us)
{
	uint8_t *p = buf;
	ssize_t n;

	while (len) {
		n = recv(fd, p, len, 0);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0)
			return RDMX_ERR_CONN_LOST;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return RDMX_ERR_CONN_LOST;
		if (rdmx_sock_wait(fd, POLLIN, deadline_us) == 0)
			return RDMX_ERR_TIMEOUT;
	}
	return RDMX_OK;
}

rdmx_status rdmx_sock_write_full(int fd, const void *buf, size_t len,
				 uint64_t deadline_us)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			return RDMX_ERR_CONN_LOST;
		if (rdmx_sock_wait(fd, POLLOUT, deadline_us) == 0)
			return RDMX_ERR_TIMEOUT;
	}
	return RDMX_OK;
}

void rdmx_sock_name(int fd, bool peer, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char ip[INET6_ADDRSTRLEN] = "?";
	int port = 0;

	if ((peer ? getpeername : getsockname)(fd, (struct sockaddr *)&ss,
					       &sl)) {
		snprintf(buf, len, "?");
		return;
	}
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

		inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
		port = ntohs(s6->sin6_port);
		snprintf(buf, len, "[%s]:%d", ip, port);
		return;
	}
	inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip,
		  sizeof(ip));
	port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	snprintf(buf, len, "%s:%d", ip, port);
}

void rdmx_sock_liveness(int fd, unsigned timeout_ms)
{
	int one = 1, cnt = (int)(timeout_ms / 1000) + 1;

	/*
	 * A dead peer host sends no FIN. Keepalive probes a socket idle for
	 * a second, once a second, and ends it after @cnt unanswered: a
	 * backstop (the kernel counts in whole seconds). Each step of a
	 * connection's setup has its own deadline, and a started connection
	 * is judged within @timeout_ms by heartbeats its transport sends,
	 * which TCP retransmits: a bound by keepalive alone would be one
	 * probe, and one lost packet would end a live connection.
	 */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

void rdmx_sock_user_timeout(int fd, unsigned ms)
{
	if (setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms)))
		rdmx_warn("TCP_USER_TIMEOUT %u: %m", ms);
}

static void rdmx_sigpipe_set(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGPIPE);
}

void rdmx_sigpipe_hold(struct rdmx_sigpipe *s)
{
	sigset_t pipe;

	rdmx_sigpipe_set(&pipe);
	pthread_sigmask(SIG_BLOCK, &pipe, &s->old);
}

void rdmx_sigpipe_release(struct rdmx_sigpipe *s)
{
	static const struct timespec now = { 0, 0 };
	sigset_t pipe;
	int saved = errno;

	/* Blocked by the caller already: one raised stays its own, pending
	 * as it would after its own write. Else none was pending at hold
	 * (it would have been delivered): take what came since. */
	if (sigismember(&s->old, SIGPIPE))
		return;
	rdmx_sigpipe_set(&pipe);
	while (sigtimedwait(&pipe, NULL, &now) < 0 && errno == EINTR)
		;
	pthread_sigmask(SIG_SETMASK, &s->old, NULL);
	errno = saved;
}

/* IPv4 as the IPv4-mapped IPv6 form. */
static void rdmx_ip16_v4(const void *in_addr, uint8_t ip[16])
{
	static const uint8_t mapped[12] = { [10] = 0xff, [11] = 0xff };

	memcpy(ip, mapped, 12);
	memcpy(ip + 12, in_addr, 4);
}

/* A peer's address as 16 bytes. */
static bool rdmx_ip16(const struct sockaddr *sa, uint8_t ip[16])
{
	if (sa->sa_family == AF_INET6) {
		memcpy(ip, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return true;
	}
	if (sa->sa_family != AF_INET)
		return false;
	rdmx_ip16_v4(&((const struct sockaddr_in *)sa)->sin_addr, ip);
	return true;
}

/* One "addr" or "addr/prefix"; false when malformed. */
static bool rdmx_cidr_one(const char *item, struct rdmx_cidr *c)
{
	char buf[64], *slash, *end;
	uint8_t v4[4];
	long prefix;
	bool is4;

	if (strlen(item) >= sizeof(buf))
		return false;
	strcpy(buf, item);
	slash = strchr(buf, '/');
	if (slash)
		*slash++ = '\0';
	is4 = inet_pton(AF_INET, buf, v4) == 1;
	if (is4)
		rdmx_ip16_v4(v4, c->ip);
	else if (inet_pton(AF_INET6, buf, c->ip) != 1)
		return false;
	prefix = is4 ? 32 : 128;
	if (slash) {
		errno = 0;
		prefix = strtol(slash, &end, 10);
		if (errno || end == slash || *end || prefix < 0 ||
		    prefix > (is4 ? 32 : 128))
			return false;
	}
	c->bits = (unsigned)prefix + (is4 ? 96 : 0);
	return true;
}

rdmx_status rdmx_cidr_parse(const char *list, struct rdmx_cidr *out, int max,
			    int *n_p)
{
	char buf[RDMX_CIDR_LIST_MAX], *save = NULL, *item;
	int n = 0;

	if (strlen(list) >= sizeof(buf))
		return RDMX_ERR_CONFIG;
	strcpy(buf, list);
	for (item = strtok_r(buf, ", ", &save); item;
	     item = strtok_r(NULL, ", ", &save)) {
		if (n == max || !rdmx_cidr_one(item, &out[n])) {
			rdmx_error("auth.allowed_peers: '%s' is not an address "
				   "or CIDR block (or more than %d of them)",
				   item, max);
			return RDMX_ERR_CONFIG;
		}
		n++;
	}
	*n_p = n;
	return RDMX_OK;
}

bool rdmx_cidr_match(const struct rdmx_cidr *list, int n,
		     const struct sockaddr *sa)
{
	uint8_t ip[16];

	if (!rdmx_ip16(sa, ip))
		return false;
	for (int i = 0; i < n; i++) {
		unsigned full = list[i].bits / 8, rest = list[i].bits % 8;
		uint8_t mask = (uint8_t)(0xff << (8 - rest));

		if (!memcmp(ip, list[i].ip, full) &&
		    (!rest || !((ip[full] ^ list[i].ip[full]) & mask)))
			return true;
	}
	return false;
}

bool rdmx_sock_is_loopback(const struct sockaddr *sa)
{
	static const uint8_t lo6[16] = { [15] = 1 };
	uint8_t ip[16];

	if (!rdmx_ip16(sa, ip))
		return false;
	return !memcmp(ip, lo6, 16) ||
	       (ip[10] == 0xff && ip[11] == 0xff && ip[12] == 127 &&
		!memcmp(ip, (const uint8_t[10]){ 0 }, 10));
}
