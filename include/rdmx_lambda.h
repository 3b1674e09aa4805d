/* SPDX-License-Identifier: MIT */
/*
 * Native lambdas for `rdmx demo lambda --native NAME`.
 *
 * A native lambda is a C function in a shared library that the operator put
 * in the server's allowlisted directory (config key lambda.native_dir). A
 * client names it; it never sends code. The server looks up the symbol
 * rdmx_lambda_<NAME> (NAME: letters, digits and '_') in those libraries:
 *
 *   int rdmx_lambda_reverse(const void *in, size_t in_len,
 *                           void *out, size_t *out_len);
 *
 * @in holds the client's input. On entry *out_len is the room in @out; the
 * function writes its result there, sets *out_len, and returns 0. A
 * nonzero return is an error: @out then holds a NUL-terminated message.
 * Each call runs in its own short-lived process, killed at the server's
 * wall-clock limit (lambda.time_limit).
 */
#ifndef RDMX_LAMBDA_H
#define RDMX_LAMBDA_H

#include <stddef.h>

#define RDMX_LAMBDA_SYMBOL_PREFIX "rdmx_lambda_"

typedef int rdmx_lambda_fn(const void *in, size_t in_len, void *out,
			   size_t *out_len);

#endif
