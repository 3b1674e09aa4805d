/* SPDX-License-Identifier: MIT */
/*
 * Description: a shm producer zeroes the stamp slots of the free lines
 * ahead of its tail after a publish, not the next chunk's slot just
 * before each stamp. That store went to a line the consumer read a lap
 * ago, and the stamp waited behind it in the store order: ~35 ns of a
 * small SEND's one-way time here (0.35 -> 0.315 us). Every slot the
 * consumer may look at next must still read zero until it is stamped:
 * over a 4 KiB ring, SENDs of many sizes lap it hundreds of times with
 * payloads whose every word would read as a wild stamp, and each arrives
 * whole.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "shm.h"

static struct rdmx_shm_pipe *pipe_of(struct rdmx_conn *conn)
{
	return to_sw_conn(conn)->pipe_priv;
}

/*
 * How far ahead of its tail the producer of @conn keeps lines zeroed; -1
 * when a line in between does not read zero. Read under the connection's
 * lock (a progress thread may send), asserted after it.
 */
static int64_t zeroed_ahead(struct rdmx_conn *conn)
{
	struct rdmx_shm_pipe *p = pipe_of(conn);
	int64_t ahead;
	uint64_t stamp;

	rdmx_spin_lock(&to_sw_conn(conn)->lock);
	ahead = (int64_t)(p->tx_zeroed - p->tx_tail);
	for (uint64_t z = p->tx_tail; z < p->tx_zeroed; z += RDMX_SHM_ALIGN) {
		memcpy(&stamp, p->tx_data + (z & (p->tx_size - 1)),
		       sizeof(stamp));
		if (stamp)
			ahead = -1;
	}
	rdmx_spin_unlock(&to_sw_conn(conn)->lock);
	print_message("zeroed ahead: %lld\n", (long long)ahead);
	return ahead;
}

static void test_shm_stamps_zeroed_ahead(void **state)
{
	static const size_t sizes[] = { 8, 40, 100, 1000, 3000, 57, 8, 2000 };
	struct pair p;
	struct buf in, out;
	struct rdmx_sge s;

	(void)state;
	setenv("RDMX_TRANSPORT", "shm", 1);
	pair_open_with(&p, "RDMX_SHM_RING_SIZE", "4096");
	assert_int_equal(pipe_of(p.cconn)->tx_size, 4096);
	buf_alloc(&p.s, &in, 4096, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.c, &out, 4096, 0);
	for (int i = 0; i < 2000; i++) {
		size_t n = sizes[i % 8];

		memset(out.p, 0xa5, n);
		out.p[0] = (uint8_t)i;
		out.p[n - 1] = (uint8_t)(i >> 8);
		memset(in.p, 0, n);
		s = sge_of(&in, 0, 4096);
		assert_int_equal(rdmx_post_recv(p.sconn, &s, 1, 1), RDMX_OK);
		s = sge_of(&out, 0, n);
		assert_int_equal(rdmx_post_send(p.cconn, &s, 2), RDMX_OK);
		assert_int_equal(
			expect_wc(p.s.cq, RDMX_OK, RDMX_OP_RECV).byte_len, n);
		expect_wc(p.c.cq, RDMX_OK, RDMX_OP_SEND);
		assert_memory_equal(in.p, out.p, n);
	}
	/* Small SENDs on a quiet ring keep a quarter of it zeroed ahead
	 * (at least half of that between batches), both ways. */
	for (int i = 0; i < 40; i++) {
		s = sge_of(&in, 0, 4096);
		assert_int_equal(rdmx_post_recv(p.sconn, &s, 1, 1), RDMX_OK);
		s = sge_of(&out, 0, 8);
		assert_int_equal(rdmx_post_send(p.cconn, &s, 2), RDMX_OK);
		expect_wc(p.s.cq, RDMX_OK, RDMX_OP_RECV);
		expect_wc(p.c.cq, RDMX_OK, RDMX_OP_SEND);
		assert_true(zeroed_ahead(p.cconn) >= 4096 / 4 / 2);
		assert_true(zeroed_ahead(p.sconn) >= RDMX_SHM_ALIGN);
	}
	buf_free(&in);
	buf_free(&out);
	pair_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shm_stamps_zeroed_ahead),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
