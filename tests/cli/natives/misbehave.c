/* SPDX-License-Identifier: MIT */
/* Native lambdas that misbehave, for tests/cli/test_lambda.sh: the server
 * must outlive each of them. */
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdmx_lambda.h"

rdmx_lambda_fn rdmx_lambda_crash, rdmx_lambda_spin, rdmx_lambda_quit;

int rdmx_lambda_crash(const void *in, size_t in_len, void *out, size_t *out_len)
{
	volatile int *p = NULL;

	(void)in, (void)in_len, (void)out, (void)out_len;
	return *p;
}

int rdmx_lambda_spin(const void *in, size_t in_len, void *out, size_t *out_len)
{
	(void)in, (void)in_len, (void)out, (void)out_len;
	for (volatile unsigned long i = 0;; i++)
		;
}

int rdmx_lambda_quit(const void *in, size_t in_len, void *out, size_t *out_len)
{
	(void)in, (void)in_len, (void)out, (void)out_len;
	exit(3);
}

/* Each reaches outside its process: the child's filter kills it. */
rdmx_lambda_fn rdmx_lambda_open, rdmx_lambda_socket, rdmx_lambda_fork,
	rdmx_lambda_exec;

int rdmx_lambda_open(const void *in, size_t in_len, void *out, size_t *out_len)
{
	int fd;

	(void)in, (void)in_len, (void)out_len;
	fd = open("/etc/passwd", O_RDONLY);
	/* Not reached: the filter ends the process at open. */
	return fd >= 0 && read(fd, out, 1) >= 0;
}

int rdmx_lambda_socket(const void *in, size_t in_len, void *out,
		       size_t *out_len)
{
	(void)in, (void)in_len, (void)out, (void)out_len;
	return socket(AF_INET, SOCK_STREAM, 0) >= 0;
}

int rdmx_lambda_fork(const void *in, size_t in_len, void *out, size_t *out_len)
{
	(void)in, (void)in_len, (void)out, (void)out_len;
	return fork() >= 0;
}

int rdmx_lambda_exec(const void *in, size_t in_len, void *out, size_t *out_len)
{
	char *argv[] = { "/bin/sh", "-c", "touch /tmp/rdmx-lambda-escaped",
			 NULL };

	(void)in, (void)in_len, (void)out, (void)out_len;
	return execve(argv[0], argv, NULL);
}
