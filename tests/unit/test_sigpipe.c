/* SPDX-License-Identifier: MIT */
/* Description: rdmx_sigpipe_hold/release, around a send that raises SIGPIPE
 * (what siw does inside ibv_post_send once its peer is gone). */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "sock.h"

/* A write on a pipe whose reader is closed: EPIPE, and SIGPIPE to this
 * thread, as tcp_sendmsg raises it for siw. */
static int broken_write(void)
{
	int fds[2];
	ssize_t n;

	if (pipe(fds))
		return -1;
	close(fds[0]);
	n = write(fds[1], "x", 1);
	close(fds[1]);
	return n < 0 && errno == EPIPE ? 0 : -1;
}

static bool pending_pipe(void)
{
	sigset_t set;

	return !sigpending(&set) && sigismember(&set, SIGPIPE);
}

static bool blocked_pipe(void)
{
	sigset_t set;

	return !pthread_sigmask(SIG_BLOCK, NULL, &set) &&
	       sigismember(&set, SIGPIPE);
}

/* In a child, SIGPIPE at its default: what the child's status says. */
static int child_status(int (*body)(void))
{
	int status;
	pid_t pid = harness_fork();

	if (pid == 0) {
		signal(SIGPIPE, SIG_DFL);
		_exit(body());
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

static int held_write(void)
{
	struct rdmx_sigpipe sp;
	int rc;

	rdmx_sigpipe_hold(&sp);
	rc = broken_write();
	rdmx_sigpipe_release(&sp);
	/* Taken, not left pending, and the mask is as it was. */
	if (rc || pending_pipe() || blocked_pipe())
		return 2;
	return 0;
}

static int bare_write(void)
{
	return broken_write() ? 2 : 0;
}

static void test_sigpipe_held_is_taken(void **state)
{
	int status;

	(void)state;
	/* The check itself: without the hold, the child dies of SIGPIPE. */
	status = child_status(bare_write);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGPIPE);
	status = child_status(held_write);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

/* The caller blocks SIGPIPE itself: one raised before or during the
 * hold stays pending for it, and blocked. */
static int caller_pending(void)
{
	struct rdmx_sigpipe sp;
	sigset_t pipe, old;

	sigemptyset(&pipe);
	sigaddset(&pipe, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe, &old);
	raise(SIGPIPE);
	rdmx_sigpipe_hold(&sp);
	if (broken_write())
		return 2;
	rdmx_sigpipe_release(&sp);
	if (!pending_pipe() || !blocked_pipe())
		return 3;
	return 0;
}

static void test_sigpipe_callers_own_stays(void **state)
{
	int status;

	(void)state;
	status = child_status(caller_pending);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sigpipe_held_is_taken),
		cmocka_unit_test(test_sigpipe_callers_own_stays),
	};

	return cmocka_run_group_tests_name("sigpipe", tests, NULL, NULL);
}
