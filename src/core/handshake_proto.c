/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "bytes.h"
#include "handshake_proto.h"

_Static_assert(RDMX_HS_HDR_LEN == 12, "handshake header is 12 bytes");

size_t rdmx_hs_body_len(uint8_t type)
{
	switch (type) {
	case RDMX_HS_HELLO:
		return 64;
	case RDMX_HS_WELCOME:
		return 48;
	case RDMX_HS_AUTH:
		return 32;
	case RDMX_HS_RESULT:
		return 40;
	case RDMX_HS_CONFIRM:
		return 8; /* reserved, zero */
	case RDMX_HS_PRIVATE:
		return 4 + RDMX_PRIVATE_DATA_MAX;
	}
	return 0;
}

size_t rdmx_hs_encode(const struct rdmx_hs_msg *msg,
		      uint8_t buf[RDMX_HS_HDR_LEN + RDMX_HS_MAX_BODY])
{
	size_t blen = rdmx_hs_body_len(msg->type);
	uint8_t *b = buf + RDMX_HS_HDR_LEN;

	memset(buf, 0, RDMX_HS_HDR_LEN + RDMX_HS_MAX_BODY);
	rdmx_put_be(buf, RDMX_HS_MAGIC, 4);
	rdmx_put_be(buf + 4, msg->version, 2);
	buf[6] = msg->type;
	buf[7] = msg->flags;
	rdmx_put_be(buf + 8, blen, 4);
	switch (msg->type) {
	case RDMX_HS_HELLO:
		rdmx_put_be(b, msg->transports, 8);
		memcpy(b + 16, msg->nonce, RDMX_HS_NONCE_LEN);
		memcpy(b + 48, msg->host_id, RDMX_HS_HOST_ID_LEN);
		break;
	case RDMX_HS_WELCOME:
		rdmx_put_be(b, msg->code, 2);
		b[2] = msg->transport;
		b[3] = msg->why;
		rdmx_put_be(b + 8, msg->transports, 8);
		memcpy(b + 16, msg->nonce, RDMX_HS_NONCE_LEN);
		break;
	case RDMX_HS_AUTH:
		memcpy(b, msg->mac, RDMX_HS_MAC_LEN);
		break;
	case RDMX_HS_RESULT:
		rdmx_put_be(b, msg->code, 2);
		memcpy(b + 8, msg->mac, RDMX_HS_MAC_LEN);
		break;
	case RDMX_HS_PRIVATE:
		rdmx_put_be(b, msg->data_len, 2);
		memcpy(b + 4, msg->data, msg->data_len);
		break;
	}
	return RDMX_HS_HDR_LEN + blen;
}

rdmx_status rdmx_hs_decode_hdr(const uint8_t *buf, size_t len,
			       struct rdmx_hs_msg *msg, size_t *body_len_p)
{
	size_t blen;

	if (len < RDMX_HS_HDR_LEN || rdmx_get_be(buf, 4) != RDMX_HS_MAGIC)
		return RDMX_ERR_PROTOCOL;
	memset(msg, 0, sizeof(*msg));
	msg->version = (uint16_t)rdmx_get_be(buf + 4, 2);
	msg->type = buf[6];
	msg->flags = buf[7];
	blen = rdmx_hs_body_len(msg->type);
	if (!blen || rdmx_get_be(buf + 8, 4) != blen)
		return RDMX_ERR_PROTOCOL;
	*body_len_p = blen;
	return RDMX_OK;
}

rdmx_status rdmx_hs_decode_body(const uint8_t *b, size_t len,
				struct rdmx_hs_msg *msg)
{
	if (len != rdmx_hs_body_len(msg->type))
		return RDMX_ERR_PROTOCOL;
	switch (msg->type) {
	case RDMX_HS_HELLO:
		msg->transports = rdmx_get_be(b, 8);
		memcpy(msg->nonce, b + 16, RDMX_HS_NONCE_LEN);
		memcpy(msg->host_id, b + 48, RDMX_HS_HOST_ID_LEN);
		break;
	case RDMX_HS_WELCOME:
		msg->code = (uint16_t)rdmx_get_be(b, 2);
		msg->transport = b[2];
		msg->why = b[3];
		msg->transports = rdmx_get_be(b + 8, 8);
		memcpy(msg->nonce, b + 16, RDMX_HS_NONCE_LEN);
		break;
	case RDMX_HS_AUTH:
		memcpy(msg->mac, b, RDMX_HS_MAC_LEN);
		break;
	case RDMX_HS_RESULT:
		msg->code = (uint16_t)rdmx_get_be(b, 2);
		memcpy(msg->mac, b + 8, RDMX_HS_MAC_LEN);
		break;
	case RDMX_HS_CONFIRM:
		break;
	case RDMX_HS_PRIVATE:
		msg->data_len = (uint16_t)rdmx_get_be(b, 2);
		if (msg->data_len > RDMX_PRIVATE_DATA_MAX)
			return RDMX_ERR_PROTOCOL;
		memcpy(msg->data, b + 4, msg->data_len);
		break;
	default:
		return RDMX_ERR_PROTOCOL;
	}
	return RDMX_OK;
}
