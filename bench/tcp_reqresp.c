/* SPDX-License-Identifier: MIT */
/*
 * Description: the floor of a key-value exchange over loopback TCP on
 * this host, for bench/kv-vs-redis.sh to set beside rdmx kv's tcp rows:
 * one server thread answers every connection from one epoll loop, one
 * client thread keeps DEPTH requests in flight on each of CONNS
 * connections. A request is REQUEST_BYTES long and names the length of
 * its answer (a GET: a small request, the value back; a SET: the value
 * out, a small answer). Nothing else is done: no lookup, no copy but the
 * kernel's. Both sides spin (epoll_wait without waiting), as rdmx kv
 * bench and its server do; each side sends a connection's answers, or
 * its requests, of one pass with one send.
 *
 * With POOL_BYTES, the server answers from a pool that large, each answer
 * from a place drawn at random (one sendmsg of them all, as a store
 * sends values where they lie): bench/kv-vs-redis.sh gives the size of
 * its key space's values, which do not fit in this host's caches, so the
 * kernel's copy of each value reads memory as rdmx kv's and Redis's do.
 * Without it (and for answers larger than the pool) every answer comes
 * from one buffer in cache.
 *
 *   tcp_reqresp server PORT [POOL_BYTES]
 *   tcp_reqresp client HOST PORT CONNS DEPTH REQUEST_BYTES ANSWER_BYTES OPS
 *
 * The client prints one JSON line: ops/s and the latency of a request
 * (sent to answer whole), p50 and p99, in microseconds.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bench.h"

#define MAX_DEPTH 64
#define MAX_BYTES (1 << 20)

/* A request: its length and its answer's, then filler. */
struct req {
	uint32_t len, answer;
};

/* One connection: bytes received but not yet a whole message. */
struct peer {
	int fd;
	uint8_t *in;
	size_t have, cap;
	/* client: its share of the requests, what is outstanding, and when
	 * each was sent (FIFO) */
	long share, sent, done;
	double at[MAX_DEPTH];
	size_t ans_have;
};

/* The server's answers: from one buffer (@out), or from a @pool. */
struct answers {
	uint8_t *out, *pool;
	size_t cap, pool_len;
	struct iovec *iov;
	size_t niov, iov_cap;
	uint64_t rnd;
};

/* Send @n iovecs whole (@v's entries are used up); -1 on error. */
static int sendv_all(int fd, struct iovec *v, size_t n)
{
	while (n) {
		struct msghdr m = { .msg_iov = v,
				    .msg_iovlen = n < IOV_MAX ? n : IOV_MAX };
		ssize_t sent = sendmsg(fd, &m, MSG_NOSIGNAL);

		if (sent < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (sent <= 0)
			return -1;
		for (; n && (size_t)sent >= v->iov_len; n--, v++)
			sent -= (ssize_t)v->iov_len;
		if (n) {
			v->iov_base = (uint8_t *)v->iov_base + sent;
			v->iov_len -= (size_t)sent;
		}
	}
	return 0;
}

static int send_all(int fd, const uint8_t *p, size_t len)
{
	struct iovec v = { (void *)p, len };

	return sendv_all(fd, &v, 1);
}

/* One answer of @len bytes from a random place of the pool. */
static int pool_answer(struct answers *a, size_t len)
{
	size_t slots = a->pool_len / len;

	if (a->niov == a->iov_cap) {
		a->iov_cap = a->iov_cap ? a->iov_cap * 2 : 256;
		a->iov = realloc(a->iov, a->iov_cap * sizeof(*a->iov));
		if (!a->iov)
			return -1;
	}
	a->rnd = a->rnd * 6364136223846793005ull + 1442695040888963407ull;
	a->iov[a->niov++] =
		(struct iovec){ a->pool + (size_t)(a->rnd >> 33) % slots * len,
				len };
	return 0;
}

/* Answer every whole request in what @p has received: one send. */
static int serve(struct peer *p, struct answers *a)
{
	size_t len = 0, off = 0;
	struct req r;
	ssize_t n;

	if (p->cap - p->have < 65536) {
		p->cap = p->cap ? p->cap * 2 : 1 << 18;
		p->in = realloc(p->in, p->cap);
		if (!p->in || p->cap > MAX_DEPTH * (size_t)MAX_BYTES)
			return -1;
	}
	n = recv(p->fd, p->in + p->have, p->cap - p->have, 0);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		return -1;
	p->have += n > 0 ? (size_t)n : 0;
	for (; p->have - off >= sizeof(r); off += r.len) {
		memcpy(&r, p->in + off, sizeof(r));
		if (r.len < sizeof(r) || r.len > MAX_BYTES ||
		    r.answer > MAX_BYTES)
			return -1;
		if (p->have - off < r.len)
			break;
		if (r.answer <= a->pool_len) {
			if (pool_answer(a, r.answer))
				return -1;
			continue;
		}
		if (len + r.answer > a->cap) {
			size_t was = a->cap;

			a->cap = (len + r.answer) * 2;
			a->out = realloc(a->out, a->cap);
			if (!a->out)
				return -1;
			memset(a->out + was, 0, a->cap - was);
		}
		len += r.answer; /* the bytes are the buffer's: in cache */
	}
	memmove(p->in, p->in + off, p->have - off);
	p->have -= off;
	if (a->niov) {
		int e = sendv_all(p->fd, a->iov, a->niov);

		a->niov = 0;
		if (e)
			return -1;
	}
	return len ? send_all(p->fd, a->out, len) : 0;
}

static int server(int port, size_t pool_len)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct epoll_event ev = { .events = EPOLLIN }, evs[64];
	int one = 1, s = socket(AF_INET, SOCK_STREAM, 0), ep = epoll_create1(0);
	struct answers an = { .cap = 1 << 20, .pool_len = pool_len, .rnd = 1 };

	an.out = calloc(1, an.cap);
	if (pool_len && (an.pool = malloc(pool_len)))
		memset(an.pool, 1, pool_len); /* its pages, before the clock */
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (s < 0 || ep < 0 || !an.out || (pool_len && !an.pool) ||
	    bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 128)) {
		perror("tcp_reqresp server");
		return 1;
	}
	ev.data.ptr = NULL;
	epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
	for (;;) { /* until killed */
		int n = epoll_wait(ep, evs, 64, 0);

		for (int i = 0; i < n; i++) {
			struct peer *p = evs[i].data.ptr;

			if (!p) {
				int fd = accept(s, NULL, NULL);

				if (fd < 0 || !(p = calloc(1, sizeof(*p)))) {
					perror("tcp_reqresp server: accept");
					if (fd >= 0)
						close(fd);
					continue;
				}
				p->fd = fd;
				setsockopt(p->fd, IPPROTO_TCP, TCP_NODELAY,
					   &one, sizeof(one));
				ev.data.ptr = p;
				epoll_ctl(ep, EPOLL_CTL_ADD, p->fd, &ev);
			} else if (serve(p, &an)) {
				close(p->fd);
				free(p->in);
				free(p);
			}
		}
	}
	return 0;
}

/*
 * Send @p's requests (@out holds @depth of them) until @depth are in
 * flight or its share is sent, with one send; -1 on error.
 */
static int ask(struct peer *p, long depth, const uint8_t *out,
	       const struct req *r)
{
	size_t len = 0;
	double t = bench_now_us();

	for (; p->sent - p->done < depth && p->sent < p->share; p->sent++) {
		len += r->len;
		p->at[p->sent % MAX_DEPTH] = t;
	}
	return len ? send_all(p->fd, out, len) : 0;
}

static int client(char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)atoi(argv[3])) };
	long conns = atol(argv[4]), depth = atol(argv[5]), ops = atol(argv[8]);
	struct req r = { (uint32_t)atol(argv[6]), (uint32_t)atol(argv[7]) };
	size_t ans = r.answer;
	struct epoll_event ev = { .events = EPOLLIN }, evs[64];
	struct peer *peers = calloc((size_t)conns, sizeof(*peers));
	double *lat = calloc((size_t)ops + 1, sizeof(*lat)), t0;
	uint8_t *buf = malloc(ans * MAX_DEPTH + 1), *out;
	int one = 1, ep = epoll_create1(0);
	long done = 0;

	if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1 || conns < 1 ||
	    depth < 1 || depth > MAX_DEPTH || r.len < sizeof(r) ||
	    r.len > MAX_BYTES || !ans || ans > MAX_BYTES || ops < conns ||
	    !peers || !lat || !buf || ep < 0)
		return 2;
	out = calloc((size_t)depth, r.len);
	if (!out)
		return 1;
	for (long i = 0; i < depth; i++)
		memcpy(out + i * r.len, &r, sizeof(r));
	for (long i = 0; i < conns; i++) {
		struct peer *p = &peers[i];

		p->fd = socket(AF_INET, SOCK_STREAM, 0);
		for (int k = 0;
		     connect(p->fd, (struct sockaddr *)&a, sizeof(a)); k++) {
			if (k == 100) {
				perror("tcp_reqresp client");
				return 1;
			}
			usleep(20000);
		}
		setsockopt(p->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		p->share = ops / conns + (i < ops % conns);
		ev.data.ptr = p;
		epoll_ctl(ep, EPOLL_CTL_ADD, p->fd, &ev);
	}
	t0 = bench_now_us();
	for (long i = 0; i < conns; i++)
		if (ask(&peers[i], depth, out, &r))
			return 1;
	while (done < ops) {
		int n = epoll_wait(ep, evs, 64, 0);

		for (int i = 0; i < n; i++) {
			struct peer *p = evs[i].data.ptr;
			ssize_t got = recv(p->fd, buf, ans * MAX_DEPTH, 0);
			double t = bench_now_us();

			if (got <= 0) {
				if (got < 0 &&
				    (errno == EAGAIN || errno == EINTR))
					continue;
				fprintf(stderr, "tcp_reqresp: the server went "
						"away\n");
				return 1;
			}
			/* (answers past those asked for are not counted) */
			for (p->ans_have += (size_t)got;
			     p->ans_have >= ans && p->done < p->sent;
			     p->ans_have -= ans, p->done++)
				lat[done++] = t - p->at[p->done % MAX_DEPTH];
			if (ask(p, depth, out, &r))
				return 1;
		}
	}
	t0 = bench_now_us() - t0;
	qsort(lat, (size_t)ops, sizeof(*lat), bench_cmp_double);
	printf("{\"tool\":\"tcp_reqresp\",\"conns\":%ld,\"depth\":%ld,"
	       "\"request\":%u,\"answer\":%u,\"ops\":%ld,\"ops_per_s\":%.0f,"
	       "\"p50_us\":%.1f,\"p99_us\":%.1f}\n",
	       conns, depth, r.len, r.answer, ops, (double)ops / t0 * 1e6,
	       lat[ops / 2], lat[ops * 99 / 100]);
	for (long i = 0; i < conns; i++)
		close(peers[i].fd);
	free(peers);
	free(lat);
	free(buf);
	free(out);
	return 0;
}

int main(int argc, char **argv)
{
	if ((argc == 3 || argc == 4) && !strcmp(argv[1], "server"))
		return server(atoi(argv[2]),
			      argc == 4 ? strtoul(argv[3], NULL, 0) : 0);
	if (argc == 9 && !strcmp(argv[1], "client"))
		return client(argv);
	fprintf(stderr, "usage: tcp_reqresp server PORT [POOL_BYTES]\n"
			"       tcp_reqresp client HOST PORT CONNS DEPTH "
			"REQUEST_BYTES ANSWER_BYTES OPS\n");
	return 2;
}
