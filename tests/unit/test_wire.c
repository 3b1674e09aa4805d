/* SPDX-License-Identifier: MIT */
/* Description: the tcp frame header, handshake messages and packed descriptors.
 */
#include <string.h>

#include "harness.h"
#include "handshake_proto.h"
#include "sw_proto.h"

static void test_tcp_hdr_round_trip(void **state)
{
	struct rdmx_sw_hdr h = { .type = RDMX_SW_ATOMIC_REQ,
				 .op = RDMX_SW_CMP_SWAP,
				 .credits = 3,
				 .rkey = 0xfeedf00dabcdef01ull,
				 .seq = 1ull << 40,
				 .addr = 0x1122334455667788ull,
				 .arg0 = 5,
				 .arg1 = ~0ull },
			   g;
	uint8_t b[RDMX_SW_HDR_LEN];

	(void)state;
	assert_int_equal(rdmx_sw_hdr_pack(&h, b), RDMX_SW_HDR_LEN);
	assert_int_equal(b[0], RDMX_SW_PROTO_VERSION);
	assert_int_equal(b[8], 0); /* big-endian seq */
	assert_int_equal(b[10], 1);
	assert_int_equal(b[48], 0xfe); /* the rkey's high half goes too */
	assert_int_equal(rdmx_sw_hdr_unpack(b, &g), RDMX_OK);
	assert_int_equal(g.type, h.type);
	assert_int_equal(g.op, h.op);
	assert_int_equal(g.credits, 3);
	assert_int_equal(g.rkey, h.rkey);
	assert_int_equal(g.seq, h.seq);
	assert_int_equal(g.addr, h.addr);
	assert_int_equal(g.arg0, 5);
	assert_int_equal(g.arg1, ~0ull);
}

static void test_tcp_hdr_rejects_bad_frames(void **state)
{
	struct rdmx_sw_hdr h = { .type = RDMX_SW_WRITE, .length = 10 }, g;
	uint8_t b[RDMX_SW_HDR_LEN], bad[RDMX_SW_HDR_LEN];

	(void)state;
	rdmx_sw_hdr_pack(&h, b);
	assert_int_equal(rdmx_sw_hdr_unpack(b, &g), RDMX_OK);
	memcpy(bad, b, sizeof(b));
	bad[0] = 1; /* version 1: a 48-byte header, a 32-bit rkey */
	assert_int_equal(rdmx_sw_hdr_unpack(bad, &g), RDMX_ERR_PROTOCOL);
	memcpy(bad, b, sizeof(b));
	bad[21] = 1; /* the zero field */
	assert_int_equal(rdmx_sw_hdr_unpack(bad, &g), RDMX_ERR_PROTOCOL);
	memcpy(bad, b, sizeof(b));
	bad[1] = RDMX_SW_TYPE_MAX + 1;
	assert_int_equal(rdmx_sw_hdr_unpack(bad, &g), RDMX_ERR_PROTOCOL);
	memcpy(bad, b, sizeof(b));
	bad[3] = 0x80; /* unknown flag */
	assert_int_equal(rdmx_sw_hdr_unpack(bad, &g), RDMX_ERR_PROTOCOL);
	memcpy(bad, b, sizeof(b));
	bad[16] = 0x80; /* length 2^31 + 10 */
	assert_int_equal(rdmx_sw_hdr_unpack(bad, &g), RDMX_ERR_PROTOCOL);
	h = (struct rdmx_sw_hdr){ .type = RDMX_SW_CREDIT, .length = 1 };
	rdmx_sw_hdr_pack(&h, b); /* a CREDIT carries no payload */
	assert_int_equal(rdmx_sw_hdr_unpack(b, &g), RDMX_ERR_PROTOCOL);
	h = (struct rdmx_sw_hdr){ .type = RDMX_SW_ATOMIC_RESP, .length = 8 };
	rdmx_sw_hdr_pack(&h, b); /* nor does an atomic's answer */
	assert_int_equal(rdmx_sw_hdr_unpack(b, &g), RDMX_ERR_PROTOCOL);
	h = (struct rdmx_sw_hdr){ .type = RDMX_SW_ATOMIC_REQ, .op = 9 };
	rdmx_sw_hdr_pack(&h, b);
	assert_int_equal(rdmx_sw_hdr_unpack(b, &g), RDMX_ERR_PROTOCOL);
}

/*
 * A header is as long as its type's last field: an ACK and a SEND of 8
 * bytes fit one line with the shm ring's stamp. The bytes after a short
 * header are the next frame's, never read as this one's fields.
 */
static void test_sw_hdr_short(void **state)
{
	struct rdmx_sw_hdr ack = { .type = RDMX_SW_ACK, .seq = 77 },
			   send = { .type = RDMX_SW_SEND,
				    .credits = 2,
				    .seq = 78,
				    .length = 8 },
			   g;
	uint8_t b[RDMX_SW_HDR_LEN];
	size_t n;

	(void)state;
	memset(b, 0xff, sizeof(b));
	n = rdmx_sw_hdr_pack(&ack, b);
	assert_int_equal(n, 16);
	assert_int_equal(rdmx_sw_hdr_len(b), 16);
	assert_int_equal(rdmx_sw_hdr_unpack(b, &g), RDMX_OK);
	assert_int_equal(g.type, RDMX_SW_ACK);
	assert_int_equal(g.seq, 77);
	assert_int_equal(g.length, 0);
	assert_int_equal(g.rkey, 0);
	memset(b, 0xff, sizeof(b));
	n = rdmx_sw_hdr_pack(&send, b);
	assert_int_equal(n, 24);
	assert_int_equal(rdmx_sw_hdr_len(b), 24);
	assert_int_equal(rdmx_sw_hdr_unpack(b, &g), RDMX_OK);
	assert_int_equal(g.length, 8);
	assert_int_equal(g.credits, 2);
	assert_int_equal(g.arg0, 0);
	/* Another version, or no type: the shortest, for unpack to refuse. */
	b[0] = RDMX_SW_PROTO_VERSION - 1;
	assert_int_equal(rdmx_sw_hdr_len(b), RDMX_SW_HDR_MIN);
	assert_int_equal(rdmx_sw_hdr_unpack(b, &g), RDMX_ERR_PROTOCOL);
	b[0] = RDMX_SW_PROTO_VERSION;
	b[1] = 0;
	assert_int_equal(rdmx_sw_hdr_len(b), RDMX_SW_HDR_MIN);
	assert_int_equal(rdmx_sw_hdr_unpack(b, &g), RDMX_ERR_PROTOCOL);
	b[1] = RDMX_SW_WRITE;
	assert_int_equal(rdmx_sw_hdr_len(b), RDMX_SW_HDR_LEN);
}

static void test_sw_hdr_byref(void **state)
{
	struct rdmx_sw_hdr h = { .type = RDMX_SW_WRITE,
				 .flags = RDMX_SW_F_BYREF,
				 .op = 3,
				 .length = 1 << 20 },
			   g;
	uint8_t b[RDMX_SW_HDR_LEN];

	(void)state;
	rdmx_sw_hdr_pack(&h, b);
	assert_int_equal(rdmx_sw_hdr_unpack(b, &g), RDMX_OK);
	/* Descriptors travel, not the data. */
	assert_int_equal(rdmx_sw_wire_len(&g), 3 * RDMX_SW_REF_LEN);
	h.op = 0; /* no descriptor */
	rdmx_sw_hdr_pack(&h, b);
	assert_int_equal(rdmx_sw_hdr_unpack(b, &g), RDMX_ERR_PROTOCOL);
	h.op = RDMX_MAX_SGE + 1;
	rdmx_sw_hdr_pack(&h, b);
	assert_int_equal(rdmx_sw_hdr_unpack(b, &g), RDMX_ERR_PROTOCOL);
	h = (struct rdmx_sw_hdr){ .type = RDMX_SW_SEND,
				  .flags = RDMX_SW_F_BYREF,
				  .op = 1,
				  .length = 8 };
	rdmx_sw_hdr_pack(&h, b); /* SEND never goes by reference */
	assert_int_equal(rdmx_sw_hdr_unpack(b, &g), RDMX_ERR_PROTOCOL);
	h = (struct rdmx_sw_hdr){ .type = RDMX_SW_READ_RESP,
				  .flags = RDMX_SW_F_BYREF,
				  .length = 99 };
	rdmx_sw_hdr_pack(&h, b);
	assert_int_equal(rdmx_sw_hdr_unpack(b, &g), RDMX_OK);
	assert_int_equal(rdmx_sw_wire_len(&g), 0);
}

static void test_hs_round_trip(void **state)
{
	struct rdmx_hs_msg m = { .version = RDMX_HS_VERSION,
				 .type = RDMX_HS_WELCOME,
				 .flags = 1,
				 .code = 4,
				 .transport = 2,
				 .transports = 5 },
			   g;
	uint8_t b[RDMX_HS_HDR_LEN + RDMX_HS_MAX_BODY];
	size_t n, blen;

	(void)state;
	memset(m.nonce, 7, sizeof(m.nonce));
	memset(m.mac, 9, sizeof(m.mac));
	n = rdmx_hs_encode(&m, b);
	assert_int_equal(n, RDMX_HS_HDR_LEN + 48);
	assert_int_equal(rdmx_hs_decode_hdr(b, n, &g, &blen), RDMX_OK);
	assert_int_equal(blen, 48);
	assert_int_equal(rdmx_hs_decode_body(b + RDMX_HS_HDR_LEN, blen, &g),
			 RDMX_OK);
	assert_int_equal(g.code, 4);
	assert_int_equal(g.transport, 2);
	assert_int_equal(g.transports, 5);
	assert_memory_equal(g.nonce, m.nonce, sizeof(m.nonce));
	/* The server's proof travels in RESULT, after the client's. */
	m.type = RDMX_HS_RESULT;
	assert_int_equal(rdmx_hs_encode(&m, b), RDMX_HS_HDR_LEN + 40);
	assert_int_equal(rdmx_hs_decode_hdr(b, RDMX_HS_HDR_LEN + 40, &g, &blen),
			 RDMX_OK);
	assert_int_equal(rdmx_hs_decode_body(b + RDMX_HS_HDR_LEN, blen, &g),
			 RDMX_OK);
	assert_int_equal(g.code, 4);
	assert_memory_equal(g.mac, m.mac, sizeof(m.mac));
	m.type = RDMX_HS_WELCOME;
	n = rdmx_hs_encode(&m, b);
	b[0] ^= 1; /* magic */
	assert_int_equal(rdmx_hs_decode_hdr(b, n, &g, &blen),
			 RDMX_ERR_PROTOCOL);
	b[0] ^= 1;
	b[11] ^= 1; /* body length */
	assert_int_equal(rdmx_hs_decode_hdr(b, n, &g, &blen),
			 RDMX_ERR_PROTOCOL);
	b[11] ^= 1;
	b[6] = 99; /* type */
	assert_int_equal(rdmx_hs_decode_hdr(b, n, &g, &blen),
			 RDMX_ERR_PROTOCOL);
}

static void test_remote_pack(void **state)
{
	struct rdmx_remote r = { 0x7fff12345678ull, (1ull << 47) + 3,
				 0xfeedf00d0badcafeull },
			   g;
	uint8_t b[RDMX_REMOTE_PACKED_LEN];

	(void)state;
	rdmx_remote_pack(&r, b);
	assert_int_equal(rdmx_remote_unpack(b, sizeof(b), &g), RDMX_OK);
	assert_int_equal(g.addr, r.addr);
	assert_int_equal(g.length, r.length);
	assert_int_equal(g.rkey, r.rkey);
	assert_int_equal(rdmx_remote_unpack(b, sizeof(b) - 1, &g),
			 RDMX_ERR_INVALID);
	b[23] = 1; /* version 1: a 32-bit rkey */
	assert_int_equal(rdmx_remote_unpack(b, sizeof(b), &g),
			 RDMX_ERR_INVALID);
}

/*
 * Bad descriptors come from peers: 100 of them get 10 lines a second
 * (rdmx_log_peer). A chaos run's hostile kv clients had the server log
 * ~80 a second of them.
 */
static void test_remote_unpack_bad_bytes_said_in_moderation(void **state)
{
	static char log[1 << 16];
	struct log_catch lc;
	struct rdmx_remote g;
	uint8_t b[3] = { 0 };
	int said;

	(void)state;
	log_catch_begin(&lc);
	for (int i = 0; i < 100; i++)
		if (rdmx_remote_unpack(b, sizeof(b), &g) != RDMX_ERR_INVALID)
			break;
	log_catch_end(&lc, log, sizeof(log));
	said = log_count(log, "rdmx_remote_unpack:");
	/* In microseconds: this second and what was left of the last. */
	assert_true(said >= 1 && said <= 20);
	assert_int_equal(rdmx_remote_unpack(NULL, 24, &g), RDMX_ERR_INVALID);
	assert_int_equal(rdmx_remote_unpack(b, sizeof(b), NULL),
			 RDMX_ERR_INVALID);
}

static void test_strerror_names_every_status(void **state)
{
	(void)state;
	for (int s = -60; s <= 0; s++)
		assert_non_null(rdmx_strerror((rdmx_status)s));
	assert_string_equal(rdmx_strerror(RDMX_OK), "success");
	assert_non_null(
		strstr(rdmx_strerror(RDMX_ERR_AUTH), "RDMX_AUTH_KEY_FILE"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tcp_hdr_round_trip),
		cmocka_unit_test(test_tcp_hdr_rejects_bad_frames),
		cmocka_unit_test(test_sw_hdr_short),
		cmocka_unit_test(test_sw_hdr_byref),
		cmocka_unit_test(test_hs_round_trip),
		cmocka_unit_test(test_remote_pack),
		cmocka_unit_test(
			test_remote_unpack_bad_bytes_said_in_moderation),
		cmocka_unit_test(test_strerror_names_every_status),
	};

	return cmocka_run_group_tests_name("wire", tests, NULL, NULL);
}
