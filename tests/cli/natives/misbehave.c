/* SPDX-License-Identifier: MIT */
/* Native lambdas that misbehave, for tests/cli/test_lambda.sh: the server
 * must outlive each of them. */
#include <stddef.h>
#include <stdlib.h>

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
