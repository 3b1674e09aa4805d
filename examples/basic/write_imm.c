/* SPDX-License-Identifier: MIT */
/*
 * One-sided WRITE with immediate: the server hands the client its
 * region's descriptor with the connection (private data); the client
 * WRITEs a message straight into that region, and the immediate (the
 * message's length) completes a RECV at the server, which then reads the
 * message from its own memory.
 *
 *   write_imm -l :7472         serve one client
 *   write_imm 127.0.0.1:7472   the client
 */
#include "example.h"

#define REGION 4096

static const char message[] = "hello from write_imm";

static void serve(struct example *ex, const char *region)
{
	struct rdmx_completion wc;
	rdmx_status st;

	/* A RECV for the immediate: it takes no buffer. */
	st = rdmx_post_recv(ex->conn, NULL, 0, 1);
	if (st)
		example_die("rdmx_post_recv", st);
	if (example_wait(ex, &wc))
		example_die("the client's WRITE_IMM", wc.status);
	/* The data is in place before the immediate's completion. */
	printf("write_imm: immediate %u; the region holds '%.*s'\n", wc.imm,
	       (int)wc.imm, region);
	/* Stay until the client has its own completion and goes. */
	st = rdmx_post_recv(ex->conn, NULL, 0, 2);
	if (!st)
		example_wait(ex, &wc);
}

int main(int argc, char **argv)
{
	static char region[REGION];
	uint8_t desc[RDMX_REMOTE_PACKED_LEN];
	struct rdmx_conn_attr attr = { 0 };
	struct rdmx_mr *mr;
	struct example ex;
	rdmx_status st;

	example_init(&ex, argc, argv, "one WRITE with immediate");
	st = rdmx_mr_reg(ex.ctx, region, REGION,
			 RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE,
			 &mr);
	if (st)
		example_die("rdmx_mr_reg", st);
	if (ex.server) {
		/* The region's descriptor goes to the client with the
		 * connection: no SEND/RECV is needed before the WRITE. */
		example_offer_region(mr, desc, &attr);
	}
	example_open(&ex, &attr);
	if (ex.server) {
		serve(&ex, region);
	} else {
		struct rdmx_remote remote = example_peer_region(&ex);

		memcpy(region, message, sizeof(message));
		struct rdmx_sge sge = { region, sizeof(message), mr };

		st = rdmx_post_write_imm(ex.conn, &sge, remote.addr,
					 remote.rkey, sizeof(message), 0);
		if (st)
			example_die("rdmx_post_write_imm", st);
		example_wait_ok(&ex);
		printf("write_imm: wrote %zu bytes, immediate %zu\n",
		       sizeof(message), sizeof(message));
	}
	rdmx_conn_close(ex.conn);
	ex.conn = NULL;
	rdmx_mr_dereg(mr);
	example_close(&ex);
	return 0;
}
