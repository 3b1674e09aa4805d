/* SPDX-License-Identifier: MIT */
/*
 * The tcp pipe: the engine's byte stream is the connected socket. Payloads
 * go from registered memory to the socket with sendmsg and back with readv,
 * with no staging copy for large ones.
 */
#include <errno.h>
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

static void rdmx_tcp_shutdown(struct rdmx_sw_conn *c)
{
	shutdown(c->fd, SHUT_RDWR);
}

static void rdmx_tcp_destroy(struct rdmx_sw_conn *c)
{
	close(c->fd);
}

const struct rdmx_sw_pipe rdmx_tcp_pipe = {
	.name = "tcp",
	.recv = rdmx_tcp_recv,
	.readv = rdmx_tcp_readv,
	.sendv = rdmx_tcp_sendv,
	.want_out = rdmx_sw_epoll_out,
	.shutdown = rdmx_tcp_shutdown,
	.destroy = rdmx_tcp_destroy,
};
