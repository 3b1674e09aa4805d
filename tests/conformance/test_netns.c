/* SPDX-License-Identifier: MIT */
/* Description: two hosts: network namespaces joined by a veth pair the test
 * creates. */
#include <fcntl.h>
#include <stdarg.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static char ns_a[32], ns_b[32], ip_a[32], ip_b[32];
static const int port = 18599;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

static void enter(const char *ns)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/var/run/netns/%s", ns);
	fd = open(path, O_RDONLY);
	if (fd < 0 || setns(fd, CLONE_NEWNET))
		_exit(10);
	close(fd);
}

/* Host A: serve one client; expose a buffer; wait for its SEND. */
static int host_a(void *arg)
{
	struct side s;
	struct rdmx_listener *lst;
	struct rdmx_conn *conn;
	struct rdmx_conn_attr attr;
	struct rdmx_conn_info info;
	struct buf mem, desc, in;
	struct rdmx_remote rem;
	struct rdmx_sge sg;
	char addr[64];

	(void)arg;
	enter(ns_a);
	side_open(&s);
	snprintf(addr, sizeof(addr), "%s:%d", ip_a, port);
	if (rdmx_listen(s.ctx, addr, &lst))
		return 1;
	attr = (struct rdmx_conn_attr){ .cq = s.cq };
	if (rdmx_accept(lst, &attr, T_TIMEOUT_MS, &conn))
		return 2;
	rdmx_conn_info(conn, &info);
	if (strncmp(info.peer_addr, ip_b, strlen(ip_b)))
		return 3;
	/* Left to choose, two namespaces are two hosts: tcp, and why. */
	if (strcmp(info.transport, "tcp") ||
	    !strstr(info.reason, "another host or netns"))
		return 7;
	buf_alloc(&s, &mem, 1 << 20,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE |
			  RDMX_ACCESS_REMOTE_READ);
	buf_alloc(&s, &desc, RDMX_REMOTE_PACKED_LEN, 0);
	buf_alloc(&s, &in, 8, RDMX_ACCESS_LOCAL_WRITE);
	rdmx_mr_remote(mem.mr, &rem);
	rdmx_remote_pack(&rem, desc.p);
	sg = sge_of(&in, 0, 8);
	if (rdmx_post_recv(conn, &sg, 1, 1))
		return 4;
	sg = sge_of(&desc, 0, desc.len);
	if (rdmx_post_send(conn, &sg, 2) || wait_wc(s.cq).status)
		return 5;
	if (wait_wc(s.cq).status) /* B's "done" */
		return 6;
	assert_pattern(mem.p, 1 << 20, 33, 0);
	rdmx_conn_close(conn);
	buf_free(&mem);
	buf_free(&desc);
	buf_free(&in);
	rdmx_listener_close(lst);
	side_close(&s);
	return 0;
}

/* Host B: WRITE 1 MiB into A, READ it back, say done. */
static int host_b(void *arg)
{
	struct side c;
	struct rdmx_conn *conn = NULL;
	struct rdmx_conn_attr attr;
	struct buf src, back, desc;
	struct rdmx_remote rem;
	struct rdmx_sge sg;
	char addr[64];

	(void)arg;
	enter(ns_b);
	side_open(&c);
	snprintf(addr, sizeof(addr), "%s:%d", ip_a, port);
	attr = (struct rdmx_conn_attr){ .cq = c.cq };
	for (int i = 0; i < 100 && !conn; i++) /* until A listens */
		if (rdmx_connect(c.ctx, addr, &attr, 1000, &conn))
			usleep(50 * 1000);
	if (!conn)
		return 1;
	buf_alloc(&c, &src, 1 << 20, 0);
	buf_alloc(&c, &back, 1 << 20, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&c, &desc, RDMX_REMOTE_PACKED_LEN, RDMX_ACCESS_LOCAL_WRITE);
	sg = sge_of(&desc, 0, desc.len);
	if (rdmx_post_recv(conn, &sg, 1, 1) || wait_wc(c.cq).status ||
	    rdmx_remote_unpack(desc.p, desc.len, &rem))
		return 2;
	buf_fill(&src, 33);
	sg = sge_of(&src, 0, src.len);
	if (rdmx_post_write(conn, &sg, rem.addr, rem.rkey, 2) ||
	    wait_wc(c.cq).status)
		return 3;
	sg = sge_of(&back, 0, back.len);
	if (rdmx_post_read(conn, &sg, rem.addr, rem.rkey, 3) ||
	    wait_wc(c.cq).status)
		return 4;
	if (memcmp(back.p, src.p, src.len))
		return 5;
	sg = sge_of(&src, 0, 8);
	if (rdmx_post_send(conn, &sg, 4) || wait_wc(c.cq).status)
		return 6;
	rdmx_conn_close(conn);
	buf_free(&src);
	buf_free(&back);
	buf_free(&desc);
	side_close(&c);
	return 0;
}

/*
 * Host B, second act: connect, post a RECV (and, @busy, keep 1 MiB SENDs
 * going into host A's RECVs), then the cable is pulled.
 */
static int host_b_cut_as(int *pipefd, bool busy)
{
	struct side c;
	struct rdmx_conn *conn = NULL;
	struct rdmx_conn_attr attr;
	struct rdmx_completion wc;
	struct buf in;
	struct rdmx_sge sg;
	struct timespec t0, t1;
	char addr[64], go;

	enter(ns_b);
	side_open(&c);
	snprintf(addr, sizeof(addr), "%s:%d", ip_a, port + 1);
	attr = (struct rdmx_conn_attr){ .cq = c.cq };
	for (int i = 0; i < 100 && !conn; i++)
		if (rdmx_connect(c.ctx, addr, &attr, 1000, &conn))
			usleep(50 * 1000);
	if (!conn)
		return 1;
	buf_alloc(&c, &in, 1 << 20, RDMX_ACCESS_LOCAL_WRITE);
	sg = sge_of(&in, 0, 8);
	if (rdmx_post_recv(conn, &sg, 1, 1))
		return 2;
	/*
	 * Data in flight when the link goes: host A is stopped first (its
	 * kernel takes what fits, then shuts its window), then we send.
	 */
	sg = sge_of(&in, 0, in.len);
	if (busy &&
	    (write(pipefd[1], "s", 1) != 1 || read(pipefd[0], &go, 1) != 1))
		return 3;
	for (int i = 0; busy && i < 16; i++)
		if (rdmx_post_send(conn, &sg, 100 + i))
			return 7;
	/* Tell the parent to cut the link, wait until it has. */
	if (write(pipefd[1], "c", 1) != 1 || read(pipefd[0], &go, 1) != 1)
		return 3;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (rdmx_cq_wait(c.cq, 10000) || rdmx_poll(c.cq, &wc, 1) != 1)
			return 4;
	} while (wc.opcode == RDMX_OP_SEND && wc.status == RDMX_OK);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (wc.status != RDMX_ERR_CONN_LOST || (!busy && wc.wr_id != 1))
		return 5;
	/* The default tcp.user_timeout is 2 s; allow the kernel's rounding. */
	if (t1.tv_sec - t0.tv_sec > 3)
		return 6;
	print_message("cable pulled%s: work flushed after %.2f s\n",
		      busy ? " with SENDs in flight" : "",
		      (double)(t1.tv_sec - t0.tv_sec) +
			      (t1.tv_nsec - t0.tv_nsec) / 1e9);
	rdmx_conn_close(conn);
	buf_free(&in);
	side_close(&c);
	return 0;
}

static int host_b_cut(void *arg)
{
	return host_b_cut_as(arg, false);
}

static int host_b_cut_busy(void *arg)
{
	return host_b_cut_as(arg, true);
}

/* Host A, second act: accept and then sit still; it never sees a FIN. */
static int host_a_idle(void *arg)
{
	struct buf in;
	struct side s;
	struct rdmx_listener *lst;
	struct rdmx_conn *conn;
	struct rdmx_conn_attr attr;
	char addr[64];

	(void)arg;
	enter(ns_a);
	side_open(&s);
	snprintf(addr, sizeof(addr), "%s:%d", ip_a, port + 1);
	if (rdmx_listen(s.ctx, addr, &lst))
		return 1;
	attr = (struct rdmx_conn_attr){ .cq = s.cq };
	if (rdmx_accept(lst, &attr, T_TIMEOUT_MS, &conn))
		return 2;
	/* Room for a busy B's SENDs; nothing is ever read from it. */
	buf_alloc(&s, &in, 16 << 20, RDMX_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < 16; i++) {
		struct rdmx_sge sg = sge_of(&in, (size_t)i << 20, 1 << 20);

		if (rdmx_post_recv(conn, &sg, 1, i))
			return 3;
	}
	pause();
	return 0;
}

/* Host B forcing shm across namespaces: refused, saying why. */
static int host_b_forced_shm(void *arg)
{
	struct side c;
	struct rdmx_conn *conn = NULL;
	struct rdmx_conn_attr attr;
	char addr[64];
	rdmx_status st = RDMX_ERR_CONN_REFUSED;

	(void)arg;
	enter(ns_b);
	setenv("RDMX_TRANSPORT", "shm", 1);
	side_open(&c);
	snprintf(addr, sizeof(addr), "%s:%d", ip_a, port);
	attr = (struct rdmx_conn_attr){ .cq = c.cq };
	/* Until A listens and the veth routes: refused or unreachable. */
	for (int i = 0; i < 100 && (st == RDMX_ERR_CONN_REFUSED ||
				    st == RDMX_ERR_UNREACHABLE);
	     i++) {
		st = rdmx_connect(c.ctx, addr, &attr, 1000, &conn);
		if (st)
			usleep(50 * 1000);
	}
	side_close(&c);
	return st == RDMX_ERR_NO_TRANSPORT ? 0 : 1;
}

/* Host A for the refusal: one accept, which must time out. */
static int host_a_refuses(void *arg)
{
	struct side s;
	struct rdmx_listener *lst;
	struct rdmx_conn *conn;
	struct rdmx_conn_attr attr;
	char addr[64];
	rdmx_status st;

	(void)arg;
	enter(ns_a);
	side_open(&s);
	snprintf(addr, sizeof(addr), "%s:%d", ip_a, port);
	if (rdmx_listen(s.ctx, addr, &lst))
		return 1;
	attr = (struct rdmx_conn_attr){ .cq = s.cq };
	st = rdmx_accept(lst, &attr, 3000, &conn);
	rdmx_listener_close(lst);
	side_close(&s);
	return st == RDMX_ERR_TIMEOUT ? 0 : 2;
}

static void cleanup(void)
{
	sh("ip netns del %s 2>/dev/null", ns_a);
	sh("ip netns del %s 2>/dev/null", ns_b);
}

/* Two namespaces joined by a veth pair; returns the id, or skips. */
static int netns_up(void)
{
	int id = getpid() % 250;

	if (geteuid() != 0)
		suite_skip("network namespaces need root");
	snprintf(ns_a, sizeof(ns_a), "rdmx-a-%d", getpid());
	snprintf(ns_b, sizeof(ns_b), "rdmx-b-%d", getpid());
	snprintf(ip_a, sizeof(ip_a), "10.213.%d.1", id);
	snprintf(ip_b, sizeof(ip_b), "10.213.%d.2", id);
	if (sh("ip netns add %s && ip netns add %s", ns_a, ns_b)) {
		cleanup();
		suite_skip("cannot create network namespaces (ip netns add)");
	}
	if (sh("ip link add rxa%d netns %s type veth peer name rxb%d netns %s"
	       " && ip -n %s addr add %s/24 dev rxa%d && ip -n %s link set rxa%d up"
	       " && ip -n %s addr add %s/24 dev rxb%d && ip -n %s link set rxb%d up"
	       " && ip -n %s link set lo up && ip -n %s link set lo up",
	       id, ns_a, id, ns_b, ns_a, ip_a, id, ns_a, id, ns_b, ip_b, id,
	       ns_b, id, ns_a, ns_b)) {
		cleanup();
		suite_skip("cannot create a veth pair between namespaces");
	}
	return id;
}

/* Host A and host B, one process each in its namespace; both must pass. */
static void two_hosts(int (*a_fn)(void *), int (*b_fn)(void *))
{
	pid_t a, b;

	netns_up();
	a = spawn_fork(a_fn, NULL);
	b = spawn_fork(b_fn, NULL);
	reap_ok(b);
	reap_ok(a);
	cleanup();
}

static void test_conn_across_namespaces(void **state)
{
	(void)state;
	two_hosts(host_a, host_b);
}

static void test_select_forced_shm_across_namespaces(void **state)
{
	(void)state;
	two_hosts(host_a_refuses, host_b_forced_shm);
}

/* Pull the cable under a connection: no FIN ever arrives, and the posted
 * work still completes within tcp.user_timeout. */
static void cable_pulled(int (*b_fn)(void *), bool busy)
{
	int to_parent[2], to_child[2], fds[2], id;
	pid_t a, b;
	char c;

	id = netns_up();
	assert_int_equal(pipe(to_parent), 0);
	assert_int_equal(pipe(to_child), 0);
	a = spawn_fork(host_a_idle, NULL);
	fds[0] = to_child[0];
	fds[1] = to_parent[1];
	b = spawn_fork(b_fn, fds);
	if (busy) {
		assert_int_equal(read(to_parent[0], &c, 1), 1);
		kill(a, SIGSTOP);
		assert_int_equal(write(to_child[1], "s", 1), 1);
	}
	assert_int_equal(read(to_parent[0], &c, 1), 1);
	if (busy)
		usleep(300 * 1000); /* the SENDs fill what the kernels hold */
	assert_int_equal(sh("ip -n %s link del rxa%d", ns_a, id), 0);
	assert_int_equal(write(to_child[1], "g", 1), 1);
	reap_ok(b);
	kill(a, SIGKILL);
	waitpid(a, NULL, 0);
	cleanup();
}

static void test_conn_cable_pulled(void **state)
{
	(void)state;
	cable_pulled(host_b_cut, false);
}

/*
 * The same with SENDs in flight into a stopped host's shut window: the
 * kernel's TCP_USER_TIMEOUT there is conn.stall_timeout, and the engine's
 * watchdog finds the silent host from its unanswered probes.
 */
static void test_conn_cable_pulled_busy(void **state)
{
	(void)state;
	cable_pulled(host_b_cut_busy, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conn_across_namespaces),
		cmocka_unit_test(test_conn_cable_pulled),
		cmocka_unit_test(test_conn_cable_pulled_busy),
		cmocka_unit_test(test_select_forced_shm_across_namespaces),
	};

	/* Each host here chooses for itself, or forces where a case says. */
	unsetenv("RDMX_TRANSPORT");
	return cmocka_run_group_tests_name("netns", tests, NULL, NULL);
}
