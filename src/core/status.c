/* SPDX-License-Identifier: MIT */
#include "rdmx.h"

const char *rdmx_strerror(rdmx_status status)
{
	switch (status) {
	case RDMX_OK:
		return "success";
	case RDMX_ERR_AGAIN:
		return "queue full: poll completions, then post again";
	case RDMX_ERR_TIMEOUT:
		return "timed out";
	case RDMX_ERR_INVALID:
		return "invalid argument (the log says which)";
	case RDMX_ERR_UNSUPPORTED:
		return "operation not supported by this transport";
	case RDMX_ERR_NOMEM:
		return "out of memory";
	case RDMX_ERR_BUSY:
		return "object still in use: close its connections, cqs, "
		       "listeners and registrations first";
	case RDMX_ERR_REMOTE_ACCESS:
		return "remote access error: the target refused the rkey, the "
		       "range or the access flags";
	case RDMX_ERR_LOCAL_LENGTH:
		return "incoming message larger than the posted receive buffer";
	case RDMX_ERR_REMOTE_INVALID:
		return "the peer's receive buffer is smaller than this message";
	case RDMX_ERR_FLUSHED:
		return "flushed: the connection was closed with work posted";
	case RDMX_ERR_NOT_FOUND:
		return "not found";
	case RDMX_ERR_CONN_REFUSED:
		return "connection refused: is an rdmx server listening there?";
	case RDMX_ERR_UNREACHABLE:
		return "peer unreachable: check the host name and the route";
	case RDMX_ERR_AUTH:
		return "authentication failed: both sides need the same "
		       "pre-shared key (auth.key_file, RDMX_AUTH_KEY_FILE)";
	case RDMX_ERR_PROTOCOL:
		return "protocol error: the peer speaks another rdmx version or "
		       "sent a malformed message";
	case RDMX_ERR_CONN_LOST:
		return "connection lost: the peer died or closed the connection";
	case RDMX_ERR_NO_TRANSPORT:
		return "no transport both sides can use (see RDMX_TRANSPORT)";
	case RDMX_ERR_CONFIG:
		return "invalid configuration value (the log names the key)";
	case RDMX_ERR_SYSTEM:
		return "system call failed (the log has the call and the error)";
	}
	return "unknown rdmx status";
}
