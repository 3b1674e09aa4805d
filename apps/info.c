/* SPDX-License-Identifier: MIT */
/* rdmx info - what this build can do and how it is configured. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "rdmx_registry.h"
#include "config.h"
#include "core.h"

static const char *const info_sources[] = { "default", "file", "env" };

static int info_config(const char *file)
{
	enum rdmx_config_source src[64];
	struct rdmx_config cfg;
	rdmx_status st;

	if (rdmx_config_rows() > 64)
		return cli_fail("info", "config table larger than expected");
	st = rdmx_config_load(file, &cfg, src);
	if (st)
		return cli_fail("info", "invalid configuration: %s",
				rdmx_strerror(st));
	printf("%-24s %-10s %-8s %-8s %-28s %s\n", "key", "value", "default",
	       "source", "env", "description");
	for (int i = 0; i < rdmx_config_rows(); i++) {
		const char *key, *dfl, *doc;
		char val[RDMX_CONFIG_STR_MAX], env[64];

		rdmx_config_describe(&cfg, i, &key, val, sizeof(val), &dfl,
				     &doc, env, sizeof(env));
		printf("%-24s %-10s %-8s %-8s %-28s %s\n", key,
		       *val ? val : "-", *dfl ? dfl : "-", info_sources[src[i]],
		       env, doc);
	}
	return 0;
}

/* Connect to an rdmx server and say which transport the handshake picks. */
static int info_peer(const char *addr)
{
	struct rdmx_conn_info info;
	struct cli_session s;
	rdmx_status st;

	if (!cli_addr_ok(addr))
		return 1;
	st = cli_session_open(&s, NULL);
	if (!st)
		st = cli_connect(&s, addr);
	if (st) {
		cli_session_close(&s);
		return cli_fail("info", "cannot reach %s: %s", addr,
				rdmx_strerror(st));
	}
	rdmx_conn_info(s.conn, &info);
	printf("peer %s: transport %s: %s\n", info.peer_addr, info.transport,
	       info.reason);
	cli_session_close(&s);
	return 0;
}

/* The registry that "@NAME" goes through, and whether it answers. */
static void info_registry(void)
{
	struct rdmx_ctx *ctx = NULL;
	struct rdmx_registry *reg;
	rdmx_status st;

	if (cli_ctx_create(NULL, &ctx) || !(reg = cli_registry(ctx))) {
		printf("registry: none (registry.url is not usable)\n");
		rdmx_ctx_destroy(ctx);
		return;
	}
	st = rdmx_registry_ping(reg);
	printf("registry: %s: %s\n", rdmx_registry_url(reg),
	       st ? rdmx_strerror(st) : "answers");
	rdmx_ctx_destroy(ctx);
}

int cli_info(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "peer", required_argument, NULL, 'p' },
		{ "config", optional_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		if (c == 'c')
			return info_config(optarg);
		if (c == 'p')
			return info_peer(optarg);
		if (c == 'h') {
			printf("usage: rdmx info [--config[=FILE]] "
			       "[--peer HOST:PORT]\n"
			       "  --config  print every configuration key with "
			       "its value, default, source and variable\n"
			       "  --peer    connect to an rdmx server and print "
			       "the transport chosen, and why\n");
			return 0;
		}
		return cli_fail("info", "see rdmx info --help");
	}
	printf("rdmx %d.%d\n", RDMX_VERSION_MAJOR, RDMX_VERSION_MINOR);
	printf("transports: ");
	for (int i = RDMX_TRANSPORT_MAX - 1; i >= 0; i--) {
		const struct rdmx_transport_ops *ops;

		ops = rdmx_transport_by_id((unsigned)i);
		if (ops)
			printf("%s ", ops->name);
	}
	printf("(best first: verbs where both sides have an RDMA device that "
	       "owns their address, shm between processes of one host, tcp "
	       "otherwise)\n");
	cli_info_verbs();
	info_registry();
	return 0;
}
