// SPDX-License-Identifier: MIT
/* The page service's two messages (page_proto.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "page_proto.h"

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)(v >> 16));
	put16(p + 2, (uint16_t)v);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)get16(p) << 16 | get16(p + 2);
}

bool page_name_ok(const char *name, size_t len)
{
	if (!len || len > RDMX_PAGE_NAME_MAX)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return false;
	}
	return true;
}

static void page_header(uint8_t *buf, uint16_t word)
{
	put32(buf, PAGE_MAGIC);
	put16(buf + 4, PAGE_VERSION);
	put16(buf + 6, word);
}

static bool page_header_ok(const uint8_t *buf, uint32_t len, uint32_t want)
{
	return len == want && get32(buf) == PAGE_MAGIC &&
	       get16(buf + 4) == PAGE_VERSION;
}

uint32_t page_lookup_encode(uint8_t *buf, const char *name)
{
	size_t n = strlen(name);

	memset(buf, 0, PAGE_LOOKUP_LEN);
	page_header(buf, PAGE_OP_LOOKUP);
	buf[8] = (uint8_t)n;
	memcpy(buf + 9, name, n);
	return PAGE_LOOKUP_LEN;
}

/* Why @len bytes at @buf are no lookup; NULL when they are one. */
static const char *page_lookup_fault(const uint8_t *buf, uint32_t len)
{
	if (len != PAGE_LOOKUP_LEN)
		return "not the length of a lookup";
	if (get32(buf) != PAGE_MAGIC)
		return "not the page service's magic";
	if (get16(buf + 4) != PAGE_VERSION)
		return "another version";
	if (get16(buf + 6) != PAGE_OP_LOOKUP)
		return "not a lookup";
	if (!page_name_ok((const char *)buf + 9, buf[8]))
		return "a malformed region name";
	return NULL;
}

bool page_lookup_decode(const uint8_t *buf, uint32_t len,
			char name[RDMX_PAGE_NAME_MAX + 1])
{
	if (page_lookup_fault(buf, len))
		return false;
	memcpy(name, buf + 9, buf[8]);
	name[buf[8]] = '\0';
	return true;
}

void page_lookup_explain(const uint8_t *buf, uint32_t len, char *out,
			 size_t size)
{
	const char *why = page_lookup_fault(buf, len);

	snprintf(out, size,
		 "%s (%" PRIu32 " bytes, magic 0x%08" PRIx32
		 ", version %u, op %u, name length %u)",
		 why ? why : "a valid lookup", len, get32(buf), get16(buf + 4),
		 get16(buf + 6), buf[8]);
}

uint32_t page_reply_encode(uint8_t *buf, const struct page_reply *r)
{
	memset(buf, 0, PAGE_REPLY_LEN);
	page_header(buf, r->status);
	put32(buf + 8, r->page_size);
	rdmx_remote_pack(&r->region, buf + 16);
	return PAGE_REPLY_LEN;
}

void page_reply_explain(const uint8_t *buf, uint32_t len, char *out,
			size_t size)
{
	snprintf(out, size,
		 "%" PRIu32 " bytes, magic 0x%08" PRIx32
		 ", version %u, status %u, page size %" PRIu32,
		 len, get32(buf), get16(buf + 4), get16(buf + 6),
		 get32(buf + 8));
}

bool page_reply_decode(const uint8_t *buf, uint32_t len, struct page_reply *r)
{
	if (!page_header_ok(buf, len, PAGE_REPLY_LEN))
		return false;
	r->status = get16(buf + 6);
	r->page_size = get32(buf + 8);
	if (r->status > PAGE_REPLY_BAD_REQUEST)
		return false;
	memset(&r->region, 0, sizeof(r->region));
	return r->status != PAGE_REPLY_OK ||
	       rdmx_remote_unpack(buf + 16, RDMX_REMOTE_PACKED_LEN,
				  &r->region) == RDMX_OK;
}
