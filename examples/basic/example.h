/* SPDX-License-Identifier: MIT */
/*
 * What the examples share: open a context and a cq, then either accept one
 * client ("-l ADDR": listen) or connect to a server ("ADDR"), and wait for
 * one completion. Copy it with the example you start from.
 */
#ifndef RDMX_EXAMPLE_H
#define RDMX_EXAMPLE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdmx.h>

struct example {
	struct rdmx_ctx *ctx;
	struct rdmx_cq *cq;
	struct rdmx_listener *lst;
	struct rdmx_conn *conn;
	int server; /* 1 after "-l ADDR" */
	const char *addr;
};

static inline __attribute__((noreturn)) void example_die(const char *what,
							 rdmx_status st)
{
	fprintf(stderr, "%s: %s\n", what, rdmx_strerror(st));
	exit(1);
}

/* Parse "-l ADDR" or "ADDR"; open the context and the cq. */
static inline void example_init(struct example *ex, int argc, char **argv,
				const char *usage)
{
	rdmx_status st;

	memset(ex, 0, sizeof(*ex));
	if (argc == 3 && !strcmp(argv[1], "-l")) {
		ex->server = 1;
		ex->addr = argv[2];
	} else if (argc == 2 && argv[1][0] != '-') {
		ex->addr = argv[1];
	} else {
		fprintf(stderr, "usage: %s -l [HOST]:PORT | %s HOST:PORT\n%s\n",
			argv[0], argv[0], usage);
		exit(2);
	}
	st = rdmx_ctx_create(NULL, &ex->ctx);
	if (!st)
		st = rdmx_cq_create(ex->ctx, &ex->cq);
	if (st)
		example_die("rdmx_ctx_create", st);
}

/*
 * Accept one client (server) or connect (client), with @attr's optional
 * fields (private data, say); attr->cq is set here.
 */
static inline void example_open(struct example *ex, struct rdmx_conn_attr *attr)
{
	struct rdmx_conn_info info;
	rdmx_status st;

	attr->cq = ex->cq;
	if (ex->server) {
		st = rdmx_listen(ex->ctx, ex->addr, &ex->lst);
		if (st)
			example_die("rdmx_listen", st);
		printf("listening on port %d\n", rdmx_listener_port(ex->lst));
		fflush(stdout);
		st = rdmx_accept(ex->lst, attr, -1, &ex->conn);
		if (st)
			example_die("rdmx_accept", st);
	} else {
		st = rdmx_connect(ex->ctx, ex->addr, attr, 10000, &ex->conn);
		if (st)
			example_die("rdmx_connect", st);
	}
	rdmx_conn_info(ex->conn, &info);
	printf("connected to %s over %s\n", info.peer_addr, info.transport);
}

/*
 * One-sided examples: the server hands its region's descriptor to the
 * client as the connection's private data, so that the client can WRITE
 * or READ at once, with no SEND/RECV first. On the server: @mr's packed
 * descriptor, in @desc (which must live until the connection is up), goes
 * into @attr.
 */
static inline void example_offer_region(struct rdmx_mr *mr,
					uint8_t desc[RDMX_REMOTE_PACKED_LEN],
					struct rdmx_conn_attr *attr)
{
	struct rdmx_remote remote;

	rdmx_mr_remote(mr, &remote);
	rdmx_remote_pack(&remote, desc);
	attr->mask |= RDMX_CONN_ATTR_PRIVATE_DATA;
	attr->private_data = desc;
	attr->private_data_len = RDMX_REMOTE_PACKED_LEN;
}

/* On the client: the server's region, from the connection's private data. */
static inline struct rdmx_remote example_peer_region(struct example *ex)
{
	struct rdmx_remote remote;
	const void *pd;
	size_t len;
	rdmx_status st;

	pd = rdmx_conn_private_data(ex->conn, &len);
	st = rdmx_remote_unpack(pd, len, &remote);
	if (st)
		example_die("the server's descriptor", st);
	return remote;
}

/* Wait for the next completion; returns its status. */
static inline rdmx_status example_wait(struct example *ex,
				       struct rdmx_completion *wc)
{
	int n;

	while ((n = rdmx_poll(ex->cq, wc, 1)) == 0)
		rdmx_cq_wait(ex->cq, -1);
	if (n < 0)
		example_die("rdmx_poll", (rdmx_status)n);
	return wc->status;
}

/* Wait for the next completion; exit if it failed. */
static inline void example_wait_ok(struct example *ex)
{
	struct rdmx_completion wc;

	if (example_wait(ex, &wc))
		example_die(rdmx_opcode_name(wc.opcode), wc.status);
}

static inline void example_close(struct example *ex)
{
	rdmx_conn_close(ex->conn);
	rdmx_listener_close(ex->lst);
	rdmx_cq_destroy(ex->cq);
	rdmx_ctx_destroy(ex->ctx);
}

#endif
