/* SPDX-License-Identifier: MIT */
/* Description: config defaults, YAML file, RDMX_* overrides and bad values. */
#include <dirent.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "config.h"
#include "core.h"

static char path[64];

static void write_yaml(const char *text)
{
	FILE *f;

	snprintf(path, sizeof(path), "/tmp/rdmx-test-%d.yaml", getpid());
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int teardown(void **state)
{
	(void)state;
	unlink(path);
	unsetenv("RDMX_CONN_MAX_SEND_WR");
	unsetenv("RDMX_PROGRESS_WAIT_SPIN");
	unsetenv("RDMX_CONFIG");
	unsetenv("RDMX_PROGRESS_CPU");
	return 0;
}

static void test_config_defaults(void **state)
{
	struct rdmx_config cfg;

	(void)state;
	assert_int_equal(rdmx_config_load(NULL, &cfg, NULL), RDMX_OK);
	assert_int_equal(cfg.conn_max_send_wr, 1024);
	assert_int_equal(cfg.tcp_user_timeout_ms, 2000);
	assert_int_equal(cfg.progress_wait_spin_us, 20);
	assert_true(cfg.progress_thread);
	assert_string_equal(cfg.transport, "auto");
}

static void test_config_yaml_then_env(void **state)
{
	struct rdmx_config cfg;
	enum rdmx_config_source src[64];

	(void)state;
	write_yaml(
		"# rdmx\nconn:\n  max_send_wr: 4k\ntcp:\n  user_timeout: 1500ms\n"
		"progress:\n  thread: off\n  wait_spin: 1ms\n"
		"log.level: error\n");
	assert_int_equal(rdmx_config_load(path, &cfg, src), RDMX_OK);
	assert_int_equal(cfg.conn_max_send_wr, 4096);
	assert_int_equal(cfg.tcp_user_timeout_ms, 1500);
	assert_int_equal(cfg.progress_wait_spin_us, 1000);
	assert_false(cfg.progress_thread);
	/* The environment wins over the file. */
	setenv("RDMX_CONN_MAX_SEND_WR", "77", 1);
	assert_int_equal(rdmx_config_load(path, &cfg, src), RDMX_OK);
	assert_int_equal(cfg.conn_max_send_wr, 77);
	for (int i = 0; i < rdmx_config_rows(); i++) {
		const char *key, *dfl, *doc;
		char val[64], env[64];

		rdmx_config_describe(&cfg, i, &key, val, sizeof(val), &dfl,
				     &doc, env, sizeof(env));
		if (!strcmp(key, "conn.max_send_wr")) {
			assert_int_equal(src[i], RDMX_CONFIG_ENV);
			assert_string_equal(env, "RDMX_CONN_MAX_SEND_WR");
			assert_string_equal(val, "77");
		}
		if (!strcmp(key, "tcp.user_timeout"))
			assert_int_equal(src[i], RDMX_CONFIG_FILE);
		if (!strcmp(key, "conn.max_recv_wr"))
			assert_int_equal(src[i], RDMX_CONFIG_DEFAULT);
	}
}

struct table_seen {
	int rows;
	int env_rows;
	char max_send_wr[32];
	char source[16];
};

static void table_row(void *arg, const struct rdmx_config_key *k)
{
	struct table_seen *seen = arg;

	seen->rows++;
	assert_non_null(k->doc);
	assert_true(!strncmp(k->env, "RDMX_", 5));
	if (!strcmp(k->source, "env"))
		seen->env_rows++;
	if (!strcmp(k->key, "conn.max_send_wr")) {
		snprintf(seen->max_send_wr, sizeof(seen->max_send_wr), "%s",
			 k->value);
		snprintf(seen->source, sizeof(seen->source), "%s", k->source);
		assert_string_equal(k->dflt, "1024");
	}
}

/* The public table: what rdmx info --config prints. */
static void test_config_table_public(void **state)
{
	struct table_seen seen = { 0 };

	(void)state;
	write_yaml("conn:\n  max_send_wr: 300\n");
	assert_int_equal(rdmx_config_table(path, table_row, &seen), RDMX_OK);
	assert_int_equal(seen.rows, rdmx_config_rows());
	assert_string_equal(seen.max_send_wr, "300");
	assert_string_equal(seen.source, "file");
	assert_int_equal(seen.env_rows, 0);
	setenv("RDMX_CONN_MAX_SEND_WR", "77", 1);
	memset(&seen, 0, sizeof(seen));
	assert_int_equal(rdmx_config_table(path, table_row, &seen), RDMX_OK);
	assert_string_equal(seen.max_send_wr, "77");
	assert_string_equal(seen.source, "env");
	assert_int_equal(seen.env_rows, 1);
	/* Nothing is called for a table that does not load. */
	setenv("RDMX_CONN_MAX_SEND_WR", "lots", 1);
	memset(&seen, 0, sizeof(seen));
	assert_int_equal(rdmx_config_table(path, table_row, &seen),
			 RDMX_ERR_CONFIG);
	assert_int_equal(seen.rows, 0);
	assert_int_equal(rdmx_config_table(path, NULL, NULL), RDMX_ERR_INVALID);
	/* tcp and shm are always built; nothing past verbs. */
	assert_int_equal(rdmx_transports_built() & (RDMX_TP_TCP | RDMX_TP_SHM),
			 RDMX_TP_TCP | RDMX_TP_SHM);
	assert_int_equal(rdmx_transports_built() &
				 ~(unsigned)(RDMX_TP_TCP | RDMX_TP_SHM |
					     RDMX_TP_VERBS),
			 0);
}

/* In file @path, the first line that starts with @prefix, past it and its
 * blanks, without the newline. */
static bool proc_line(const char *path, const char *prefix, char *out,
		      size_t len)
{
	FILE *f = fopen(path, "r");
	char line[256];
	bool found = false;

	while (f && !found && fgets(line, sizeof(line), f)) {
		found = !strncmp(line, prefix, strlen(prefix));
		if (found)
			snprintf(out, len, "%s",
				 line + strlen(prefix) +
					 strspn(line + strlen(prefix), " \t"));
	}
	if (f)
		fclose(f);
	out[found ? strcspn(out, "\n") : 0] = '\0';
	return found;
}

/* The Cpus_allowed_list of this process's thread named @comm, or "". */
static void thread_cpus(const char *comm, char *out, size_t len)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	char path[300], name[32];

	*out = '\0';
	while (d && (e = readdir(d))) {
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm",
			 e->d_name);
		if (!proc_line(path, "", name, sizeof(name)) ||
		    strcmp(name, comm))
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/status",
			 e->d_name);
		proc_line(path, "Cpus_allowed_list:", out, len);
		break;
	}
	if (d)
		closedir(d);
}

/* progress.cpu pins the progress threads, and a CPU the process may not
 * use fails the context at once. */
static void test_config_progress_cpu(void **state)
{
	struct rdmx_ctx *ctx = NULL;
	char cpus[256];
	cpu_set_t set;
	void *priv;
	int mine = -1, other = -1;

	(void)state;
	assert_int_equal(sched_getaffinity(0, sizeof(set), &set), 0);
	for (int i = CPU_SETSIZE - 1; i >= 0; i--)
		if (CPU_ISSET(i, &set))
			mine = i; /* the lowest allowed */
		else if (other < 0 && i < 1024)
			other = i; /* one it may not use */
	assert_true(mine >= 0 && other >= 0);

	snprintf(cpus, sizeof(cpus), "%d", mine);
	setenv("RDMX_PROGRESS_CPU", cpus, 1);
	assert_int_equal(rdmx_ctx_create(NULL, &ctx), RDMX_OK);
	assert_int_equal(rdmx_ctx_transport(ctx, RDMX_TRANSPORT_TCP, &priv),
			 RDMX_OK);
	thread_cpus("rdmx-tcp", cpus, sizeof(cpus));
	assert_int_equal(atoi(cpus), mine);
	assert_null(strpbrk(cpus, ",-")); /* that one CPU only */
	assert_int_equal(rdmx_ctx_destroy(ctx), RDMX_OK);

	snprintf(cpus, sizeof(cpus), "%d", other);
	setenv("RDMX_PROGRESS_CPU", cpus, 1);
	ctx = NULL;
	assert_int_equal(rdmx_ctx_create(NULL, &ctx), RDMX_ERR_CONFIG);
	assert_null(ctx);
	setenv("RDMX_PROGRESS_CPU", "2000", 1); /* past the bound */
	assert_int_equal(rdmx_ctx_create(NULL, &ctx), RDMX_ERR_CONFIG);

	/* auto: the thread may run wherever the process may. */
	unsetenv("RDMX_PROGRESS_CPU");
	assert_int_equal(rdmx_ctx_create(NULL, &ctx), RDMX_OK);
	assert_int_equal(rdmx_ctx_transport(ctx, RDMX_TRANSPORT_TCP, &priv),
			 RDMX_OK);
	thread_cpus("rdmx-tcp", cpus, sizeof(cpus));
	assert_true(*cpus);
	if (CPU_COUNT(&set) > 1)
		assert_non_null(strpbrk(cpus, ",-"));
	assert_int_equal(rdmx_ctx_destroy(ctx), RDMX_OK);
}

static void test_config_bad_values_fail(void **state)
{
	struct rdmx_config cfg;
	struct rdmx_ctx *ctx = NULL;

	(void)state;
	setenv("RDMX_CONN_MAX_SEND_WR", "lots", 1);
	assert_int_equal(rdmx_ctx_create(NULL, &ctx), RDMX_ERR_CONFIG);
	assert_null(ctx);
	setenv("RDMX_CONN_MAX_SEND_WR", "0", 1); /* below the bound */
	assert_int_equal(rdmx_config_load(NULL, &cfg, NULL), RDMX_ERR_CONFIG);
	unsetenv("RDMX_CONN_MAX_SEND_WR");
	write_yaml("tcp:\n  tx_dept: 5\n"); /* misspelt key */
	assert_int_equal(rdmx_config_load(path, &cfg, NULL), RDMX_ERR_CONFIG);
	write_yaml("transport: carrier-pigeon\n");
	assert_int_equal(rdmx_config_load(path, &cfg, NULL), RDMX_ERR_CONFIG);
	write_yaml("tcp: [1, 2\n"); /* not YAML */
	assert_int_equal(rdmx_config_load(path, &cfg, NULL), RDMX_ERR_CONFIG);
	assert_int_equal(rdmx_config_load("/nonexistent/rdmx.yaml", &cfg, NULL),
			 RDMX_ERR_CONFIG);
	setenv("RDMX_CONFIG", "/nonexistent/rdmx.yaml", 1);
	assert_int_equal(rdmx_ctx_create(NULL, &ctx), RDMX_ERR_CONFIG);
}

static void test_config_units(void **state)
{
	uint64_t v;

	(void)state;
	assert_int_equal(rdmx_config_parse_size("4k", &v), RDMX_OK);
	assert_int_equal(v, 4096);
	assert_int_equal(rdmx_config_parse_size("2MB", &v), RDMX_OK);
	assert_int_equal(v, 2 << 20);
	assert_int_equal(rdmx_config_parse_size("-1", &v), RDMX_ERR_INVALID);
	assert_int_equal(rdmx_config_parse_size("4q", &v), RDMX_ERR_INVALID);
	assert_int_equal(rdmx_config_parse_size("99999999999999999999", &v),
			 RDMX_ERR_INVALID);
	assert_int_equal(rdmx_config_parse_time("2s", 1000, &v), RDMX_OK);
	assert_int_equal(v, 2000);
	assert_int_equal(rdmx_config_parse_time("250", 1000, &v), RDMX_OK);
	assert_int_equal(v, 250);
	assert_int_equal(rdmx_config_parse_time("5us", 1, &v), RDMX_OK);
	assert_int_equal(v, 5);
	assert_int_equal(rdmx_config_parse_time("", 1, &v), RDMX_ERR_INVALID);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_config_defaults, teardown),
		cmocka_unit_test_teardown(test_config_yaml_then_env, teardown),
		cmocka_unit_test_teardown(test_config_table_public, teardown),
		cmocka_unit_test_teardown(test_config_progress_cpu, teardown),
		cmocka_unit_test_teardown(test_config_bad_values_fail,
					  teardown),
		cmocka_unit_test_teardown(test_config_units, teardown),
	};

	return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
