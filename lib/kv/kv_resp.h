/* SPDX-License-Identifier: MIT */
/* The Redis protocol: the request parser (kv_resp_proto.c), fuzzed. */
#ifndef RDMX_KV_RESP_H
#define RDMX_KV_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KV_RESP_MAX_ARGS 1024
#define KV_RESP_MAX_BULK (64ll << 20) /* a value or a key, at most */
#define KV_RESP_MAX_INLINE (64 << 10)

struct kv_resp_cmd {
	int argc;
	const uint8_t *argv[KV_RESP_MAX_ARGS]; /* into the buffer */
	size_t argl[KV_RESP_MAX_ARGS];
};

/*
 * One request from @buf (@len bytes): 1 and *used when whole, 0 when more
 * bytes are needed, -1 with *err (Redis's wording) when malformed.
 */
int kv_resp_parse(const uint8_t *buf, size_t len, struct kv_resp_cmd *cmd,
		  size_t *used, const char **err);

#endif
