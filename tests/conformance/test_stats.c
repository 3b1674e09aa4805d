/* SPDX-License-Identifier: MIT */
/*
 * rdmx_ctx_stats over every transport: requests and bytes per operation
 * and direction, latency histograms that count each signaled request once
 * (unsignaled ones in between, lists too), errors by status, connections
 * by transport, the Prometheus text of it all, and counts from many
 * threads, ended ones included.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

#define N 64
#define EVERY 8
#define SZ 100

static uint64_t bucket_sum(const struct rdmx_stats *s, int op)
{
	uint64_t n = 0;

	for (int b = 0; b < RDMX_STATS_BUCKETS; b++)
		n += s->lat_bucket[op][b];
	return n;
}

static void post_writes(struct pair *p, struct buf *src,
			const struct rdmx_remote *rem)
{
	for (int i = 0; i < N; i++) {
		struct rdmx_sge sg = sge_of(src, (size_t)i * SZ, SZ);
		struct rdmx_wr wr = {
			.wr_id = (uint64_t)i,
			.opcode = RDMX_OP_WRITE,
			.sg_list = &sg,
			.num_sge = 1,
			.remote_addr = rem->addr + (uint64_t)i * SZ,
			.rkey = rem->rkey,
			.flags = i % EVERY == EVERY - 1 ? 0
							: RDMX_WR_UNSIGNALED,
		};

		assert_int_equal(rdmx_post(p->cconn, &wr), RDMX_OK);
	}
	for (int i = EVERY - 1; i < N; i += EVERY)
		expect_wc(p->c.cq, RDMX_OK, RDMX_OP_WRITE);
}

static void post_reads(struct pair *p, struct buf *src,
		       const struct rdmx_remote *rem)
{
	struct rdmx_sge sg[4];
	struct rdmx_wr wrs[4];
	int posted = 0;

	for (int i = 0; i < 4; i++) {
		sg[i] = sge_of(src, (size_t)i * SZ, SZ);
		wrs[i] = (struct rdmx_wr){ .wr_id = (uint64_t)i,
					   .opcode = RDMX_OP_READ,
					   .sg_list = &sg[i],
					   .num_sge = 1,
					   .remote_addr = rem->addr,
					   .rkey = rem->rkey };
	}
	assert_int_equal(rdmx_post_list(p->cconn, wrs, 4, &posted), RDMX_OK);
	assert_int_equal(posted, 4);
	for (int i = 0; i < 4; i++)
		expect_wc(p->c.cq, RDMX_OK, RDMX_OP_READ);
}

static void test_stats_count_ops_bytes_latency(void **state)
{
	struct rdmx_stats c0, c, s0, s;
	struct pair p;
	struct buf src, dst, msg;
	struct rdmx_remote rem;
	struct rdmx_sge sg;
	char *text, line[96];
	size_t len;
	int t, served;

	(void)state;
	pair_open_with(&p, "RDMX_METRICS_LATENCY", "on");
	buf_alloc(&p.c, &src, N * SZ,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_READ);
	buf_alloc(&p.s, &dst, N * SZ,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE |
			  RDMX_ACCESS_REMOTE_READ);
	buf_alloc(&p.s, &msg, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_fill(&src, 7);
	rem = share_remote(&p, &dst);
	rdmx_ctx_stats(p.c.ctx, &c0);
	rdmx_ctx_stats(p.s.ctx, &s0);

	post_writes(&p, &src, &rem);
	post_reads(&p, &src, &rem);
	sg = sge_of(&msg, 0, 64);
	assert_int_equal(rdmx_post_recv(p.sconn, &sg, 1, 1), RDMX_OK);
	sg = sge_of(&src, 0, 10);
	assert_int_equal(rdmx_post_send(p.cconn, &sg, 1), RDMX_OK);
	expect_wc(p.c.cq, RDMX_OK, RDMX_OP_SEND);
	assert_int_equal(expect_wc(p.s.cq, RDMX_OK, RDMX_OP_RECV).byte_len, 10);

	rdmx_ctx_stats(p.c.ctx, &c);
	rdmx_ctx_stats(p.s.ctx, &s);
	assert_int_equal(c.ops_out[RDMX_OP_WRITE] - c0.ops_out[RDMX_OP_WRITE],
			 N);
	assert_int_equal(c.bytes_out[RDMX_OP_WRITE] -
				 c0.bytes_out[RDMX_OP_WRITE],
			 N * SZ);
	assert_int_equal(c.ops_out[RDMX_OP_READ] - c0.ops_out[RDMX_OP_READ], 4);
	assert_int_equal(c.ops_out[RDMX_OP_SEND] - c0.ops_out[RDMX_OP_SEND], 1);
	assert_int_equal(s.ops_in[RDMX_OP_RECV] - s0.ops_in[RDMX_OP_RECV], 1);
	assert_int_equal(s.bytes_in[RDMX_OP_RECV] - s0.bytes_in[RDMX_OP_RECV],
			 10);
	/* Latency: the signaled requests only, each once. */
	assert_int_equal(c.lat_count[RDMX_OP_WRITE], N / EVERY);
	assert_int_equal(c.lat_count[RDMX_OP_READ], 4);
	assert_int_equal(bucket_sum(&c, RDMX_OP_WRITE), N / EVERY);
	assert_true(c.lat_sum_ns[RDMX_OP_WRITE] > 0);
	/* The target's process posted nothing but its RECVs and share. */
	assert_int_equal(s.ops_out[RDMX_OP_WRITE], 0);
	t = transport_index(p.cconn);
	/* The target's side: what it served, where the CPU sees it. */
	served = strcmp(rdmx_transport_name(t), "verbs") ? 1 : 0;
	assert_int_equal(s.served_ops[t][RDMX_OP_WRITE] -
				 s0.served_ops[t][RDMX_OP_WRITE],
			 served * N);
	assert_int_equal(s.served_bytes[t][RDMX_OP_WRITE] -
				 s0.served_bytes[t][RDMX_OP_WRITE],
			 served * N * SZ);
	assert_int_equal(s.served_ops[t][RDMX_OP_READ] -
				 s0.served_ops[t][RDMX_OP_READ],
			 served * 4);
	assert_int_equal(s.served_bytes[t][RDMX_OP_READ] -
				 s0.served_bytes[t][RDMX_OP_READ],
			 served * 4 * SZ);
	assert_int_equal(c.served_ops[t][RDMX_OP_WRITE], 0); /* the initiator */
	assert_int_equal(c.conns_open[t], 1);
	assert_int_equal(c.conns_total[t], 1);
	assert_int_equal(s.conns_open[t], 1);

	len = rdmx_stats_prometheus(&c, NULL, 0);
	text = malloc(len + 1);
	assert_non_null(text);
	assert_int_equal(rdmx_stats_prometheus(&c, text, len + 1), len);
	assert_int_equal(strlen(text), len);
	assert_non_null(strstr(
		text, "rdmx_op_latency_seconds_count{op=\"write\"} 8\n"));
	assert_non_null(strstr(
		text,
		"rdmx_op_latency_seconds_bucket{op=\"read\",le=\"+Inf\"} 4\n"));
	free(text);
	/* The target's text has its served counters. */
	len = rdmx_stats_prometheus(&s, NULL, 0);
	text = malloc(len + 1);
	assert_non_null(text);
	rdmx_stats_prometheus(&s, text, len + 1);
	snprintf(line, sizeof(line),
		 "rdmx_served_bytes_total{transport=\"%s\",op=\"write\"} "
		 "%llu\n",
		 rdmx_transport_name(t),
		 (unsigned long long)s.served_bytes[t][RDMX_OP_WRITE]);
	assert_non_null(strstr(text, line));
	assert_non_null(strstr(text, "rdmx_refused_total{reason=\"rkey\"} "));
	free(text);
	buf_free(&src);
	buf_free(&dst);
	buf_free(&msg);
	pair_close(&p);
}

/* Threads that post PER writes each, on one connection, then end. */
#define THREADS 4
#define PER 16

struct poster {
	struct pair *p;
	struct buf *src;
	struct rdmx_remote rem;
	int id;
};

static void *post_some(void *arg)
{
	struct poster *w = arg;

	for (int i = 0; i < PER; i++) {
		struct rdmx_sge sg = sge_of(w->src, (size_t)w->id * SZ, SZ);

		assert_int_equal(rdmx_post_write(w->p->cconn, &sg, w->rem.addr,
						 w->rem.rkey, (uint64_t)i),
				 RDMX_OK);
	}
	return NULL;
}

/*
 * Counters kept per thread (stats.c) sum to every request: from threads
 * that have ended, and from later ones (which may take over their ids).
 */
static void test_stats_threads_count_all(void **state)
{
	struct poster w[THREADS];
	pthread_t th[THREADS];
	struct rdmx_stats c0, c;
	struct rdmx_remote rem;
	struct pair p;
	struct buf src, dst;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, THREADS * SZ, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.s, &dst, SZ,
		  RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE);
	rem = share_remote(&p, &dst);
	rdmx_ctx_stats(p.c.ctx, &c0);
	for (int round = 1; round <= 2; round++) {
		for (int t = 0; t < THREADS; t++) {
			w[t] = (struct poster){ &p, &src, rem, t };
			assert_int_equal(pthread_create(&th[t], NULL, post_some,
							&w[t]),
					 0);
		}
		for (int t = 0; t < THREADS; t++)
			pthread_join(th[t], NULL);
		for (int i = 0; i < THREADS * PER; i++)
			expect_wc(p.c.cq, RDMX_OK, RDMX_OP_WRITE);
		rdmx_ctx_stats(p.c.ctx, &c);
		assert_int_equal(c.ops_out[RDMX_OP_WRITE] -
					 c0.ops_out[RDMX_OP_WRITE],
				 round * THREADS * PER);
		assert_int_equal(c.bytes_out[RDMX_OP_WRITE] -
					 c0.bytes_out[RDMX_OP_WRITE],
				 round * THREADS * PER * SZ);
	}
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

static void test_stats_errors_by_status(void **state)
{
	struct rdmx_stats c0, c;
	struct pair p;
	struct buf src, dst;
	struct rdmx_remote rem;
	struct rdmx_sge sg;
	struct rdmx_completion wc;
	uint64_t errs = 0;

	(void)state;
	pair_open(&p);
	buf_alloc(&p.c, &src, 64, RDMX_ACCESS_LOCAL_WRITE);
	buf_alloc(&p.s, &dst, 64, RDMX_ACCESS_LOCAL_WRITE);
	rem = share_remote(&p, &dst);
	rdmx_ctx_stats(p.c.ctx, &c0);
	sg = sge_of(&src, 0, 8);
	/* An unknown rkey: refused (a READ, since iWARP may complete a
	 * WRITE locally before the target judges it). */
	assert_int_equal(rdmx_post_read(p.cconn, &sg, rem.addr,
					rem.rkey ^ 0x80000001u, 5),
			 RDMX_OK);
	wc = wait_wc(p.c.cq);
	assert_refused(p.cconn, wc.status);
	rdmx_ctx_stats(p.c.ctx, &c);
	assert_int_equal(c.errors[-wc.status] - c0.errors[-wc.status], 1);
	for (int i = 0; i < RDMX_STATS_STATUSES; i++)
		errs += c.errors[i] - c0.errors[i];
	assert_int_equal(errs, 1);
	/* Latency is off by default: nothing is stamped. */
	assert_int_equal(c.lat_count[RDMX_OP_READ], 0);
	buf_free(&src);
	buf_free(&dst);
	pair_close(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stats_count_ops_bytes_latency),
		cmocka_unit_test(test_stats_errors_by_status),
		cmocka_unit_test(test_stats_threads_count_all),
	};

	return cmocka_run_group_tests_name(suite_transport(), tests, NULL,
					   NULL);
}
