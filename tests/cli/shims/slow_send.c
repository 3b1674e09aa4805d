/* SPDX-License-Identifier: MIT */
/*
 * Description: an LD_PRELOAD shim for tests: every sendmsg(2) of the
 * process of at least RDMX_TEST_SEND_DELAY_MIN bytes (0 by default) first
 * sleeps RDMX_TEST_SEND_DELAY_US microseconds, so that a test can tell
 * whether a measurement includes the sends it should.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	static ssize_t (*next)(int, const struct msghdr *, int);
	const char *us = getenv("RDMX_TEST_SEND_DELAY_US"),
		   *min = getenv("RDMX_TEST_SEND_DELAY_MIN");
	long d = us ? atol(us) : 0;
	size_t len = 0;

	for (size_t i = 0; i < msg->msg_iovlen; i++)
		len += msg->msg_iov[i].iov_len;
	if (min && len < (size_t)atol(min))
		d = 0;

	if (!next)
		next = (ssize_t(*)(int, const struct msghdr *,
				   int))dlsym(RTLD_NEXT, "sendmsg");
	if (d > 0) {
		struct timespec ts = { d / 1000000, d % 1000000 * 1000 };

		while (nanosleep(&ts, &ts))
			;
	}
	return next(fd, msg, flags);
}
