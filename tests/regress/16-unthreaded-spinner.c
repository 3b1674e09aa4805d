/* SPDX-License-Identifier: MIT */
/*
 * Description: without a progress thread (progress.thread off), a caller
 * that spins on rdmx_poll is served as one is while the thread backs off:
 * the peer rings no doorbell per message (a write(2) on shm), and the ACK
 * and the RECV's credit ride on the caller's next SEND. Neither happened:
 * with the thread off, the rings stayed armed and every ACK and credit
 * went as a frame of its own, and an 8-byte ping-pong took 1.00 us
 * one-way over shm against 0.37 with the thread (6.4 us against 3.4 over
 * tcp).
 */
#include <poll.h>
#include <sys/epoll.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "shm.h"

enum { WARM = 100, N = 1000 };

/* Take what @cq holds (never sleep): SEND completions; true on a RECV. */
static bool take(struct rdmx_cq *cq)
{
	struct rdmx_completion wc;
	int n = rdmx_poll(cq, &wc, 1);

	assert_true(n >= 0);
	if (!n)
		return false;
	assert_int_equal(wc.status, RDMX_OK);
	if (wc.opcode == RDMX_OP_RECV)
		return true;
	assert_int_equal(wc.opcode, RDMX_OP_SEND);
	return false;
}

/*
 * 8 bytes from @from, taken at @to by spinning, and @to's RECV reposted.
 * One thread drives both contexts, spinning on both cqs: each SEND
 * completes by the other side's next message, which carries its ACK.
 */
static void message(struct rdmx_conn *from, struct rdmx_cq *from_cq,
		    struct rdmx_conn *to, struct rdmx_cq *to_cq,
		    struct buf *out, struct buf *in)
{
	struct rdmx_sge so = sge_of(out, 0, 8);
	struct rdmx_sge si = sge_of(in, 0, in->len);
	double end = now_s() + T_TIMEOUT_MS / 1e3;

	assert_int_equal(rdmx_post_send(from, &so, 0), RDMX_OK);
	while (!take(to_cq)) {
		assert_false(take(from_cq));
		assert_true(now_s() < end);
	}
	assert_int_equal(rdmx_post_recv(to, &si, 1, 0), RDMX_OK);
}

static void ping_pong(const char *transport)
{
	struct pair p;
	struct buf cin, cout, sin, sout;
	struct rdmx_sge sg;
	uint64_t tx0;
	long w0, writes;
	double per_msg;

	setenv("RDMX_TRANSPORT", transport, 1);
	pair_open_with(&p, "RDMX_PROGRESS_THREAD", "off");
	buf_alloc(&p.c, &cin, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.c, &cout, 64, 0);
	buf_alloc(&p.s, &sin, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.s, &sout, 64, 0);
	sg = sge_of(&cin, 0, cin.len);
	assert_int_equal(rdmx_post_recv(p.cconn, &sg, 1, 0), RDMX_OK);
	sg = sge_of(&sin, 0, sin.len);
	assert_int_equal(rdmx_post_recv(p.sconn, &sg, 1, 0), RDMX_OK);
	for (int i = 0; i < WARM; i++) {
		message(p.cconn, p.c.cq, p.sconn, p.s.cq, &cout, &sin);
		message(p.sconn, p.s.cq, p.cconn, p.c.cq, &sout, &cin);
	}
	tx0 = to_sw_conn(p.cconn)->tx_total;
	w0 = harness_syscw();
	assert_true(w0 >= 0);
	for (int i = 0; i < N; i++) {
		message(p.cconn, p.c.cq, p.sconn, p.s.cq, &cout, &sin);
		message(p.sconn, p.s.cq, p.cconn, p.c.cq, &sout, &cin);
	}
	writes = harness_syscw() - w0;
	per_msg = (double)(to_sw_conn(p.cconn)->tx_total - tx0) / N;
	print_message("%s, no progress thread: %d messages each way, %.1f "
		      "bytes sent per message, %ld write calls\n",
		      transport, N, per_msg, writes);
	/*
	 * A SEND header (24), 8 bytes, and the ACK in front (16): 48. A
	 * bare ACK (16) or credit (40) of their own make it 88 or more.
	 */
	assert_true(per_msg <= 56);
	/* Doorbells: none while both sides spin (write(2) on shm, and
	 * nothing else writes here: tcp sends with sendmsg). */
	assert_true(writes < N / 10);
	/* The last SEND completes by the ACK the client still holds. */
	for (struct rdmx_completion wc;;) {
		assert_false(take(p.c.cq));
		if (rdmx_poll(p.s.cq, &wc, 1) == 1) {
			assert_int_equal(wc.opcode, RDMX_OP_SEND);
			break;
		}
	}
	buf_free(&cin);
	buf_free(&cout);
	buf_free(&sin);
	buf_free(&sout);
	pair_close(&p);
}

/*
 * The spinner turns to sleeping on rdmx_cq_fd (which arms the peer's
 * wake-ups again), with a message that came while they were off, and
 * rang nothing, waiting in the ring: the fd is readable at once. It was
 * not until the watchdog's next tick, up to 250 ms later.
 */
static void test_unthreaded_spinner_then_fd(void **state)
{
	struct pair p;
	struct buf in, out;
	struct rdmx_sge sg;
	struct rdmx_completion wc;
	struct pollfd pfd = { .events = POLLIN };

	(void)state;
	setenv("RDMX_TRANSPORT", "shm", 1);
	pair_open_with(&p, "RDMX_PROGRESS_THREAD", "off");
	buf_alloc(&p.s, &in, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.c, &out, 64, 0);
	sg = sge_of(&in, 0, in.len);
	assert_int_equal(rdmx_post_recv(p.sconn, &sg, 1, 7), RDMX_OK);
	/* Both spin a while: the client learns its credit; the server's
	 * side of the ring goes disarmed. */
	for (int i = 0; i < 100; i++) {
		assert_false(take(p.s.cq));
		assert_false(take(p.c.cq));
	}
	/* Nothing else makes its progress fd readable (a doorbell of the
	 * setup, while armed, was taken by those polls). */
	pfd.fd = to_sw_conn(p.sconn)->tctx->epfd;
	assert_int_equal(poll(&pfd, 1, 0), 0);
	sg = sge_of(&out, 0, 8);
	assert_int_equal(rdmx_post_send(p.cconn, &sg, 8), RDMX_OK);
	pfd.fd = rdmx_cq_fd(p.s.cq);
	assert_true(pfd.fd >= 0);
	assert_int_equal(poll(&pfd, 1, 0), 1);
	wc = wait_wc(p.s.cq);
	assert_int_equal(wc.status, RDMX_OK);
	assert_int_equal(wc.wr_id, 7);
	expect_wc(p.c.cq, RDMX_OK, RDMX_OP_SEND);
	buf_free(&in);
	buf_free(&out);
	pair_close(&p);
}

static void test_unthreaded_spinner_shm(void **state)
{
	(void)state;
	ping_pong("shm");
}

static void test_unthreaded_spinner_tcp(void **state)
{
	(void)state;
	ping_pong("tcp");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unthreaded_spinner_shm),
		cmocka_unit_test(test_unthreaded_spinner_tcp),
		cmocka_unit_test(test_unthreaded_spinner_then_fd),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
