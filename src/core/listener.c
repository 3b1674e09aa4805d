/* SPDX-License-Identifier: MIT */
/*
 * Listeners. Each accepted peer's handshake and connection setup (the
 * transport's: shm rings, an rdma_cm exchange) run in a thread of its own,
 * so a peer that says nothing, sends garbage slowly or stalls in its
 * setup holds up only itself: rdmx_accept hands out whichever finishes
 * first. Pending peers are bounded in all (listen.max_pending) and per
 * source address (listen.max_pending_per_addr); a peer over a bound is
 * closed at once.
 *
 * A worker sets its peer up with the transports allowed by the accepting
 * call that admitted it, and the connection waits, not started (it
 * completes nothing), until a call that allows the same takes it; that
 * call's cq, srq, user_ctx and private data go with it (a verbs QP is
 * made only then, and a sw connection joins its srq only then).
 *
 * Locking: `lock` guards the slots and counters. A slot is the worker's
 * while WORKING and the listener's otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include "core.h"
#include "handshake.h"
#include "sock.h"

enum rdmx_slot_state { RDMX_SLOT_FREE, RDMX_SLOT_WORKING, RDMX_SLOT_READY };

struct rdmx_pending {
	struct rdmx_listener *lst;
	enum rdmx_slot_state state;
	int fd;
	int hold; /* WORKING: a dup of fd, which setup may close, to shut down
		   */
	uint64_t allow; /* transports the admitting call's attr allows */
	struct rdmx_cq *cq; /* and its cq, until rdmx_accept gives one */
	uint64_t seq; /* READY: first come, first served */
	char peer[64]; /* address:port */
	char host[64]; /* address only: the per-address bound */
	struct rdmx_conn *conn; /* READY: set up, not started */
};

struct rdmx_listener {
	struct rdmx_ctx *ctx;
	int fd;
	int port;
	int efd; /* a handshake finished */
	pthread_mutex_t lock;
	pthread_cond_t idle; /* working dropped to 0 */
	struct rdmx_pending *slots;
	unsigned nslots; /* listen.max_pending */
	unsigned working;
	uint64_t seq;
};

/* auth.allowed_peers lets @fd's peer in (an empty list lets all in). */
static bool rdmx_listen_allowed(const struct rdmx_listener *lst, int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (!lst->ctx->nallowed)
		return true;
	return !getpeername(fd, (struct sockaddr *)&ss, &len) &&
	       rdmx_cidr_match(lst->ctx->allowed, lst->ctx->nallowed,
			       (struct sockaddr *)&ss);
}

/*
 * A listener that other hosts can reach, with no key and no list of
 * allowed peers, lets anyone in: say so once.
 */
static void rdmx_listen_check_open(const struct rdmx_listener *lst,
				   const char *addr)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (lst->ctx->auth_key_len || lst->ctx->nallowed ||
	    getsockname(lst->fd, (struct sockaddr *)&ss, &len) ||
	    rdmx_sock_is_loopback((struct sockaddr *)&ss))
		return;
	rdmx_warn("listening on %s with neither auth.key_file nor "
		  "auth.allowed_peers: any host that reaches this port may "
		  "connect and use the memory this process registers for "
		  "remote access",
		  addr);
}

rdmx_status rdmx_listen(struct rdmx_ctx *ctx, const char *addr,
			struct rdmx_listener **lst_p)
{
	struct rdmx_listener *lst;
	rdmx_status st = RDMX_ERR_NOMEM;

	if (!ctx || !addr || !lst_p)
		return rdmx_invalid("rdmx_listen", "NULL %s",
				    !ctx    ? "context"
				    : !addr ? "address"
					    : "output pointer");
	lst = calloc(1, sizeof(*lst));
	if (!lst)
		return RDMX_ERR_NOMEM;
	lst->nslots = (unsigned)ctx->cfg.listen_max_pending;
	lst->slots = calloc(lst->nslots, sizeof(*lst->slots));
	if (!lst->slots)
		goto err_free;
	lst->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (lst->efd < 0) {
		rdmx_error("listen: eventfd: %m");
		st = RDMX_ERR_SYSTEM;
		goto err_free;
	}
	st = rdmx_sock_listen(addr, &lst->fd, &lst->port);
	if (st)
		goto err_efd;
	pthread_mutex_init(&lst->lock, NULL);
	pthread_cond_init(&lst->idle, NULL);
	lst->ctx = ctx;
	rdmx_ctx_child(ctx, &ctx->nlisteners, 1);
	rdmx_info("listening on %s (port %d)", addr, lst->port);
	rdmx_listen_check_open(lst, addr);
	*lst_p = lst;
	return RDMX_OK;

err_efd:
	close(lst->efd);
err_free:
	free(lst->slots);
	free(lst);
	return st;
}

int rdmx_listener_port(const struct rdmx_listener *lst)
{
	return lst ? lst->port : -1;
}

void rdmx_listener_close(struct rdmx_listener *lst)
{
	if (!lst)
		return;
	pthread_mutex_lock(&lst->lock);
	/* Handshakes and setups in progress fail at once; wait for them. */
	for (unsigned i = 0; i < lst->nslots; i++)
		if (lst->slots[i].state == RDMX_SLOT_WORKING)
			shutdown(lst->slots[i].hold, SHUT_RDWR);
	while (lst->working)
		pthread_cond_wait(&lst->idle, &lst->lock);
	for (unsigned i = 0; i < lst->nslots; i++)
		if (lst->slots[i].state == RDMX_SLOT_READY)
			rdmx_conn_discard(lst->slots[i].conn);
	pthread_mutex_unlock(&lst->lock);
	pthread_mutex_destroy(&lst->lock);
	pthread_cond_destroy(&lst->idle);
	close(lst->fd);
	close(lst->efd);
	rdmx_ctx_child(lst->ctx, &lst->ctx->nlisteners, -1);
	free(lst->slots);
	free(lst);
}

/* A peer's handshake, then its connection's setup. */
static void *rdmx_hs_worker(void *arg)
{
	struct rdmx_pending *p = arg;
	struct rdmx_listener *lst = p->lst;
	struct rdmx_conn_attr attr = { .cq = p->cq };
	struct rdmx_hs_result res;
	uint64_t one = 1;
	rdmx_status st;

	st = rdmx_hs_server(lst->ctx, p->fd, p->peer, p->allow, 0, &res);
	if (st) {
		close(p->fd);
	} else {
		/* It owns fd now, and closes it if it fails. */
		st = rdmx_conn_setup(
			lst->ctx, p->fd, true, &res, &attr,
			rdmx_deadline((int)lst->ctx->cfg.handshake_timeout_ms),
			&p->conn);
		if (st)
			rdmx_peer_warn(
				"refused %s: its connection could not be set "
				"up (%s)",
				p->peer, rdmx_strerror(st));
	}
	pthread_mutex_lock(&lst->lock);
	close(p->hold);
	if (st) {
		p->state = RDMX_SLOT_FREE;
	} else {
		p->seq = ++lst->seq;
		p->state = RDMX_SLOT_READY;
	}
	if (write(lst->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		rdmx_debug("listen: eventfd write: %m");
	if (!--lst->working)
		pthread_cond_broadcast(&lst->idle);
	pthread_mutex_unlock(&lst->lock);
	return NULL;
}

/*
 * A new peer: within the bounds, start its handshake and setup for the
 * admitting call's @attr; else close it. Call with lock held; takes @fd
 * either way.
 */
static void rdmx_listen_admit(struct rdmx_listener *lst, int fd,
			      const struct rdmx_conn_attr *attr)
{
	const struct rdmx_config *cfg = &lst->ctx->cfg;
	struct rdmx_pending *p = NULL;
	char peer[64], host[64], *colon;
	unsigned same = 0;
	pthread_t t;

	rdmx_sock_name(fd, true, peer, sizeof(peer));
	if (!rdmx_listen_allowed(lst, fd)) {
		rdmx_peer_warn("refused %s at once: not in auth.allowed_peers",
			       peer);
		close(fd);
		return;
	}
	memcpy(host, peer, sizeof(host));
	colon = strrchr(host, ':');
	if (colon)
		*colon = '\0';
	for (unsigned i = 0; i < lst->nslots; i++) {
		struct rdmx_pending *s = &lst->slots[i];

		if (s->state == RDMX_SLOT_FREE)
			p = p ? p : s;
		else if (!strcmp(s->host, host))
			same++;
	}
	if (!p || same >= cfg->listen_max_pending_per_addr) {
		rdmx_peer_warn("refused %s at once: %s pending handshakes (%s)",
			       peer,
			       !p ? "too many" : "too many of its address's",
			       !p ? "listen.max_pending"
				  : "listen.max_pending_per_addr");
		close(fd);
		return;
	}
	rdmx_sock_liveness(fd, (unsigned)cfg->tcp_user_timeout_ms);
	*p = (struct rdmx_pending){
		.lst = lst,
		.state = RDMX_SLOT_WORKING,
		.fd = fd,
		.hold = fcntl(fd, F_DUPFD_CLOEXEC, 0),
		.allow = rdmx_conn_attr_transports(attr),
		.cq = attr->cq,
	};
	memcpy(p->peer, peer, sizeof(p->peer));
	memcpy(p->host, host, sizeof(p->host));
	if (p->hold < 0) {
		rdmx_peer_warn("refused %s: dup: %m", peer);
		p->state = RDMX_SLOT_FREE;
		close(fd);
		return;
	}
	if (rdmx_thread_start(&t, rdmx_hs_worker, p, "handshake")) {
		p->state = RDMX_SLOT_FREE;
		close(p->hold);
		close(fd);
		return;
	}
	pthread_detach(t);
	lst->working++;
}

/* The oldest connection set up for the transports @attr allows. Call
 * with lock held. */
static struct rdmx_pending *rdmx_listen_ready(struct rdmx_listener *lst,
					      const struct rdmx_conn_attr *attr)
{
	uint64_t allow = rdmx_conn_attr_transports(attr);
	struct rdmx_pending *best = NULL;

	for (unsigned i = 0; i < lst->nslots; i++) {
		struct rdmx_pending *s = &lst->slots[i];

		if (s->state == RDMX_SLOT_READY && s->allow == allow &&
		    (!best || s->seq < best->seq))
			best = s;
	}
	return best;
}

/*
 * Take every peer waiting in the kernel's queue. Running out of
 * descriptors or memory is not the listener's end: back off briefly, the
 * peer stays queued. Call with lock held.
 */
static void rdmx_listen_take(struct rdmx_listener *lst,
			     const struct rdmx_conn_attr *attr)
{
	struct timespec nap = { 0, 20 * 1000 * 1000 };

	for (;;) {
		int fd = accept4(lst->fd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd >= 0) {
			rdmx_listen_admit(lst, fd, attr);
			continue;
		}
		if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
			return;
		rdmx_peer_warn("accept on port %d: %m; backing off, the "
			       "peer stays queued",
			       lst->port);
		pthread_mutex_unlock(&lst->lock);
		nanosleep(&nap, NULL);
		pthread_mutex_lock(&lst->lock);
		return;
	}
}

rdmx_status rdmx_accept(struct rdmx_listener *lst,
			const struct rdmx_conn_attr *attr, int timeout_ms,
			struct rdmx_conn **conn_p)
{
	uint64_t deadline = rdmx_deadline(timeout_ms), v;
	struct pollfd pfd[2];
	struct rdmx_pending *p;
	struct rdmx_conn *conn;
	char peer[64];
	rdmx_status st;
	int wait;

	if (!lst)
		return rdmx_invalid("rdmx_accept", "NULL listener");
	if (!rdmx_conn_attr_ok(lst->ctx, attr, conn_p))
		return RDMX_ERR_INVALID;
	pthread_mutex_lock(&lst->lock);
	for (;;) {
		p = rdmx_listen_ready(lst, attr);
		if (p) {
			conn = p->conn;
			memcpy(peer, p->peer, sizeof(peer));
			p->state = RDMX_SLOT_FREE;
			pthread_mutex_unlock(&lst->lock);
			/* Our private data goes out; a peer gone by now is
			 * the next one's turn. */
			st = rdmx_conn_start(
				conn, true, attr,
				rdmx_deadline(
					(int)lst->ctx->cfg.handshake_timeout_ms),
				conn_p);
			if (st == RDMX_OK || st == RDMX_ERR_NOMEM)
				return st;
			rdmx_peer_warn(
				"refused %s: its connection could not be "
				"started (%s)",
				peer, rdmx_strerror(st));
			pthread_mutex_lock(&lst->lock);
			continue;
		}
		wait = rdmx_ms_left(deadline);
		if (!wait)
			break;
		pthread_mutex_unlock(&lst->lock);
		/*
		 * Another caller may take the eventfd's wake-up for a peer
		 * meant for us (other attr): look again now and then.
		 */
		pfd[0] = (struct pollfd){ .fd = lst->fd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = lst->efd, .events = POLLIN };
		poll(pfd, 2, wait < 0 || wait > 100 ? 100 : wait);
		if ((pfd[1].revents & POLLIN) &&
		    read(lst->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			rdmx_debug("listen: eventfd read: %m");
		pthread_mutex_lock(&lst->lock);
		if (pfd[0].revents & POLLIN)
			rdmx_listen_take(lst, attr);
	}
	pthread_mutex_unlock(&lst->lock);
	return RDMX_ERR_TIMEOUT;
}
