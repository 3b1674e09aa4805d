// SPDX-License-Identifier: MIT
/*
 * The store over the Redis protocol, on plain TCP: GET, SET, DEL, EXISTS,
 * PING, ECHO, INFO, SELECT 0, QUIT, and empty answers to CONFIG GET and
 * COMMAND so that redis-cli and redis-benchmark start. One thread and
 * epoll, as Redis itself: it blocks between requests (a wake costs what
 * it costs Redis). Values are copied out of the pool under a reference,
 * so a SET racing a GET never tears it here either.
 */
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kv.h"
#include "kv_resp.h"

#define KV_RESP_MAX_CONNS 4096
#define KV_RESP_MAX_OUT (256u << 20) /* a reader this far behind goes */

struct kv_resp_conn {
	struct kv_resp_conn *prev, *next;
	int fd;
	uint8_t *in, *out;
	size_t in_len, in_cap, out_len, out_off, out_cap;
	bool quit;
};

struct kv_resp {
	struct rdmx_kv_server *srv;
	int lfd, epfd, wake[2];
	int port;
	pthread_t thread;
	unsigned nconns;
	struct kv_resp_conn *conns;
	struct kv_resp_cmd cmd;
};

/* ---- output ------------------------------------------------------------- */

static bool kv_out_room(struct kv_resp_conn *c, size_t more)
{
	if (c->out_len + more <= c->out_cap)
		return true;
	if (c->out_len + more > KV_RESP_MAX_OUT)
		return false;
	size_t cap = c->out_cap ? c->out_cap : 4096;

	while (cap < c->out_len + more)
		cap *= 2;
	uint8_t *p = realloc(c->out, cap);

	if (!p)
		return false;
	c->out = p;
	c->out_cap = cap;
	return true;
}

static void kv_out(struct kv_resp_conn *c, const void *p, size_t n)
{
	if (!kv_out_room(c, n)) {
		c->quit = true;
		return;
	}
	memcpy(c->out + c->out_len, p, n);
	c->out_len += n;
}

static void kv_out_str(struct kv_resp_conn *c, const char *s)
{
	kv_out(c, s, strlen(s));
}

static void kv_out_int(struct kv_resp_conn *c, long long v)
{
	char b[32];

	kv_out(c, b, (size_t)snprintf(b, sizeof(b), ":%lld\r\n", v));
}

static void kv_out_bulk(struct kv_resp_conn *c, const void *p, size_t n)
{
	char b[32];

	kv_out(c, b, (size_t)snprintf(b, sizeof(b), "$%zu\r\n", n));
	kv_out(c, p, n);
	kv_out(c, "\r\n", 2);
}

/* ---- commands ----------------------------------------------------------- */

static bool kv_is(const struct kv_resp_cmd *cmd, int i, const char *name)
{
	return cmd->argl[i] == strlen(name) &&
	       !strncasecmp((const char *)cmd->argv[i], name, cmd->argl[i]);
}

static void kv_resp_get(struct kv_resp *r, struct kv_resp_conn *c,
			const uint8_t *key, size_t klen)
{
	struct kv_store *s = kv_server_store(r->srv);
	uint64_t pool_len;
	uint8_t *pool = kv_store_pool(s, &pool_len);
	struct kv_item *it;

	if (!klen || klen > RDMX_KV_KEY_MAX) {
		kv_out_str(c, "$-1\r\n");
		return;
	}
	kv_store_lock(s);
	it = kv_get(s, key, klen);
	kv_store_unlock(s);
	if (!it) {
		kv_out_str(c, "$-1\r\n");
		return;
	}
	kv_out_bulk(c, pool + it->off, it->vlen); /* the ref holds it */
	kv_store_lock(s);
	kv_unref(s, it);
	kv_store_unlock(s);
}

static void kv_resp_set(struct kv_resp *r, struct kv_resp_conn *c,
			const struct kv_resp_cmd *cmd)
{
	switch (kv_server_put(r->srv, cmd->argv[1], cmd->argl[1], cmd->argv[2],
			      cmd->argl[2])) {
	case KV_OK:
		kv_out_str(c, "+OK\r\n");
		return;
	case KV_NOMEM:
		kv_out_str(c, "-OOM command not allowed when used memory > "
			      "'maxmemory'.\r\n");
		return;
	case KV_BAD:
		kv_out_str(c, "-ERR invalid key\r\n");
		return;
	default:
		kv_out_str(c, "-ERR the append-only file failed\r\n");
	}
}

static void kv_resp_info(struct kv_resp *r, struct kv_resp_conn *c)
{
	struct rdmx_kv_server_stats st;
	char b[1024];
	int n;

	rdmx_kv_server_stats(r->srv, &st);
	n = snprintf(b, sizeof(b),
		     "# Server\r\nredis_version:7.0.0\r\nrdmx_kv:%d.%d\r\n"
		     "tcp_port:%d\r\n# Clients\r\nconnected_clients:%u\r\n"
		     "# Memory\r\nused_memory:%llu\r\nmaxmemory:%llu\r\n"
		     "# Stats\r\nkeyspace_hits:%llu\r\nkeyspace_misses:%llu\r\n"
		     "rdmx_puts:%llu\r\nrdmx_deletes:%llu\r\n"
		     "evicted_keys:%llu\r\n# Keyspace\r\n"
		     "db0:keys=%llu,expires=0,avg_ttl=0\r\n",
		     RDMX_VERSION_MAJOR, RDMX_VERSION_MINOR, r->port, r->nconns,
		     (unsigned long long)st.bytes_used,
		     (unsigned long long)st.pool_bytes,
		     (unsigned long long)st.hits,
		     (unsigned long long)(st.gets - st.hits),
		     (unsigned long long)st.puts, (unsigned long long)st.dels,
		     (unsigned long long)st.evicted,
		     (unsigned long long)st.keys);
	kv_out_bulk(c, b, (size_t)n);
}

static void kv_resp_exec(struct kv_resp *r, struct kv_resp_conn *c,
			 const struct kv_resp_cmd *cmd)
{
	int argc = cmd->argc;
	long long n = 0;

	if (!argc)
		return;
	if (kv_is(cmd, 0, "GET") && argc == 2) {
		kv_resp_get(r, c, cmd->argv[1], cmd->argl[1]);
	} else if (kv_is(cmd, 0, "SET") && argc == 3) {
		kv_resp_set(r, c, cmd);
	} else if ((kv_is(cmd, 0, "DEL") || kv_is(cmd, 0, "EXISTS")) &&
		   argc >= 2) {
		bool del = kv_is(cmd, 0, "DEL");

		for (int i = 1; i < argc; i++)
			n += del ? kv_server_del(r->srv, cmd->argv[i],
						 cmd->argl[i]) == KV_OK
				 : kv_server_exists(r->srv, cmd->argv[i],
						    cmd->argl[i]);
		kv_out_int(c, n);
	} else if (kv_is(cmd, 0, "PING") && argc <= 2) {
		if (argc == 2)
			kv_out_bulk(c, cmd->argv[1], cmd->argl[1]);
		else
			kv_out_str(c, "+PONG\r\n");
	} else if (kv_is(cmd, 0, "ECHO") && argc == 2) {
		kv_out_bulk(c, cmd->argv[1], cmd->argl[1]);
	} else if (kv_is(cmd, 0, "INFO")) {
		kv_resp_info(r, c);
	} else if (kv_is(cmd, 0, "SELECT") && argc == 2) {
		kv_out_str(c, cmd->argl[1] == 1 && cmd->argv[1][0] == '0'
				      ? "+OK\r\n"
				      : "-ERR DB index is out of range\r\n");
	} else if (kv_is(cmd, 0, "CONFIG") && argc == 3 &&
		   kv_is(cmd, 1, "GET") &&
		   (kv_is(cmd, 2, "save") || kv_is(cmd, 2, "appendonly"))) {
		/* What redis-benchmark asks at start: no RDB snapshots. */
		bool save = kv_is(cmd, 2, "save");

		kv_out_str(c, "*2\r\n");
		kv_out_bulk(c, cmd->argv[2], cmd->argl[2]);
		kv_out_str(c, save			   ? "$0\r\n\r\n"
			      : kv_server_persists(r->srv) ? "$3\r\nyes\r\n"
							   : "$2\r\nno\r\n");
	} else if (kv_is(cmd, 0, "CONFIG") || kv_is(cmd, 0, "COMMAND")) {
		kv_out_str(c, "*0\r\n"); /* what the tools start with */
	} else if (kv_is(cmd, 0, "QUIT")) {
		kv_out_str(c, "+OK\r\n");
		c->quit = true;
	} else if (kv_is(cmd, 0, "SET") || kv_is(cmd, 0, "GET")) {
		kv_out_str(c, "-ERR syntax error\r\n");
	} else {
		char name[41], b[128];
		size_t n = cmd->argl[0] < 40 ? cmd->argl[0] : 40;

		for (size_t i = 0; i < n; i++) { /* no CR or LF in a line */
			char ch = (char)cmd->argv[0][i];

			name[i] = ch == '\r' || ch == '\n' ? ' ' : ch;
		}
		name[n] = '\0';
		snprintf(b, sizeof(b), "-ERR unknown command '%s'\r\n", name);
		kv_out_str(c, b);
	}
}

/* ---- connections -------------------------------------------------------- */

/* "PORT", ":PORT" or "IPV4:PORT" (all addresses when no host). */
static int kv_resp_addr(const char *s, struct sockaddr_in *sa)
{
	const char *colon = strrchr(s, ':');
	char host[64], *end;
	long port = strtol(colon ? colon + 1 : s, &end, 10);

	if (*end || end == (colon ? colon + 1 : s) || port < 0 || port > 65535)
		return -1;
	sa->sin_port = htons((uint16_t)port);
	sa->sin_addr.s_addr = htonl(INADDR_ANY);
	if (!colon || colon == s)
		return 0;
	if ((size_t)(colon - s) >= sizeof(host))
		return -1;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static void kv_resp_close(struct kv_resp *r, struct kv_resp_conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		r->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	epoll_ctl(r->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c->in);
	free(c->out);
	free(c);
	r->nconns--;
}

/* Send what is queued; false when the connection must go. */
static bool kv_resp_flush(struct kv_resp *r, struct kv_resp_conn *c)
{
	struct epoll_event ev = { .data.ptr = c };

	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off,
				 c->out_len - c->out_off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0)
			return false;
		c->out_off += (size_t)n;
	}
	if (c->out_off == c->out_len) {
		c->out_off = c->out_len = 0;
		if (c->quit)
			return false;
	}
	ev.events = EPOLLIN | (c->out_len ? EPOLLOUT : 0);
	epoll_ctl(r->epfd, EPOLL_CTL_MOD, c->fd, &ev);
	return true;
}

/* Read what came, run every whole request; false when it must go. */
static bool kv_resp_read(struct kv_resp *r, struct kv_resp_conn *c)
{
	for (;;) {
		ssize_t n;

		if (c->in_len == c->in_cap) {
			size_t cap = c->in_cap ? c->in_cap * 2 : 16384;
			uint8_t *p;

			if (cap > (size_t)KV_RESP_MAX_BULK + 65536)
				return false;
			p = realloc(c->in, cap);
			if (!p)
				return false;
			c->in = p;
			c->in_cap = cap;
		}
		n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0)
			return false;
		c->in_len += (size_t)n;
	}
	size_t at = 0, used;
	const char *err = NULL;
	int rc;

	while (!c->quit && (rc = kv_resp_parse(c->in + at, c->in_len - at,
					       &r->cmd, &used, &err)) != 0) {
		if (rc < 0) {
			kv_out_str(c, "-ERR ");
			kv_out_str(c, err);
			kv_out_str(c, "\r\n");
			c->quit = true; /* as Redis: answer, then close */
			break;
		}
		kv_resp_exec(r, c, &r->cmd);
		at += used;
	}
	memmove(c->in, c->in + at, c->in_len - at);
	c->in_len -= at;
	return kv_resp_flush(r, c);
}

static void kv_resp_accept(struct kv_resp *r)
{
	for (;;) {
		int fd = accept4(r->lfd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC),
		    one = 1;
		struct kv_resp_conn *c;
		struct epoll_event ev = { .events = EPOLLIN };

		if (fd < 0)
			return; /* EAGAIN, or out of fds: try at the next */
		if (r->nconns >= KV_RESP_MAX_CONNS ||
		    !(c = calloc(1, sizeof(*c)))) {
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd;
		ev.data.ptr = c;
		if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev)) {
			close(fd);
			free(c);
			continue;
		}
		r->nconns++;
		c->next = r->conns;
		if (c->next)
			c->next->prev = c;
		r->conns = c;
	}
}

static void *kv_resp_run(void *arg)
{
	struct kv_resp *r = arg;
	struct epoll_event ev[64];

	for (;;) {
		int n = epoll_wait(r->epfd, ev, 64, -1);

		for (int i = 0; i < n; i++) {
			struct kv_resp_conn *c = ev[i].data.ptr;

			if (c == (void *)r)
				kv_resp_accept(r);
			else if (c == NULL)
				return NULL; /* the wake pipe: stop */
			else if (!(ev[i].events & EPOLLOUT
					   ? kv_resp_flush(r, c)
					   : kv_resp_read(r, c)))
				kv_resp_close(r, c);
		}
	}
}

int kv_resp_start(struct rdmx_kv_server *srv, const char *addr,
		  struct kv_resp **r_p)
{
	struct kv_resp *r = calloc(1, sizeof(*r));
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	struct epoll_event ev = { .events = EPOLLIN };
	int one = 1;

	if (!r)
		return -1;
	r->srv = srv;
	r->lfd = r->epfd = r->wake[0] = r->wake[1] = -1;
	if (kv_resp_addr(addr, &sa)) {
		kv_log(RDMX_LOG_ERROR, "--resp-port: '%s' is not [IPV4:]PORT",
		       addr);
		goto err;
	}
	r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	r->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (r->lfd < 0 || r->epfd < 0 || pipe2(r->wake, O_CLOEXEC) ||
	    setsockopt(r->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(r->lfd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(r->lfd, 511) ||
	    getsockname(r->lfd, (struct sockaddr *)&sa, &sl)) {
		kv_log(RDMX_LOG_ERROR, "the Redis port %s: %m", addr);
		goto err;
	}
	r->port = ntohs(sa.sin_port);
	if (sa.sin_addr.s_addr == htonl(INADDR_ANY))
		kv_log(RDMX_LOG_WARN,
		       "the Redis port %d listens on every address and has no "
		       "AUTH: any host that reaches it may read and change "
		       "every key (give it 127.0.0.1:PORT)",
		       r->port);
	ev.data.ptr = r;
	epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->lfd, &ev);
	ev.data.ptr = NULL;
	epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->wake[0], &ev);
	if (pthread_create(&r->thread, NULL, kv_resp_run, r))
		goto err;
	*r_p = r;
	return 0;
err:
	if (r->lfd >= 0)
		close(r->lfd);
	if (r->epfd >= 0)
		close(r->epfd);
	if (r->wake[0] >= 0) {
		close(r->wake[0]);
		close(r->wake[1]);
	}
	free(r);
	return -1;
}

int kv_resp_port(const struct kv_resp *r)
{
	return r ? r->port : 0;
}

void kv_resp_stop(struct kv_resp *r)
{
	if (!r)
		return;
	if (write(r->wake[1], "x", 1) != 1)
		kv_log(RDMX_LOG_WARN, "cannot wake the Redis port's thread");
	pthread_join(r->thread, NULL);
	while (r->conns)
		kv_resp_close(r, r->conns);
	close(r->lfd);
	close(r->wake[0]);
	close(r->wake[1]);
	close(r->epfd);
	free(r);
}
