/* SPDX-License-Identifier: MIT */
/*
 * Setting up a shm connection (the steps are in shm_proto.h): the two
 * sides meet on a unix socket named over the control connection, learn
 * each other's pid and uid from the kernel, and pass the memfds of their
 * rings and their doorbells as descriptors. Nothing the peer claims about
 * itself is taken on trust: a peer of another user is refused, and a ring
 * is mapped only once its seals show it cannot shrink under us (which
 * would be a SIGBUS in our progress engine).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "shm.h"
#include "sock.h"

#define RDMX_SHM_MAX_RING (64ull << 20)
/* How long a connection to our unix socket may take to show the token. */
#define RDMX_SHM_TOKEN_MS 200

static int rdmx_shm_pidfd_open(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/*
 * shm names its peer by a pidfd (Linux 5.3): without one, a copy to the
 * peer's pid could reach a process that took a dead peer's pid. Where
 * the kernel refuses pidfd_open (an older one, a seccomp filter, or
 * valgrind 3.19, which does not know the call), this process offers no
 * shm, so that peers on this host agree on tcp; said once per process.
 * Asked at each handshake, not remembered: a child may install a filter
 * its parent had not.
 */
bool rdmx_shm_usable(struct rdmx_ctx *ctx, int fd)
{
	static atomic_int said; /* the pid that said why */
	int pfd = rdmx_shm_pidfd_open(getpid());

	(void)ctx;
	(void)fd;
	if (pfd >= 0) {
		close(pfd);
		return true;
	}
	if (atomic_exchange(&said, (int)getpid()) != (int)getpid())
		rdmx_warn("shm: pidfd_open: %m (Linux 5.3 has it; a seccomp "
			  "filter or valgrind may refuse it): this process "
			  "offers no shm, and its peers on this host use tcp");
	return false;
}

/*
 * Rings are mapped populated, on both sides: a ring page's first touch
 * was a page fault at each end (allocating it at the first), so the
 * first lap of a ring cost a fault per 64 small messages. The first
 * 6,000 or so of a ping-pong had a quarter of their samples over twice
 * the median, and a run of 20,000 a p99 of 0.8-1.3 us against 0.5.
 */
static void *rdmx_shm_map(int fd, uint64_t size)
{
	void *p = mmap(NULL, RDMX_SHM_RING_HDR + size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

/*
 * Our ring: a memfd of header + @size bytes, mapped. Returns its fd. The
 * peer maps it: it is sealed, and never shrinks under the peer.
 */
static int rdmx_shm_ring_create(uint64_t size, struct rdmx_shm_ring **ring_p)
{
	struct rdmx_shm_ring *r;
	void *m;
	int fd;

	fd = rdmx_memfd_map("rdmx-shm-ring", RDMX_SHM_RING_HDR + size, 0,
			    MAP_POPULATE, &m);
	if (fd < 0) {
		rdmx_error("shm: a ring of %llu bytes: %m",
			   (unsigned long long)size);
		return -1;
	}
	r = m;
	r->magic = RDMX_SHM_MAGIC;
	r->version = RDMX_SHM_VERSION;
	r->size = size;
	r->id = (uint64_t)randombytes_random() << 32 | randombytes_random();
	/* Armed from the start: the consumer may be asleep already. */
	atomic_store(&r->consumer_waiting, 1);
	r->owner_fenced = rdmx_membarrier_ready();
	*ring_p = r;
	return fd;
}

void rdmx_shm_pipe_free(struct rdmx_shm_pipe *p)
{
	if (!p)
		return;
	rdmx_shm_map_leave(p);
	if (p->rx)
		munmap(p->rx, RDMX_SHM_RING_HDR + p->rx_size);
	if (p->tx)
		munmap(p->tx, RDMX_SHM_RING_HDR + p->tx_size);
	if (p->door >= 0)
		close(p->door);
	if (p->peer_door >= 0)
		close(p->peer_door);
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (p->ctl >= 0)
		close(p->ctl);
	free(p);
}

rdmx_status rdmx_shm_ring_check(int fd, uint64_t size)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0) {
		rdmx_peer_error(
			"shm: the peer's ring is not a memfd (%m); refusing "
			"it");
		return RDMX_ERR_PROTOCOL;
	}
	if (!(seals & F_SEAL_SHRINK)) {
		rdmx_peer_error("shm: the peer's ring is not sealed against "
				"shrinking; refusing to map it");
		return RDMX_ERR_PROTOCOL;
	}
	if (fstat(fd, &st) || (uint64_t)st.st_size < RDMX_SHM_RING_HDR + size) {
		rdmx_peer_error(
			"shm: the peer's ring is smaller than the %llu bytes "
			"it says",
			(unsigned long long)size);
		return RDMX_ERR_PROTOCOL;
	}
	return RDMX_OK;
}

rdmx_status rdmx_shm_door_check(int fd)
{
	char path[64], target[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	if (n < 0 ||
	    (target[n] = '\0', strcmp(target, "anon_inode:[eventfd]"))) {
		rdmx_peer_error("shm: the peer's doorbell is not an eventfd; "
				"refusing it");
		return RDMX_ERR_PROTOCOL;
	}
	return RDMX_OK;
}

/*
 * The setup socket "rdmx-shm-NAME" in the abstract namespace (no file;
 * reachable from this network namespace only): bound and listening, or
 * connected to. Returns it, or -1 (logged).
 */
static int rdmx_shm_unix(const char name[RDMX_SHM_NAME_LEN], bool listening)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	/* sun_path[0] stays 0: the abstract namespace. */
	int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1,
			 "rdmx-shm-%.*s", RDMX_SHM_NAME_LEN, name);
	socklen_t len =
		(socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd >= 0 &&
	    (listening ? bind(fd, (struct sockaddr *)&sa, len) || listen(fd, 8)
		       : connect(fd, (struct sockaddr *)&sa, len))) {
		int err = errno;

		close(fd);
		fd = -1;
		errno = err;
	}
	if (fd < 0 && listening)
		rdmx_error("shm: unix socket for setup: %m");
	else if (fd < 0)
		rdmx_error("shm: cannot reach the peer's unix socket (%m): it "
			   "is not in this network namespace");
	return fd;
}

/*
 * Wait for a connection to the setup socket @lfd. A peer that gives up
 * (it closes the control connection, or a listener being closed shuts it
 * down) ends the wait, as the timeout does.
 */
static rdmx_status rdmx_shm_meet_wait(int lfd, int ctl, uint64_t deadline)
{
	struct pollfd pfd[2] = { { .fd = lfd, .events = POLLIN },
				 { .fd = ctl, .events = POLLRDHUP } };
	int ms = rdmx_ms_left(deadline), rc;

	if (!ms)
		return RDMX_ERR_TIMEOUT;
	do {
		rc = poll(pfd, 2, ms);
	} while (rc < 0 && errno == EINTR);
	if (rc <= 0)
		return RDMX_ERR_TIMEOUT;
	if (pfd[1].revents && !(pfd[0].revents & POLLIN)) {
		rdmx_peer_error(
			"shm: the peer closed the connection while setting "
			"up (see its log)");
		return RDMX_ERR_CONN_LOST;
	}
	return RDMX_OK;
}

/*
 * Acceptor: offer a unix socket on the control connection and take the
 * first connection to it that presents the token (another local process
 * may see the name in /proc/net/unix and race for it).
 */
static rdmx_status rdmx_shm_meet_accept(int ctl, uint64_t deadline, int *ufd_p)
{
	struct rdmx_shm_offer o;
	uint8_t b[RDMX_SHM_OFFER_LEN], token[RDMX_SHM_TOKEN_LEN];
	uint8_t rnd[RDMX_SHM_NAME_LEN / 2];
	char hex[RDMX_SHM_NAME_LEN + 1];
	rdmx_status st;
	int lfd, fd;

	randombytes_buf(rnd, sizeof(rnd));
	sodium_bin2hex(hex, sizeof(hex), rnd, sizeof(rnd));
	memcpy(o.name, hex, RDMX_SHM_NAME_LEN);
	lfd = rdmx_shm_unix(o.name, true);
	if (lfd < 0)
		return RDMX_ERR_SYSTEM;
	randombytes_buf(o.token, sizeof(o.token));
	rdmx_shm_offer_pack(&o, b);
	st = rdmx_sock_write_full(ctl, b, sizeof(b), deadline);
	while (!st) {
		uint64_t bound = rdmx_now_us() + RDMX_SHM_TOKEN_MS * 1000;

		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR) {
				rdmx_error("shm: accept on the setup socket: "
					   "%m");
				st = RDMX_ERR_SYSTEM;
			} else {
				st = rdmx_shm_meet_wait(lfd, ctl, deadline);
			}
			continue;
		}
		if (!rdmx_sock_read_full(fd, token, sizeof(token),
					 bound < deadline ? bound : deadline) &&
		    !sodium_memcmp(token, o.token, sizeof(token))) {
			*ufd_p = fd;
			break;
		}
		rdmx_peer_warn(
			"shm: a process without the token connected to the "
			"setup socket; ignored");
		close(fd);
	}
	close(lfd);
	return st;
}

/* Connector: go to the socket the offer names, show the token. */
static rdmx_status rdmx_shm_meet_connect(int ctl, uint64_t deadline, int *ufd_p)
{
	struct rdmx_shm_offer o;
	uint8_t b[RDMX_SHM_OFFER_LEN];
	rdmx_status st;
	int fd;

	st = rdmx_sock_read_full(ctl, b, sizeof(b), deadline);
	if (st)
		return st;
	if (rdmx_shm_offer_unpack(b, &o)) {
		if (rdmx_get_be(b, 4) == RDMX_SHM_MAGIC &&
		    rdmx_get_be(b + 4, 4) != RDMX_SHM_VERSION)
			rdmx_peer_error(
				"shm: the peer's rings are version %u, ours "
				"%u: use one rdmx release on both sides, or "
				"transport tcp",
				(unsigned)rdmx_get_be(b + 4, 4),
				RDMX_SHM_VERSION);
		else
			rdmx_peer_error(
				"shm: malformed setup offer from the peer");
		return RDMX_ERR_PROTOCOL;
	}
	fd = rdmx_shm_unix(o.name, false);
	if (fd < 0)
		return RDMX_ERR_NO_TRANSPORT;
	st = rdmx_sock_write_full(fd, o.token, sizeof(o.token), deadline);
	if (st) {
		close(fd);
		return st;
	}
	*ufd_p = fd;
	return RDMX_OK;
}

/*
 * The peer, as the kernel knows it: same user, or refused. Its pid gets a
 * pidfd, taken while its end of @ufd is still open (so the pid is not a
 * reused one).
 */
static rdmx_status rdmx_shm_peer(struct rdmx_shm_pipe *p, int ufd)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	struct pollfd pfd = { .fd = ufd, .events = POLLRDHUP };

	if (getsockopt(ufd, SOL_SOCKET, SO_PEERCRED, &cred, &len)) {
		rdmx_error("shm: SO_PEERCRED: %m");
		return RDMX_ERR_SYSTEM;
	}
	if (cred.uid != geteuid()) {
		rdmx_peer_error(
			"shm: the peer process %d runs as uid %u, this one "
			"as uid %u: shm is only between processes of one "
			"user; refusing (RDMX_TRANSPORT=tcp avoids shm)",
			(int)cred.pid, (unsigned)cred.uid, (unsigned)geteuid());
		return RDMX_ERR_NO_TRANSPORT;
	}
	p->peer_pid = cred.pid;
	p->pidfd = rdmx_shm_pidfd_open(cred.pid);
	if (p->pidfd < 0 && errno != ESRCH) {
		rdmx_error("shm: pidfd_open of the peer process %d: %m",
			   (int)cred.pid);
		return RDMX_ERR_SYSTEM;
	}
	if (p->pidfd < 0 ||
	    (poll(&pfd, 1, 0) == 1 && (pfd.revents & (POLLRDHUP | POLLHUP)))) {
		rdmx_peer_error("shm: the peer process %d is gone",
				(int)cred.pid);
		return RDMX_ERR_CONN_LOST;
	}
	return RDMX_OK;
}

/* Send our hello with the ring's memfd and our doorbell. */
static rdmx_status rdmx_shm_hello_send(int ufd, uint64_t size, int ring_fd,
				       int door, uint64_t deadline)
{
	uint8_t b[RDMX_SHM_HELLO_LEN];
	int fds[2] = { ring_fd, door };
	union {
		char buf[CMSG_SPACE(sizeof(fds))];
		struct cmsghdr align;
	} u = { 0 };
	struct iovec iov = { b, sizeof(b) };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = u.buf,
			      .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);

	rdmx_shm_hello_pack(size, b);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	while (sendmsg(ufd, &msg, MSG_NOSIGNAL) != (ssize_t)sizeof(b)) {
		if (errno != EAGAIN ||
		    !rdmx_sock_wait(ufd, POLLOUT, deadline)) {
			rdmx_error("shm: sending the setup hello: %m");
			return RDMX_ERR_CONN_LOST;
		}
	}
	return RDMX_OK;
}

/* Receive the peer's hello and exactly its two descriptors. */
static rdmx_status rdmx_shm_hello_recv(int ufd, uint64_t deadline,
				       uint64_t *size_p, int fds[2])
{
	uint8_t b[RDMX_SHM_HELLO_LEN];
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { b, sizeof(b) };
	struct msghdr msg = { .msg_iov = &iov,
			      .msg_iovlen = 1,
			      .msg_control = u.buf,
			      .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;
	rdmx_status st = RDMX_OK;
	ssize_t n;
	int nfds = 0;

	while ((n = recvmsg(ufd, &msg, MSG_CMSG_CLOEXEC)) < 0) {
		if (errno != EAGAIN || !rdmx_sock_wait(ufd, POLLIN, deadline))
			return errno == EAGAIN ? RDMX_ERR_TIMEOUT
					       : RDMX_ERR_CONN_LOST;
	}
	for (cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0;
		     i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int),
			       sizeof(fd));
			if (nfds < 2)
				fds[nfds] = fd;
			else
				close(fd);
			nfds++;
		}
	}
	if (n == 0)
		st = RDMX_ERR_CONN_LOST;
	else if (n < (ssize_t)sizeof(b))
		st = rdmx_sock_read_full(ufd, b + n, sizeof(b) - (size_t)n,
					 deadline);
	if (!st && (nfds != 2 || (msg.msg_flags & MSG_CTRUNC) ||
		    rdmx_shm_hello_unpack(b, size_p))) {
		rdmx_peer_error("shm: malformed setup hello from the peer");
		st = RDMX_ERR_PROTOCOL;
	}
	if (st)
		for (int i = 0; i < nfds && i < 2; i++)
			close(fds[i]);
	return st;
}

/* Check and map the peer's ring; take its doorbell. Owns both fds. */
static rdmx_status rdmx_shm_attach(struct rdmx_shm_pipe *p, uint64_t size,
				   int ring_fd, int door)
{
	rdmx_status st = RDMX_OK;

	p->peer_door = door;
	if (size < 4096 || size > RDMX_SHM_MAX_RING || (size & (size - 1))) {
		rdmx_peer_error("shm: peer offers a ring of %llu bytes",
				(unsigned long long)size);
		st = RDMX_ERR_PROTOCOL;
	}
	if (!st)
		st = rdmx_shm_ring_check(ring_fd, size);
	if (!st)
		st = rdmx_shm_door_check(door);
	if (!st) {
		p->tx = rdmx_shm_map(ring_fd, size);
		if (!p->tx) {
			rdmx_error("shm: mmap the peer's ring: %m");
			st = RDMX_ERR_SYSTEM;
		}
	}
	close(ring_fd);
	if (st)
		return st;
	p->tx_size = size;
	p->tx_data = (uint8_t *)p->tx + RDMX_SHM_RING_HDR;
	if (p->tx->magic != RDMX_SHM_MAGIC || p->tx->size != size) {
		rdmx_peer_error(
			"shm: the peer's ring header is not an rdmx ring");
		return RDMX_ERR_PROTOCOL;
	}
	p->tx_tail = atomic_load(&p->tx->tail);
	p->tx_head = atomic_load(&p->tx->head);
	/* A new ring: its pages read zero, every stamp slot of its lap. */
	p->tx_zeroed = p->tx_tail + size;
	/* A peer that says so falsely only delays its own traffic. */
	p->fenced = rdmx_membarrier_ready() && p->tx->owner_fenced == 1;
	return RDMX_OK;
}

/* Meet the peer, swap rings, and say ready both ways. */
static rdmx_status rdmx_shm_exchange(struct rdmx_shm_pipe *p, bool accepting,
				     int ring_fd, uint64_t deadline)
{
	uint64_t size;
	uint8_t ready = 'R';
	int ufd = -1, fds[2];
	rdmx_status st;

	st = accepting ? rdmx_shm_meet_accept(p->ctl, deadline, &ufd)
		       : rdmx_shm_meet_connect(p->ctl, deadline, &ufd);
	if (!st)
		st = rdmx_shm_peer(p, ufd);
	if (!st)
		st = rdmx_shm_hello_send(ufd, p->rx_size, ring_fd, p->door,
					 deadline);
	if (!st)
		st = rdmx_shm_hello_recv(ufd, deadline, &size, fds);
	if (!st)
		st = rdmx_shm_attach(p, size, fds[0], fds[1]);
	/* Before the peer can copy into our memory: dereg must see it. */
	if (!st)
		rdmx_shm_map_join(p);
	if (!st)
		st = rdmx_sock_write_full(ufd, &ready, 1, deadline);
	if (!st)
		st = rdmx_sock_read_full(ufd, &ready, 1, deadline);
	if (!st && ready != 'R')
		st = RDMX_ERR_PROTOCOL;
	if (ufd >= 0)
		close(ufd);
	return st;
}

rdmx_status rdmx_shm_pipe_setup(struct rdmx_ctx *ctx, int ctl, bool accepting,
				uint64_t deadline,
				struct rdmx_shm_pipe **pipe_p)
{
	struct rdmx_shm_pipe *p;
	rdmx_status st = RDMX_ERR_SYSTEM;
	uint64_t size = 4096, ino = 0;
	int ring_fd, fd;

	while (size < ctx->cfg.shm_ring_size)
		size <<= 1;
	p = calloc(1, sizeof(*p));
	if (!p) {
		close(ctl);
		return RDMX_ERR_NOMEM;
	}
	p->ctl = ctl;
	p->door = p->peer_door = p->pidfd = -1;
	p->ctx = ctx;
	ring_fd = rdmx_shm_ring_create(size, &p->rx);
	if (ring_fd < 0)
		goto err;
	/* Where the peer finds what we grant it to map (core/mem.h). */
	if (rdmx_mem_table(ctx, &fd, &ino))
		fd = -1;
	p->rx->grants_fd = fd;
	p->rx->grants_ino = ino;
	p->rx_size = size;
	p->rx_data = (uint8_t *)p->rx + RDMX_SHM_RING_HDR;
	p->door = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->door < 0) {
		rdmx_error("shm: eventfd: %m");
		goto err_ring;
	}
	st = rdmx_shm_exchange(p, accepting, ring_fd, deadline);
	if (st)
		goto err_ring;
	close(ring_fd);
	*pipe_p = p;
	return RDMX_OK;

err_ring:
	close(ring_fd);
err:
	rdmx_shm_pipe_free(p);
	return st ? st : RDMX_ERR_SYSTEM;
}
