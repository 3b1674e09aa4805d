/* SPDX-License-Identifier: MIT */
/*
 * The tcp pipe: the engine's byte stream is the connected socket. Payloads
 * go from registered memory to the socket with sendmsg and back with readv,
 * with no staging copy for large ones.
 *
 * Liveness apart from slowness: the kernel's TCP_USER_TIMEOUT on this
 * socket is conn.stall_timeout, since it also ends a connection whose
 * peer keeps its receive window shut (a live process that stopped
 * reading); a host that answers nothing at all (data, window probes and
 * keepalives unacknowledged) is found by rdmx_tcp_alive within
 * tcp.user_timeout.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tcp.h"

static ssize_t rdmx_tcp_result(ssize_t n)
{
	if (n >= 0)
		return n;
	return errno == EWOULDBLOCK ? -EAGAIN : -errno;
}

static ssize_t rdmx_tcp_recv(struct rdmx_sw_conn *c, void *buf, size_t len)
{
	ssize_t n;

	do {
		n = recv(c->fd, buf, len, MSG_DONTWAIT);
	} while (n < 0 && errno == EINTR);
	return rdmx_tcp_result(n);
}

static ssize_t rdmx_tcp_readv(struct rdmx_sw_conn *c, const struct iovec *iov,
			      int iovcnt)
{
	ssize_t n;

	do {
		n = readv(c->fd, iov, iovcnt);
	} while (n < 0 && errno == EINTR);
	return rdmx_tcp_result(n);
}

static ssize_t rdmx_tcp_sendv(struct rdmx_sw_conn *c, const struct iovec *iov,
			      int iovcnt)
{
	struct msghdr msg = { .msg_iov = (struct iovec *)iov,
			      .msg_iovlen = (size_t)iovcnt };
	ssize_t n;

	do {
		n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
	} while (n < 0 && errno == EINTR);
	return rdmx_tcp_result(n);
}

/*
 * SO_RCVLOWAT: epoll reports the socket readable, and the kernel wakes
 * its waiters, only once that much is queued. Kept to a quarter of the
 * receive buffer as it is now: for a mark the buffer cannot hold, the
 * kernel grows the buffer and clamps the window to the mark
 * (tcp_set_rcvlowat), early in a connection while autotuning has not
 * grown the buffer yet. What is asked is then always there in time.
 */
static void rdmx_tcp_rx_wait(struct rdmx_sw_conn *c, uint64_t bytes)
{
	int v = 1, buf = 0;
	socklen_t len = sizeof(buf);

	/* (0 counts as 1 for the kernel) */
	if (bytes && !getsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &buf, &len))
		v = bytes < (uint64_t)buf / 4 ? (int)bytes : buf / 4;
	if (setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)))
		rdmx_debug("tcp: SO_RCVLOWAT %d: %m", v);
}

static void rdmx_tcp_shutdown(struct rdmx_sw_conn *c)
{
	shutdown(c->fd, SHUT_RDWR);
}

static void rdmx_tcp_destroy(struct rdmx_sw_conn *c)
{
	close(c->fd);
}

/*
 * The peer's kernel acknowledges what it gets, even while its process
 * reads nothing (a shut window is answered too): it is gone when nothing
 * was acknowledged for tcp.user_timeout while something of ours waited
 * for it, data in flight, a window probe or a keepalive.
 */
static bool rdmx_tcp_alive(struct rdmx_sw_conn *c)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	if (getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &ti, &len))
		return true;
	if (ti.tcpi_last_ack_recv < c->base.ctx->cfg.tcp_user_timeout_ms)
		return true;
	return !ti.tcpi_unacked && !ti.tcpi_probes && !ti.tcpi_retransmits;
}

const struct rdmx_sw_pipe rdmx_tcp_pipe = {
	.name = "tcp",
	.recv = rdmx_tcp_recv,
	.readv = rdmx_tcp_readv,
	.sendv = rdmx_tcp_sendv,
	.want_out = rdmx_sw_epoll_out,
	.rx_wait = rdmx_tcp_rx_wait,
	.alive = rdmx_tcp_alive,
	.shutdown = rdmx_tcp_shutdown,
	.destroy = rdmx_tcp_destroy,
};
