/* SPDX-License-Identifier: MIT */
/*
 * Wire format of the connection handshake on the control connection. Only
 * this file knows the byte layout. Every message is a 12-byte header and a
 * fixed-size body; all integers are big-endian. The header layout never
 * changes between versions, so any two versions can tell each other apart.
 *
 *   client                          server
 *   HELLO  (transports, host id, nonce_c) ->
 *                                <- WELCOME (code, transport, why,
 *                                            transports, nonce_s)
 *   AUTH   (mac_c)               ->
 *                                <- RESULT  (code, mac_s)
 *   CONFIRM (reserved)           ->
 *
 * CONFIRM says the client goes on: it sends it only after RESULT and the
 * server's proof checked out within its own deadline, and the server's
 * rdmx_accept sees the peer only once it has arrived. A client that gives
 * up (its rdmx_connect timed out) closes instead, so the two sides agree
 * on whether a connection exists.
 *
 * Then PRIVATE (length, up to RDMX_PRIVATE_DATA_MAX bytes of the
 * application's private data) goes each way, around the transport's setup:
 *
 *   PRIVATE (client's)           ->
 *   ... the transport's setup (its own protocol) ...
 *                                <- PRIVATE (server's)
 *
 * The server's comes only when its rdmx_accept hands the connection out,
 * so the setup runs in the listener's worker, beside other peers', before
 * the accepting call (and the private data it offers) is known. Version 4
 * moved the server's PRIVATE after the setup; version 3 sent both before.
 *
 * With a pre-shared key, mac_c = HMAC-SHA256(key, "rdmx-client" ||
 * SHA-256(HELLO || WELCOME)) and mac_s = HMAC-SHA256(key, "rdmx-server" ||
 * SHA-256(HELLO || WELCOME || AUTH)), over the messages' bytes exactly as
 * sent, headers included. So each side proves the key without sending
 * it, a replay fails against fresh nonces, and an on-path attacker who
 * changes an offer (a downgrade) breaks both proofs. The client proves
 * first: a stranger who connects learns nothing it could test key guesses
 * against offline, since the server's proof comes only after the
 * client's has checked out. (A client that connects to an impostor does
 * give it one proof to guess against: keys are at least 16 bytes.)
 */
#ifndef RDMX_HANDSHAKE_PROTO_H
#define RDMX_HANDSHAKE_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "rdmx.h"

#define RDMX_HS_MAGIC 0x52444d58u /* "RDMX" */
#define RDMX_HS_VERSION 4
#define RDMX_HS_HDR_LEN 12
#define RDMX_HS_NONCE_LEN 32
#define RDMX_HS_MAC_LEN 32
#define RDMX_HS_MAX_BODY 260

enum rdmx_hs_type {
	RDMX_HS_HELLO = 1,
	RDMX_HS_WELCOME = 2,
	RDMX_HS_AUTH = 3,
	RDMX_HS_RESULT = 4,
	RDMX_HS_CONFIRM = 5,
	RDMX_HS_PRIVATE = 6,
};

/* Header flags. */
enum {
	RDMX_HS_F_HAS_KEY = 1 << 0, /* HELLO, WELCOME: sender has a key */
};

/* WELCOME and RESULT codes. */
enum rdmx_hs_code {
	RDMX_HS_OK = 0,
	RDMX_HS_BAD_VERSION = 1,
	RDMX_HS_KEY_REQUIRED = 2, /* server has a key, client has none */
	RDMX_HS_KEY_UNEXPECTED = 3, /* client has a key, server has none */
	RDMX_HS_KEY_WRONG = 4,
	RDMX_HS_NO_TRANSPORT = 5,
	RDMX_HS_NOT_SAME_HOST = 6, /* only same-host transports were allowed */
};

/* WELCOME: why the server chose the transport it chose. */
enum rdmx_hs_why {
	RDMX_HS_WHY_BEST = 0, /* the best transport both sides offer */
	RDMX_HS_WHY_FORCED = 1, /* a side's transport setting allowed one */
	RDMX_HS_WHY_REMOTE = 2, /* a better one needs the same host */
};

#define RDMX_HS_HOST_ID_LEN 16

/* A decoded message; which fields count depends on type. */
struct rdmx_hs_msg {
	uint16_t version;
	uint8_t type;
	uint8_t flags;
	uint16_t code; /* WELCOME, RESULT */
	uint8_t transport; /* WELCOME: chosen transport id */
	uint8_t why; /* WELCOME: enum rdmx_hs_why */
	uint8_t host_id[RDMX_HS_HOST_ID_LEN]; /* HELLO */
	uint64_t transports; /* HELLO, WELCOME: mask the sender can use */
	uint8_t nonce[RDMX_HS_NONCE_LEN]; /* HELLO, WELCOME */
	uint8_t mac[RDMX_HS_MAC_LEN]; /* AUTH, RESULT */
	uint16_t data_len; /* PRIVATE */
	uint8_t data[RDMX_PRIVATE_DATA_MAX]; /* PRIVATE */
};

/* Body sizes: HELLO 64, WELCOME 48, AUTH 32, RESULT 40, CONFIRM 8,
 * PRIVATE 260. */
size_t rdmx_hs_body_len(uint8_t type);

/* Encode header and body into @buf; returns the byte count. */
size_t rdmx_hs_encode(const struct rdmx_hs_msg *msg,
		      uint8_t buf[RDMX_HS_HDR_LEN + RDMX_HS_MAX_BODY]);

/*
 * Decode a header: checks the magic, the type and that the body length is
 * the one the type has. Sets version, type and flags of @msg and the body
 * length. RDMX_ERR_PROTOCOL when anything is off.
 */
rdmx_status rdmx_hs_decode_hdr(const uint8_t *buf, size_t len,
			       struct rdmx_hs_msg *msg, size_t *body_len_p);

/* Decode a body of the type already set in @msg. */
rdmx_status rdmx_hs_decode_body(const uint8_t *buf, size_t len,
				struct rdmx_hs_msg *msg);

#endif
