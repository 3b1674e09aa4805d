/* SPDX-License-Identifier: MIT */
/* rdmx info - what this build can do and how it is configured. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "rdmx_registry.h"

static void info_config_row(void *arg, const struct rdmx_config_key *k)
{
	bool *header = arg;

	if (!*header)
		printf("%-24s %-10s %-8s %-8s %-28s %s\n", "key", "value",
		       "default", "source", "env", "description");
	*header = true;
	printf("%-24s %-10s %-8s %-8s %-28s %s\n", k->key,
	       *k->value ? k->value : "-", *k->dflt ? k->dflt : "-", k->source,
	       k->env, k->doc);
}

static int info_config(const char *file)
{
	bool header = false;
	rdmx_status st;

	st = rdmx_config_table(file, info_config_row, &header);
	if (st)
		return cli_fail("info", "invalid configuration: %s",
				rdmx_strerror(st));
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

/*
 * The context every command would make: whether the configuration in
 * effect (RDMX_CONFIG, RDMX_* variables) is usable, then the registry that
 * "@NAME" goes through, and whether it answers. Returns 1 when the
 * configuration is not usable: every other command would refuse to start
 * with it.
 */
static int info_context(void)
{
	struct rdmx_ctx *ctx = NULL;
	struct rdmx_registry *reg;
	rdmx_status st = cli_ctx_create(NULL, &ctx);

	if (st) {
		printf("configuration: not usable (the line above says "
		       "why)\n");
		return 1;
	}
	if (!(reg = cli_registry(ctx))) {
		printf("registry: none (registry.url is not usable)\n");
		rdmx_ctx_destroy(ctx);
		return 0;
	}
	st = rdmx_registry_ping(reg);
	printf("registry: %s: %s\n", rdmx_registry_url(reg),
	       st ? rdmx_strerror(st) : "answers");
	rdmx_ctx_destroy(ctx);
	return 0;
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
		if (c == 'c') { /* --config=FILE, or --config FILE */
			if (!optarg && optind < argc && argv[optind][0] != '-')
				optarg = argv[optind++];
			if (optind < argc)
				break;
			return info_config(optarg);
		}
		if (c == 'p' && optind < argc)
			break;
		if (c == 'p')
			return info_peer(optarg);
		if (c == 'h') {
			printf("usage: rdmx info [--config [FILE]] "
			       "[--peer HOST:PORT]\n"
			       "  --config  print every configuration key with "
			       "its value, default, source and variable\n"
			       "  --peer    connect to an rdmx server and print "
			       "the transport chosen, and why\n");
			return 0;
		}
		return cli_fail("info", "see rdmx info --help");
	}
	if (optind < argc)
		return cli_fail("info", "unexpected argument '%s'",
				argv[optind]);
	printf("rdmx %d.%d\n", RDMX_VERSION_MAJOR, RDMX_VERSION_MINOR);
	printf("transports: ");
	for (int i = 31; i >= 0; i--) /* best first */
		if (rdmx_transports_built() & (1u << i))
			printf("%s ", rdmx_transport_name(i));
	printf("(best first: verbs where both sides have an RDMA device that "
	       "owns their address, shm between processes of one host, tcp "
	       "otherwise)\n");
	cli_info_verbs();
	return info_context();
}
