/* SPDX-License-Identifier: MIT */
/*
 * Description: a crafted peer on the software engine's wire (a tcp
 * connection over a socketpair) cannot make rdmx report success before
 * the data left, flood it with answers it owes, or hold up rdmx_mr_dereg
 * with a half-sent WRITE; an honest sender keeps within the peer's limit.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "bytes.h"
#include "core.h"
#include "sw.h"
#include "tcp.h"

struct rig {
	struct rdmx_ctx *ctx;
	struct rdmx_cq *cq;
	void *tcp; /* the engine the connection runs on */
	void *own; /* an engine of our own (byref_open), or NULL */
	struct rdmx_srq *srq; /* the connection's RECVs come from it */
	struct rdmx_conn *conn;
	int peer; /* the crafted peer's end */
};

static void rig_start(struct rig *r, const char *var, const char *value)
{
	memset(r, 0, sizeof(*r));
	signal(SIGPIPE, SIG_IGN);
	setenv("RDMX_PROGRESS_THREAD", "off", 1);
	if (var)
		setenv(var, value, 1);
	assert_int_equal(rdmx_ctx_create(NULL, &r->ctx), RDMX_OK);
	if (var)
		unsetenv(var);
	assert_int_equal(rdmx_cq_create(r->ctx, &r->cq), RDMX_OK);
}

/* A connected pair of loopback TCP sockets in @fds. */
static void tcp_pair(int fds[2])
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int lst = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(lst >= 0);
	assert_int_equal(bind(lst, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lst, 1), 0);
	assert_int_equal(getsockname(lst, (struct sockaddr *)&a, &len), 0);
	fds[1] = socket(AF_INET, SOCK_STREAM, 0);
	assert_int_equal(connect(fds[1], (struct sockaddr *)&a, sizeof(a)), 0);
	fds[0] = accept(lst, NULL, NULL);
	assert_true(fds[0] >= 0);
	close(lst);
}

/* @tcp: over loopback TCP, as rdmx's tcp transport runs, where the
 * kernel's receive marks are real; else a Unix socketpair. */
static void rig_connect_on(struct rig *r, bool tcp)
{
	struct rdmx_conn_attr attr = { 0 };
	int fds[2], small = 64 << 10;

	if (tcp) {
		tcp_pair(fds);
	} else {
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
		/* Small buffers: a large frame stays in the sender's queue. */
		setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &small,
			   sizeof(small));
		setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &small,
			   sizeof(small));
	}
	assert_int_equal(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
	attr.cq = r->cq;
	if (r->srq) {
		attr.mask = RDMX_CONN_ATTR_SRQ;
		attr.srq = r->srq;
	}
	assert_int_equal(rdmx_sw_conn_create(r->tcp, fds[0], -1, NULL, &attr,
					     &r->conn),
			 RDMX_OK);
	assert_int_equal(rdmx_sw_conn_start(r->conn), RDMX_OK);
	r->peer = fds[1];
}

static void rig_connect(struct rig *r)
{
	rig_connect_on(r, false);
}

static void rig_open(struct rig *r, const char *var, const char *value)
{
	rig_start(r, var, value);
	assert_int_equal(rdmx_ctx_transport(r->ctx, RDMX_TRANSPORT_TCP,
					    &r->tcp),
			 RDMX_OK);
	rig_connect(r);
}

/* The peer's memory is gone (fake_move fails as process_vm_* would). */
static bool fake_move_fails;

/* A socket pretending to reach the peer's memory, as shm does. */
static ssize_t fake_move(struct rdmx_sw_conn *c, const struct iovec *local,
			 int nlocal, const struct iovec *remote, int nremote)
{
	(void)c;
	(void)remote;
	(void)nremote;
	if (fake_move_fails)
		return -EFAULT;
	return nlocal ? (ssize_t)local[0].iov_len : 0;
}

/* The same rig on an engine whose pipe moves one-sided data by reference,
 * READs of @byref_min bytes or more. */
static void byref_open(struct rig *r, uint64_t byref_min)
{
	static struct rdmx_sw_pipe pipe;
	static struct rdmx_sw_transport tp;

	pipe = rdmx_tcp_pipe;
	pipe.pull = fake_move;
	pipe.push = fake_move;
	tp = (struct rdmx_sw_transport){ .ops = &rdmx_tcp_ops, .pipe = &pipe };
	rig_start(r, NULL, NULL);
	assert_int_equal(rdmx_sw_open(r->ctx, &tp, &r->own), RDMX_OK);
	((struct rdmx_sw_ctx *)r->own)->byref_min = byref_min;
	r->tcp = r->own;
	rig_connect(r);
}

static void rig_close(struct rig *r)
{
	struct rdmx_completion wc;

	rdmx_sw_conn_close(r->conn);
	while (rdmx_poll(r->cq, &wc, 1) > 0)
		;
	if (r->srq) { /* its RECVs flush into the cq */
		assert_int_equal(rdmx_srq_destroy(r->srq), RDMX_OK);
		while (rdmx_poll(r->cq, &wc, 1) > 0)
			;
	}
	close(r->peer);
	if (r->own)
		rdmx_sw_close(r->own);
	assert_int_equal(rdmx_cq_destroy(r->cq), RDMX_OK);
	assert_int_equal(rdmx_ctx_destroy(r->ctx), RDMX_OK);
}

static void drive(struct rig *r)
{
	for (int i = 0; i < 4; i++)
		rdmx_sw_progress(r->tcp, false);
}

/* The peer writes all of @len, driving our side while the socket is full. */
static void peer_write(struct rig *r, const void *buf, size_t len)
{
	const uint8_t *p = buf;

	while (len) {
		ssize_t n = write(r->peer, p, len);

		if (n < 0 && errno == EPIPE)
			break; /* we cut the peer off: the rest goes nowhere */
		if (n < 0) {
			assert_int_equal(errno, EAGAIN);
			drive(r);
			continue;
		}
		p += n;
		len -= (size_t)n;
	}
	drive(r);
}

static void peer_frame(struct rig *r, const struct rdmx_sw_hdr *h,
		       const void *payload, size_t len)
{
	uint8_t b[RDMX_SW_HDR_LEN];

	peer_write(r, b, rdmx_sw_hdr_pack(h, b));
	if (len)
		peer_write(r, payload, len);
}

/* The peer reads exactly @len bytes (NULL: drops them). */
static void peer_read(struct rig *r, void *buf, size_t len)
{
	uint8_t sink[4096], *p = buf;

	for (int idle = 0; len;) {
		size_t want = p ? len
				: (len < sizeof(sink) ? len : sizeof(sink));
		ssize_t n = read(r->peer, p ? p : sink, want);

		if (n <= 0) {
			assert_true(n < 0 && errno == EAGAIN);
			assert_true(++idle < 100000);
			drive(r);
			continue;
		}
		if (p)
			p += n;
		len -= (size_t)n;
	}
}

/* The peer reads one frame header. */
static struct rdmx_sw_hdr peer_hdr(struct rig *r)
{
	uint8_t b[RDMX_SW_HDR_LEN];
	struct rdmx_sw_hdr h;

	peer_read(r, b, RDMX_SW_HDR_MIN);
	peer_read(r, b + RDMX_SW_HDR_MIN, rdmx_sw_hdr_len(b) - RDMX_SW_HDR_MIN);
	assert_int_equal(rdmx_sw_hdr_unpack(b, &h), RDMX_OK);
	return h;
}

/* Our side's first frame is its LIMIT; the peer answers with its own. */
static void peer_hello(struct rig *r, uint32_t limit)
{
	struct rdmx_sw_hdr h = peer_hdr(r);
	struct rdmx_sw_hdr mine = { .type = RDMX_SW_CREDIT,
				    .op = RDMX_SW_CREDIT_LIMIT,
				    .arg0 = limit };

	assert_int_equal(h.type, RDMX_SW_CREDIT);
	assert_int_equal(h.op, RDMX_SW_CREDIT_LIMIT);
	peer_frame(r, &mine, NULL, 0);
}

/*
 * A WRITE whose header the peer read and answered before the rest left:
 * the answer is a lie (nothing was placed), and the request must not
 * complete while its buffer is still being sent. After the completion no
 * byte of the buffer may leave any more.
 */
static void early_answer(uint8_t type)
{
	enum { LEN = 4 << 20 };
	struct rig r;
	struct rdmx_mr *mr;
	struct rdmx_completion wc;
	struct rdmx_sw_hdr h, a = { .type = type };
	uint8_t *buf = malloc(LEN), chunk[4096];
	struct rdmx_sge s;
	ssize_t n;

	rig_open(&r, NULL, NULL);
	peer_hello(&r, 16);
	memset(buf, 0x11, LEN);
	assert_int_equal(rdmx_mr_reg(r.ctx, buf, LEN, RDMX_ACCESS_LOCAL_WRITE,
				     &mr),
			 RDMX_OK);
	s = (struct rdmx_sge){ buf, LEN, mr };
	assert_int_equal(rdmx_post_write(r.conn, &s, 4096, 1, 7), RDMX_OK);
	h = peer_hdr(&r);
	assert_int_equal(h.type, RDMX_SW_WRITE);
	a.seq = h.seq;
	a.arg0 = h.seq;
	a.op = type == RDMX_SW_NAK ? RDMX_SW_NAK_ACCESS : 0;
	peer_frame(&r, &a, NULL, 0);
	while ((n = rdmx_poll(r.cq, &wc, 1)) == 0)
		drive(&r);
	assert_int_equal(n, 1);
	assert_int_equal(wc.wr_id, 7);
	assert_int_equal(wc.status, RDMX_ERR_CONN_LOST);
	/* The application reuses its buffer: none of that may go out. */
	memset(buf, 0xee, LEN);
	drive(&r);
	while ((n = read(r.peer, chunk, sizeof(chunk))) > 0)
		for (ssize_t i = 0; i < n; i++)
			assert_int_not_equal(chunk[i], 0xee);
	assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	free(buf);
	rig_close(&r);
}

static void test_write_early_ack_is_not_success(void **state)
{
	(void)state;
	early_answer(RDMX_SW_ACK);
}

static void test_write_early_nak_waits_for_the_bytes(void **state)
{
	(void)state;
	early_answer(RDMX_SW_NAK);
}

/*
 * A peer of another frame version (an rdmx before or after this one) is
 * refused at its first frame, and the one line logged says which side to
 * upgrade: its frames are never read with our layout.
 */
static void other_version(int delta, const char *says)
{
	struct rdmx_sw_hdr h = { .type = RDMX_SW_CREDIT, .credits = 1 };
	uint8_t b[RDMX_SW_HDR_LEN];
	char log[4096];
	struct log_catch lc;
	struct rig r;

	rig_open(&r, NULL, NULL);
	peer_hello(&r, 16);
	memset(b, 0, sizeof(b));
	rdmx_sw_hdr_pack(&h, b);
	b[0] = (uint8_t)(RDMX_SW_PROTO_VERSION + delta);
	log_catch_begin(&lc);
	peer_write(&r, b, sizeof(b));
	drive(&r);
	log_catch_end(&lc, log, sizeof(log));
	assert_int_equal(rdmx_conn_check(r.conn), RDMX_ERR_CONN_LOST);
	if (!strstr(log, says))
		fail_msg("log '%s' does not say '%s'", log, says);
	/* Its credit was not taken: the frame was never read as ours. */
	assert_int_equal(to_sw_conn(r.conn)->peer_credits, 0);
	rig_close(&r);
}

static void test_older_frame_version_refused(void **state)
{
	(void)state;
	other_version(-1, "older frame version: upgrade it");
}

static void test_newer_frame_version_refused(void **state)
{
	(void)state;
	other_version(1, "newer frame version: upgrade this side");
}

/*
 * A peer that sends READ requests and never reads the answers: what we owe
 * it stays within conn.max_peer_requests, and past it the peer is cut off.
 */
static void test_flood_of_reads_is_bounded(void **state)
{
	enum { MAX = 16, LEN = 64 << 10 };
	struct rig r;
	struct rdmx_mr *mr;
	uint8_t *region = calloc(1, LEN);
	struct rdmx_sw_conn *c;
	int sent = 0;

	(void)state;
	rig_open(&r, "RDMX_CONN_MAX_PEER_REQUESTS", "16");
	c = to_sw_conn(r.conn);
	peer_hello(&r, 16);
	assert_int_equal(rdmx_mr_reg(r.ctx, region, LEN,
				     RDMX_ACCESS_LOCAL_WRITE |
					     RDMX_ACCESS_REMOTE_READ,
				     &mr),
			 RDMX_OK);
	while (rdmx_conn_check(r.conn) == RDMX_OK && sent < 1000) {
		struct rdmx_sw_hdr h = { .type = RDMX_SW_READ_REQ,
					 .seq = (uint64_t)sent,
					 .length = LEN,
					 .rkey = mr->rkey,
					 .addr = (uintptr_t)region };

		peer_frame(&r, &h, NULL, 0);
		sent++;
		assert_true(c->owed <= MAX + 1);
	}
	/* Cut off soon after the limit: answers that fit the socket left. */
	assert_int_not_equal(rdmx_conn_check(r.conn), RDMX_OK);
	assert_true(sent > MAX && sent < 100);
	assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	free(region);
	rig_close(&r);
}

/* Nothing more has come from our side. */
static void peer_quiet(struct rig *r)
{
	uint8_t b;

	drive(r);
	assert_true(read(r->peer, &b, 1) < 0 && errno == EAGAIN);
}

/* We keep within the peer's limit: 2 at a time, the rest waits. */
static void test_sender_keeps_within_peer_limit(void **state)
{
	struct rig r;
	struct rdmx_mr *mr;
	uint8_t local[64];
	struct rdmx_sge s;
	struct rdmx_completion wc;

	(void)state;
	rig_open(&r, NULL, NULL);
	assert_int_equal(rdmx_mr_reg(r.ctx, local, sizeof(local),
				     RDMX_ACCESS_LOCAL_WRITE, &mr),
			 RDMX_OK);
	s = (struct rdmx_sge){ local, 8, mr };
	/* Posted before the limit is known: none may leave yet. */
	for (int i = 0; i < 5; i++)
		assert_int_equal(rdmx_post_read(r.conn, &s, 64, 1, (uint64_t)i),
				 RDMX_OK);
	assert_int_equal(peer_hdr(&r).op, RDMX_SW_CREDIT_LIMIT);
	peer_quiet(&r);
	peer_frame(&r,
		   &(struct rdmx_sw_hdr){ .type = RDMX_SW_CREDIT,
					  .op = RDMX_SW_CREDIT_LIMIT,
					  .arg0 = 2 },
		   NULL, 0);
	assert_int_equal(peer_hdr(&r).seq, 0);
	for (uint64_t i = 0; i < 5; i++) {
		struct rdmx_sw_hdr a = { .type = RDMX_SW_READ_RESP,
					 .seq = i,
					 .length = 8 };
		uint64_t v = i;

		if (i + 1 < 5)
			assert_int_equal(peer_hdr(&r).seq, i + 1);
		peer_quiet(&r); /* two out: the next waits for an answer */
		peer_frame(&r, &a, &v, 8);
	}
	for (uint64_t i = 0; i < 5; i++) {
		while (rdmx_poll(r.cq, &wc, 1) == 0)
			drive(&r);
		assert_int_equal(wc.status, RDMX_OK);
		assert_int_equal(wc.wr_id, i);
	}
	assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	rig_close(&r);
}

/*
 * A peer that sends a WRITE's header and part of its payload, then
 * nothing: rdmx_mr_dereg returns at once, and what arrives later lands
 * nowhere and is refused.
 */
static void test_half_sent_write_does_not_hold_dereg(void **state)
{
	enum { LEN = 1 << 20, PART = 1000 };
	struct rig r;
	struct rdmx_mr *mr;
	uint8_t *region = malloc(LEN), *data = malloc(LEN);
	struct rdmx_sw_hdr h, a;

	(void)state;
	rig_open(&r, NULL, NULL);
	peer_hello(&r, 16);
	memset(region, 0, LEN);
	memset(data, 0x77, LEN);
	assert_int_equal(rdmx_mr_reg(r.ctx, region, LEN,
				     RDMX_ACCESS_LOCAL_WRITE |
					     RDMX_ACCESS_REMOTE_WRITE,
				     &mr),
			 RDMX_OK);
	h = (struct rdmx_sw_hdr){ .type = RDMX_SW_WRITE,
				  .seq = 0,
				  .length = LEN,
				  .rkey = mr->rkey,
				  .addr = (uintptr_t)region };
	peer_frame(&r, &h, data, PART);
	assert_int_equal(region[PART - 1], 0x77);
	/* Before the fix this spun for ever: alarm() ends the test then. */
	alarm(10);
	assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	alarm(0);
	memset(region, 0x5a, LEN);
	peer_write(&r, data + PART, LEN - PART);
	drive(&r);
	a = peer_hdr(&r);
	assert_int_equal(a.type, RDMX_SW_NAK);
	assert_int_equal(a.op, RDMX_SW_NAK_ACCESS);
	assert_int_equal(a.seq, 0);
	for (size_t i = 0; i < LEN; i++)
		if (region[i] != 0x5a)
			fail_msg("byte %zu written after dereg", i);
	free(region);
	free(data);
	rig_close(&r);
}

/* The receive mark of our side's socket (SO_RCVLOWAT). */
static int rcvlowat(struct rig *r)
{
	int v = -1;
	socklen_t len = sizeof(v);

	assert_int_equal(getsockopt(to_sw_conn(r->conn)->fd, SOL_SOCKET,
				    SO_RCVLOWAT, &v, &len),
			 0);
	return v;
}

/*
 * Over tcp, a receiver placing a large payload waits for a chunk of it,
 * not for each segment (a mark on the socket), and the mark never asks
 * for more than is certain to come: after the payload it is back to one
 * byte, and when the region goes mid-frame (the rest read and dropped
 * through staging, in smaller reads) it comes down at once. Left up, the
 * socket never turned readable for the rest: the NAK never came. @dereg:
 * the region goes after the first part.
 */
static void receive_marks(bool dereg)
{
	enum { LEN = 1 << 20, PART = 300 << 10 };
	struct rig r;
	struct rdmx_mr *mr;
	uint8_t *region = malloc(LEN), *data = malloc(LEN);
	struct rdmx_sw_hdr h, a;

	rig_start(&r, NULL, NULL);
	assert_int_equal(rdmx_ctx_transport(r.ctx, RDMX_TRANSPORT_TCP, &r.tcp),
			 RDMX_OK);
	rig_connect_on(&r, true);
	peer_hello(&r, 16);
	memset(region, 0, LEN);
	memset(data, 0x77, LEN);
	assert_int_equal(rdmx_mr_reg(r.ctx, region, LEN,
				     RDMX_ACCESS_LOCAL_WRITE |
					     RDMX_ACCESS_REMOTE_WRITE,
				     &mr),
			 RDMX_OK);
	h = (struct rdmx_sw_hdr){ .type = RDMX_SW_WRITE,
				  .length = LEN,
				  .rkey = mr->rkey,
				  .addr = (uintptr_t)region };
	peer_frame(&r, &h, data, PART);
	/* Placed up to the last chunk the mark asks for in full. */
	for (int i = 0; i < 100 && region[PART - 128 * 1024] != 0x77; i++)
		drive(&r);
	assert_int_equal(region[PART - 128 * 1024], 0x77);
	print_message("mark while %d KiB of the payload are to come: %d\n",
		      (LEN - PART) >> 10, rcvlowat(&r));
	assert_true(rcvlowat(&r) > 1);
	if (dereg)
		assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	peer_write(&r, data + PART, LEN - PART);
	a = peer_hdr(&r);
	assert_int_equal(a.type, dereg ? RDMX_SW_NAK : RDMX_SW_ACK);
	assert_int_equal(a.seq, 0);
	assert_int_equal(rcvlowat(&r), 1);
	if (!dereg) {
		assert_memory_equal(region, data, LEN);
		assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	}
	free(region);
	free(data);
	rig_close(&r);
}

static void test_tcp_receive_mark_follows_payload(void **state)
{
	(void)state;
	receive_marks(false);
}

static void test_tcp_receive_mark_down_when_region_goes(void **state)
{
	(void)state;
	receive_marks(true);
}

/*
 * A READ answer must be of the kind the READ was: a ring READ answered
 * "placed by reference" used to complete with success and no data, and a
 * READ by reference answered with bytes is no answer of ours either.
 */
static void read_answer_of_the_wrong_kind(uint64_t byref_min, uint8_t flags)
{
	struct rig r;
	struct rdmx_mr *mr;
	uint8_t local[64] = { 0 }, bytes[64];
	struct rdmx_sge s;
	struct rdmx_completion wc;
	struct rdmx_sw_hdr h, a;

	byref_open(&r, byref_min);
	peer_hello(&r, 16);
	assert_int_equal(rdmx_mr_reg(r.ctx, local, sizeof(local),
				     RDMX_ACCESS_LOCAL_WRITE, &mr),
			 RDMX_OK);
	s = (struct rdmx_sge){ local, sizeof(local), mr };
	assert_int_equal(rdmx_post_read(r.conn, &s, 4096, 1, 5), RDMX_OK);
	h = peer_hdr(&r);
	assert_int_equal(h.type, RDMX_SW_READ_REQ);
	assert_int_equal(h.flags & RDMX_SW_F_BYREF,
			 flags ? 0 : RDMX_SW_F_BYREF);
	if (h.flags & RDMX_SW_F_BYREF)
		peer_read(&r, NULL, (size_t)h.op * RDMX_SW_REF_LEN);
	a = (struct rdmx_sw_hdr){ .type = RDMX_SW_READ_RESP,
				  .flags = flags,
				  .seq = h.seq,
				  .length = sizeof(local) };
	memset(bytes, 0x42, sizeof(bytes));
	peer_frame(&r, &a, bytes, flags ? 0 : sizeof(bytes));
	while (rdmx_poll(r.cq, &wc, 1) == 0)
		drive(&r);
	assert_int_equal(wc.wr_id, 5);
	assert_int_equal(wc.status, RDMX_ERR_CONN_LOST);
	assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	rig_close(&r);
}

static void test_ring_read_answered_by_reference(void **state)
{
	(void)state;
	read_answer_of_the_wrong_kind(1 << 20, RDMX_SW_F_BYREF);
}

static void test_byref_read_answered_with_bytes(void **state)
{
	(void)state;
	read_answer_of_the_wrong_kind(1, 0);
}

/*
 * A peer of a shared receive queue that ASKs for 2^32 - 1 credits wants no
 * more than the requests it may have outstanding here: it cannot hoard
 * the pool (a peer that wants is never revoked from). Nor by saying it has
 * 2^64 - 1 in flight besides 2^64 - 1 waiting (their sum wraps to 2^64 - 2).
 */
static void test_srq_ask_is_capped(void **state)
{
	struct rig r;
	struct rdmx_srq_attr sa = { 0 };
	struct rdmx_sw_hdr ask = { .type = RDMX_SW_CREDIT,
				   .op = RDMX_SW_CREDIT_ASK,
				   .arg0 = UINT32_MAX };
	struct rdmx_sw_hdr wraps = { .type = RDMX_SW_CREDIT,
				     .op = RDMX_SW_CREDIT_ASK,
				     .seq = UINT64_MAX,
				     .arg0 = UINT64_MAX };
	uint8_t buf[64];
	struct rdmx_mr *mr;
	struct rdmx_sge s;

	(void)state;
	rig_start(&r, "RDMX_CONN_MAX_PEER_REQUESTS", "8");
	assert_int_equal(rdmx_ctx_transport(r.ctx, RDMX_TRANSPORT_TCP, &r.tcp),
			 RDMX_OK);
	sa.mask = RDMX_SRQ_ATTR_MAX_WR;
	sa.cq = r.cq;
	sa.max_wr = 64;
	assert_int_equal(rdmx_srq_create(r.ctx, &sa, &r.srq), RDMX_OK);
	assert_int_equal(rdmx_mr_reg(r.ctx, buf, sizeof(buf),
				     RDMX_ACCESS_LOCAL_WRITE, &mr),
			 RDMX_OK);
	s = (struct rdmx_sge){ buf, sizeof(buf), mr };
	for (int i = 0; i < 64; i++)
		assert_int_equal(rdmx_srq_post_recv(r.srq, &s, 1, (uint64_t)i),
				 RDMX_OK);
	rig_connect(&r);
	peer_hello(&r, 16);
	peer_frame(&r, &ask, NULL, 0);
	drive(&r);
	assert_true(to_sw_conn(r.conn)->srq_want <= 8);
	assert_true(to_sw_conn(r.conn)->srq_held <= 8);
	peer_frame(&r, &wraps, NULL, 0);
	drive(&r);
	assert_true(to_sw_conn(r.conn)->srq_want <= 8);
	assert_true(to_sw_conn(r.conn)->srq_held <= 8);
	assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	rig_close(&r);
}

/*
 * A list of requests leaves in one sendmsg when it fits the socket: 40
 * WRITEs are 80 pieces (a header and a payload each). An rdmx kv
 * server's answers to 16 GETs, with an ACK, are 65; at 64 pieces a
 * sendmsg, every batch of them took two.
 */
static void test_list_leaves_in_one_sendmsg(void **state)
{
	enum { N = 40 };
	struct rig r;
	struct rdmx_mr *mr;
	struct rdmx_wr wrs[N];
	struct rdmx_sw_hdr h, a = { .type = RDMX_SW_ACK };
	struct rdmx_completion wc;
	struct rdmx_sge s;
	uint8_t local[64];
	uint64_t before;
	int posted = 0;

	(void)state;
	rig_open(&r, NULL, NULL);
	peer_hello(&r, 64);
	drive(&r);
	assert_int_equal(rdmx_mr_reg(r.ctx, local, sizeof(local),
				     RDMX_ACCESS_LOCAL_WRITE, &mr),
			 RDMX_OK);
	s = (struct rdmx_sge){ local, 8, mr };
	for (int i = 0; i < N; i++)
		wrs[i] = (struct rdmx_wr){ .wr_id = (uint64_t)i,
					   .opcode = RDMX_OP_WRITE,
					   .sg_list = &s,
					   .num_sge = 1,
					   .remote_addr = 4096,
					   .rkey = 1 };
	before = to_sw_conn(r.conn)->tx_sends;
	assert_int_equal(rdmx_post_list(r.conn, wrs, N, &posted), RDMX_OK);
	assert_int_equal(posted, N);
	drive(&r);
	assert_int_equal(to_sw_conn(r.conn)->tx_sends, before + 1);
	for (int i = 0; i < N; i++) {
		h = peer_hdr(&r);
		assert_int_equal(h.type, RDMX_SW_WRITE);
		peer_read(&r, NULL, 8);
	}
	a.seq = a.arg0 = h.seq; /* all placed */
	peer_frame(&r, &a, NULL, 0);
	for (int n = 0, idle = 0; n < N;) {
		int got = rdmx_poll(r.cq, &wc, 1);

		if (!got) {
			assert_true(++idle < 100000);
			drive(&r);
		}
		assert_true(got == 0 || wc.status == RDMX_OK);
		n += got;
	}
	assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	rig_close(&r);
}

/*
 * Atomics only a crafted peer can send: one at an address that is not
 * 8-byte aligned is refused (the API refuses to post one) and counted
 * under that reason; a good one is served and counted as served.
 */
static void test_misaligned_atomic_refused_and_counted(void **state)
{
	uint64_t *word = aligned_alloc(64, 64);
	struct rdmx_stats st;
	struct rdmx_sw_hdr h;
	struct rdmx_mr *mr;
	struct rig r;

	(void)state;
	rig_open(&r, NULL, NULL);
	peer_hello(&r, 16);
	word[0] = 5;
	assert_int_equal(rdmx_mr_reg(r.ctx, word, 64,
				     RDMX_ACCESS_LOCAL_WRITE |
					     RDMX_ACCESS_REMOTE_ATOMIC,
				     &mr),
			 RDMX_OK);
	h = (struct rdmx_sw_hdr){ .type = RDMX_SW_ATOMIC_REQ,
				  .op = RDMX_SW_FETCH_ADD,
				  .seq = 0,
				  .rkey = mr->rkey,
				  .addr = (uintptr_t)word + 4,
				  .arg0 = 1 };
	peer_frame(&r, &h, NULL, 0);
	h = peer_hdr(&r);
	assert_int_equal(h.type, RDMX_SW_NAK);
	assert_int_equal(h.op, RDMX_SW_NAK_ACCESS);
	assert_int_equal(word[0], 5);
	rdmx_ctx_stats(r.ctx, &st);
	assert_int_equal(st.refused_by[RDMX_REFUSED_ALIGN], 1);
	assert_int_equal(st.refused, 1);
	assert_int_equal(st.served_ops[RDMX_TRANSPORT_TCP][RDMX_OP_FETCH_ADD],
			 0);

	h = (struct rdmx_sw_hdr){ .type = RDMX_SW_ATOMIC_REQ,
				  .op = RDMX_SW_FETCH_ADD,
				  .seq = 1,
				  .rkey = mr->rkey,
				  .addr = (uintptr_t)word,
				  .arg0 = 2 };
	peer_frame(&r, &h, NULL, 0);
	h = peer_hdr(&r);
	assert_int_equal(h.type, RDMX_SW_ATOMIC_RESP);
	assert_int_equal(h.arg0, 5);
	assert_int_equal(word[0], 7);
	rdmx_ctx_stats(r.ctx, &st);
	assert_int_equal(st.served_ops[RDMX_TRANSPORT_TCP][RDMX_OP_FETCH_ADD],
			 1);
	assert_int_equal(st.served_bytes[RDMX_TRANSPORT_TCP][RDMX_OP_FETCH_ADD],
			 8);
	assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	free(word);
	rig_close(&r);
}

/*
 * A WRITE by reference whose bytes cannot be pulled from the peer (its
 * memory went away, as a truncated memfd does) is refused, counted under
 * "fault", and not served.
 */
static void test_byref_fault_refused_and_counted(void **state)
{
	uint8_t region[64] = { 0 }, ref[RDMX_SW_REF_LEN];
	struct rdmx_stats st;
	struct rdmx_sw_hdr h;
	struct rdmx_mr *mr;
	struct rig r;

	(void)state;
	byref_open(&r, 1);
	peer_hello(&r, 16);
	assert_int_equal(rdmx_mr_reg(r.ctx, region, sizeof(region),
				     RDMX_ACCESS_LOCAL_WRITE |
					     RDMX_ACCESS_REMOTE_WRITE,
				     &mr),
			 RDMX_OK);
	rdmx_put_be(ref, 0x10000, 8); /* the peer's buffer, "gone" */
	rdmx_put_be(ref + 8, sizeof(region), 8);
	h = (struct rdmx_sw_hdr){ .type = RDMX_SW_WRITE,
				  .flags = RDMX_SW_F_BYREF,
				  .op = 1,
				  .seq = 0,
				  .length = sizeof(region),
				  .rkey = mr->rkey,
				  .addr = (uintptr_t)region };
	fake_move_fails = true;
	peer_frame(&r, &h, ref, sizeof(ref));
	h = peer_hdr(&r);
	fake_move_fails = false;
	assert_int_equal(h.type, RDMX_SW_NAK);
	assert_int_equal(h.op, RDMX_SW_NAK_ACCESS);
	rdmx_ctx_stats(r.ctx, &st);
	assert_int_equal(st.refused_by[RDMX_REFUSED_FAULT], 1);
	assert_int_equal(st.served_ops[RDMX_TRANSPORT_TCP][RDMX_OP_WRITE], 0);
	assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	rig_close(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_early_ack_is_not_success),
		cmocka_unit_test(test_write_early_nak_waits_for_the_bytes),
		cmocka_unit_test(test_older_frame_version_refused),
		cmocka_unit_test(test_newer_frame_version_refused),
		cmocka_unit_test(test_flood_of_reads_is_bounded),
		cmocka_unit_test(test_sender_keeps_within_peer_limit),
		cmocka_unit_test(test_half_sent_write_does_not_hold_dereg),
		cmocka_unit_test(test_tcp_receive_mark_follows_payload),
		cmocka_unit_test(test_tcp_receive_mark_down_when_region_goes),
		cmocka_unit_test(test_ring_read_answered_by_reference),
		cmocka_unit_test(test_byref_read_answered_with_bytes),
		cmocka_unit_test(test_srq_ask_is_capped),
		cmocka_unit_test(test_list_leaves_in_one_sendmsg),
		cmocka_unit_test(test_misaligned_atomic_refused_and_counted),
		cmocka_unit_test(test_byref_fault_refused_and_counted),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
