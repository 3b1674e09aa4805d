/* SPDX-License-Identifier: MIT */
/*
 * The registry in the CLI: every context the CLI makes resolves "@NAME"
 * through the configured registry (opened on first use), servers publish
 * themselves, and `rdmx registry ls|get|watch|publish` looks inside.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "rdmx_registry.h"

#define REGISTRY_TTL_MAX_MS 86400000u /* a day */

static pthread_mutex_t cli_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdmx_registry *cli_reg;

static void cli_registry_close(void)
{
	rdmx_registry_close(cli_reg);
	cli_reg = NULL;
}

struct rdmx_registry *cli_registry(struct rdmx_ctx *ctx)
{
	static bool tried; /* a bad registry.url is said once */

	pthread_mutex_lock(&cli_reg_lock);
	if (!tried && !rdmx_registry_open(ctx, NULL, &cli_reg))
		atexit(cli_registry_close);
	tried = true;
	pthread_mutex_unlock(&cli_reg_lock);
	return cli_reg;
}

rdmx_status cli_ctx_create(const char *config, struct rdmx_ctx **ctx_p)
{
	struct rdmx_ctx_attr attr = { .mask = config ? RDMX_CTX_ATTR_CONFIG_FILE
						     : 0,
				      .config_file = config };
	struct rdmx_registry *reg;
	rdmx_status st = rdmx_ctx_create(&attr, ctx_p);

	/* Opening asks nothing of the backend: every command can have it. */
	if (!st && (reg = cli_registry(*ctx_p)))
		rdmx_registry_attach(reg, *ctx_p);
	return st;
}

void cli_publish(struct rdmx_ctx *ctx, const char *cmd, const char *name,
		 const char *listen, int port, const void *payload, size_t len)
{
	struct rdmx_registry *reg = cli_registry(ctx);
	struct rdmx_registry_entry e = { 0 };
	char host[RDMX_REGISTRY_ADDR_MAX - 8] = "";
	const char *colon = listen ? strrchr(listen, ':') : NULL;
	rdmx_status st;

	if (!reg)
		return;
	/* The host it listens on; on every address, one a peer can use: the
	 * loopback for a registry on this host, else the host's name. */
	if (listen && colon && colon > listen && strncmp(listen, "0.0.0.0", 7))
		snprintf(host, sizeof(host), "%.*s", (int)(colon - listen),
			 listen);
	else if (!strncmp(rdmx_registry_url(reg), "dir:", 4))
		snprintf(host, sizeof(host), "127.0.0.1");
	else if (gethostname(host, sizeof(host)))
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = 0;
	snprintf(e.name, sizeof(e.name), "%s", name);
	snprintf(e.addr, sizeof(e.addr), "%s:%d", host, port);
	if (len > sizeof(e.payload))
		len = sizeof(e.payload);
	memcpy(e.payload, payload, len);
	e.payload_len = len;
	st = rdmx_registry_publish(reg, &e, 0);
	if (st == RDMX_ERR_UNREACHABLE)
		fprintf(stderr,
			"rdmx %s: warning: @%s is not in %s yet (no member "
			"answers); it will be once one does\n",
			cmd, name, rdmx_registry_url(reg));
	else if (st)
		fprintf(stderr,
			"rdmx %s: warning: cannot publish @%s in %s: %s; "
			"serving on without it\n",
			cmd, name, rdmx_registry_url(reg), rdmx_strerror(st));
	else
		printf("rdmx %s: published @%s as %s in %s\n", cmd, name,
		       e.addr, rdmx_registry_url(reg));
	fflush(stdout);
}

void cli_unpublish(const char *name)
{
	if (cli_reg)
		rdmx_registry_unpublish(cli_reg, name);
}

/* ---- rdmx registry ------------------------------------------------------ */

static void registry_usage(FILE *f)
{
	fprintf(f,
		"usage: rdmx registry ls [URL] [PREFIX]\n"
		"       rdmx registry get [URL] NAME\n"
		"       rdmx registry watch [URL] [PREFIX]\n"
		"       rdmx registry publish [URL] NAME HOST:PORT [--ttl MS]\n"
		"\n"
		"URL is etcd://HOST:PORT[,HOST:PORT...][/PREFIX] or dir:PATH;\n"
		"without one, the config key registry.url (RDMX_REGISTRY_URL),\n"
		"else dir:/tmp/rdmx-registry-UID. Options: --json, --config "
		"FILE.\n");
}

static void registry_print(const struct rdmx_registry_entry *e, bool json,
			   const char *event)
{
	char payload[2 * RDMX_REGISTRY_PAYLOAD_MAX + 1] = "";
	bool text = true;

	for (size_t i = 0; i < e->payload_len; i++)
		if (e->payload[i] < 0x20 || e->payload[i] > 0x7e ||
		    e->payload[i] == '"' || e->payload[i] == '\\')
			text = false;
	for (size_t i = 0; i < e->payload_len; i++)
		snprintf(payload + (text ? i : 2 * i), 3, text ? "%c" : "%02x",
			 e->payload[i]);
	if (event && !strcmp(event, "DELETE")) {
		if (json)
			printf("{\"event\":\"DELETE\",\"name\":\"%s\"}\n",
			       e->name);
		else
			printf("DELETE %s\n", e->name);
		return;
	}
	if (json)
		printf("{%s%s%s\"name\":\"%s\",\"addr\":\"%s\",\"pid\":%" PRId64
		       ",\"host\":\"%s\",\"payload_%s\":\"%s\"}\n",
		       event ? "\"event\":\"" : "", event ? event : "",
		       event ? "\"," : "", e->name, e->addr, e->pid, e->host,
		       text ? "text" : "hex", payload);
	else
		printf("%s%s%-24s %-24s pid %" PRId64 " on %s%s%s\n",
		       event ? event : "", event ? " " : "", e->name, e->addr,
		       e->pid, e->host, e->payload_len ? "  " : "", payload);
}

static bool registry_is_url(const char *s)
{
	return !strncmp(s, "etcd://", 7) || !strncmp(s, "dir:", 4);
}

/* The commands, and the arguments each takes after its URL. */
static const struct registry_form {
	const char *what, *args;
	int min, max;
} registry_forms[] = {
	{ "ls", "[PREFIX]", 0, 1 },
	{ "get", "NAME", 1, 1 },
	{ "watch", "[PREFIX]", 0, 1 },
	{ "publish", "NAME HOST:PORT", 2, 2 },
};

/* @n arguments for @what: 0 if they fit, else 1 and one line why. */
static int registry_args_ok(const char *what, int n, char **rest)
{
	for (size_t i = 0;
	     i < sizeof(registry_forms) / sizeof(registry_forms[0]); i++) {
		const struct registry_form *f = &registry_forms[i];

		if (strcmp(what, f->what))
			continue;
		if (n > f->max)
			return cli_fail("registry", "unexpected argument '%s'",
					rest[f->max]);
		if (n < f->min)
			return cli_fail("registry", "%s takes [URL] %s", what,
					f->args);
		return 0;
	}
	return cli_fail("registry",
			"unknown command '%s': ls, get, watch or publish",
			what);
}

int cli_registry_cmd(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "config", required_argument, NULL, 'c' },
		{ "ttl", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *url = NULL, *config = NULL, *what;
	struct rdmx_ctx *ctx = NULL;
	struct rdmx_registry *reg = NULL;
	bool json = false;
	unsigned ttl = 0;
	rdmx_status st = RDMX_OK;
	int c, rc = 1;

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		registry_usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 1 : 0;
	}
	what = argv[1];
	argc--;
	argv++;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'c':
			config = optarg;
			break;
		case 't': {
			char *end;
			unsigned long v;

			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (*optarg < '0' || *optarg > '9' || *end || errno ||
			    !v || v > REGISTRY_TTL_MAX_MS)
				return cli_fail("registry",
						"--ttl expects milliseconds, "
						"1..%u, not '%s'",
						REGISTRY_TTL_MAX_MS, optarg);
			ttl = (unsigned)v;
			break;
		}
		case 'h':
			registry_usage(stdout);
			return 0;
		default:
			return cli_fail("registry", "see rdmx registry --help");
		}
	}
	if (optind < argc && registry_is_url(argv[optind]))
		url = argv[optind++];
	if (registry_args_ok(what, argc - optind, argv + optind))
		return 1;
	/* Without a URL, the one every command uses (opened with the ctx);
	 * either way a bad one was named in the log, once. */
	st = cli_ctx_create(config, &ctx);
	if (st) {
		cli_fail("registry", "%s", rdmx_strerror(st));
		goto out;
	}
	if (url ? rdmx_registry_open(ctx, url, &reg)
		: !(reg = cli_registry(ctx)))
		goto out;
	if (!strcmp(what, "ls")) {
		struct rdmx_registry_entry *es;
		size_t n;

		st = rdmx_registry_list(reg, optind < argc ? argv[optind] : "",
					&es, &n);
		if (!st) {
			for (size_t i = 0; i < n; i++)
				registry_print(&es[i], json, NULL);
			free(es);
		}
	} else if (!strcmp(what, "get")) {
		struct rdmx_registry_entry e;

		st = rdmx_registry_lookup(reg, argv[optind], &e);
		if (!st)
			registry_print(&e, json, NULL);
		else if (st == RDMX_ERR_NOT_FOUND)
			cli_fail("registry", "no %s in the registry %s",
				 argv[optind], rdmx_registry_url(reg));
	} else if (!strcmp(what, "watch")) {
		struct rdmx_registry_watch *w;
		struct rdmx_registry_event ev;

		st = rdmx_registry_watch(reg, optind < argc ? argv[optind] : "",
					 &w);
		if (!st) {
			cli_catch_signals();
			printf("rdmx registry: watching %s\n",
			       rdmx_registry_url(reg));
			fflush(stdout);
			while (!cli_stop) {
				int got = rdmx_registry_watch_next(w, &ev, 200);

				if (got != 1)
					continue;
				registry_print(&ev.entry, json,
					       ev.type == RDMX_REGISTRY_PUT
						       ? "PUT"
						       : "DELETE");
				fflush(stdout);
			}
			rdmx_registry_watch_close(w);
		}
	} else { /* publish */
		struct rdmx_registry_entry e = { 0 };

		snprintf(e.name, sizeof(e.name), "%s", argv[optind]);
		snprintf(e.addr, sizeof(e.addr), "%s", argv[optind + 1]);
		st = rdmx_registry_publish(reg, &e, ttl);
		if (!st) {
			printf("rdmx registry: published %s as %s in %s until "
			       "SIGINT\n",
			       e.name, e.addr, rdmx_registry_url(reg));
			fflush(stdout);
			cli_catch_signals();
			while (!cli_stop)
				usleep(100000);
		}
	}
	/* The library said why, in one line. */
	rc = st ? 1 : 0;
out:
	if (url)
		rdmx_registry_close(reg);
	rdmx_ctx_destroy(ctx);
	return rc;
}
