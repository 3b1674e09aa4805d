// SPDX-License-Identifier: MIT
/*
 * The Redis protocol's requests (RESP2): an array of bulk strings
 * ("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"), or an inline command line ("PING\r\n")
 * as a person types it. Parsed in place: arguments point into the buffer.
 */
#include <string.h>

#include "kv_resp.h"

/* A decimal number ended by \r\n at @p (< @end); -1 need more, -2 bad. */
static long long kv_resp_num(const uint8_t *p, const uint8_t *end,
			     const uint8_t **next)
{
	long long v = 0;
	const uint8_t *q = p;
	bool neg = false;

	if (q < end && *q == '-') {
		neg = true;
		q++;
	}
	for (; q < end && *q >= '0' && *q <= '9'; q++) {
		if (v > (1ll << 40))
			return -2;
		v = v * 10 + (*q - '0');
	}
	if (q == end || (q + 1 == end && *q == '\r'))
		return -1;
	if (q == p + neg || q[0] != '\r' || q[1] != '\n')
		return -2;
	*next = q + 2;
	return neg ? -v : v;
}

static int kv_resp_inline(const uint8_t *buf, size_t len,
			  struct kv_resp_cmd *cmd, size_t *used,
			  const char **err)
{
	const uint8_t *nl = memchr(buf, '\n', len), *p = buf, *end;

	if (!nl) {
		if (len > KV_RESP_MAX_INLINE) {
			*err = "Protocol error: too big inline request";
			return -1;
		}
		return 0;
	}
	end = nl > buf && nl[-1] == '\r' ? nl - 1 : nl;
	cmd->argc = 0;
	while (p < end) {
		const uint8_t *s;

		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		if (p == end)
			break;
		s = p;
		while (p < end && *p != ' ' && *p != '\t')
			p++;
		if (cmd->argc == KV_RESP_MAX_ARGS) {
			*err = "Protocol error: too many arguments";
			return -1;
		}
		cmd->argv[cmd->argc] = s;
		cmd->argl[cmd->argc++] = (size_t)(p - s);
	}
	*used = (size_t)(nl + 1 - buf);
	return 1;
}

int kv_resp_parse(const uint8_t *buf, size_t len, struct kv_resp_cmd *cmd,
		  size_t *used, const char **err)
{
	const uint8_t *p = buf + 1, *end = buf + len;
	long long n;

	if (!len)
		return 0;
	if (buf[0] != '*')
		return kv_resp_inline(buf, len, cmd, used, err);
	n = kv_resp_num(p, end, &p);
	if (n == -1)
		return 0;
	if (n < 0 || n > KV_RESP_MAX_ARGS) {
		*err = "Protocol error: invalid multibulk length";
		return -1;
	}
	cmd->argc = (int)n;
	for (int i = 0; i < cmd->argc; i++) {
		long long bl;

		if (p == end)
			return 0;
		if (*p != '$') {
			*err = "Protocol error: expected '$'";
			return -1;
		}
		bl = kv_resp_num(p + 1, end, &p);
		if (bl == -1)
			return 0;
		if (bl < 0 || bl > KV_RESP_MAX_BULK) {
			*err = "Protocol error: invalid bulk length";
			return -1;
		}
		if (end - p < bl + 2)
			return 0;
		if (p[bl] != '\r' || p[bl + 1] != '\n') {
			*err = "Protocol error: bulk not ended by CRLF";
			return -1;
		}
		cmd->argv[i] = p;
		cmd->argl[i] = (size_t)bl;
		p += bl + 2;
	}
	*used = (size_t)(p - buf);
	return 1;
}
