/* SPDX-License-Identifier: MIT */
/* Description: fetch-and-add and compare-and-swap, from two initiator
 * processes. */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include "harness.h"

enum { ADDS = 2000, DEPTH = 16 };

/*
 * Does @conn lack atomics? Only a verbs device may (siw has none); there an
 * atomic must be refused at once, RDMX_ERR_UNSUPPORTED, not sent.
 */
static bool lacks_atomics(struct rdmx_conn *conn, struct buf *res)
{
	struct rdmx_sge s = sge_of(res, 0, 8);

	if (conn_has(conn, RDMX_CONN_ATOMICS))
		return false;
	if (strcmp(suite_transport(), "verbs") != 0)
		fail_msg("%s: no RDMX_CONN_ATOMICS", suite_transport());
	assert_int_equal(rdmx_post_fetch_add(conn, &s, 0, 0, 1, 1),
			 RDMX_ERR_UNSUPPORTED);
	assert_int_equal(rdmx_post_cmp_swap(conn, &s, 0, 0, 0, 1, 1),
			 RDMX_ERR_UNSUPPORTED);
	print_message("skip: %s: this device has no atomics "
		      "(RDMX_CONN_ATOMICS)\n",
		      suite_transport());
	return true;
}

/* A pair without atomics: free its buffers, close it, skip the test. */
static void skip_without_atomics(struct pair *p, struct buf *target,
				 struct buf *res)
{
	if (!lacks_atomics(p->cconn, res))
		return;
	buf_free(target);
	buf_free(res);
	pair_close(p);
	skip();
}

/* A child: receive the counter's descriptor, then add 1, ADDS times. */
static int initiator(int port, int flag)
{
	struct side c;
	struct rdmx_conn *conn;
	struct buf res, rb;
	struct rdmx_remote rem;
	struct rdmx_sge r;
	uint64_t last = 0;
	int posted = 0, done = 0;

	(void)flag;
	side_open(&c);
	conn = side_connect(&c, port);
	buf_alloc(&c, &rb, RDMX_REMOTE_PACKED_LEN, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&c, &res, 8 * DEPTH, RDMX_ACCESS_LOCAL_WRITE);
	r = sge_of(&rb, 0, rb.len);
	if (rdmx_post_recv(conn, &r, 1, 0))
		return 1;
	if (wait_wc(c.cq).status || rdmx_remote_unpack(rb.p, rb.len, &rem))
		return 2;
	while (done < ADDS) {
		while (posted < ADDS && posted - done < DEPTH) {
			struct rdmx_sge s =
				sge_of(&res, (posted % DEPTH) * 8, 8);

			if (rdmx_post_fetch_add(conn, &s, rem.addr, rem.rkey, 1,
						posted))
				return 3;
			posted++;
		}
		struct rdmx_completion wc = wait_wc(c.cq);
		uint64_t before;

		if (wc.status || wc.opcode != RDMX_OP_FETCH_ADD)
			return 4;
		/* Our own adds see the counter only grow. */
		memcpy(&before, res.p + (wc.wr_id % DEPTH) * 8, 8);
		if (done && before <= last)
			return 5;
		last = before;
		done++;
	}
	rdmx_conn_close(conn);
	buf_free(&res);
	buf_free(&rb);
	side_close(&c);
	return 0;
}

static void test_atomic_fetch_add_two_initiators(void **state)
{
	struct side s;
	struct rdmx_listener *lst;
	struct rdmx_conn *conns[2];
	struct rdmx_conn_attr attr;
	struct buf counter, desc;
	struct rdmx_remote rem;
	int port;
	pid_t pid[2];

	(void)state;
	side_open(&s);
	port = side_listen(&s, &lst);
	buf_alloc(&s, &counter, 64,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_ATOMIC);
	buf_alloc(&s, &desc, RDMX_REMOTE_PACKED_LEN, 0);
	memset(counter.p, 0, 64);
	rdmx_mr_remote(counter.mr, &rem);
	rem.addr += 8;
	rdmx_remote_pack(&rem, desc.p);
	pid[0] = spawn("initiator", port, 0);
	pid[1] = spawn("initiator", port, 0);
	attr = (struct rdmx_conn_attr){ .cq = s.cq };
	for (int i = 0; i < 2; i++) {
		struct rdmx_sge d = sge_of(&desc, 0, desc.len);

		assert_int_equal(rdmx_accept(lst, &attr, T_TIMEOUT_MS,
					     &conns[i]),
				 RDMX_OK);
		if (lacks_atomics(conns[i], &counter)) {
			/* Send the children home, then skip. */
			kill(pid[0], SIGKILL);
			kill(pid[1], SIGKILL);
			waitpid(pid[0], NULL, 0);
			waitpid(pid[1], NULL, 0);
			for (int j = 0; j <= i; j++)
				rdmx_conn_close(conns[j]);
			rdmx_listener_close(lst);
			buf_free(&counter);
			buf_free(&desc);
			side_close(&s);
			skip();
		}
		assert_int_equal(rdmx_post_send(conns[i], &d, i), RDMX_OK);
		expect_wc(s.cq, RDMX_OK, RDMX_OP_SEND);
	}
	/* The target makes no call: its progress engine serves the adds. */
	reap_ok(pid[0]);
	reap_ok(pid[1]);
	/* Remote atomics wrote it: read it as an atomic too. */
	assert_int_equal(__atomic_load_n((uint64_t *)(counter.p + 8),
					 __ATOMIC_ACQUIRE),
			 2 * ADDS);
	assert_int_equal(
		__atomic_load_n((uint64_t *)counter.p, __ATOMIC_ACQUIRE), 0);
	rdmx_conn_close(conns[0]);
	rdmx_conn_close(conns[1]);
	rdmx_listener_close(lst);
	buf_free(&counter);
	buf_free(&desc);
	side_close(&s);
}

/* CMP_SWAP(@compare, @swap): the old value comes back in @res as @old and
 * the target then holds @now. */
static void cmp_swap_expect(struct pair *p, struct rdmx_sge *r,
			    const struct rdmx_remote *rem, uint64_t compare,
			    uint64_t swap, const uint8_t *res, uint64_t old,
			    const uint8_t *target, uint64_t now)
{
	uint64_t got;

	assert_int_equal(rdmx_post_cmp_swap(p->cconn, r, rem->addr, rem->rkey,
					    compare, swap, compare),
			 RDMX_OK);
	expect_wc(p->c.cq, RDMX_OK, RDMX_OP_CMP_SWAP);
	memcpy(&got, res, 8);
	assert_int_equal(got, old);
	memcpy(&got, target, 8);
	assert_int_equal(got, now);
}

static void test_atomic_cmp_swap(void **state)
{
	struct pair p;
	struct buf target, res;
	struct rdmx_remote rem;
	struct rdmx_sge r;
	uint64_t v = 5;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.s, &target, 8,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_ATOMIC);
	buf_alloc(&p.c, &res, 8, RDMX_ACCESS_LOCAL_WRITE);
	skip_without_atomics(&p, &target, &res);
	memcpy(target.p, &v, 8);
	rem = share_remote(&p, &target);
	r = sge_of(&res, 0, 8);
	/* Compare fails: value unchanged, old value returned. */
	cmp_swap_expect(&p, &r, &rem, 4, 9, res.p, 5, target.p, 5);
	/* Compare succeeds: swapped. */
	cmp_swap_expect(&p, &r, &rem, 5, 9, res.p, 5, target.p, 9);
	buf_free(&target);
	buf_free(&res);
	pair_close(&p);
}

static void test_atomic_bad_arguments(void **state)
{
	struct pair p;
	struct buf target, res;
	struct rdmx_remote rem;
	struct rdmx_sge r;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.s, &target, 16,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_ATOMIC);
	buf_alloc(&p.c, &res, 8, RDMX_ACCESS_LOCAL_WRITE);
	skip_without_atomics(&p, &target, &res);
	rem = share_remote(&p, &target);
	r = sge_of(&res, 0, 8);
	assert_int_equal(rdmx_post_fetch_add(p.cconn, &r, rem.addr + 4,
					     rem.rkey, 1, 1),
			 RDMX_ERR_INVALID);
	r = sge_of(&res, 0, 4);
	assert_int_equal(rdmx_post_fetch_add(p.cconn, &r, rem.addr, rem.rkey, 1,
					     1),
			 RDMX_ERR_INVALID);
	buf_free(&target);
	buf_free(&res);
	pair_close(&p);
}

static const struct child children[] = {
	{ "initiator", initiator },
	{ NULL, NULL },
};

int main(int argc, char **argv)
{
	harness_children(argc, argv, children);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_atomic_fetch_add_two_initiators),
		cmocka_unit_test(test_atomic_cmp_swap),
		cmocka_unit_test(test_atomic_bad_arguments),
	};

	return cmocka_run_group_tests_name(suite_transport(), tests, NULL,
					   NULL);
}
