// SPDX-License-Identifier: MIT
/*
 * Description: the KV store's parsers of network bytes: the first input
 * byte picks the Redis protocol's request parser (run over the rest until
 * it stops, as the server does) or the binary request and answer decoders.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv_proto.h"
#include "kv_resp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_resp(const uint8_t *b, size_t n)
{
	static struct kv_resp_cmd cmd;
	size_t at = 0, used;
	const char *err;

	while (at < n) {
		int rc = kv_resp_parse(b + at, n - at, &cmd, &used, &err);

		if (rc <= 0)
			break;
		if (!used || used > n - at)
			abort(); /* must consume, and within the input */
		for (int i = 0; i < cmd.argc; i++)
			if (cmd.argv[i] < b + at ||
			    cmd.argv[i] + cmd.argl[i] > b + at + used)
				abort(); /* arguments inside the request */
		at += used;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kv_req r;
	struct kv_answer a;
	uint8_t *copy;

	if (!size)
		return 0;
	/* An exact-size copy, so reads past the end are caught. */
	copy = malloc(size - 1 ? size - 1 : 1);
	memcpy(copy, data + 1, size - 1);
	if (data[0] & 1) {
		fuzz_resp(copy, size - 1);
	} else if (kv_req_decode(copy, (uint32_t)(size - 1), &r)) {
		if (KV_REQ_HDR + r.key_len + r.payload_len != size - 1)
			abort();
	} else {
		kv_answer_decode(copy, (uint32_t)(size - 1), &a);
	}
	free(copy);
	return 0;
}
