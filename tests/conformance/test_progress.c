/* SPDX-License-Identifier: MIT */
/* Description: who serves one-sided operations: a spinning caller, then the
 * progress thread again. */
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* Spin on the target's cq for @ms: its caller drives progress. */
static void spin_target(struct pair *p, int ms)
{
	struct rdmx_completion wc;
	double end = now_s() + ms / 1e3;

	while (now_s() < end)
		assert_true(rdmx_poll(p->s.cq, &wc, 1) >= 0);
}

/* WRITE into the target, which makes no call; check it lands promptly. */
static void write_served(struct pair *p, struct buf *src, struct buf *dst,
			 const struct rdmx_remote *rem, uint8_t seed)
{
	struct rdmx_sge s = sge_of(src, 0, src->len);
	double t0;

	buf_fill(src, seed);
	t0 = now_s();
	assert_int_equal(rdmx_post_write(p->cconn, &s, rem->addr, rem->rkey,
					 seed),
			 RDMX_OK);
	expect_wc(p->c.cq, RDMX_OK, RDMX_OP_WRITE);
	/* progress.idle_after is 1 ms; allow a loaded machine plenty. */
	assert_true(now_s() - t0 < T_FLUSH_S);
	assert_pattern(dst->p, dst->len, seed, 0);
}

static void test_progress_resumes_after_spinning_stops(void **state)
{
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, 4096, 0);
	buf_alloc(&p.s, &dst, 4096,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE);
	rem = share_remote(&p, &dst);
	for (uint8_t round = 1; round <= 5; round++) {
		/* The target spins, so its thread steps aside ... */
		spin_target(&p, 20);
		/* ... then stops, with no wait and no goodbye. */
		write_served(&p, &src, &dst, &rem, round);
	}
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

struct sleeper {
	struct rdmx_cq *cq;
	rdmx_status st;
	struct rdmx_completion wc;
	pthread_t thread;
};

static void *sleeper_main(void *arg)
{
	struct sleeper *w = arg;

	w->st = rdmx_cq_wait(w->cq, T_TIMEOUT_MS);
	if (!w->st && rdmx_poll(w->cq, &w->wc, 1) != 1)
		w->st = RDMX_ERR_SYSTEM;
	return NULL;
}

/*
 * The target sleeps in rdmx_cq_wait for a SEND (it spins first, which
 * sends the progress thread into its back-off, and hands over as it goes
 * to sleep), then makes no call, and its thread serves the WRITE that
 * follows. Eight rounds.
 */
static void test_progress_resumes_after_sleeping(void **state)
{
	struct pair p;
	struct buf src, dst, msg, in;
	struct rdmx_remote rem;
	struct rdmx_sge sg;

	(void)state;
	pair_open_with(&p, "RDMX_PROGRESS_WAIT_SPIN", "0"); /* asleep at once */
	buf_alloc(&p.c, &src, 4096, 0);
	buf_alloc(&p.c, &msg, 64, 0);
	buf_alloc(&p.s, &in, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.s, &dst, 4096,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE);
	rem = share_remote(&p, &dst);
	for (uint8_t round = 1; round <= 8; round++) {
		struct sleeper w = { .cq = p.s.cq };
		struct timespec nap = { 0, 5 * 1000 * 1000 };

		sg = sge_of(&in, 0, in.len);
		assert_int_equal(rdmx_post_recv(p.sconn, &sg, 1, round),
				 RDMX_OK);
		assert_int_equal(
			pthread_create(&w.thread, NULL, sleeper_main, &w), 0);
		nanosleep(&nap, NULL); /* asleep by now, most likely */
		sg = sge_of(&msg, 0, msg.len);
		assert_int_equal(rdmx_post_send(p.cconn, &sg, round), RDMX_OK);
		expect_wc(p.c.cq, RDMX_OK, RDMX_OP_SEND);
		pthread_join(w.thread, NULL);
		assert_int_equal(w.st, RDMX_OK);
		assert_int_equal(w.wc.status, RDMX_OK);
		assert_int_equal(w.wc.wr_id, round);
		write_served(&p, &src, &dst, &rem, round);
	}
	buf_free(&in);
	buf_free(&msg);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

/*
 * Both sides asleep for every message: a ping-pong where each SEND has to
 * wake its sleeping peer. A lost wake-up (a doorbell not rung, as when
 * the publishing side and the side going to sleep each miss the other's
 * flag) leaves a message in the pipe and its waiter asleep until
 * something else wakes it: the waits here end every 100 ms. A round takes
 * 60-90 us here; with no doorbells at all every round took 109 ms. The
 * case fails past 2 s for one round, or past 20 rounds (1%) over 20 ms.
 */
struct ponger {
	struct rdmx_conn *conn;
	struct rdmx_cq *cq;
	struct buf *in, *out;
	bool echo; /* wait first, then answer */
	rdmx_status st;
	int done, slow;
};

enum { PONG_ROUNDS = 2000 };

static rdmx_status pong_recv(struct ponger *g)
{
	struct rdmx_completion wc;
	struct rdmx_sge sg = sge_of(g->in, 0, g->in->len);
	double end = now_s() + 2 * time_scale();
	rdmx_status st;
	int n;

	for (;;) {
		n = rdmx_poll(g->cq, &wc, 1);
		if (n < 0)
			return (rdmx_status)n;
		if (n == 1 && wc.status)
			return wc.status;
		if (n == 1 && wc.opcode == RDMX_OP_RECV)
			return rdmx_post_recv(g->conn, &sg, 1, 0);
		if (now_s() > end)
			return RDMX_ERR_TIMEOUT;
		if (n == 0 && (st = rdmx_cq_wait(g->cq, 100)) &&
		    st != RDMX_ERR_TIMEOUT)
			return st;
	}
}

static void *pong_main(void *arg)
{
	struct ponger *g = arg;
	struct rdmx_sge sg = sge_of(g->out, 0, g->out->len);

	for (g->done = 0; g->done < PONG_ROUNDS && !g->st; g->done++) {
		double t0 = now_s();

		if (g->echo)
			g->st = pong_recv(g);
		if (!g->st)
			g->st = rdmx_post_send(g->conn, &sg, 0);
		if (!g->st && !g->echo)
			g->st = pong_recv(g);
		g->slow += now_s() - t0 > 0.02 * time_scale();
	}
	return NULL;
}

/*
 * @thread off: each side's own calls are all its progress. Each poll
 * that finds nothing spins (and disarms the peer's wake-ups), then the
 * wait arms them and goes to sleep; a message that came in between rang
 * nothing, and must still wake it.
 */
static void sleepers_ping_pong(const char *thread)
{
	struct pair p;
	struct buf cin, cout, sin, sout;
	struct ponger c, s;
	struct rdmx_sge sg;
	pthread_t th;
	double t0;

	if (suite_lossy()) {
		/* A lost packet stalls a round as a lost wake-up would. */
		print_message("skip: a lossy link\n");
		skip();
	}
	setenv("RDMX_PROGRESS_THREAD", thread, 1);
	pair_open_with(&p, "RDMX_PROGRESS_WAIT_SPIN", "0"); /* asleep at once */
	unsetenv("RDMX_PROGRESS_THREAD");
	buf_alloc(&p.c, &cin, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.c, &cout, 64, 0);
	buf_alloc(&p.s, &sin, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.s, &sout, 64, 0);
	c = (struct ponger){
		.conn = p.cconn, .cq = p.c.cq, .in = &cin, .out = &cout
	};
	s = (struct ponger){ .conn = p.sconn,
			     .cq = p.s.cq,
			     .in = &sin,
			     .out = &sout,
			     .echo = true };
	sg = sge_of(&cin, 0, cin.len);
	assert_int_equal(rdmx_post_recv(p.cconn, &sg, 1, 0), RDMX_OK);
	sg = sge_of(&sin, 0, sin.len);
	assert_int_equal(rdmx_post_recv(p.sconn, &sg, 1, 0), RDMX_OK);
	t0 = now_s();
	assert_int_equal(pthread_create(&th, NULL, pong_main, &s), 0);
	pong_main(&c);
	pthread_join(th, NULL);
	print_message("%d sleeping round trips, progress thread %s: %.1f us "
		      "each, %d over 20 ms\n",
		      c.done, thread,
		      (now_s() - t0) * 1e6 / (c.done ? c.done : 1), c.slow);
	if (c.st || s.st)
		print_error("round %d: %s; echo round %d: %s\n", c.done,
			    rdmx_strerror(c.st), s.done, rdmx_strerror(s.st));
	assert_int_equal(c.st, RDMX_OK);
	assert_int_equal(s.st, RDMX_OK);
	assert_int_equal(c.done, PONG_ROUNDS);
	assert_true(c.slow <= PONG_ROUNDS / 100);
	buf_free(&cin);
	buf_free(&cout);
	buf_free(&sin);
	buf_free(&sout);
	pair_close(&p);
}

static void test_progress_sleepers_ping_pong(void **state)
{
	(void)state;
	sleepers_ping_pong("on");
}

static void test_progress_sleepers_ping_pong_no_thread(void **state)
{
	(void)state;
	sleepers_ping_pong("off");
}

/* Spin (never sleep) for a RECV; SENDs completing meanwhile are taken. */
static void spin_recv(struct rdmx_cq *cq)
{
	struct rdmx_completion wc;
	double end = now_s() + T_TIMEOUT_MS / 1e3;
	int n;

	for (;;) {
		while ((n = rdmx_poll(cq, &wc, 1)) == 0)
			assert_true(now_s() < end);
		assert_int_equal(n, 1);
		assert_int_equal(wc.status, RDMX_OK);
		if (wc.opcode == RDMX_OP_RECV)
			return;
		assert_int_equal(wc.opcode, RDMX_OP_SEND);
	}
}

/*
 * A SEND from @from, taken at @to by spinning, and @to's RECV reposted.
 * Each side's SEND completes by the other's next message (its ACK rides
 * on it), so one thread may drive both contexts without waiting on one
 * for what only the other's progress would send.
 */
static void spin_message(struct rdmx_conn *from, struct rdmx_conn *to,
			 struct rdmx_cq *to_cq, struct buf *out, struct buf *in)
{
	struct rdmx_sge so = sge_of(out, 0, out->len);
	struct rdmx_sge si = sge_of(in, 0, in->len);

	assert_int_equal(rdmx_post_send(from, &so, 0), RDMX_OK);
	spin_recv(to_cq);
	assert_int_equal(rdmx_post_recv(to, &si, 1, 0), RDMX_OK);
}

/*
 * A connection made while its context's thread backs off (the caller
 * spins) is served by the spinner like the others: its peer need not
 * ring a doorbell (a write(2) on shm) for each message. It did, as long
 * as the thread stayed in its back-off. The accept may wake a thread
 * (armed, it then waits for the next doorbell to see the spinner); on a
 * busy machine it can take the whole of a window of messages to run, so
 * windows of N messages are counted until one is quiet: with the bug,
 * none ever was.
 */
static void test_progress_new_conn_spinning_no_doorbells(void **state)
{
	enum { N = 1000, WINDOWS = 20 };
	struct pair p;
	struct acc a = { 0 };
	struct rdmx_conn *c2;
	struct buf out, in, sout, sin;
	struct rdmx_sge sg;
	long w0, writes = -1;
	int w;

	(void)state;
	if (!strcmp(suite_transport(), "verbs") || suite_lossy()) {
		/* Soft RDMA's providers post with write(2): nothing to count;
		 * and a lossy link only makes it slow. */
		print_message("skip: verbs, or a lossy link\n");
		skip();
	}
	pair_open(&p);
	buf_alloc(&p.c, &out, 64, 0);
	buf_alloc(&p.c, &in, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.s, &sout, 64, 0);
	buf_alloc(&p.s, &sin, 64, RDMX_ACCESS_LOCAL_WRITE);
	sg = sge_of(&sin, 0, sin.len);
	assert_int_equal(rdmx_post_recv(p.sconn, &sg, 1, 0), RDMX_OK);
	sg = sge_of(&in, 0, in.len);
	assert_int_equal(rdmx_post_recv(p.cconn, &sg, 1, 0), RDMX_OK);
	/* Spinning both ways for a while: both threads back off. */
	for (int i = 0; i < 200; i++) {
		spin_message(p.cconn, p.sconn, p.s.cq, &out, &sin);
		spin_message(p.sconn, p.cconn, p.c.cq, &sout, &in);
	}
	a.s = &p.s;
	a.lst = p.lst;
	acc_start(&a);
	c2 = side_connect(&p.c, rdmx_listener_port(p.lst));
	acc_join(&a);
	assert_non_null(c2);
	assert_int_equal(a.st, RDMX_OK);
	sg = sge_of(&sin, 0, sin.len);
	assert_int_equal(rdmx_post_recv(a.conn, &sg, 1, 0), RDMX_OK);
	sg = sge_of(&in, 0, in.len);
	assert_int_equal(rdmx_post_recv(c2, &sg, 1, 0), RDMX_OK);
	for (w = 1; w <= WINDOWS; w++) {
		w0 = harness_syscw();
		assert_true(w0 >= 0);
		for (int i = 0; i < N; i++) {
			spin_message(c2, a.conn, p.s.cq, &out, &sin);
			spin_message(a.conn, c2, p.c.cq, &sout, &in);
		}
		writes = harness_syscw() - w0;
		if (writes < N / 10)
			break;
	}
	print_message("%d messages each way on a new connection: %ld write "
		      "calls (window %d of at most %d)\n",
		      N, writes, w > WINDOWS ? WINDOWS : w, WINDOWS);
	assert_true(writes < N / 10);
	rdmx_conn_close(c2);
	rdmx_conn_close(a.conn);
	buf_free(&out);
	buf_free(&in);
	buf_free(&sout);
	buf_free(&sin);
	pair_close(&p);
}

/* CPU seconds this process used while rdmx_cq_wait timed out @ms. */
static double cpu_while_waiting(struct rdmx_cq *cq, int ms)
{
	struct rusage a, b;

	getrusage(RUSAGE_SELF, &a);
	assert_int_equal(rdmx_cq_wait(cq, ms), RDMX_ERR_TIMEOUT);
	getrusage(RUSAGE_SELF, &b);
	return (double)(b.ru_utime.tv_sec - a.ru_utime.tv_sec) +
	       (double)(b.ru_stime.tv_sec - a.ru_stime.tv_sec) +
	       (double)(b.ru_utime.tv_usec - a.ru_utime.tv_usec) / 1e6 +
	       (double)(b.ru_stime.tv_usec - a.ru_stime.tv_usec) / 1e6;
}

/* progress.use_event_channel: off polls (a core busy), on sleeps. */
static void test_progress_polling_or_events(void **state)
{
	struct side poll_side, event_side;
	double polled, slept;

	(void)state;
	side_open_with(&poll_side, "RDMX_PROGRESS_USE_EVENT_CHANNEL", "off");
	side_open(&event_side);
	polled = cpu_while_waiting(poll_side.cq, 300);
	slept = cpu_while_waiting(event_side.cq, 300);
	print_message("cpu over a 300 ms wait: polling %.3f s, events %.3f s\n",
		      polled, slept);
	assert_true(polled > 0.09); /* at least 30% of a core, if shared */
	assert_true(slept < 0.03);
	side_close(&poll_side);
	side_close(&event_side);
}

static void test_progress_fd_users_are_served(void **state)
{
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, 4096, 0);
	buf_alloc(&p.s, &dst, 4096,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE);
	rem = share_remote(&p, &dst);
	/* An event-driven target: it drains by rdmx_poll, waits on the fd. */
	assert_true(rdmx_cq_fd(p.s.cq) >= 0);
	spin_target(&p, 20);
	write_served(&p, &src, &dst, &rem, 9);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

/* One completion, sleeping in poll(2) on the cq's fd between rdmx_polls. */
static struct rdmx_completion fd_wait(struct rdmx_cq *cq)
{
	struct pollfd pfd = { .fd = rdmx_cq_fd(cq), .events = POLLIN };
	struct rdmx_completion wc;
	double end = now_s() + T_TIMEOUT_MS / 1e3;
	int wakes = 0;

	assert_true(pfd.fd >= 0);
	/* Nothing but the fd wakes us: no timeout to poll by. */
	while (rdmx_poll(cq, &wc, 1) == 0) {
		if (now_s() > end)
			fail_msg("no completion within %d ms (%d wake-ups)",
				 T_TIMEOUT_MS, wakes);
		if (poll(&pfd, 1, T_TIMEOUT_MS) > 0)
			wakes++;
	}
	return wc;
}

struct fd_server {
	struct pair *p;
	int stop; /* an eventfd */
	pthread_t thread;
};

/* The target of a READ, event-driven: it sleeps on its cq's fd, with no
 * timeout, and calls rdmx_poll on each wake-up, which is all that serves
 * the READ. */
static void *fd_server_main(void *arg)
{
	struct fd_server *srv = arg;
	struct pollfd pfd[2] = {
		{ .fd = rdmx_cq_fd(srv->p->s.cq), .events = POLLIN },
		{ .fd = srv->stop, .events = POLLIN },
	};
	struct rdmx_completion wc;

	while (!pfd[1].revents) {
		poll(pfd, 2, -1);
		rdmx_poll(srv->p->s.cq, &wc, 1);
	}
	return NULL;
}

/*
 * Without a progress thread, a process asleep on rdmx_cq_fd wakes on its
 * transports' input and rdmx_poll serves: both sides of a READ sleep
 * that way, with no timeout, and 20 READs complete with their bytes.
 */
static void test_progress_cq_fd_without_thread(void **state)
{
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;
	struct fd_server srv = { .p = &p, .stop = eventfd(0, EFD_CLOEXEC) };
	struct rdmx_completion wc;
	struct rdmx_sge sg;
	uint64_t one = 1;

	(void)state;
	assert_true(srv.stop >= 0);
	pair_open_with(&p, "RDMX_PROGRESS_THREAD", "off");
	/* Each round reads its own slice, filled before any READ: the
	 * server's thread sends from it while this one moves on. */
	buf_alloc(&p.s, &src, 20 * 4096, RDMX_ACCESS_REMOTE_READ);
	buf_alloc(&p.c, &dst, 4096, RDMX_ACCESS_LOCAL_WRITE);
	/* One process: the descriptor needs no SEND (which would need
	 * both sides progressing while this thread waits on one). */
	rdmx_mr_remote(src.mr, &rem);
	assert_int_equal(
		pthread_create(&srv.thread, NULL, fd_server_main, &srv), 0);
	buf_fill(&src, 7);
	for (uint8_t round = 0; round < 20; round++) {
		memset(dst.p, 0, dst.len);
		sg = sge_of(&dst, 0, dst.len);
		assert_int_equal(rdmx_post_read(p.cconn, &sg,
						rem.addr + round * 4096u,
						rem.rkey, round),
				 RDMX_OK);
		wc = fd_wait(p.c.cq);
		assert_int_equal(wc.status, RDMX_OK);
		assert_int_equal(wc.wr_id, round);
		assert_pattern(dst.p, dst.len, 7, round * 4096u);
	}
	assert_int_equal(write(srv.stop, &one, sizeof(one)), sizeof(one));
	pthread_join(srv.thread, NULL);
	close(srv.stop);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_progress_resumes_after_spinning_stops),
		cmocka_unit_test(test_progress_resumes_after_sleeping),
		cmocka_unit_test(test_progress_sleepers_ping_pong),
		cmocka_unit_test(test_progress_sleepers_ping_pong_no_thread),
		cmocka_unit_test(test_progress_new_conn_spinning_no_doorbells),
		cmocka_unit_test(test_progress_fd_users_are_served),
		cmocka_unit_test(test_progress_cq_fd_without_thread),
		cmocka_unit_test(test_progress_polling_or_events),
	};

	return cmocka_run_group_tests_name(suite_transport(), tests, NULL,
					   NULL);
}
