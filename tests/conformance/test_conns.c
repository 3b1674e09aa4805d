/* SPDX-License-Identifier: MIT */
/* Description: 64 concurrent connections between two processes; private
 * data exchanged with a connection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

enum { NCONN = 64 };

static int client(int port, int flag)
{
	struct side c;
	struct rdmx_conn *conns[NCONN];
	struct buf out, in;
	int got = 0;

	(void)flag;
	side_open(&c);
	buf_alloc(&c, &out, NCONN * 8, 0);
	buf_alloc(&c, &in, NCONN * 8, RDMX_ACCESS_LOCAL_WRITE);
	for (int i = 0; i < NCONN; i++) {
		struct rdmx_sge r = sge_of(&in, i * 8, 8);

		conns[i] = side_connect(&c, port);
		if (rdmx_post_recv(conns[i], &r, 1, 1000 + i))
			return 1;
	}
	/* All open at once: send each its index, expect twice it back. */
	for (uint64_t i = 0; i < NCONN; i++) {
		struct rdmx_sge s = sge_of(&out, i * 8, 8);

		memcpy(s.addr, &i, 8);
		if (rdmx_post_send(conns[i], &s, i))
			return 2;
	}
	while (got < 2 * NCONN) {
		struct rdmx_completion wc = wait_wc(c.cq);

		if (wc.status)
			return 3;
		if (wc.opcode == RDMX_OP_RECV) {
			uint64_t i = wc.wr_id - 1000, v;

			memcpy(&v, in.p + i * 8, 8);
			if (wc.conn != conns[i] || v != 2 * i)
				return 4;
		}
		got++;
	}
	for (int i = 0; i < NCONN; i++)
		rdmx_conn_close(conns[i]);
	buf_free(&out);
	buf_free(&in);
	side_close(&c);
	return 0;
}

static void test_conn_64_concurrent(void **state)
{
	struct side s;
	struct rdmx_listener *lst;
	struct rdmx_conn *conns[NCONN];
	struct buf in, out;
	bool seen[NCONN] = { false };
	int port, got = 0;
	pid_t pid;

	(void)state;
	side_open(&s);
	port = side_listen(&s, &lst);
	pid = spawn("client", port, 0);
	buf_alloc(&s, &in, NCONN * 8, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&s, &out, NCONN * 8, 0);
	for (uintptr_t i = 0; i < NCONN; i++) {
		struct rdmx_conn_attr attr = { .mask = RDMX_CONN_ATTR_USER_CTX,
					       .cq = s.cq,
					       .user_ctx = (void *)i };
		struct rdmx_sge r = sge_of(&in, i * 8, 8);

		assert_int_equal(rdmx_accept(lst, &attr, T_TIMEOUT_MS,
					     &conns[i]),
				 RDMX_OK);
		assert_int_equal(rdmx_post_recv(conns[i], &r, 1, i), RDMX_OK);
	}
	while (got < NCONN) {
		struct rdmx_completion wc = wait_wc(s.cq);
		uintptr_t i = (uintptr_t)rdmx_conn_user_ctx(wc.conn);
		uint64_t v;

		if (wc.opcode != RDMX_OP_RECV)
			continue;
		assert_int_equal(wc.status, RDMX_OK);
		assert_int_equal(wc.wr_id, i);
		memcpy(&v, in.p + i * 8, 8);
		/*
		 * Handshakes run concurrently, so accept order need not be
		 * connect order: each of the client's numbers comes once.
		 */
		assert_true(v < NCONN && !seen[v]);
		seen[v] = true;
		v *= 2;
		memcpy(out.p + i * 8, &v, 8);
		struct rdmx_sge sg = sge_of(&out, i * 8, 8);

		assert_int_equal(rdmx_post_send(conns[i], &sg, 500 + i),
				 RDMX_OK);
		got++;
	}
	reap_ok(pid);
	for (int i = 0; i < NCONN; i++)
		rdmx_conn_close(conns[i]);
	buf_free(&in);
	buf_free(&out);
	rdmx_listener_close(lst);
	side_close(&s);
}

/*
 * Private data both ways: the server hands its region's descriptor over
 * with the connection, and the client READs it at once, with no
 * SEND/RECV first; the client's bytes reach the server's side too.
 */
static void test_conn_private_data_both_ways(void **state)
{
	struct side s, c;
	struct buf region, dst;
	struct rdmx_remote rem;
	struct rdmx_sge sg;
	uint8_t desc[RDMX_REMOTE_PACKED_LEN], hello[200];
	struct acc a = { .s = &s };
	struct rdmx_conn_attr attr;
	struct rdmx_conn *conn = NULL, *none = NULL;
	const void *got;
	size_t len;
	char addr[64];

	(void)state;
	side_open(&s);
	side_open(&c);
	buf_alloc(&s, &region, 4096,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_READ);
	buf_fill(&region, 9);
	buf_alloc(&c, &dst, 4096, RDMX_ACCESS_LOCAL_WRITE);
	rdmx_mr_remote(region.mr, &rem);
	rdmx_remote_pack(&rem, desc);
	for (size_t i = 0; i < sizeof(hello); i++)
		hello[i] = (uint8_t)(i * 7);
	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(),
		 side_listen(&s, &a.lst));
	a.attr = (struct rdmx_conn_attr){ .mask = RDMX_CONN_ATTR_PRIVATE_DATA,
					  .cq = s.cq,
					  .private_data = desc,
					  .private_data_len = sizeof(desc) };
	acc_start(&a);
	attr = (struct rdmx_conn_attr){ .mask = RDMX_CONN_ATTR_PRIVATE_DATA,
					.cq = c.cq,
					.private_data = hello,
					.private_data_len = sizeof(hello) };
	assert_int_equal(rdmx_connect(c.ctx, addr, &attr, T_TIMEOUT_MS, &conn),
			 RDMX_OK);
	acc_join(&a);
	assert_int_equal(a.st, RDMX_OK);
	/* The client's bytes, on the server's connection. */
	got = rdmx_conn_private_data(a.conn, &len);
	assert_int_equal(len, sizeof(hello));
	assert_memory_equal(got, hello, sizeof(hello));
	/* The descriptor, and a READ with it straight away. */
	got = rdmx_conn_private_data(conn, &len);
	assert_int_equal(len, RDMX_REMOTE_PACKED_LEN);
	assert_int_equal(rdmx_remote_unpack(got, len, &rem), RDMX_OK);
	sg = sge_of(&dst, 0, 4096);
	assert_int_equal(rdmx_post_read(conn, &sg, rem.addr, rem.rkey, 1),
			 RDMX_OK);
	expect_wc(c.cq, RDMX_OK, RDMX_OP_READ);
	assert_pattern(dst.p, 4096, 9, 0);
	/* Too much is refused before anything is sent. */
	attr.private_data_len = RDMX_PRIVATE_DATA_MAX + 1;
	assert_int_equal(rdmx_connect(c.ctx, addr, &attr, T_TIMEOUT_MS, &none),
			 RDMX_ERR_INVALID);
	rdmx_conn_close(conn);
	rdmx_conn_close(a.conn);
	/* None sent: none received. */
	a.attr = (struct rdmx_conn_attr){ .cq = s.cq };
	acc_start(&a);
	attr = (struct rdmx_conn_attr){ .cq = c.cq };
	assert_int_equal(rdmx_connect(c.ctx, addr, &attr, T_TIMEOUT_MS, &conn),
			 RDMX_OK);
	acc_join(&a);
	assert_int_equal(a.st, RDMX_OK);
	assert_null(rdmx_conn_private_data(conn, &len));
	assert_int_equal(len, 0);
	assert_null(rdmx_conn_private_data(a.conn, &len));
	rdmx_conn_close(conn);
	rdmx_conn_close(a.conn);
	buf_free(&region);
	buf_free(&dst);
	rdmx_listener_close(a.lst);
	side_close(&c);
	side_close(&s);
}

/* Connect with attr.transports = @tp; the status, and the transport. */
static rdmx_status connect_over(struct side *s, struct side *c,
				struct rdmx_listener *lst, const char *addr,
				unsigned tp, char *used, size_t len)
{
	struct acc a = { .s = s, .lst = lst };
	struct rdmx_conn_attr attr = { .mask = RDMX_CONN_ATTR_TRANSPORTS,
				       .cq = c->cq,
				       .transports = tp };
	struct rdmx_conn *conn = NULL;
	struct rdmx_conn_info info;
	rdmx_status st;

	acc_start(&a);
	st = rdmx_connect(c->ctx, addr, &attr, T_TIMEOUT_MS, &conn);
	if (st) { /* refused: the server has nothing to take */
		acc_stop(&a);
		assert_int_equal(a.st, RDMX_ERR_TIMEOUT);
	} else {
		acc_join(&a);
		assert_int_equal(a.st, RDMX_OK);
		rdmx_conn_info(conn, &info);
		snprintf(used, len, "%s", info.transport);
		rdmx_conn_close(conn);
		rdmx_conn_close(a.conn);
	}
	return st;
}

/*
 * Two connections of one context over different transports, chosen in
 * their attr (it took a setenv between two contexts); one the peers
 * cannot share is refused, with the reason.
 */
static void test_conn_transports_per_connection(void **state)
{
	struct side s, c;
	struct rdmx_listener *lst;
	struct rdmx_conn *conn = NULL;
	struct rdmx_conn_attr bad;
	char addr[64], used[16];
	rdmx_status st;

	(void)state;
	/* Contexts that may use every transport (the suite forces one). */
	side_open_with(&s, "RDMX_TRANSPORT", "auto");
	side_open_with(&c, "RDMX_TRANSPORT", "auto");
	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(),
		 side_listen(&s, &lst));
	assert_int_equal(connect_over(&s, &c, lst, addr, RDMX_TP_TCP, used,
				      sizeof(used)),
			 RDMX_OK);
	assert_string_equal(used, "tcp");
	assert_int_equal(connect_over(&s, &c, lst, addr, RDMX_TP_SHM, used,
				      sizeof(used)),
			 RDMX_OK);
	assert_string_equal(used, "shm");
	/* Verbs where a device serves the address, else refused. */
	st = connect_over(&s, &c, lst, addr, RDMX_TP_VERBS, used, sizeof(used));
	if (st == RDMX_OK)
		assert_string_equal(used, "verbs");
	else
		assert_int_equal(st, RDMX_ERR_NO_TRANSPORT);
	print_message("verbs only: %s\n", st ? rdmx_strerror(st) : used);
	bad = (struct rdmx_conn_attr){ .mask = RDMX_CONN_ATTR_TRANSPORTS,
				       .cq = c.cq,
				       .transports = 1u << 5 };
	assert_int_equal(rdmx_connect(c.ctx, addr, &bad, 1000, &conn),
			 RDMX_ERR_INVALID);
	bad.transports = 0;
	assert_int_equal(rdmx_connect(c.ctx, addr, &bad, 1000, &conn),
			 RDMX_ERR_INVALID);
	rdmx_listener_close(lst);
	side_close(&c);
	side_close(&s);
}

/* A connection of @c's from @src (NULL: the context's choice) to
 * @host:@port, accepted by @s on @lst. */
static struct rdmx_conn *connect_to(struct side *s, struct side *c,
				    struct rdmx_listener *lst, const char *src,
				    const char *host, int port,
				    struct rdmx_conn **sconn_p)
{
	struct acc a = { .s = s, .lst = lst };
	struct rdmx_conn_attr attr = {
		.mask = src ? RDMX_CONN_ATTR_SOURCE_ADDR : 0,
		.cq = c->cq,
		.source_addr = src,
	};
	struct rdmx_conn *conn = NULL;
	char addr[64];

	snprintf(addr, sizeof(addr), "%s:%d", host, port);
	acc_start(&a);
	assert_int_equal(rdmx_connect(c->ctx, addr, &attr, T_TIMEOUT_MS, &conn),
			 RDMX_OK);
	acc_join(&a);
	assert_int_equal(a.st, RDMX_OK);
	*sconn_p = a.conn;
	return conn;
}

/* WRITE @seed's pattern at @off of @dst over @conn, READ it back into
 * @src, check it; @src and @dst's descriptor @r. */
static void write_read(struct rdmx_conn *conn, struct side *from,
		       struct buf *src, const struct rdmx_remote *r, size_t off,
		       size_t len, uint8_t seed)
{
	struct rdmx_sge sg = sge_of(src, 0, len);

	buf_fill(src, seed);
	assert_int_equal(rdmx_post_write(conn, &sg, r->addr + off, r->rkey, 1),
			 RDMX_OK);
	expect_wc(from->cq, RDMX_OK, RDMX_OP_WRITE);
	memset(src->p, 0, len);
	assert_int_equal(rdmx_post_read(conn, &sg, r->addr + off, r->rkey, 2),
			 RDMX_OK);
	expect_wc(from->cq, RDMX_OK, RDMX_OP_READ);
	assert_pattern(src->p, len, seed, 0);
}

/*
 * With verbs.device unset, each connection goes through the device that
 * owns its address, and one descriptor serves them all: the rkeys' low
 * half is the first device's key, and a connection on another device
 * asks its peer for that device's. In the guest, over rxe0 and siw0 at
 * once, both ways, for regions registered before and after connecting;
 * an rkey with a forged high half is refused where it is translated.
 */
static void test_conn_device_per_address(void **state)
{
	const char *host[2] = { getenv("RDMX_RXE_ADDR"),
				getenv("RDMX_SIW_ADDR") };
	const char *dev[2] = { "rxe0", "siw0" };
	struct side s, c;
	struct rdmx_listener *lst;
	struct rdmx_conn *cc[2], *sc[2];
	struct buf target, back, local, late;
	struct rdmx_remote rt, rb, rl;
	struct rdmx_conn_info info;
	int port, refused = 0;

	(void)state;
	if (strcmp(suite_transport(), "verbs") || !host[0] || !host[1])
		skip(); /* the guest, with both devices */
	side_open_with(&s, "RDMX_VERBS_DEVICE", "");
	side_open_with(&c, "RDMX_VERBS_DEVICE", "");
	buf_alloc(&s, &target, 1 << 20,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE |
			  RDMX_ACCESS_REMOTE_READ);
	buf_alloc(&c, &back, 1 << 16,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE |
			  RDMX_ACCESS_REMOTE_READ);
	buf_alloc(&c, &local, 1 << 20, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&s, &late, 1 << 16, RDMX_ACCESS_LOCAL_WRITE);
	rdmx_mr_remote(target.mr, &rt);
	rdmx_mr_remote(back.mr, &rb);
	assert_int_equal(rdmx_listen(s.ctx, ":0", &lst), RDMX_OK);
	port = rdmx_listener_port(lst);
	for (int i = 0; i < 2; i++) {
		cc[i] = connect_to(&s, &c, lst, host[i], host[i], port, &sc[i]);
		rdmx_conn_info(cc[i], &info);
		assert_string_equal(info.transport, "verbs");
		if (!strstr(info.reason, dev[i]))
			fail_msg("the connection to %s is not on %s: %s",
				 host[i], dev[i], info.reason);
	}
	for (int i = 0; i < 2; i++) {
		/* client -> server, two sizes, one descriptor for both */
		write_read(cc[i], &c, &local, &rt, 4096 * (size_t)i, 100,
			   (uint8_t)(10 + i));
		write_read(cc[i], &c, &local, &rt, 0, 1 << 20,
			   (uint8_t)(20 + i));
		/* server -> client */
		write_read(sc[i], &s, &late, &rb, 64, 4000, (uint8_t)(30 + i));
	}
	/* A region registered after both connections, each way. */
	buf_free(&late);
	buf_alloc(&c, &late, 1 << 16,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE |
			  RDMX_ACCESS_REMOTE_READ);
	rdmx_mr_remote(late.mr, &rl);
	for (int i = 0; i < 2; i++)
		write_read(sc[i], &s, &target, &rl, 8, 5000, (uint8_t)(40 + i));
	/*
	 * A READ with a forged high half: a NIC checks only the low 32
	 * bits, so on the first device's connection it passes; where the
	 * peer translates the key it is refused, and the connection ends.
	 */
	for (int i = 0; i < 2; i++) {
		struct rdmx_sge sg = sge_of(&local, 0, 8);
		struct rdmx_completion wc;

		assert_int_equal(rdmx_post_read(cc[i], &sg, rt.addr,
						rt.rkey ^ (1ull << 40), 3),
				 RDMX_OK);
		wc = wait_wc(c.cq);
		if (wc.status) {
			assert_refused(cc[i], wc.status);
			assert_int_not_equal(rdmx_conn_check(cc[i]), RDMX_OK);
			refused++;
		}
	}
	assert_int_equal(refused, 1);
	for (int i = 0; i < 2; i++) {
		rdmx_conn_close(cc[i]);
		rdmx_conn_close(sc[i]);
	}
	rdmx_listener_close(lst);
	buf_free(&late);
	buf_free(&local);
	buf_free(&back);
	buf_free(&target);
	side_close(&c);
	side_close(&s);
}

/* Does @addr ("ip:port") have the host part @host? */
static bool addr_is(const char *addr, const char *host)
{
	size_t n = strlen(host);

	return !strncmp(addr, host, n) && addr[n] == ':';
}

/*
 * One connection's source address, in its attr: the server sees the
 * client come from it, and the next connection without it comes from the
 * context's choice. One that is not this host's, or NULL, is INVALID.
 */
static void test_conn_source_addr_per_connection(void **state)
{
	/* Loopback is all of 127/8: a second address of this host. */
	const char *other = strcmp(suite_addr(), "127.0.0.1") ? suite_addr()
							      : "127.0.0.2";
	struct side s, c;
	struct rdmx_listener *lst;
	struct rdmx_conn *cc, *sc, *conn = NULL;
	struct rdmx_conn_info ci, si;
	struct rdmx_conn_attr bad = { .mask = RDMX_CONN_ATTR_SOURCE_ADDR };
	char addr[64];
	int port;

	(void)state;
	side_open(&s);
	side_open(&c);
	port = side_listen(&s, &lst);
	for (int i = 0; i < 2; i++) {
		cc = connect_to(&s, &c, lst, i ? NULL : other, suite_addr(),
				port, &sc);
		rdmx_conn_info(cc, &ci);
		rdmx_conn_info(sc, &si);
		print_message("from %s to %s\n", si.peer_addr, ci.peer_addr);
		assert_true(addr_is(ci.local_addr, i ? suite_addr() : other));
		assert_true(addr_is(si.peer_addr, i ? suite_addr() : other));
		rdmx_conn_close(cc);
		rdmx_conn_close(sc);
	}
	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(), port);
	bad.cq = c.cq;
	bad.source_addr = "192.0.2.1"; /* TEST-NET-1: nobody's */
	assert_int_equal(rdmx_connect(c.ctx, addr, &bad, 1000, &conn),
			 RDMX_ERR_INVALID);
	bad.source_addr = "not an address";
	assert_int_equal(rdmx_connect(c.ctx, addr, &bad, 1000, &conn),
			 RDMX_ERR_INVALID);
	bad.source_addr = NULL;
	assert_int_equal(rdmx_connect(c.ctx, addr, &bad, 1000, &conn),
			 RDMX_ERR_INVALID);
	assert_null(conn);
	rdmx_listener_close(lst);
	side_close(&c);
	side_close(&s);
}

/* 1,000 connect/close cycles; 100 under an emulator. */
static int churn_cycles(void)
{
	return time_scale() > 1 ? 100 : 1000;
}

/*
 * After the first 50 cycles, usage is where it stays: no descriptor
 * more at the end, and no more than 2 MiB more resident (the allocator's
 * slack), unless all of it came at once, in one half of the cycles after
 * the first 50: a leak grows in both halves. A step of 2 MiB came now and
 * then over siw in the guest (7528 -> 9600 KiB, where other runs grew by
 * 0-64 KiB), before cycle 50 as often as after it: the allocator's or a
 * thread's, not the connections'. Returns 0 or says what grew.
 */
struct churn {
	const char *who;
	long fds, rss, mid_rss;
};

/* The cycles after which usage is counted: the 50th and halfway on. */
static int churn_mid(void)
{
	return 50 + (churn_cycles() - 50) / 2;
}

/*
 * Both sides count at quiet moments: a connection's socket is closed by
 * the progress thread a moment after rdmx_conn_close, and the listener
 * may already hold the next peer's. The client pauses after cycles 50
 * and churn_mid() (CHURN_PAUSE_US) and the server counts within it; at
 * the end, both wait a tenth of that first.
 */
#define CHURN_PAUSE_US 300000

static void churn_mark(struct churn *ch, int i, bool client)
{
	long fds;

	if (i != 49 && i != churn_mid() - 1)
		return;
	usleep(CHURN_PAUSE_US / 3);
	harness_usage(&fds, i == 49 ? &ch->rss : &ch->mid_rss);
	if (i == 49)
		ch->fds = fds;
	if (client)
		usleep(CHURN_PAUSE_US);
}

static int churn_check(const struct churn *ch)
{
	long fds, rss, mid = ch->mid_rss, first, second;

	usleep(CHURN_PAUSE_US / 3);
	harness_usage(&fds, &rss);
	fprintf(stderr,
		"%s: after 50 cycles %ld fds, %ld KiB; after %d: %ld KiB; "
		"after %d: %ld fds, %ld KiB\n",
		ch->who, ch->fds, ch->rss >> 10, churn_mid(), ch->mid_rss >> 10,
		churn_cycles(), fds, rss >> 10);
#ifdef HARNESS_SANITIZED
	rss = mid = ch->rss; /* shadow and quarantine: no bound to check */
#endif
	first = mid - ch->rss;
	second = rss - mid;
	return fds > ch->fds || (rss > ch->rss + (2l << 20) &&
				 first > 256l << 10 && second > 256l << 10);
}

/*
 * The client of the churn, in its own process. A setup that fails is
 * counted, said, and tried again (the server accepts until the client is
 * done): this case is about resources. More than a tenth failing fails
 * it.
 */
static int churn_client(int port, int flag)
{
	struct side c;
	struct churn ch = { .who = "client" };
	struct rdmx_conn_attr attr;
	char addr[64];
	int bad, ok = 0, failed = 0;

	(void)flag;
	side_open(&c);
	attr = (struct rdmx_conn_attr){ .cq = c.cq };
	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(), port);
	while (ok < churn_cycles()) {
		struct rdmx_conn *conn = NULL;

		if (rdmx_connect(c.ctx, addr, &attr, T_TIMEOUT_MS, &conn)) {
			if (++failed > churn_cycles() / 10)
				return 2;
			continue;
		}
		rdmx_conn_close(conn);
		churn_mark(&ch, ok++, true);
	}
	if (failed)
		fprintf(stderr,
			"client: %d of %d setups failed and were "
			"tried again\n",
			failed, ok + failed);
	bad = churn_check(&ch);
	side_close(&c);
	return bad;
}

/*
 * Connect/close churn between two processes leaves both where they were
 * after the first 50 cycles: descriptors and memory bounded.
 */
static void test_conn_churn_bounded(void **state)
{
	struct side s;
	struct rdmx_listener *lst;
	struct rdmx_conn_attr attr;
	struct rdmx_conn *conn;
	struct churn ch = { .who = "server" };
	pid_t pid;

	(void)state;
	side_open(&s);
	attr = (struct rdmx_conn_attr){ .cq = s.cq };
	pid = spawn("churn_client", side_listen(&s, &lst), 0);
	/*
	 * Until the client is done: a setup can fail on its side after it
	 * succeeded here (we closed before its device said established, as
	 * siw may), and it tries again. The other way round, one can fail
	 * here after it succeeded there: the client closes at once, and over
	 * rxe in the guest the disconnect once came before our "established"
	 * (CI at f214076: 99 of 100 taken). That one is not tried again, so
	 * as many may be missing here as the client may fail: a tenth.
	 */
	for (int i = 0, idle_ms = 0;;) {
		int status;

		if (rdmx_accept(lst, &attr, 200, &conn) == RDMX_OK) {
			rdmx_conn_close(conn);
			churn_mark(&ch, i++, false);
			idle_ms = 0;
			continue;
		}
		if (waitpid(pid, &status, WNOHANG) == pid) {
			assert_true(WIFEXITED(status) && !WEXITSTATUS(status));
			assert_true(i >= churn_cycles() - churn_cycles() / 10);
			break;
		}
		idle_ms += 200;
		assert_true(idle_ms < T_TIMEOUT_MS);
	}
	assert_int_equal(churn_check(&ch), 0);
	rdmx_listener_close(lst);
	side_close(&s);
}

static const struct child children[] = {
	{ "client", client },
	{ "churn_client", churn_client },
	{ NULL, NULL },
};

/* A connection of @c's to @lst, accepted by @s with @user_ctx. */
static struct rdmx_conn *accept_marked(struct side *s, struct side *c,
				       struct rdmx_listener *lst, int port,
				       void *user_ctx,
				       struct rdmx_conn **cconn_p)
{
	struct acc a = { .s = s, .lst = lst };

	a.attr = (struct rdmx_conn_attr){ .mask = RDMX_CONN_ATTR_USER_CTX,
					  .cq = s->cq,
					  .user_ctx = user_ctx };
	acc_start(&a);
	*cconn_p = side_connect(c, port);
	acc_join(&a);
	assert_int_equal(a.st, RDMX_OK);
	return a.conn;
}

/*
 * A closed connection's completions still in the cq name it: until they
 * have been polled and the cq polled again, its address goes to no
 * connection made meanwhile, and rdmx_conn_user_ctx answers for it. The
 * kv server closed a client whose requests were queued, accepted a new
 * one at the freed address, and dropped its hello as the closed one's
 * (under ASan: heap-use-after-free in rdmx_conn_user_ctx).
 */
static void test_conn_closed_named_until_polled(void **state)
{
	static int mark_old, mark_new[8];
	struct rdmx_conn *old, *cold, *conn[8], *cconn[8];
	struct rdmx_listener *lst;
	struct rdmx_completion wc;
	struct side s, c;
	struct buf rb, sb;
	struct rdmx_sge sg;
	int port;

	(void)state;
	side_open(&s);
	side_open(&c);
	port = side_listen(&s, &lst);
	old = accept_marked(&s, &c, lst, port, &mark_old, &cold);
	buf_alloc(&s, &rb, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&c, &sb, 64, 0);
	sg = sge_of(&rb, 0, 64);
	for (int i = 0; i < 4; i++)
		assert_int_equal(rdmx_post_recv(old, &sg, 1, (uint64_t)i),
				 RDMX_OK);
	rdmx_conn_close(old); /* four flushed RECVs wait in s.cq */
	rdmx_conn_close(cold);
	for (int i = 0; i < 8; i++) {
		conn[i] = accept_marked(&s, &c, lst, port, &mark_new[i],
					&cconn[i]);
		assert_ptr_not_equal(conn[i], old);
	}
	for (int i = 0; i < 4; i++) {
		wc = expect_wc(s.cq, RDMX_ERR_FLUSHED, RDMX_OP_RECV);
		assert_ptr_equal(wc.conn, old);
		assert_ptr_equal(rdmx_conn_user_ctx(wc.conn), &mark_old);
		assert_int_equal(wc.wr_id, (uint64_t)i);
	}
	/* The new ones are themselves (and the old one is let go of). */
	for (int i = 0; i < 8; i++) {
		sg = sge_of(&rb, 0, 64);
		assert_int_equal(rdmx_post_recv(conn[i], &sg, 1, 100), RDMX_OK);
		sg = sge_of(&sb, 0, 64);
		assert_int_equal(rdmx_post_send(cconn[i], &sg, 200), RDMX_OK);
		expect_wc(c.cq, RDMX_OK, RDMX_OP_SEND);
		wc = expect_wc(s.cq, RDMX_OK, RDMX_OP_RECV);
		assert_ptr_equal(wc.conn, conn[i]);
		assert_ptr_equal(rdmx_conn_user_ctx(wc.conn), &mark_new[i]);
		rdmx_conn_close(cconn[i]);
		rdmx_conn_close(conn[i]);
	}
	buf_free(&rb);
	buf_free(&sb);
	rdmx_listener_close(lst);
	side_close(&s);
	side_close(&c);
}

int main(int argc, char **argv)
{
	harness_children(argc, argv, children);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conn_64_concurrent),
		cmocka_unit_test(test_conn_private_data_both_ways),
		cmocka_unit_test(test_conn_transports_per_connection),
		cmocka_unit_test(test_conn_device_per_address),
		cmocka_unit_test(test_conn_source_addr_per_connection),
		cmocka_unit_test(test_conn_churn_bounded),
		cmocka_unit_test(test_conn_closed_named_until_polled),
	};

	return cmocka_run_group_tests_name(suite_transport(), tests, NULL,
					   NULL);
}
