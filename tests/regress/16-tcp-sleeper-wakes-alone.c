/* SPDX-License-Identifier: MIT */
/*
 * Description: a caller asleep in rdmx_cq_wait over tcp, or in an event
 * loop on rdmx_cq_fd, is the only thread its answer wakes. Both it and the
 * progress thread slept on the transport's epoll set, so each answer woke
 * both, the thread first: it took the data and signalled the cq while the
 * caller waited for the CPU (a 4 KiB READ 34 us where a blocking TCP
 * ping-pong takes ~14). Now the thread stays backed off while a caller
 * serves: over 200 READs, each waited for asleep, the client's progress
 * thread must switch out far fewer than 200 times (it did once a READ).
 * And the event loop's rdmx_poll, which makes the completion it takes,
 * no longer writes the cq's eventfd for it (and reads it back): far fewer
 * than 200 write system calls in the process (it made one a READ).
 *
 * The same once the thread has taken over: an event loop away longer
 * than progress.idle_after comes back, and its first call must call the
 * thread back. The thread slept in epoll_wait on the answers the loop
 * now took, woken by each (in the kernel, to find it gone: no return to
 * its check), until the loop's next stamp, up to 1024 calls later; on a
 * loaded host this test's READs above failed so 1 run in 10.
 */
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <unistd.h>

#include "harness.h"
#include "core.h"
#include "sw.h"

#define READS 200

/* The voluntary context switches of thread @tid of this process. */
static long switches(int tid)
{
	char path[64], line[128];
	long n = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
	f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1)
			break;
	fclose(f);
	assert_true(n >= 0);
	return n;
}

/* One READ into @dst, its completion waited for asleep: in rdmx_cq_wait,
 * or in poll on rdmx_cq_fd (@fd). */
static void read_asleep(struct pair *p, struct buf *dst, struct rdmx_remote rem,
			bool fd)
{
	struct rdmx_sge d = sge_of(dst, 0, dst->len);
	struct rdmx_completion wc;
	int n;

	assert_int_equal(rdmx_post_read(p->cconn, &d, rem.addr, rem.rkey, 1),
			 RDMX_OK);
	while (!(n = rdmx_poll(p->c.cq, &wc, 1))) {
		if (fd) {
			struct pollfd pfd = { .fd = rdmx_cq_fd(p->c.cq),
					      .events = POLLIN };

			assert_true(poll(&pfd, 1, T_TIMEOUT_MS) == 1);
		} else {
			assert_int_equal(rdmx_cq_wait(p->c.cq, T_TIMEOUT_MS),
					 RDMX_OK);
		}
	}
	assert_int_equal(n, 1);
	assert_int_equal(wc.status, RDMX_OK);
	assert_int_equal(wc.opcode, RDMX_OP_READ);
}

/* A tcp pair, a 4 KiB source to READ (bytes @seed on), the client's
 * transport and its progress thread. The caller sleeps at once (no spin
 * first). */
struct sleeper {
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;
	struct rdmx_sw_ctx *t;
	int tid;
};

static void sleeper_open(struct sleeper *s, uint8_t seed)
{
	void *priv;

	setenv("RDMX_TRANSPORT", "tcp", 1);
	setenv("RDMX_PROGRESS_WAIT_SPIN", "0", 1);
	pair_open(&s->p);
	buf_alloc(&s->p.s, &s->src, 4096, RDMX_ACCESS_REMOTE_READ);
	buf_alloc(&s->p.c, &s->dst, 4096, RDMX_ACCESS_LOCAL_WRITE);
	buf_fill(&s->src, seed);
	s->rem = share_remote(&s->p, &s->src);
	assert_int_equal(rdmx_ctx_transport(s->p.c.ctx, RDMX_TRANSPORT_TCP,
					    &priv),
			 RDMX_OK);
	s->t = priv;
	assert_true(s->t->thread_running);
	while (!(s->tid = atomic_load(&s->t->thread_tid)))
		sched_yield();
}

static void sleeper_close(struct sleeper *s)
{
	buf_free(&s->src);
	buf_free(&s->dst);
	pair_close(&s->p);
}

static void sleeper_wakes_alone(bool fd)
{
	struct sleeper s;
	long before, after, writes;

	sleeper_open(&s, 9);
	for (int i = 0; i < 10; i++) /* the thread hears of us */
		read_asleep(&s.p, &s.dst, s.rem, fd);
	before = switches(s.tid);
	writes = harness_syscw();
	for (int i = 0; i < READS; i++)
		read_asleep(&s.p, &s.dst, s.rem, fd);
	after = switches(s.tid);
	writes = harness_syscw() - writes;
	assert_pattern(s.dst.p, s.dst.len, 9, 0);
	print_message("%s: the client's progress thread switched out %ld "
		      "times in %d READs\n",
		      fd ? "rdmx_cq_fd" : "rdmx_cq_wait", after - before,
		      READS);
	assert_true(after - before < READS / 4);
	print_message("and made %ld write system calls\n", writes);
	assert_true(writes < READS / 4);
	sleeper_close(&s);
}

/*
 * An event loop on rdmx_cq_fd whose calls come fast (its stamp interval
 * grows to one call in 1024) goes away until the thread takes over, then
 * comes back for READS READs: the thread must not wake for each.
 */
static void test_returning_loop_recalls_thread(void **state)
{
	struct rdmx_completion wc;
	struct sleeper s;
	struct rdmx_sw_ctx *t;
	unsigned taken;
	long before, after;

	(void)state;
	sleeper_open(&s, 5);
	t = s.t;
	for (int i = 0; i < 10; i++)
		read_asleep(&s.p, &s.dst, s.rem, true);
	/* Fast empty calls for 200 ms: the stamp interval grows (to 1024;
	 * less where calls are slow, under sanitizers). Stop just after a
	 * stamp, so that the next is as far off as it gets. */
	for (double end = now_s() + 0.2;
	     now_s() < end ||
	     atomic_load(&t->app_polls) % atomic_load(&t->stamp_every) != 1;)
		assert_int_equal(rdmx_poll(s.p.c.cq, &wc, 1), 0);
	/* Away: the thread takes over. */
	taken = atomic_load(&t->take_overs);
	for (int ms = 0; atomic_load(&t->take_overs) == taken; ms++) {
		assert_true(ms < T_TIMEOUT_MS);
		usleep(1000);
	}
	usleep(10000); /* into its epoll_wait */
	before = switches(s.tid);
	for (int i = 0; i < READS; i++)
		read_asleep(&s.p, &s.dst, s.rem, true);
	after = switches(s.tid);
	assert_pattern(s.dst.p, s.dst.len, 5, 0);
	print_message("back from away: the client's progress thread switched "
		      "out %ld times in %d READs\n",
		      after - before, READS);
	assert_true(after - before < READS / 4);
	sleeper_close(&s);
}

static void test_cq_wait_sleeper_wakes_alone(void **state)
{
	(void)state;
	sleeper_wakes_alone(false);
}

static void test_cq_fd_sleeper_wakes_alone(void **state)
{
	(void)state;
	sleeper_wakes_alone(true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cq_wait_sleeper_wakes_alone),
		cmocka_unit_test(test_cq_fd_sleeper_wakes_alone),
		cmocka_unit_test(test_returning_loop_recalls_thread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
