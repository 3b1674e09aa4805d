/* SPDX-License-Identifier: MIT */
/*
 * Description: lib/registry on both backends: publish, look up, list and
 * watch; a SIGKILLed publisher's entry goes (within its TTL on etcd); etcd
 * down fails look-ups with one line while connections made stay; a
 * three-member etcd cluster loses a member and clients carry on; "@NAME"
 * in rdmx_connect. Each etcd is Debian's, started here on loopback ports
 * with a temporary data directory and stopped by its pid.
 */
#include <dirent.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd_rig.h"
#include "harness.h"
#include "rdmx_registry.h"

#define TTL_MS 2000

/* ---- the cases, on either backend --------------------------------------- */

static struct rdmx_registry_entry entry(const char *name, const char *addr,
					const char *payload)
{
	struct rdmx_registry_entry e = { 0 };

	snprintf(e.name, sizeof(e.name), "%s", name);
	snprintf(e.addr, sizeof(e.addr), "%s", addr);
	e.payload_len = strlen(payload);
	memcpy(e.payload, payload, e.payload_len);
	return e;
}

static struct rdmx_registry_event next_event(struct rdmx_registry_watch *w)
{
	struct rdmx_registry_event ev;
	int got = rdmx_registry_watch_next(w, &ev, (int)(5000 * time_scale()));

	if (got != 1)
		fail_msg("no watch event within 5 s (%d)", got);
	return ev;
}

static void publish_lookup_list_watch(const char *url)
{
	struct rdmx_registry *reg, *other;
	struct rdmx_registry_entry e, *es;
	struct rdmx_registry_watch *w;
	struct rdmx_registry_event ev;
	size_t n;

	assert_int_equal(rdmx_registry_open(NULL, url, &reg), RDMX_OK);
	assert_int_equal(rdmx_registry_open(NULL, url, &other), RDMX_OK);
	e = entry("mem0", "127.0.0.1:7480", "size=4096");
	assert_int_equal(rdmx_registry_publish(reg, &e, TTL_MS), RDMX_OK);
	e = entry("kv/a", "127.0.0.1:7490", "");
	assert_int_equal(rdmx_registry_publish(reg, &e, TTL_MS), RDMX_OK);
	e = entry("kv/b", "127.0.0.1:7491", "\x01\x02");
	assert_int_equal(rdmx_registry_publish(reg, &e, TTL_MS), RDMX_OK);

	/* Another handle (another process, as far as the store knows). */
	assert_int_equal(rdmx_registry_lookup(other, "mem0", &e), RDMX_OK);
	assert_string_equal(e.name, "mem0");
	assert_string_equal(e.addr, "127.0.0.1:7480");
	assert_int_equal(e.payload_len, 9);
	assert_memory_equal(e.payload, "size=4096", 9);
	assert_int_equal(e.pid, getpid());
	assert_int_equal(rdmx_registry_lookup(other, "mem", &e),
			 RDMX_ERR_NOT_FOUND);
	assert_int_equal(rdmx_registry_list(other, "kv/", &es, &n), RDMX_OK);
	assert_int_equal(n, 2);
	assert_string_equal(es[0].name, "kv/a");
	assert_string_equal(es[1].name, "kv/b");
	assert_int_equal(es[1].payload_len, 2);
	free(es);
	assert_int_equal(rdmx_registry_list(other, "", &es, &n), RDMX_OK);
	assert_int_equal(n, 3);
	free(es);

	/* Changes from now on, in order; entries already there are not. */
	/* Changes after the call returns are reported: no wait here. */
	assert_int_equal(rdmx_registry_watch(other, "kv/", &w), RDMX_OK);
	e = entry("kv/c", "127.0.0.1:7492", "new");
	assert_int_equal(rdmx_registry_publish(reg, &e, TTL_MS), RDMX_OK);
	e = entry("mem1", "127.0.0.1:7481", ""); /* outside the prefix */
	assert_int_equal(rdmx_registry_publish(reg, &e, TTL_MS), RDMX_OK);
	assert_int_equal(rdmx_registry_unpublish(reg, "kv/a"), RDMX_OK);
	ev = next_event(w);
	assert_int_equal(ev.type, RDMX_REGISTRY_PUT);
	assert_string_equal(ev.entry.name, "kv/c");
	assert_string_equal(ev.entry.addr, "127.0.0.1:7492");
	ev = next_event(w);
	assert_int_equal(ev.type, RDMX_REGISTRY_DELETE);
	assert_string_equal(ev.entry.name, "kv/a");
	assert_int_equal(rdmx_registry_watch_next(w, &ev, 0), 0);
	assert_int_equal(rdmx_registry_lookup(other, "kv/a", &e),
			 RDMX_ERR_NOT_FOUND);
	assert_int_equal(rdmx_registry_unpublish(reg, "kv/a"),
			 RDMX_ERR_NOT_FOUND);

	/* Bad input: refused, nothing lost. */
	e = entry("bad name", "127.0.0.1:1", "");
	assert_int_equal(rdmx_registry_publish(reg, &e, 0), RDMX_ERR_INVALID);
	e = entry("../up", "127.0.0.1:1", "");
	assert_int_equal(rdmx_registry_publish(reg, &e, 0), RDMX_ERR_INVALID);
	assert_int_equal(rdmx_registry_lookup(other, "", &e), RDMX_ERR_INVALID);

	/* Close unpublishes what it published. */
	rdmx_registry_close(reg);
	assert_int_equal(rdmx_registry_list(other, "", &es, &n), RDMX_OK);
	assert_int_equal(n, 0);
	free(es);
	rdmx_registry_watch_close(w);
	rdmx_registry_close(other);
}

/* A child: publish "doomed" at the URL in $TEST_REGISTRY_URL, then wait. */
static int doomed_publisher(int port, int flag)
{
	struct rdmx_registry *reg;
	struct rdmx_registry_entry e = entry("doomed", "127.0.0.1:1", "");

	(void)flag;
	(void)port;
	if (rdmx_registry_open(NULL, getenv("TEST_REGISTRY_URL"), &reg) ||
	    rdmx_registry_publish(reg, &e, TTL_MS))
		return 1;
	for (;;)
		pause();
}

/* Publisher SIGKILLed: the entry is gone within @bound_s; the seconds. */
static double killed_publisher_goes(const char *url, double bound_s)
{
	struct rdmx_registry *reg;
	struct rdmx_registry_entry e;
	struct rdmx_registry_watch *w;
	struct rdmx_registry_event ev;
	double t0, gone;
	pid_t pid;
	int i;

	setenv("TEST_REGISTRY_URL", url, 1);
	assert_int_equal(rdmx_registry_open(NULL, url, &reg), RDMX_OK);
	pid = spawn("doomed_publisher", 0, 0);
	for (i = 0; rdmx_registry_lookup(reg, "doomed", &e); i++) {
		if (i > 100 * time_scale())
			fail_msg("the child did not publish in 10 s");
		usleep(100000);
	}
	assert_int_equal(e.pid, pid);
	assert_int_equal(rdmx_registry_watch(reg, "doomed", &w), RDMX_OK);
	/* Alive past its TTL: the keep-alive renews it. */
	usleep(TTL_MS * 1000 * 3 / 2);
	assert_int_equal(rdmx_registry_lookup(reg, "doomed", &e), RDMX_OK);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	t0 = now_s();
	while (rdmx_registry_lookup(reg, "doomed", &e) == RDMX_OK) {
		if (now_s() - t0 > bound_s)
			fail_msg("the entry of a SIGKILLed publisher is still "
				 "there after %.1f s",
				 bound_s);
		usleep(20000);
	}
	gone = now_s() - t0;
	ev = next_event(w);
	assert_int_equal(ev.type, RDMX_REGISTRY_DELETE);
	assert_string_equal(ev.entry.name, "doomed");
	rdmx_registry_watch_close(w);
	rdmx_registry_close(reg);
	return gone;
}

/* ---- dir: --------------------------------------------------------------- */

static void test_dir_publish_lookup_list_watch(void **state)
{
	char dir[] = "/tmp/rdmx-reg-XXXXXX", url[64], cmd[64];

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(url, sizeof(url), "dir:%s/r", dir);
	publish_lookup_list_watch(url);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

static void test_dir_killed_publisher_ignored_and_removed(void **state)
{
	char dir[] = "/tmp/rdmx-reg-XXXXXX", url[64], cmd[64], file[96];
	double s;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(url, sizeof(url), "dir:%s", dir);
	s = killed_publisher_goes(url, 1.0);
	print_message("dir: the entry went %.0f ms after the SIGKILL\n",
		      s * 1000);
	snprintf(file, sizeof(file), "%s/doomed", dir);
	assert_int_equal(access(file, F_OK), -1); /* removed, not only hidden */
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

static void test_bad_urls_refused(void **state)
{
	struct rdmx_registry *reg = NULL;

	(void)state;
	assert_int_equal(rdmx_registry_open(NULL, "http://x", &reg),
			 RDMX_ERR_INVALID);
	assert_int_equal(rdmx_registry_open(NULL, "etcd://", &reg),
			 RDMX_ERR_INVALID);
	assert_int_equal(rdmx_registry_open(NULL, "etcd://hostnoport/p", &reg),
			 RDMX_ERR_INVALID);
	assert_int_equal(rdmx_registry_open(NULL, "dir:", &reg),
			 RDMX_ERR_INVALID);
	assert_null(reg);
}

/* ---- etcd --------------------------------------------------------------- */

static void test_etcd_publish_lookup_list_watch(void **state)
{
	struct etcd e;

	(void)state;
	etcd_start(&e, 1);
	publish_lookup_list_watch(e.url);
	etcd_stop(&e);
}

static void test_etcd_killed_publisher_expires(void **state)
{
	struct etcd e;
	double s;

	(void)state;
	etcd_start(&e, 1);
	/* Its lease's TTL, etcd's expiry check, a loaded machine's slack. */
	s = killed_publisher_goes(e.url, (TTL_MS / 1000.0 + 3) * time_scale());
	print_message("etcd: the entry went %.0f ms after the SIGKILL (TTL "
		      "%d ms)\n",
		      s * 1000, TTL_MS);
	etcd_stop(&e);
}

/*
 * "@NAME" in rdmx_connect; then etcd dies: a look-up fails at once with
 * one line, and the connection made through it goes on working.
 */
static void test_etcd_down_lookups_fail_connections_stay(void **state)
{
	struct etcd e;
	struct rdmx_registry *reg;
	struct rdmx_registry_entry en;
	struct side s, c;
	struct rdmx_listener *lst;
	struct rdmx_conn *sconn, *cconn, *none = NULL;
	struct acc acc;
	struct rdmx_conn_attr attr;
	struct buf sb, cb;
	struct rdmx_sge sg;
	char addr[64];
	double t0;

	(void)state;
	etcd_start(&e, 1);
	side_open(&s);
	side_open(&c);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", side_listen(&s, &lst));
	acc = (struct acc){ .s = &s, .lst = lst };
	assert_int_equal(rdmx_registry_open(NULL, e.url, &reg), RDMX_OK);
	en = entry("srv", addr, "");
	assert_int_equal(rdmx_registry_publish(reg, &en, TTL_MS), RDMX_OK);

	/* Without a resolver a name is refused; with one it connects. */
	attr = (struct rdmx_conn_attr){ .cq = c.cq };
	assert_int_equal(rdmx_connect(c.ctx, "@srv", &attr, T_TIMEOUT_MS,
				      &cconn),
			 RDMX_ERR_INVALID);
	rdmx_registry_attach(reg, c.ctx);
	assert_int_equal(rdmx_connect(c.ctx, "@nosuch", &attr, T_TIMEOUT_MS,
				      &cconn),
			 RDMX_ERR_NOT_FOUND);
	acc_start(&acc);
	assert_int_equal(rdmx_connect(c.ctx, "@srv", &attr, T_TIMEOUT_MS,
				      &cconn),
			 RDMX_OK);
	acc_join(&acc);
	assert_int_equal(acc.st, RDMX_OK);
	sconn = acc.conn;

	etcd_kill(&e, 0);
	t0 = now_s();
	assert_int_equal(rdmx_registry_lookup(reg, "srv", &en),
			 RDMX_ERR_UNREACHABLE);
	assert_true(now_s() - t0 < 2.0 * time_scale());
	assert_int_equal(rdmx_connect(c.ctx, "@srv", &attr, T_TIMEOUT_MS,
				      &none),
			 RDMX_ERR_UNREACHABLE);

	/* The connection made before: a SEND still arrives. */
	buf_alloc(&s, &sb, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&c, &cb, 64, 0);
	buf_fill(&cb, 7);
	sg = sge_of(&sb, 0, 64);
	assert_int_equal(rdmx_post_recv(sconn, &sg, 1, 1), RDMX_OK);
	sg = sge_of(&cb, 0, 64);
	assert_int_equal(rdmx_post_send(cconn, &sg, 2), RDMX_OK);
	expect_wc(c.cq, RDMX_OK, RDMX_OP_SEND);
	expect_wc(s.cq, RDMX_OK, RDMX_OP_RECV);
	assert_pattern(sb.p, 64, 7, 0);

	buf_free(&sb);
	buf_free(&cb);
	rdmx_conn_close(cconn);
	rdmx_conn_close(sconn);
	rdmx_listener_close(lst);
	side_close(&s);
	side_close(&c);
	rdmx_registry_close(reg); /* its etcd is gone: it says so, no hang */
	etcd_stop(&e);
}

/*
 * Three members; the one the clients use, and the leader, is SIGKILLed:
 * look-ups, publications, renewals and the watch carry on through the
 * others, across their election.
 */
static void test_etcd_cluster_survives_a_member(void **state)
{
	struct etcd e;
	struct rdmx_registry *reg, *other;
	struct rdmx_registry_entry en;
	struct rdmx_registry_watch *w;
	struct rdmx_registry_event ev;

	(void)state;
	etcd_start(&e, 3);
	assert_int_equal(rdmx_registry_open(NULL, e.url, &reg), RDMX_OK);
	assert_int_equal(rdmx_registry_open(NULL, e.url, &other), RDMX_OK);
	en = entry("n1", "127.0.0.1:1", "one");
	assert_int_equal(rdmx_registry_publish(reg, &en, TTL_MS), RDMX_OK);
	assert_int_equal(rdmx_registry_watch(other, "n", &w), RDMX_OK);

	/*
	 * The first listed, everyone's first choice, and the leader: the
	 * others elect a new one, answering 503 meanwhile, and the calls
	 * must ride that out.
	 */
	etcd_lead(&e, 0);
	etcd_kill(&e, 0);
	assert_int_equal(rdmx_registry_lookup(other, "n1", &en), RDMX_OK);
	en = entry("n2", "127.0.0.1:2", "two");
	assert_int_equal(rdmx_registry_publish(reg, &en, TTL_MS), RDMX_OK);
	ev = next_event(w);
	assert_int_equal(ev.type, RDMX_REGISTRY_PUT);
	assert_string_equal(ev.entry.name, "n2");
	/* Past the TTL: renewed through a live member. */
	usleep(TTL_MS * 1000 * 2);
	assert_int_equal(rdmx_registry_lookup(other, "n1", &en), RDMX_OK);
	assert_string_equal(en.addr, "127.0.0.1:1");
	rdmx_registry_watch_close(w);
	rdmx_registry_close(reg);
	rdmx_registry_close(other);
	etcd_stop(&e);
}

/*
 * A server started while etcd is down: publish says so, keeps the entry,
 * and stores it once etcd is back; the name then resolves.
 */
/* A member that answers 503 (as etcd does while it elects a leader)
 * @busy times, then 200. */
struct busy_member {
	int fd, busy;
	_Atomic int served;
};

static void *busy_member_main(void *arg)
{
	static const char unavailable[] =
		"HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
		"application/json\r\nContent-Length: 54\r\nConnection: "
		"close\r\n\r\n{\"error\":\"etcdserver: leader changed\","
		"\"code\":14,\"x\":0}";
	static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Type: "
				 "application/json\r\nContent-Length: "
				 "2\r\nConnection: close\r\n\r\n{}";
	struct busy_member *m = arg;
	char req[4096];
	int c;

	while ((c = accept(m->fd, NULL, NULL)) >= 0) {
		const char *a = atomic_fetch_add(&m->served, 1) < m->busy
					? unavailable
					: ok;

		if (read(c, req, sizeof(req)) > 0 &&
		    write(c, a, strlen(a)) != (ssize_t)strlen(a))
			break;
		close(c);
	}
	return NULL;
}

/*
 * A member that is up but answers 503 while its cluster elects a leader
 * (a member was lost): the call is tried again until it answers, within
 * a bound; it used to fail at the first 503.
 */
static void test_etcd_election_ridden_out(void **state)
{
	struct busy_member m = { .busy = 3 };
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	struct rdmx_registry *reg;
	pthread_t th;
	char url[64];

	(void)state;
	m.fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(m.fd >= 0);
	assert_int_equal(bind(m.fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(m.fd, 8), 0);
	assert_int_equal(getsockname(m.fd, (struct sockaddr *)&a, &alen), 0);
	assert_int_equal(pthread_create(&th, NULL, busy_member_main, &m), 0);
	snprintf(url, sizeof(url), "etcd://127.0.0.1:%d/test",
		 ntohs(a.sin_port));
	assert_int_equal(rdmx_registry_open(NULL, url, &reg), RDMX_OK);
	assert_int_equal(rdmx_registry_ping(reg), RDMX_OK);
	assert_int_equal(atomic_load(&m.served), m.busy + 1);
	rdmx_registry_close(reg);
	shutdown(m.fd, SHUT_RDWR);
	close(m.fd);
	pthread_join(th, NULL);
}

/*
 * A test that fails between etcd_start and etcd_stop leaves no etcd
 * behind: the rig's exit handler kills it (CI once found members of a
 * failed run still running).
 */
static void test_etcd_rig_reaps_on_failure(void **state)
{
	int fds[2];
	pid_t child, member = 0;

	(void)state;
	assert_int_equal(pipe(fds), 0);
	child = fork();
	assert_true(child >= 0);
	if (!child) {
		struct etcd e;

		close(fds[0]);
		etcd_start(&e, 1);
		if (write(fds[1], &e.pid[0], sizeof(e.pid[0])) < 0)
			_exit(2);
		exit(1); /* as a failed assertion ends the program */
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &member, sizeof(member)), sizeof(member));
	close(fds[0]);
	assert_int_equal(waitpid(child, NULL, 0), child);
	assert_true(member > 0);
	/* Killed and reaped by the child's exit handler: no such process. */
	assert_int_equal(kill(member, 0), -1);
	assert_int_equal(errno, ESRCH);
}

static void test_etcd_publish_waits_for_etcd(void **state)
{
	struct etcd e;
	struct rdmx_registry *reg, *other;
	struct rdmx_registry_entry en = entry("late", "127.0.0.1:9", "");
	double t0;

	(void)state;
	etcd_start(&e, 1);
	etcd_kill(&e, 0);
	assert_int_equal(rdmx_registry_open(NULL, e.url, &reg), RDMX_OK);
	assert_int_equal(rdmx_registry_publish(reg, &en, TTL_MS),
			 RDMX_ERR_UNREACHABLE);
	etcd_restart(&e, 0);
	etcd_wait(e.url);
	assert_int_equal(rdmx_registry_open(NULL, e.url, &other), RDMX_OK);
	t0 = now_s();
	while (rdmx_registry_lookup(other, "late", &en) != RDMX_OK) {
		if (now_s() - t0 > 5 * time_scale())
			fail_msg("not published 5 s after etcd came back");
		usleep(50000);
	}
	print_message("published %.0f ms after etcd answered again\n",
		      (now_s() - t0) * 1000);
	assert_string_equal(en.addr, "127.0.0.1:9");
	/* Unpublished at close, as any other. */
	rdmx_registry_close(reg);
	assert_int_equal(rdmx_registry_lookup(other, "late", &en),
			 RDMX_ERR_NOT_FOUND);
	rdmx_registry_close(other);
	etcd_stop(&e);
}

static const struct child children[] = {
	{ "doomed_publisher", doomed_publisher },
	{ NULL, NULL },
};

int main(int argc, char **argv)
{
	harness_children(argc, argv, children);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_urls_refused),
		cmocka_unit_test(test_dir_publish_lookup_list_watch),
		cmocka_unit_test(test_dir_killed_publisher_ignored_and_removed),
		cmocka_unit_test(test_etcd_publish_lookup_list_watch),
		cmocka_unit_test(test_etcd_killed_publisher_expires),
		cmocka_unit_test(test_etcd_down_lookups_fail_connections_stay),
		cmocka_unit_test(test_etcd_cluster_survives_a_member),
		cmocka_unit_test(test_etcd_publish_waits_for_etcd),
		cmocka_unit_test(test_etcd_election_ridden_out),
		cmocka_unit_test(test_etcd_rig_reaps_on_failure),
	};

	return cmocka_run_group_tests_name("registry", tests, NULL, NULL);
}
