/* SPDX-License-Identifier: MIT */
/*
 * An event loop that sleeps: the pingpong server again, but waiting in
 * epoll_wait() on rdmx_cq_fd() beside the program's other descriptors
 * (here stdin: type a line to see the loop serve it too) instead of
 * spinning in rdmx_poll(). Serve one client, then exit.
 *
 *   epoll_loop -l :7474        serve; any pingpong client will do:
 *   pingpong 127.0.0.1:7474
 */
#include <sys/epoll.h>
#include <unistd.h>

#include "example.h"

#define SIZE 64

struct loop {
	struct example ex;
	struct rdmx_sge in, out;
	int rounds;
	int done;
};

/* Post the RECV the next message lands in. */
static void post_recv(struct loop *l)
{
	rdmx_status st = rdmx_post_recv(l->ex.conn, &l->in, 1, 0);

	if (st)
		example_die("rdmx_post_recv", st);
}

/* Drain the cq: echo each message back; a failed RECV means the end. */
static void on_completions(struct loop *l)
{
	struct rdmx_completion wc[16];
	int n;

	while ((n = rdmx_poll(l->ex.cq, wc, 16)) > 0) {
		for (int i = 0; i < n; i++) {
			rdmx_status st;

			if (wc[i].status) {
				l->done = 1; /* the client closed */
				continue;
			}
			if (wc[i].opcode != RDMX_OP_RECV)
				continue; /* our SEND went out */
			memcpy(l->out.addr, l->in.addr, wc[i].byte_len);
			l->out.length = wc[i].byte_len;
			/* The next RECV first, then the answer. */
			post_recv(l);
			st = rdmx_post_send(l->ex.conn, &l->out, 0);
			if (st)
				example_die("rdmx_post_send", st);
			l->rounds++;
		}
	}
	if (n < 0)
		example_die("rdmx_poll", (rdmx_status)n);
}

int main(int argc, char **argv)
{
	static char in_buf[SIZE], out_buf[SIZE];
	struct rdmx_conn_attr attr = { 0 };
	struct rdmx_mr *in_mr, *out_mr;
	struct epoll_event ev;
	struct loop l = { 0 };
	rdmx_status st;
	int ep;

	example_init(&l.ex, argc, argv, "a pingpong server in an epoll loop");
	if (!l.ex.server) {
		fprintf(stderr, "epoll_loop serves (-l); use pingpong as the "
				"client\n");
		return 2;
	}
	st = rdmx_mr_reg(l.ex.ctx, in_buf, SIZE, RDMX_ACCESS_LOCAL_WRITE,
			 &in_mr);
	if (!st)
		st = rdmx_mr_reg(l.ex.ctx, out_buf, SIZE, 0, &out_mr);
	if (st)
		example_die("rdmx_mr_reg", st);
	l.in = (struct rdmx_sge){ in_buf, SIZE, in_mr };
	l.out = (struct rdmx_sge){ out_buf, SIZE, out_mr };
	example_open(&l.ex, &attr);
	post_recv(&l);

	ep = epoll_create1(EPOLL_CLOEXEC);
	ev = (struct epoll_event){ .events = EPOLLIN, .data.fd = 0 };
	epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev); /* fails when stdin is /dev/null
					       */
	ev.data.fd = rdmx_cq_fd(l.ex.cq);
	if (ev.data.fd < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ev.data.fd, &ev))
		example_die("rdmx_cq_fd", RDMX_ERR_SYSTEM);
	while (!l.done) {
		if (epoll_wait(ep, &ev, 1, -1) < 1)
			continue;
		if (ev.data.fd == 0) {
			char line[256];
			ssize_t len = read(0, line, sizeof(line));

			if (len <= 0) /* stdin closed: stop watching it */
				epoll_ctl(ep, EPOLL_CTL_DEL, 0, NULL);
			else
				printf("epoll_loop: %d round trips so far\n",
				       l.rounds);
			continue;
		}
		on_completions(&l);
	}
	printf("epoll_loop: served %d round trips; the client left\n",
	       l.rounds);
	close(ep);
	rdmx_conn_close(l.ex.conn);
	l.ex.conn = NULL;
	rdmx_mr_dereg(in_mr);
	rdmx_mr_dereg(out_mr);
	example_close(&l.ex);
	return 0;
}
