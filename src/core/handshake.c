/* SPDX-License-Identifier: MIT */
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "handshake.h"
#include "handshake_proto.h"
#include "sock.h"

struct rdmx_hs {
	struct rdmx_ctx *ctx;
	int fd;
	const char *peer;
	uint64_t deadline, start;
	uint64_t allow; /* transports the connection may use (its srq's) */
	uint64_t mine, theirs; /* the two offers, for the refusal's line */
	crypto_hash_sha256_state transcript; /* every byte either side sent */
};

/* MAC of @role over the transcript so far, with the pre-shared key. */
static void rdmx_hs_mac(const struct rdmx_hs *hs, const char *role,
			uint8_t mac[RDMX_HS_MAC_LEN])
{
	crypto_hash_sha256_state t = hs->transcript;
	crypto_auth_hmacsha256_state st;
	uint8_t digest[crypto_hash_sha256_BYTES];

	crypto_hash_sha256_final(&t, digest);
	crypto_auth_hmacsha256_init(&st, hs->ctx->auth_key,
				    hs->ctx->auth_key_len);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)role, strlen(role));
	crypto_auth_hmacsha256_update(&st, digest, sizeof(digest));
	crypto_auth_hmacsha256_final(&st, mac);
}

static void rdmx_hs_init(struct rdmx_hs *hs, struct rdmx_ctx *ctx, int fd,
			 const char *peer, uint64_t allow, uint64_t deadline)
{
	hs->ctx = ctx;
	hs->fd = fd;
	hs->peer = peer;
	hs->start = rdmx_now_us();
	hs->deadline =
		deadline ? deadline
			 : rdmx_deadline((int)ctx->cfg.handshake_timeout_ms);
	hs->allow = allow;
	crypto_hash_sha256_init(&hs->transcript);
}

/* What this side offers: what it can use, less what the connection may not. */
static uint64_t rdmx_hs_offer(const struct rdmx_hs *hs)
{
	return rdmx_ctx_transport_mask(hs->ctx, hs->fd) & hs->allow;
}

static rdmx_status rdmx_hs_send(struct rdmx_hs *hs, struct rdmx_hs_msg *msg)
{
	uint8_t buf[RDMX_HS_HDR_LEN + RDMX_HS_MAX_BODY];
	size_t n;

	msg->version = RDMX_HS_VERSION;
	n = rdmx_hs_encode(msg, buf);
	crypto_hash_sha256_update(&hs->transcript, buf, n);
	return rdmx_sock_write_full(hs->fd, buf, n, hs->deadline);
}

/* Receive one message of @type; logs what went wrong. */
static rdmx_status rdmx_hs_recv(struct rdmx_hs *hs, uint8_t type,
				struct rdmx_hs_msg *msg)
{
	uint8_t buf[RDMX_HS_HDR_LEN + RDMX_HS_MAX_BODY];
	size_t blen;
	rdmx_status st;

	st = rdmx_sock_read_full(hs->fd, buf, RDMX_HS_HDR_LEN, hs->deadline);
	if (!st)
		st = rdmx_hs_decode_hdr(buf, RDMX_HS_HDR_LEN, msg, &blen);
	if (!st && msg->type != type)
		st = RDMX_ERR_PROTOCOL;
	if (!st)
		st = rdmx_sock_read_full(hs->fd, buf + RDMX_HS_HDR_LEN, blen,
					 hs->deadline);
	if (!st)
		st = rdmx_hs_decode_body(buf + RDMX_HS_HDR_LEN, blen, msg);
	if (!st)
		crypto_hash_sha256_update(&hs->transcript, buf,
					  RDMX_HS_HDR_LEN + blen);
	if (st == RDMX_ERR_TIMEOUT)
		rdmx_peer_error(
			"handshake with %s: no answer within %llu ms", hs->peer,
			(unsigned long long)(hs->deadline - hs->start) / 1000);
	else if (st == RDMX_ERR_PROTOCOL)
		rdmx_peer_error(
			"handshake with %s: malformed message (is it an rdmx "
			"peer?)",
			hs->peer);
	return st;
}

/* "shm,tcp": the transports in @mask, best first. */
static void rdmx_hs_names(uint64_t mask, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (int i = RDMX_TRANSPORT_MAX - 1; i >= 0; i--) {
		const struct rdmx_transport_ops *ops;

		ops = rdmx_transport_by_id((unsigned)i);
		if ((mask & (1ull << i)) && ops && off < len)
			off += (size_t)snprintf(buf + off, len - off, "%s%s",
						off ? "," : "", ops->name);
	}
	if (!off)
		snprintf(buf, len, "none");
}

/*
 * The best transport in @common (higher ids are faster paths) that can
 * serve this peer: one that needs the same host is skipped when the host
 * ids differ. Returns its id and sets *why_p, or -1.
 */
static int rdmx_hs_choose(uint64_t common, bool same_host, uint8_t *why_p)
{
	bool skipped = false;

	for (int i = RDMX_TRANSPORT_MAX - 1; i >= 0; i--) {
		const struct rdmx_transport_ops *ops;

		ops = rdmx_transport_by_id((unsigned)i);
		if (!ops || !(common & (1ull << i)))
			continue;
		if ((ops->caps & RDMX_CAP_SAME_HOST) && !same_host) {
			skipped = true;
			continue;
		}
		*why_p = skipped ? RDMX_HS_WHY_REMOTE : RDMX_HS_WHY_BEST;
		return i;
	}
	*why_p = skipped ? RDMX_HS_WHY_REMOTE : RDMX_HS_WHY_BEST;
	return -1;
}

static void rdmx_hs_reason(struct rdmx_ctx *ctx, uint64_t client,
			   uint64_t server, unsigned chosen, uint8_t why,
			   struct rdmx_hs_result *res)
{
	char c[24], s[24];

	rdmx_hs_names(client, c, sizeof(c));
	rdmx_hs_names(server, s, sizeof(s));
	res->transport = chosen;
	if (strcmp(ctx->cfg.transport, "auto"))
		snprintf(res->reason, sizeof(res->reason),
			 "forced by transport=%s (RDMX_TRANSPORT)",
			 ctx->cfg.transport);
	else if (why == RDMX_HS_WHY_FORCED)
		snprintf(res->reason, sizeof(res->reason),
			 "forced by the peer's transport setting");
	else if (why == RDMX_HS_WHY_REMOTE)
		snprintf(res->reason, sizeof(res->reason),
			 "the peer is on another host or netns "
			 "(client: %s; server: %s)",
			 c, s);
	else
		snprintf(res->reason, sizeof(res->reason),
			 "best both sides support (client: %s; server: %s)", c,
			 s);
}

static rdmx_status rdmx_hs_refused(const struct rdmx_hs *hs, uint16_t code,
				   bool server)
{
	const char *who = server ? "client" : "server";

	switch (code) {
	case RDMX_HS_BAD_VERSION:
		rdmx_peer_error(
			"%s %s speaks another rdmx protocol version (this "
			"side: %d); upgrade one of them",
			who, hs->peer, RDMX_HS_VERSION);
		return RDMX_ERR_PROTOCOL;
	case RDMX_HS_KEY_REQUIRED:
		rdmx_peer_error(
			"%s: the server requires a pre-shared key and the "
			"client has none (set auth.key_file or "
			"RDMX_AUTH_KEY_FILE on the client)",
			hs->peer);
		return RDMX_ERR_AUTH;
	case RDMX_HS_KEY_UNEXPECTED:
		rdmx_peer_error(
			"%s: the client has a pre-shared key and the server "
			"has none; refusing an unauthenticated connection "
			"(set auth.key_file on the server)",
			hs->peer);
		return RDMX_ERR_AUTH;
	case RDMX_HS_KEY_WRONG:
		rdmx_peer_error(
			"%s %s failed authentication: the pre-shared keys "
			"differ",
			who, hs->peer);
		return RDMX_ERR_AUTH;
	case RDMX_HS_NO_TRANSPORT: {
		char m[64], t[64];

		rdmx_hs_names(hs->mine, m, sizeof(m));
		rdmx_hs_names(hs->theirs, t, sizeof(t));
		rdmx_peer_error(
			"%s: no transport both sides can use: this side "
			"offers %s, the peer %s (the transport setting, "
			"RDMX_TRANSPORT, or the connection's "
			"attr.transports)",
			hs->peer, m, t);
		return RDMX_ERR_NO_TRANSPORT;
	}
	case RDMX_HS_NOT_SAME_HOST:
		rdmx_peer_error(
			"%s: the transports allowed need both processes on "
			"one host and network namespace, and these are not "
			"(unset RDMX_TRANSPORT, or use tcp)",
			hs->peer);
		return RDMX_ERR_NO_TRANSPORT;
	}
	rdmx_peer_error("%s %s refused the handshake with unknown code %u", who,
			hs->peer, code);
	return RDMX_ERR_PROTOCOL;
}

static uint16_t rdmx_hs_check_hello(struct rdmx_hs *hs,
				    const struct rdmx_hs_msg *hello,
				    struct rdmx_hs_msg *welcome)
{
	bool same_host;
	uint64_t common;
	int chosen;

	bool has_key = hs->ctx->auth_key_len != 0;

	if (hello->version != RDMX_HS_VERSION)
		return RDMX_HS_BAD_VERSION;
	if (has_key && !(hello->flags & RDMX_HS_F_HAS_KEY))
		return RDMX_HS_KEY_REQUIRED;
	if (!has_key && (hello->flags & RDMX_HS_F_HAS_KEY))
		return RDMX_HS_KEY_UNEXPECTED;
	common = hello->transports & rdmx_hs_offer(hs);
	same_host = !sodium_memcmp(hello->host_id, hs->ctx->host_id,
				   RDMX_HS_HOST_ID_LEN);
	chosen = rdmx_hs_choose(common, same_host, &welcome->why);
	if (chosen < 0)
		return welcome->why == RDMX_HS_WHY_REMOTE
			       ? RDMX_HS_NOT_SAME_HOST
			       : RDMX_HS_NO_TRANSPORT;
	welcome->transport = (uint8_t)chosen;
	if (strcmp(hs->ctx->cfg.transport, "auto"))
		welcome->why = RDMX_HS_WHY_FORCED;
	return RDMX_HS_OK;
}

rdmx_status rdmx_hs_server(struct rdmx_ctx *ctx, int fd, const char *peer,
			   uint64_t allow, uint64_t deadline,
			   struct rdmx_hs_result *res)
{
	struct rdmx_hs hs;
	struct rdmx_hs_msg hello, welcome = { .type = RDMX_HS_WELCOME };
	struct rdmx_hs_msg auth, result = { .type = RDMX_HS_RESULT }, confirm;
	uint8_t mac[RDMX_HS_MAC_LEN];
	rdmx_status st;

	rdmx_hs_init(&hs, ctx, fd, peer, allow, deadline);
	st = rdmx_hs_recv(&hs, RDMX_HS_HELLO, &hello);
	if (st)
		return st;
	welcome.code = rdmx_hs_check_hello(&hs, &hello, &welcome);
	welcome.transports = rdmx_hs_offer(&hs);
	hs.mine = welcome.transports;
	hs.theirs = hello.transports;
	welcome.flags = ctx->auth_key_len ? RDMX_HS_F_HAS_KEY : 0;
	if (welcome.code) {
		rdmx_hs_send(&hs, &welcome);
		return rdmx_hs_refused(&hs, welcome.code, true);
	}
	randombytes_buf(welcome.nonce, sizeof(welcome.nonce));
	st = rdmx_hs_send(&hs, &welcome);
	if (ctx->auth_key_len)
		rdmx_hs_mac(&hs, "rdmx-client", mac);
	if (!st)
		st = rdmx_hs_recv(&hs, RDMX_HS_AUTH, &auth);
	if (st)
		return st;
	/* The client proves the key first; ours follows only then. */
	if (ctx->auth_key_len) {
		if (sodium_memcmp(mac, auth.mac, sizeof(mac)))
			result.code = RDMX_HS_KEY_WRONG;
		else
			rdmx_hs_mac(&hs, "rdmx-server", result.mac);
	}
	st = rdmx_hs_send(&hs, &result);
	if (result.code)
		return rdmx_hs_refused(&hs, result.code, true);
	if (!st)
		st = rdmx_hs_recv(&hs, RDMX_HS_CONFIRM, &confirm);
	if (st == RDMX_ERR_CONN_LOST)
		rdmx_peer_info("handshake with %s: the client gave up before "
			       "confirming (its connect timed out?)",
			       peer);
	if (st)
		return st;
	rdmx_hs_reason(ctx, hello.transports, welcome.transports,
		       welcome.transport, welcome.why, res);
	return RDMX_OK;
}

rdmx_status rdmx_hs_private_send(struct rdmx_ctx *ctx, int fd, const char *peer,
				 const void *mine, size_t len,
				 uint64_t deadline)
{
	struct rdmx_hs hs;
	struct rdmx_hs_msg msg = { .type = RDMX_HS_PRIVATE,
				   .data_len = (uint16_t)len };
	rdmx_status st;

	rdmx_hs_init(&hs, ctx, fd, peer, ~0ull, deadline);
	if (len)
		memcpy(msg.data, mine, len);
	st = rdmx_hs_send(&hs, &msg);
	if (st == RDMX_ERR_CONN_LOST)
		rdmx_peer_error(
			"connection setup with %s: the peer closed before "
			"our private data went out",
			peer);
	return st;
}

rdmx_status rdmx_hs_private_recv(struct rdmx_ctx *ctx, int fd, const char *peer,
				 uint64_t deadline, uint8_t *theirs,
				 uint16_t *theirs_len_p)
{
	struct rdmx_hs hs;
	struct rdmx_hs_msg got;
	rdmx_status st;

	rdmx_hs_init(&hs, ctx, fd, peer, ~0ull, deadline);
	st = rdmx_hs_recv(&hs, RDMX_HS_PRIVATE, &got);
	if (st == RDMX_ERR_CONN_LOST)
		rdmx_peer_error(
			"connection setup with %s: the peer closed before "
			"its private data",
			peer);
	if (st)
		return st;
	memcpy(theirs, got.data, got.data_len);
	*theirs_len_p = got.data_len;
	return RDMX_OK;
}

rdmx_status rdmx_hs_client(struct rdmx_ctx *ctx, int fd, const char *peer,
			   uint64_t allow, uint64_t deadline,
			   struct rdmx_hs_result *res)
{
	struct rdmx_hs hs;
	struct rdmx_hs_msg hello = { .type = RDMX_HS_HELLO }, welcome;
	struct rdmx_hs_msg auth = { .type = RDMX_HS_AUTH }, result;
	struct rdmx_hs_msg confirm = { .type = RDMX_HS_CONFIRM };
	uint8_t mac[RDMX_HS_MAC_LEN];
	rdmx_status st;

	rdmx_hs_init(&hs, ctx, fd, peer, allow, deadline);
	hello.transports = rdmx_hs_offer(&hs);
	hello.flags = ctx->auth_key_len ? RDMX_HS_F_HAS_KEY : 0;
	memcpy(hello.host_id, ctx->host_id, sizeof(hello.host_id));
	randombytes_buf(hello.nonce, sizeof(hello.nonce));
	st = rdmx_hs_send(&hs, &hello);
	if (!st)
		st = rdmx_hs_recv(&hs, RDMX_HS_WELCOME, &welcome);
	if (st)
		goto err_lost;
	hs.mine = hello.transports;
	hs.theirs = welcome.transports;
	if (welcome.code)
		return rdmx_hs_refused(&hs, welcome.code, false);
	/* Range first: the byte comes from the network, the shift needs < 64.
	 */
	if (welcome.transport >= RDMX_TRANSPORT_MAX ||
	    !(hello.transports & (1ull << welcome.transport)) ||
	    !rdmx_transport_by_id(welcome.transport)) {
		rdmx_peer_error(
			"server %s chose transport %u, which this side did "
			"not offer",
			peer, welcome.transport);
		return RDMX_ERR_PROTOCOL;
	}
	if (ctx->auth_key_len)
		rdmx_hs_mac(&hs, "rdmx-client", auth.mac);
	st = rdmx_hs_send(&hs, &auth);
	if (ctx->auth_key_len)
		rdmx_hs_mac(&hs, "rdmx-server", mac);
	if (!st)
		st = rdmx_hs_recv(&hs, RDMX_HS_RESULT, &result);
	if (st)
		goto err_lost;
	if (result.code) {
		rdmx_peer_error(
			"server %s rejected this client's pre-shared key: "
			"the keys differ",
			peer);
		return RDMX_ERR_AUTH;
	}
	/* Every byte both sides sent is under the server's proof. */
	if (ctx->auth_key_len && sodium_memcmp(mac, result.mac, sizeof(mac)))
		return rdmx_hs_refused(&hs, RDMX_HS_KEY_WRONG, false);
	/* We go on: only now does the server's rdmx_accept see us. */
	st = rdmx_hs_send(&hs, &confirm);
	if (st)
		goto err_lost;
	rdmx_hs_reason(ctx, hello.transports, welcome.transports,
		       welcome.transport, welcome.why, res);
	return RDMX_OK;

err_lost:
	if (st == RDMX_ERR_CONN_LOST)
		rdmx_peer_error(
			"handshake with %s: the server closed the connection "
			"(it may have refused this client; see its log)",
			peer);
	return st;
}
