/* SPDX-License-Identifier: MIT */
/*
 * Description: the test harness's children die with the test process. A
 * test that ctest killed at its timeout left the servers it had spawned
 * running (seen with the conformance suite's children): they kept their
 * ports and CPU through every test after. And the free ports it hands out
 * are never the same twice: the kernel gave etcd's rig one port for two
 * members once, and the cluster lost its quorum at the test's first kill.
 */
#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static int sleep_forever(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return 0;
}

/*
 * A middle process spawns a child, says its pid, and is killed with
 * SIGKILL (as ctest kills a test). This process is a subreaper: the
 * orphan comes to it, and its end is seen here.
 */
static void check_child_dies(bool by_exec)
{
	int fds[2], status;
	pid_t mid, child = 0;

	assert_int_equal(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	assert_int_equal(pipe(fds), 0);
	mid = fork();
	assert_true(mid >= 0);
	if (mid == 0) {
		pid_t c = by_exec ? spawn("sleeper", 0, 0)
				  : spawn_fork(sleep_forever, NULL);

		if (write(fds[1], &c, sizeof(c)) != sizeof(c))
			_exit(1);
		for (;;)
			pause();
	}
	assert_int_equal(read(fds[0], &child, sizeof(child)), sizeof(child));
	assert_true(child > 0);
	assert_int_equal(kill(mid, SIGKILL), 0);
	assert_int_equal(waitpid(mid, &status, 0), mid);
	/* Before the fix the child slept on, and this waited forever
	 * (ctest's timeout ends it). */
	assert_int_equal(waitpid(child, &status, 0), child);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGKILL);
	close(fds[0]);
	close(fds[1]);
}

static void test_harness_spawned_child_dies_with_test(void **state)
{
	(void)state;
	check_child_dies(true);
}

static void test_harness_forked_child_dies_with_test(void **state)
{
	(void)state;
	check_child_dies(false);
}

static int sleeper(int port, int flag)
{
	(void)port;
	(void)flag;
	return sleep_forever(NULL);
}

/* 500 of ~28,000 ephemeral ports: ~4 repeats expected, were none kept. */
static void test_harness_free_ports_never_repeat(void **state)
{
	static int ports[500];

	(void)state;
	for (int i = 0; i < 500; i++) {
		ports[i] = harness_free_port();
		for (int j = 0; j < i; j++)
			if (ports[j] == ports[i])
				fail_msg("port %d handed out twice (%d, %d)",
					 ports[i], j, i);
	}
}

int main(int argc, char **argv)
{
	static const struct child children[] = {
		{ "sleeper", sleeper },
		{ NULL, NULL },
	};
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_harness_spawned_child_dies_with_test),
		cmocka_unit_test(test_harness_forked_child_dies_with_test),
		cmocka_unit_test(test_harness_free_ports_never_repeat),
	};

	harness_children(argc, argv, children);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
