/* SPDX-License-Identifier: MIT */
/* Status names and one-line explanations, from one table. */
#include <stddef.h>

#include "rdmx.h"

static const struct {
	rdmx_status status;
	const char *name;
	const char *text;
} rdmx_statuses[] = {
	{ RDMX_OK, "ok", "success" },
	{ RDMX_ERR_AGAIN, "again",
	  "queue full: poll completions, then post again" },
	{ RDMX_ERR_TIMEOUT, "timeout", "timed out" },
	{ RDMX_ERR_INVALID, "invalid",
	  "invalid argument (the log says which)" },
	{ RDMX_ERR_UNSUPPORTED, "unsupported",
	  "operation not supported by this transport" },
	{ RDMX_ERR_NOMEM, "nomem", "out of memory" },
	{ RDMX_ERR_BUSY, "busy",
	  "object still in use: close its connections, cqs, "
	  "listeners and registrations first" },
	{ RDMX_ERR_REMOTE_ACCESS, "remote_access",
	  "remote access error: the target refused the rkey, the "
	  "range or the access flags" },
	{ RDMX_ERR_LOCAL_LENGTH, "local_length",
	  "incoming message larger than the posted receive buffer" },
	{ RDMX_ERR_REMOTE_INVALID, "remote_invalid",
	  "the peer's receive buffer is smaller than this message" },
	{ RDMX_ERR_FLUSHED, "flushed",
	  "flushed: the connection was closed with work posted" },
	{ RDMX_ERR_NOT_FOUND, "not_found", "not found" },
	{ RDMX_ERR_CONN_REFUSED, "conn_refused",
	  "connection refused: is an rdmx server listening there?" },
	{ RDMX_ERR_UNREACHABLE, "unreachable",
	  "peer unreachable: check the host name and the route" },
	{ RDMX_ERR_AUTH, "auth",
	  "authentication failed: both sides need the same "
	  "pre-shared key (auth.key_file, RDMX_AUTH_KEY_FILE)" },
	{ RDMX_ERR_PROTOCOL, "protocol",
	  "protocol error: the peer speaks another rdmx version or "
	  "sent a malformed message" },
	{ RDMX_ERR_CONN_LOST, "conn_lost",
	  "connection lost: the peer died or closed the connection" },
	{ RDMX_ERR_NO_TRANSPORT, "no_transport",
	  "no transport both sides can use (see RDMX_TRANSPORT)" },
	{ RDMX_ERR_CONFIG, "config",
	  "invalid configuration value (the log names the key)" },
	{ RDMX_ERR_SYSTEM, "system",
	  "system call failed (the log has the call and the error)" },
};

#define RDMX_NSTATUSES (sizeof(rdmx_statuses) / sizeof(rdmx_statuses[0]))

const char *rdmx_strerror(rdmx_status status)
{
	for (size_t i = 0; i < RDMX_NSTATUSES; i++)
		if (rdmx_statuses[i].status == status)
			return rdmx_statuses[i].text;
	return "unknown rdmx status";
}

const char *rdmx_status_name(rdmx_status status)
{
	for (size_t i = 0; i < RDMX_NSTATUSES; i++)
		if (rdmx_statuses[i].status == status)
			return rdmx_statuses[i].name;
	return "unknown";
}
