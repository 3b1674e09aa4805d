/* SPDX-License-Identifier: MIT */
/* Description: transport selection at connect: shm on one host, forcing,
 * refusals. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static char files[2][64];

/* A side whose config says transport: @t ("auto", "tcp", "shm"). */
static void side_with(struct side *s, int i, const char *t)
{
	struct rdmx_ctx_attr attr = { .mask = RDMX_CTX_ATTR_CONFIG_FILE,
				      .config_file = files[i] };
	FILE *f;

	snprintf(files[i], sizeof(files[i]), "/tmp/rdmx-sel-%d-%d.yaml",
		 getpid(), i);
	f = fopen(files[i], "w");
	assert_non_null(f);
	fprintf(f, "transport: %s\n", t);
	fclose(f);
	assert_int_equal(rdmx_ctx_create(&attr, &s->ctx), RDMX_OK);
	assert_int_equal(rdmx_cq_create(s->ctx, &s->cq), RDMX_OK);
}

/* Connect a client configured @ct to a server configured @st_cfg. */
static rdmx_status try_pair(const char *st_cfg, const char *ct,
			    struct rdmx_conn_info *info)
{
	struct side s, c;
	struct rdmx_conn_attr attr;
	struct rdmx_conn *conn = NULL;
	struct acc a;
	char addr[32];
	rdmx_status st;

	side_with(&s, 0, st_cfg);
	side_with(&c, 1, ct);
	a = (struct acc){ .s = &s, .timeout = 1000 };
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", side_listen(&s, &a.lst));
	acc_start(&a);
	attr = (struct rdmx_conn_attr){ .cq = c.cq };
	st = rdmx_connect(c.ctx, addr, &attr, 2000, &conn);
	acc_join(&a);
	if (!st) {
		struct rdmx_conn_info sinfo;

		rdmx_conn_info(conn, info);
		rdmx_conn_info(a.conn, &sinfo);
		/* Both ends agree on what they run. */
		assert_string_equal(sinfo.transport, info->transport);
	}
	rdmx_conn_close(conn);
	rdmx_conn_close(a.conn);
	rdmx_listener_close(a.lst);
	side_close(&c);
	side_close(&s);
	unlink(files[0]);
	unlink(files[1]);
	return st;
}

static void test_select_same_host_picks_shm(void **state)
{
	struct rdmx_conn_info info;

	(void)state;
	assert_int_equal(try_pair("auto", "auto", &info), RDMX_OK);
	assert_string_equal(info.transport, "shm");
	assert_non_null(strstr(info.reason, "best both sides support"));
	assert_non_null(strstr(info.reason, "shm,tcp"));
}

static void test_select_forced(void **state)
{
	struct rdmx_conn_info info;

	(void)state;
	assert_int_equal(try_pair("auto", "tcp", &info), RDMX_OK);
	assert_string_equal(info.transport, "tcp");
	assert_non_null(strstr(info.reason, "forced by transport=tcp"));
	assert_int_equal(try_pair("tcp", "auto", &info), RDMX_OK);
	assert_string_equal(info.transport, "tcp");
	assert_non_null(strstr(info.reason, "peer's transport setting"));
	assert_int_equal(try_pair("shm", "auto", &info), RDMX_OK);
	assert_string_equal(info.transport, "shm");
}

static void test_select_conflict_refused(void **state)
{
	struct rdmx_conn_info info;

	(void)state;
	assert_int_equal(try_pair("shm", "tcp", &info), RDMX_ERR_NO_TRANSPORT);
	assert_int_equal(try_pair("tcp", "shm", &info), RDMX_ERR_NO_TRANSPORT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_select_same_host_picks_shm),
		cmocka_unit_test(test_select_forced),
		cmocka_unit_test(test_select_conflict_refused),
	};

	/* The configs of each side decide here, not the suite's variable. */
	unsetenv("RDMX_TRANSPORT");
	return cmocka_run_group_tests_name("select", tests, NULL, NULL);
}
