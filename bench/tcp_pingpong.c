/* SPDX-License-Identifier: MIT */
/*
 * Description: the floor of a TCP ping-pong on this host, for
 * bench/compare.sh to set beside rdmx: two processes over loopback, each
 * message echoed whole. Blocking (each side sleeps in read: a cross-core
 * wake-up per message) or --spin (non-blocking sockets polled in a loop).
 *
 *   tcp_pingpong server PORT [--spin]
 *   tcp_pingpong client HOST PORT SIZE ITERS [--spin]
 *
 * The client prints one JSON line: one-way latency (half the round trip)
 * in microseconds, min / median / p99 / p99.9 / max.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench.h"

static int spin;

static int xfer(int fd, char *buf, size_t len, int out)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = out ? send(fd, buf + done, len - done,
				       MSG_NOSIGNAL | (spin ? MSG_DONTWAIT : 0))
				: recv(fd, buf + done, len - done,
				       spin ? MSG_DONTWAIT : 0);

		if (n > 0)
			done += (size_t)n;
		else if (n == 0 || (errno != EAGAIN && errno != EINTR))
			return -1;
	}
	return 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: tcp_pingpong server PORT [--spin]\n"
			"       tcp_pingpong client HOST PORT SIZE ITERS "
			"[--spin]\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int one = 1, fd, s, server;
	size_t size = 8;
	long iters = 0;
	double *lat;
	char *buf;

	if (argc < 3)
		return usage();
	server = !strcmp(argv[1], "server");
	spin = !strcmp(argv[argc - 1], "--spin");
	if (server) {
		a.sin_port = htons((uint16_t)atoi(argv[2]));
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		s = socket(AF_INET, SOCK_STREAM, 0);
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(s, (struct sockaddr *)&a, sizeof(a)) || listen(s, 1) ||
		    (fd = accept(s, NULL, NULL)) < 0) {
			perror("tcp_pingpong server");
			return 1;
		}
		close(s);
		/* The client says the size first. */
		if (xfer(fd, (char *)&size, sizeof(size), 0))
			return 1;
	} else {
		if (argc < 6)
			return usage();
		size = (size_t)atol(argv[4]);
		iters = atol(argv[5]);
		if (!size || iters < 10)
			return usage();
		a.sin_port = htons((uint16_t)atoi(argv[3]));
		if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1)
			return usage();
		fd = socket(AF_INET, SOCK_STREAM, 0);
		for (int i = 0; connect(fd, (struct sockaddr *)&a, sizeof(a));
		     i++) {
			if (i == 100) {
				perror("tcp_pingpong client");
				return 1;
			}
			usleep(20000);
		}
		if (xfer(fd, (char *)&size, sizeof(size), 1))
			return 1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	buf = calloc(1, size);
	lat = calloc((size_t)iters + 1, sizeof(*lat));
	if (!buf || !lat)
		return 1;
	if (server) {
		while (!xfer(fd, buf, size, 0))
			if (xfer(fd, buf, size, 1))
				break;
		free(buf);
		free(lat);
		close(fd);
		return 0;
	}
	for (long i = -iters / 10; i < iters; i++) { /* a tenth to warm up */
		double t0 = bench_now_us();

		if (xfer(fd, buf, size, 1) || xfer(fd, buf, size, 0)) {
			fprintf(stderr, "tcp_pingpong: the server went away\n");
			free(buf);
			free(lat);
			return 1;
		}
		if (i >= 0)
			lat[i] = (bench_now_us() - t0) / 2;
	}
	qsort(lat, (size_t)iters, sizeof(*lat), bench_cmp_double);
	printf("{\"tool\":\"tcp_pingpong\",\"wait\":\"%s\",\"size\":%zu,"
	       "\"iters\":%ld,\"lat_us\":{\"min\":%.3f,\"median\":%.3f,"
	       "\"p99\":%.3f,\"p99_9\":%.3f,\"max\":%.3f}}\n",
	       spin ? "spin" : "block", size, iters, lat[0], lat[iters / 2],
	       lat[iters * 99 / 100], lat[iters * 999 / 1000], lat[iters - 1]);
	free(buf);
	free(lat);
	close(fd);
	return 0;
}
