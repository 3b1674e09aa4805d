/* SPDX-License-Identifier: MIT */
/*
 * Example native lambdas. Build into a shared library, put it in the
 * directory the server's lambda.native_dir names, and call them with
 * `rdmx demo lambda HOST --native reverse -i hello`.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rdmx_lambda.h"

rdmx_lambda_fn rdmx_lambda_reverse, rdmx_lambda_fnv1a;

/* The input, back to front. */
int rdmx_lambda_reverse(const void *in, size_t in_len, void *out,
			size_t *out_len)
{
	const char *i = in;
	char *o = out;

	if (in_len > *out_len) {
		snprintf(out, *out_len, "input larger than the result buffer");
		return 1;
	}
	for (size_t k = 0; k < in_len; k++)
		o[k] = i[in_len - 1 - k];
	*out_len = in_len;
	return 0;
}

/* The 64-bit FNV-1a hash of the input, in hex. */
int rdmx_lambda_fnv1a(const void *in, size_t in_len, void *out, size_t *out_len)
{
	const unsigned char *p = in;
	uint64_t h = 0xcbf29ce484222325ull;
	int n;

	for (size_t k = 0; k < in_len; k++)
		h = (h ^ p[k]) * 0x100000001b3ull;
	n = snprintf(out, *out_len, "%016llx", (unsigned long long)h);
	if (n < 0 || (size_t)n >= *out_len)
		return 1;
	*out_len = (size_t)n;
	return 0;
}
