/* SPDX-License-Identifier: MIT */
/*
 * What the frame fuzzers share: a context with a registration the input
 * may name ("RKEYRKEY" and "ADDRADDR" stand for its rkey and an address in
 * it), and requests of our own so that answers have something to match.
 */
#ifndef RDMX_FUZZ_RIG_H
#define RDMX_FUZZ_RIG_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"

struct fuzz_rig {
	struct rdmx_ctx *ctx;
	struct rdmx_cq *cq;
	uint8_t *region, *local;
	struct rdmx_mr *region_mr, *local_mr;
};

/* A context (manual progress, no log) with both registrations; aborts. */
void fuzz_rig_init(struct fuzz_rig *r);
/* Replace the symbolic rkey and address in @b with the live ones. */
void fuzz_rig_resolve(const struct fuzz_rig *r, uint8_t *b, size_t size);
/* Two RECVs, then a WRITE, a READ, a fetch-add and a SEND. */
void fuzz_rig_post(const struct fuzz_rig *r,
		   const struct rdmx_transport_ops *ops,
		   struct rdmx_conn *conn);

#endif
