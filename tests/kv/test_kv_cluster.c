/* SPDX-License-Identifier: MIT */
/*
 * Description: a KV cluster on etcd: three servers (child processes) in
 * cluster "t", 10,000 keys put through one client spread 20-47% each and
 * all read back; one server SIGKILLed: its keys fail with CONN_LOST, the
 * others' keep working, and within its TTL it leaves and its keys read as
 * not found; a fourth server joins and takes new keys.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd_rig.h"
#include "harness.h"
#include "rdmx_kv.h"
#include "rdmx_registry.h"

#define KEYS 10000
#define TTL_MS 2000

/* A child: a KV server, member m<idx> of cluster t at $TEST_REGISTRY_URL. */
static int kv_member(int port, int idx)
{
	struct rdmx_kv_server_attr sa = { .mask = RDMX_KV_SERVER_ATTR_MEMORY,
					  .memory = 64 << 20 };
	struct rdmx_ctx *ctx;
	struct rdmx_kv_server *srv;
	struct rdmx_registry *reg;
	char addr[64], member[16];

	(void)port;
	if (rdmx_ctx_create(NULL, &ctx) ||
	    rdmx_kv_server_create(ctx, "127.0.0.1:0", &sa, &srv) ||
	    rdmx_registry_open(NULL, getenv("TEST_REGISTRY_URL"), &reg))
		return 1;
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", rdmx_kv_server_port(srv));
	snprintf(member, sizeof(member), "m%d", idx);
	if (rdmx_kv_cluster_publish(reg, "t", member, addr, TTL_MS))
		return 2;
	for (;;)
		pause();
}

static void wait_size(struct rdmx_kv_cluster *cl, unsigned n, double bound_s)
{
	double t0 = now_s();

	while (rdmx_kv_cluster_size(cl) != n) {
		if (now_s() - t0 > bound_s)
			fail_msg("the cluster has %u members, not %u, after "
				 "%.1f s",
				 rdmx_kv_cluster_size(cl), n, bound_s);
		usleep(20000);
	}
}

static void key_of(int i, char *k, size_t len)
{
	snprintf(k, len, "key-%d", i);
}

/* Put key @i (its own name as the value); the index of its member. */
static int put_key(struct rdmx_kv_cluster *cl, int i)
{
	char k[32], owner[64];

	key_of(i, k, sizeof(k));
	assert_int_equal(rdmx_kv_cluster_put(cl, k, strlen(k), k, strlen(k)),
			 RDMX_OK);
	assert_int_equal(rdmx_kv_cluster_owner(cl, k, strlen(k), owner,
					       sizeof(owner), NULL, 0),
			 RDMX_OK);
	return owner[1] - '0';
}

static void test_kv_cluster_spread_kill_join(void **state)
{
	struct etcd e;
	struct rdmx_ctx *ctx;
	struct rdmx_registry *reg;
	struct rdmx_kv_cluster *cl;
	char k[32], v[32], *owners = calloc(KEYS, 1);
	uint64_t len;
	unsigned count[4] = { 0 }, lost = 0, kept = 0, joined = 0;
	pid_t pid[4];
	double t0, gone;

	(void)state;
	assert_non_null(owners);
	etcd_start(&e, 1);
	setenv("TEST_REGISTRY_URL", e.url, 1);
	for (int i = 0; i < 3; i++)
		pid[i] = spawn("kv_member", 0, i);
	assert_int_equal(rdmx_ctx_create(NULL, &ctx), RDMX_OK);
	assert_int_equal(rdmx_registry_open(NULL, e.url, &reg), RDMX_OK);
	assert_int_equal(rdmx_kv_cluster_open(ctx, reg, "t", NULL, &cl),
			 RDMX_OK);
	wait_size(cl, 3, 10 * time_scale());

	/* 10,000 keys through one client: spread, and every one back. */
	for (int i = 0; i < KEYS; i++) {
		owners[i] = (char)put_key(cl, i);
		count[(int)owners[i]]++;
	}
	print_message("10000 keys over 3 servers: %u %u %u\n", count[0],
		      count[1], count[2]);
	for (int i = 0; i < 3; i++)
		assert_true(count[i] >= KEYS / 5 &&
			    count[i] <= KEYS * 47 / 100);
	for (int i = 0; i < KEYS; i++) {
		key_of(i, k, sizeof(k));
		assert_int_equal(rdmx_kv_cluster_get(cl, k, strlen(k), v,
						     sizeof(v), &len),
				 RDMX_OK);
		assert_int_equal(len, strlen(k));
		assert_memory_equal(v, k, len);
	}

	/* m1 dies: its keys fail with CONN_LOST, the others' work. */
	kill(pid[1], SIGKILL);
	waitpid(pid[1], NULL, 0);
	t0 = now_s();
	for (int i = 0; i < 300; i++) {
		rdmx_status st;

		key_of(i, k, sizeof(k));
		st = rdmx_kv_cluster_get(cl, k, strlen(k), v, sizeof(v), &len);
		if (owners[i] == 1) {
			assert_int_equal(st, RDMX_ERR_CONN_LOST);
			lost++;
		} else {
			assert_int_equal(st, RDMX_OK);
			kept++;
		}
	}
	assert_true(lost > 0 && kept > 0);
	/* Within its TTL it leaves: its keys are the others' now, lost. */
	wait_size(cl, 2, (TTL_MS / 1000.0 + 3) * time_scale());
	gone = now_s() - t0;
	print_message("m1 left the cluster %.0f ms after its SIGKILL\n",
		      gone * 1000);
	for (int i = 0; i < 300; i++) {
		key_of(i, k, sizeof(k));
		assert_int_equal(rdmx_kv_cluster_get(cl, k, strlen(k), v,
						     sizeof(v), &len),
				 owners[i] == 1 ? RDMX_ERR_NOT_FOUND : RDMX_OK);
	}

	/* m3 joins and takes about a third of the new keys. */
	pid[3] = spawn("kv_member", 0, 3);
	wait_size(cl, 3, 10 * time_scale());
	for (int i = KEYS; i < KEYS + 1000; i++) {
		joined += put_key(cl, i) == 3;
		key_of(i, k, sizeof(k));
		assert_int_equal(rdmx_kv_cluster_get(cl, k, strlen(k), v,
						     sizeof(v), &len),
				 RDMX_OK);
	}
	print_message("m3 joined and holds %u of 1000 new keys\n", joined);
	assert_true(joined >= 200 && joined <= 470);

	rdmx_kv_cluster_close(cl);
	for (int i = 0; i < 4; i++)
		if (i != 1) {
			kill(pid[i], SIGKILL);
			waitpid(pid[i], NULL, 0);
		}
	rdmx_registry_close(reg);
	assert_int_equal(rdmx_ctx_destroy(ctx), RDMX_OK);
	etcd_stop(&e);
	free(owners);
}

static const struct child children[] = {
	{ "kv_member", kv_member },
	{ NULL, NULL },
};

int main(int argc, char **argv)
{
	harness_children(argc, argv, children);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kv_cluster_spread_kill_join),
	};

	return cmocka_run_group_tests_name("kv.cluster", tests, NULL, NULL);
}
