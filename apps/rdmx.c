/* SPDX-License-Identifier: MIT */
/* rdmx - the command line: one file per subcommand, dispatched here. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "lambda.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rdmx <command> [options]\n"
		"commands:\n"
		"  demo send|write|read|lambda [HOST][:PORT]\n"
		"                                       the RDMA communication modes\n"
		"  bench [HOST][:PORT]                  latency and bandwidth, as perftest\n"
		"  page serve|bench ...                 remote memory: pages fetched on fault\n"
		"  kv serve|put|get|del ...             a key-value store: values RDMA-written\n"
		"  registry ls|get|watch|publish ...    names (@NAME) on etcd or in a directory\n"
		"  info [--config] [--peer HOST:PORT]   transports, configuration, choice\n"
		"  version                              print the version\n"
		"Run 'rdmx <command> --help' for the options of one command.\n");
}

int main(int argc, char **argv)
{
	/* A lambda call's own process (lib/lambda), started by a server. */
	if (argc == 2 && !strcmp(argv[1], LAMBDA_CHILD_ARG))
		lambda_child_main();
	if (argc < 2) {
		usage(stderr);
		return 1;
	}
	if (!strcmp(argv[1], "demo"))
		return cli_demo(argc - 1, argv + 1);
	if (!strcmp(argv[1], "bench"))
		return cli_bench(argc - 1, argv + 1);
	if (!strcmp(argv[1], "kv"))
		return cli_kv(argc - 1, argv + 1);
	if (!strcmp(argv[1], "registry"))
		return cli_registry_cmd(argc - 1, argv + 1);
	if (!strcmp(argv[1], "page"))
		return cli_page(argc - 1, argv + 1);
	if (!strcmp(argv[1], "info"))
		return cli_info(argc - 1, argv + 1);
	if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
		if (argc > 2)
			return cli_fail("version", "unexpected argument '%s'",
					argv[2]);
		printf("rdmx %d.%d\n", RDMX_VERSION_MAJOR, RDMX_VERSION_MINOR);
		return 0;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
	    !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "rdmx: unknown command '%s' (try rdmx --help)\n",
		argv[1]);
	return 1;
}
