/* SPDX-License-Identifier: MIT */
/*
 * The page service's wire format: one LOOKUP message from the client and
 * one REPLY from the server, each PAGE_MSG bytes in a SEND, fields
 * big-endian at fixed offsets. Pages themselves move by READ and WRITE on
 * the region the reply names.
 *
 *   LOOKUP  0 magic u32 | 4 version u16 | 6 op u16 | 8 name_len u8 |
 *           9 name[63]                                       (72 bytes)
 *   REPLY   0 magic u32 | 4 version u16 | 6 status u16 | 8 page_size u32 |
 *           12 reserved u32 | 16 region (rdmx_remote_pack, 24 bytes)
 *                                                            (40 bytes)
 */
#ifndef RDMX_PAGE_PROTO_H
#define RDMX_PAGE_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdmx.h"
#include "rdmx_page.h"

#define PAGE_MAGIC 0x52504147u /* "RPAG" */
#define PAGE_VERSION 1
#define PAGE_OP_LOOKUP 1
#define PAGE_MSG 128 /* RECV buffers on both sides */
#define PAGE_LOOKUP_LEN 72
#define PAGE_REPLY_LEN (16 + RDMX_REMOTE_PACKED_LEN)

_Static_assert(9 + RDMX_PAGE_NAME_MAX == PAGE_LOOKUP_LEN, "lookup size");
_Static_assert(PAGE_REPLY_LEN <= PAGE_MSG && PAGE_LOOKUP_LEN <= PAGE_MSG,
	       "messages fit the RECV");

enum page_reply_status {
	PAGE_REPLY_OK = 0,
	PAGE_REPLY_NOT_FOUND = 1,
	PAGE_REPLY_BAD_REQUEST = 2,
};

struct page_reply {
	uint16_t status; /* enum page_reply_status */
	uint32_t page_size;
	struct rdmx_remote region;
};

/* True for 1..RDMX_PAGE_NAME_MAX characters of [A-Za-z0-9._-]. */
bool page_name_ok(const char *name, size_t len);

/* Encode a lookup of @name (already checked) into @buf; returns its length. */
uint32_t page_lookup_encode(uint8_t *buf, const char *name);
/*
 * Decode @len bytes into @name (NUL-terminated); false when malformed.
 * @buf holds PAGE_MSG bytes whatever @len says (a RECV buffer).
 */
bool page_lookup_decode(const uint8_t *buf, uint32_t len,
			char name[RDMX_PAGE_NAME_MAX + 1]);
/* Into @out: why the lookup in @buf is refused, and its header's fields. */
void page_lookup_explain(const uint8_t *buf, uint32_t len, char *out,
			 size_t size);

uint32_t page_reply_encode(uint8_t *buf, const struct page_reply *r);
bool page_reply_decode(const uint8_t *buf, uint32_t len, struct page_reply *r);
/* Into @out: the fields of the @len bytes of reply in @buf, for the log. */
void page_reply_explain(const uint8_t *buf, uint32_t len, char *out,
			size_t size);

#endif
