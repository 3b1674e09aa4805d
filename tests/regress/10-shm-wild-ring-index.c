/* SPDX-License-Identifier: MIT */
/*
 * Description: a shm peer that stores a wild index into a live ring (a
 * chunk's stamp on the ring we read, its consumer head on the ring we
 * write) ends the connection with error completions; rdmx used to copy
 * past the ring's mapping (SIGSEGV in rdmx_shm_get and rdmx_shm_put).
 */
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"
#include "shm.h"

static struct rdmx_shm_pipe *pipe_of(struct rdmx_conn *conn)
{
	return to_sw_conn(conn)->pipe_priv;
}

/* A RECV posted on the victim ends with an error, and the process lives. */
static void wild(bool producer_tail)
{
	struct pair p;
	struct buf b, cb;
	struct rdmx_sge s, cs;
	struct rdmx_shm_pipe *victim;
	struct rdmx_completion wc;
	rdmx_status st;

	/* A message larger than the ring: a wild index copies past it. */
	setenv("RDMX_TRANSPORT", "shm", 1);
	pair_open_with(&p, "RDMX_SHM_RING_SIZE", "4096");
	buf_alloc(&p.s, &b, 64 << 10, RDMX_ACCESS_LOCAL_WRITE);
	s = sge_of(&b, 0, 64 << 10);
	buf_alloc(&p.c, &cb, 64 << 10, RDMX_ACCESS_LOCAL_WRITE);
	cs = sge_of(&cb, 0, 64 << 10);
	assert_int_equal(rdmx_post_recv(p.sconn, &s, 1, 1), RDMX_OK);
	victim = pipe_of(p.sconn);
	if (producer_tail) {
		/*
		 * As the peer: a chunk (shm_proto.h) stamped with more bytes
		 * than the ring holds, where the victim reads next, and its
		 * doorbell, once the victim has read what the honest peer
		 * sent (credits): then its next chunk starts at its head.
		 */
		uint64_t one = 1, next;

		for (int i = 0; atomic_load(&victim->rx->head) !=
				atomic_load(&victim->rx->tail);
		     i++) {
			assert_true(i < 100000);
			usleep(10);
		}
		next = atomic_load(&victim->rx->head);
		atomic_store(rdmx_shm_stamp(victim->rx_data, victim->rx_size,
					    next),
			     next + (1ull << 40));
		assert_int_equal(write(victim->door, &one, sizeof(one)),
				 sizeof(one));
	} else {
		/* A RECV at the peer, so our SEND has its credit and goes. */
		assert_int_equal(rdmx_post_recv(p.cconn, &cs, 1, 4), RDMX_OK);
		/*
		 * The honest peer stores its head after each read, from the
		 * value it loaded: wait until it has read all we wrote (the
		 * credit for RECV 1), so that it cannot overwrite the wild
		 * head with an old one; it reads nothing more until we write.
		 */
		for (int i = 0; atomic_load(&victim->tx->head) !=
				atomic_load(&victim->tx->tail);
		     i++) {
			assert_true(i < 100000);
			usleep(10);
		}
		/* As the peer: a head past everything we wrote. */
		atomic_fetch_add(&victim->tx->head, 1ull << 40);
		/* Our next write finds it: at the post, or just after. */
		st = rdmx_post_send(p.sconn, &s, 3);
		if (st == RDMX_OK) {
			wc = wait_wc(p.s.cq);
			assert_int_equal(wc.wr_id, 3);
			assert_int_not_equal(wc.status, RDMX_OK);
		} else {
			assert_int_equal(st, RDMX_ERR_CONN_LOST);
		}
	}
	wc = wait_wc(p.s.cq);
	assert_int_equal(wc.wr_id, 1);
	assert_int_not_equal(wc.status, RDMX_OK);
	assert_int_not_equal(rdmx_conn_check(p.sconn), RDMX_OK);
	buf_free(&b);
	buf_free(&cb);
	pair_close(&p);
}

static void test_shm_wild_producer_tail(void **state)
{
	(void)state;
	wild(true);
}

static void test_shm_wild_consumer_head(void **state)
{
	(void)state;
	wild(false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shm_wild_producer_tail),
		cmocka_unit_test(test_shm_wild_consumer_head),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
