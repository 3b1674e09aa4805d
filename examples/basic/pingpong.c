/* SPDX-License-Identifier: MIT */
/*
 * Ping-pong over SEND/RECV: the client sends 64 bytes, the server sends
 * them back, 1000 times; the client checks each answer and prints the
 * average round trip.
 *
 *   pingpong -l :7471          serve one client
 *   pingpong 127.0.0.1:7471    the client
 */
#include <time.h>

#include "example.h"

#define ROUNDS 1000
#define SIZE 64

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Send back what comes in, until the client goes. */
static void serve(struct example *ex, struct rdmx_sge *in, struct rdmx_sge *out)
{
	struct rdmx_completion wc;
	rdmx_status st;
	int rounds = 0;

	for (;;) {
		st = rdmx_post_recv(ex->conn, in, 1, 0);
		if (st == RDMX_ERR_CONN_LOST)
			break; /* the client closed before we posted */
		if (st)
			example_die("rdmx_post_recv", st);
		if (example_wait(ex, &wc)) {
			st = wc.status; /* the client closed: the RECV ends */
			break;
		}
		memcpy(out->addr, in->addr, wc.byte_len);
		out->length = wc.byte_len;
		st = rdmx_post_send(ex->conn, out, 0);
		if (st == RDMX_ERR_CONN_LOST)
			break;
		if (st)
			example_die("rdmx_post_send", st);
		if (example_wait(ex, &wc)) {
			st = wc.status; /* it left without waiting for this one
					 */
			break;
		}
		rounds++;
	}
	printf("pingpong: served %d round trips; the client left (%s)\n",
	       rounds, rdmx_status_name(st));
}

static void ping(struct example *ex, struct rdmx_sge *in, struct rdmx_sge *out)
{
	double t0 = now_us();

	for (int i = 0; i < ROUNDS; i++) {
		rdmx_status st;

		snprintf(out->addr, SIZE, "ping %d", i);
		st = rdmx_post_recv(ex->conn, in, 1, 0);
		if (!st)
			st = rdmx_post_send(ex->conn, out, 0);
		if (st)
			example_die("post", st);
		/* The SEND's completion and the answer, in either order. */
		example_wait_ok(ex);
		example_wait_ok(ex);
		if (strcmp(in->addr, out->addr)) {
			fprintf(stderr, "pingpong: sent '%s', got '%s'\n",
				(char *)out->addr, (char *)in->addr);
			exit(1);
		}
	}
	printf("pingpong: %d round trips of %d bytes: %.1f us each\n", ROUNDS,
	       SIZE, (now_us() - t0) / ROUNDS);
}

int main(int argc, char **argv)
{
	static char in_buf[SIZE], out_buf[SIZE];
	struct rdmx_conn_attr attr = { 0 };
	struct rdmx_mr *in_mr, *out_mr;
	struct example ex;
	rdmx_status st;

	example_init(&ex, argc, argv, "SEND/RECV ping-pong, 1000 rounds");
	/* RECVs write into memory: LOCAL_WRITE. SENDs only read it. */
	st = rdmx_mr_reg(ex.ctx, in_buf, SIZE, RDMX_ACCESS_LOCAL_WRITE, &in_mr);
	if (!st)
		st = rdmx_mr_reg(ex.ctx, out_buf, SIZE, 0, &out_mr);
	if (st)
		example_die("rdmx_mr_reg", st);
	example_open(&ex, &attr);

	struct rdmx_sge in = { in_buf, SIZE, in_mr };
	struct rdmx_sge out = { out_buf, SIZE, out_mr };

	if (ex.server)
		serve(&ex, &in, &out);
	else
		ping(&ex, &in, &out);
	rdmx_conn_close(ex.conn); /* before the memory its work uses */
	ex.conn = NULL;
	rdmx_mr_dereg(in_mr);
	rdmx_mr_dereg(out_mr);
	example_close(&ex);
	return 0;
}
