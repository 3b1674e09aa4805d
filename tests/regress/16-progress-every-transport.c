/* SPDX-License-Identifier: MIT */
/*
 * Description: a context with connections over two transports drives both
 * from one spinning poll. rdmx_ctx_progress calls the one open transport
 * alone, a jump where its loop over all of them cost ~40 instructions of
 * an empty spinning poll; once a second transport opens it must loop
 * again. Here, with no progress threads, each context opens shm first and
 * then tcp (and then the other way round): SENDs must go both ways over
 * both connections, each side polling only its own cq, with the other
 * transport's traffic interleaved. Had the shortcut kept to the first
 * transport, the second's SENDs would never arrive.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

struct link {
	struct rdmx_conn *s, *c;
};

static struct rdmx_conn_attr over(struct rdmx_cq *cq, unsigned tp)
{
	return (struct rdmx_conn_attr){ .mask = RDMX_CONN_ATTR_TRANSPORTS,
					.cq = cq,
					.transports = tp };
}

static void link_open(struct side *s, struct rdmx_listener *lst, struct side *c,
		      unsigned tp, const char *name, struct link *l)
{
	struct acc a = { .s = s, .lst = lst, .attr = over(s->cq, tp) };
	struct rdmx_conn_attr ca = over(c->cq, tp);
	struct rdmx_conn_info info;
	char addr[64];

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", rdmx_listener_port(lst));
	acc_start(&a);
	assert_int_equal(rdmx_connect(c->ctx, addr, &ca, T_TIMEOUT_MS, &l->c),
			 RDMX_OK);
	acc_join(&a);
	assert_int_equal(a.st, RDMX_OK);
	l->s = a.conn;
	rdmx_conn_info(l->c, &info);
	assert_string_equal(info.transport, name);
	rdmx_conn_info(l->s, &info);
	assert_string_equal(info.transport, name);
}

/* One SEND @from -> @to, its RECV posted first; both sides spin. */
static void send_one(struct rdmx_conn *from, struct side *fs,
		     struct rdmx_conn *to, struct side *ts, struct buf *out,
		     struct buf *in, uint64_t id)
{
	struct rdmx_sge r = sge_of(in, 0, 8), s = sge_of(out, 0, 8);

	memcpy(out->p, &id, sizeof(id));
	assert_int_equal(rdmx_post_recv(to, &r, 1, id), RDMX_OK);
	assert_int_equal(rdmx_post_send(from, &s, id), RDMX_OK);
	spin_wc(ts->cq, fs->cq, RDMX_OP_RECV, false);
	spin_wc(fs->cq, ts->cq, RDMX_OP_SEND, true);
	assert_memory_equal(in->p, &id, sizeof(id));
}

static void run(unsigned first, const char *first_name, unsigned second,
		const char *second_name)
{
	struct side s, c;
	struct rdmx_listener *lst;
	struct link l[2];
	struct buf sb, cb;

	print_message("%s, then %s\n", first_name, second_name);
	unsetenv("RDMX_TRANSPORT");
	side_open_with(&s, "RDMX_PROGRESS_THREAD", "off");
	side_open_with(&c, "RDMX_PROGRESS_THREAD", "off");
	side_listen(&s, &lst);
	buf_alloc(&s, &sb, 8, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&c, &cb, 8, RDMX_ACCESS_LOCAL_WRITE);
	link_open(&s, lst, &c, first, first_name, &l[0]);
	/* One transport open on each side: the shortcut's case. */
	send_one(l[0].c, &c, l[0].s, &s, &cb, &sb, 1);
	send_one(l[0].s, &s, l[0].c, &c, &sb, &cb, 2);
	link_open(&s, lst, &c, second, second_name, &l[1]);
	for (uint64_t i = 0; i < 20; i++) {
		struct link *k = &l[i % 2];

		if (i % 4 < 2)
			send_one(k->c, &c, k->s, &s, &cb, &sb, 100 + i);
		else
			send_one(k->s, &s, k->c, &c, &sb, &cb, 100 + i);
	}
	for (int i = 0; i < 2; i++) {
		rdmx_conn_close(l[i].c);
		rdmx_conn_close(l[i].s);
	}
	rdmx_listener_close(lst);
	buf_free(&sb);
	buf_free(&cb);
	side_close(&c);
	side_close(&s);
}

static void test_progress_every_transport(void **state)
{
	(void)state;
	run(RDMX_TP_SHM, "shm", RDMX_TP_TCP, "tcp");
	run(RDMX_TP_TCP, "tcp", RDMX_TP_SHM, "shm");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_progress_every_transport),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
