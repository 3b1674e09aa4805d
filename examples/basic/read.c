/* SPDX-License-Identifier: MIT */
/*
 * One-sided READ of a peer's region: the server fills a region, grants
 * remote READ on it and hands its descriptor over with the connection;
 * the client READs it into its own memory. The server's CPU takes no part
 * in the READ (on an RDMA NIC none at all).
 *
 *   read -l :7473          serve one client
 *   read 127.0.0.1:7473    the client
 */
#include "example.h"

#define REGION 4096

int main(int argc, char **argv)
{
	static char region[REGION];
	uint8_t desc[RDMX_REMOTE_PACKED_LEN];
	struct rdmx_conn_attr attr = { 0 };
	struct rdmx_completion wc;
	struct rdmx_mr *mr;
	struct example ex;
	rdmx_status st;

	example_init(&ex, argc, argv, "one READ of the server's region");
	if (ex.server) /* what the client will READ */
		snprintf(region, REGION, "the server's region, %d bytes",
			 REGION);
	/* READ results land in the client's memory: LOCAL_WRITE there. */
	st = rdmx_mr_reg(ex.ctx, region, REGION,
			 ex.server ? RDMX_ACCESS_REMOTE_READ
				   : RDMX_ACCESS_LOCAL_WRITE,
			 &mr);
	if (st)
		example_die("rdmx_mr_reg", st);
	if (ex.server) /* the client gets its descriptor with the connection */
		example_offer_region(mr, desc, &attr);
	example_open(&ex, &attr);
	if (ex.server) {
		/* Nothing to do but wait for the client to leave: a RECV
		 * that its close flushes. */
		st = rdmx_post_recv(ex.conn, NULL, 0, 0);
		if (!st)
			example_wait(&ex, &wc);
		printf("read: the client left\n");
	} else {
		struct rdmx_remote remote = example_peer_region(&ex);

		struct rdmx_sge sge = { region, REGION, mr };

		st = rdmx_post_read(ex.conn, &sge, remote.addr, remote.rkey, 0);
		if (st)
			example_die("rdmx_post_read", st);
		example_wait_ok(&ex);
		printf("read: %d bytes: '%s'\n", REGION, region);
	}
	rdmx_conn_close(ex.conn);
	ex.conn = NULL;
	rdmx_mr_dereg(mr);
	example_close(&ex);
	return 0;
}
