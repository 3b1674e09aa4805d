/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "config.h"
#include "log.h"

enum rdmx_config_type {
	RDMX_CFG_UINT, /* plain count with optional k/m/g suffix */
	RDMX_CFG_TIME_MS,
	RDMX_CFG_TIME_US,
	RDMX_CFG_BOOL,
	RDMX_CFG_STRING,
	RDMX_CFG_ENUM, /* one of the '|'-separated words in choices */
	RDMX_CFG_LOGLEVEL,
	RDMX_CFG_INDEX, /* "auto" (stored as -1) or a number in bounds */
};

struct rdmx_config_row {
	const char *key;
	const char *dfl;
	enum rdmx_config_type type;
	uint64_t min, max;
	const char *choices;
	size_t offset;
	const char *doc;
};

#define RDMX_CFG_FIELD(f) offsetof(struct rdmx_config, f)

static const struct rdmx_config_row rdmx_config_keys[] = {
	{ "log.level", "warn", RDMX_CFG_LOGLEVEL, 0, 0, NULL,
	  RDMX_CFG_FIELD(log_level),
	  "Least severe log level printed: off, error, warn, info or debug." },
	{ "transport", "auto", RDMX_CFG_ENUM, 0, 0, "auto|verbs|shm|tcp",
	  RDMX_CFG_FIELD(transport),
	  "Transport to use; auto picks the best both sides can use." },
	{ "auth.key_file", "", RDMX_CFG_STRING, 0, 0, NULL,
	  RDMX_CFG_FIELD(auth_key_file),
	  "File holding the pre-shared key; empty means no authentication." },
	{ "auth.allowed_peers", "", RDMX_CFG_STRING, 0, 0, NULL,
	  RDMX_CFG_FIELD(auth_allowed_peers),
	  "Addresses or CIDR blocks, comma-separated, a listener accepts "
	  "peers from; others are closed before any other work. Empty: all." },
	{ "conn.handshake_timeout", "5s", RDMX_CFG_TIME_MS, 1, 3600000, NULL,
	  RDMX_CFG_FIELD(handshake_timeout_ms),
	  "Longest time a peer may take over the connection handshake." },
	{ "listen.max_pending", "128", RDMX_CFG_UINT, 1, 4096, NULL,
	  RDMX_CFG_FIELD(listen_max_pending),
	  "Handshakes a listener runs at once, each in its own thread; a "
	  "peer past it is closed at once." },
	{ "listen.max_pending_per_addr", "32", RDMX_CFG_UINT, 1, 4096, NULL,
	  RDMX_CFG_FIELD(listen_max_pending_per_addr),
	  "Of them, how many may come from one address." },
	{ "conn.source_addr", "", RDMX_CFG_STRING, 0, 0, NULL,
	  RDMX_CFG_FIELD(source_addr),
	  "Local address rdmx_connect connects from; empty: the kernel's "
	  "choice. It decides which RDMA device a connection can use." },
	{ "conn.max_send_wr", "1024", RDMX_CFG_UINT, 1, 65536, NULL,
	  RDMX_CFG_FIELD(conn_max_send_wr),
	  "Work requests a connection may have outstanding before posts "
	  "return RDMX_ERR_AGAIN (verbs: the send queue's depth)." },
	{ "conn.max_recv_wr", "1024", RDMX_CFG_UINT, 1, 65536, NULL,
	  RDMX_CFG_FIELD(conn_max_recv_wr),
	  "RECVs a connection may have posted at once (verbs: the receive "
	  "queue's depth)." },
	{ "conn.max_sge", "16", RDMX_CFG_UINT, 1, RDMX_MAX_SGE, NULL,
	  RDMX_CFG_FIELD(conn_max_sge),
	  "Scatter/gather entries one work request may carry (verbs: also "
	  "limited by the device)." },
	{ "conn.max_peer_requests", "1024", RDMX_CFG_UINT, 1, 65536, NULL,
	  RDMX_CFG_FIELD(conn_max_peer_requests),
	  "Software transports: requests a peer may have outstanding at "
	  "this side. The peer is told and waits; one that sends more is cut "
	  "off, so a flooding peer costs at most about 1 KiB per request." },
	{ "conn.max_access_errors", "4", RDMX_CFG_UINT, 0, 1000000, NULL,
	  RDMX_CFG_FIELD(conn_max_access_errors),
	  "Software transports: a peer whose one-sided requests were refused "
	  "this many times is cut off at the next refusal, so rkeys cannot "
	  "be probed; 0 ends the connection at the first, as a NIC does." },
	{ "conn.use_srq", "off", RDMX_CFG_BOOL, 0, 0, NULL,
	  RDMX_CFG_FIELD(conn_use_srq),
	  "rdmx bench and demo servers: take each client's RECVs from a "
	  "shared receive queue (rdmx_srq_create); in the library, a "
	  "connection uses one when rdmx_conn_attr names it." },
	{ "tcp.user_timeout", "2s", RDMX_CFG_TIME_MS, 100, 600000, NULL,
	  RDMX_CFG_FIELD(tcp_user_timeout_ms),
	  "A peer host silent this long with data or keepalives unanswered "
	  "is declared dead and its work flushed." },
	{ "conn.stall_timeout", "30s", RDMX_CFG_TIME_MS, 100, 3600000, NULL,
	  RDMX_CFG_FIELD(conn_stall_timeout_ms),
	  "tcp and shm: a peer whose host answers but that takes nothing "
	  "this side sends, or answers none of its requests, for this long "
	  "is given up; its work fails with RDMX_ERR_TIMEOUT." },
	{ "tcp.send_buffer", "0", RDMX_CFG_UINT, 0, 1 << 30, NULL,
	  RDMX_CFG_FIELD(tcp_send_buffer),
	  "SO_SNDBUF of a connection's socket; 0: the kernel's autotuning." },
	{ "tcp.recv_buffer", "0", RDMX_CFG_UINT, 0, 1 << 30, NULL,
	  RDMX_CFG_FIELD(tcp_recv_buffer),
	  "SO_RCVBUF of a connection's socket; 0: the kernel's autotuning." },
	{ "shm.ring_size", "512k", RDMX_CFG_UINT, 4096, 64 << 20, NULL,
	  RDMX_CFG_FIELD(shm_ring_size),
	  "Bytes of each shared-memory ring (a power of two; rounded up)." },
	{ "shm.single_copy_min", "32k", RDMX_CFG_UINT, 0, 1 << 30, NULL,
	  RDMX_CFG_FIELD(shm_single_copy_min),
	  "WRITE and READ payloads this large move in one copy between the "
	  "processes (process_vm_readv/writev); 0 turns it off." },
	{ "verbs.device", "", RDMX_CFG_STRING, 0, 0, NULL,
	  RDMX_CFG_FIELD(verbs_device),
	  "The one RDMA device to use (rdmx info lists them); empty: each "
	  "connection's, the device that owns its address." },
	{ "verbs.port", "1", RDMX_CFG_UINT, 1, 255, NULL,
	  RDMX_CFG_FIELD(verbs_port), "Port of the RDMA device." },
	{ "verbs.gid_index", "auto", RDMX_CFG_INDEX, 0, 65535, NULL,
	  RDMX_CFG_FIELD(verbs_gid_index),
	  "Connecting side: the GID to connect from (its IP is the source); "
	  "auto: the GID of the control connection's address." },
	{ "verbs.mtu", "auto", RDMX_CFG_ENUM, 0, 0,
	  "auto|256|512|1024|2048|4096", RDMX_CFG_FIELD(verbs_mtu),
	  "Largest path MTU a connection may use (InfiniBand and RoCE; both "
	  "sides take the smaller wish); auto: the route's." },
	{ "verbs.max_inline_data", "64", RDMX_CFG_UINT, 0, 4096, NULL,
	  RDMX_CFG_FIELD(verbs_max_inline_data),
	  "SEND and WRITE payloads this small travel inside the work request "
	  "(the device may grant less)." },
	{ "verbs.request_timeout", "30s", RDMX_CFG_TIME_MS, 100, 3600000, NULL,
	  RDMX_CFG_FIELD(verbs_request_timeout_ms),
	  "With work outstanding, a device that completes nothing for this "
	  "long fails the connection (RDMX_ERR_CONN_LOST): nothing hangs." },
	{ "progress.thread", "on", RDMX_CFG_BOOL, 0, 0, NULL,
	  RDMX_CFG_FIELD(progress_thread),
	  "Serve one-sided operations from a background thread; off means "
	  "only rdmx_poll and rdmx_cq_wait drive progress (over shm and tcp "
	  "a caller that spins on rdmx_poll is as fast either way)." },
	{ "progress.use_event_channel", "on", RDMX_CFG_BOOL, 0, 0, NULL,
	  RDMX_CFG_FIELD(progress_use_event_channel),
	  "on: rdmx_cq_wait sleeps on events after progress.wait_spin; off: "
	  "it polls until a completion or the timeout (a core for latency)." },
	{ "progress.wait_spin", "20us", RDMX_CFG_TIME_US, 0, 10000000, NULL,
	  RDMX_CFG_FIELD(progress_wait_spin_us),
	  "How long rdmx_cq_wait spins before it sleeps; waking a sleeping "
	  "thread costs tens of microseconds on VMs." },
	{ "progress.idle_after", "1ms", RDMX_CFG_TIME_US, 0, 1000000, NULL,
	  RDMX_CFG_FIELD(progress_idle_after_us),
	  "While a caller spins on rdmx_poll (or, over tcp, sleeps in "
	  "rdmx_cq_wait or polls from a loop on rdmx_cq_fd), the progress "
	  "thread stays out of its way until it has been quiet this long "
	  "(it looks every 50 ms); 0 never." },
	{ "progress.cpu", "auto", RDMX_CFG_INDEX, 0, 1023, NULL,
	  RDMX_CFG_FIELD(progress_cpu),
	  "CPU the progress threads run on; auto: wherever the scheduler "
	  "puts them. Pin it apart from the thread that polls." },
	{ "metrics.latency", "off", RDMX_CFG_BOOL, 0, 0, NULL,
	  RDMX_CFG_FIELD(metrics_latency),
	  "Keep per-operation latency histograms (rdmx_ctx_stats); costs a "
	  "clock read and a lock per request. --metrics turns it on." },
	{ "registry.url", "", RDMX_CFG_STRING, 0, 0, NULL,
	  RDMX_CFG_FIELD(registry_url),
	  "where names (\"@NAME\") are published and looked up: "
	  "etcd://HOST:PORT[,HOST:PORT...]/PREFIX, or dir:PATH; empty: a "
	  "directory per user on this host (rdmx_registry(7))" },
	{ "lambda.native_dir", "", RDMX_CFG_STRING, 0, 0, NULL,
	  RDMX_CFG_FIELD(lambda_native_dir),
	  "rdmx demo lambda server: the directory of shared libraries whose "
	  "rdmx_lambda_* functions clients may call; empty: none." },
	{ "lambda.instructions", "10000000", RDMX_CFG_UINT, 1000,
	  1000000000000ull, NULL, RDMX_CFG_FIELD(lambda_instructions),
	  "rdmx demo lambda server: Lua VM instructions one call may run." },
	{ "lambda.memory", "64m", RDMX_CFG_UINT, 65536, 1ull << 34, NULL,
	  RDMX_CFG_FIELD(lambda_memory),
	  "rdmx demo lambda server: bytes one call's Lua state may hold." },
	{ "lambda.time_limit", "1s", RDMX_CFG_TIME_MS, 1, 600000, NULL,
	  RDMX_CFG_FIELD(lambda_time_limit_ms),
	  "rdmx demo lambda server: wall clock one call may take; the "
	  "process running it is killed after." },
};

#define RDMX_CONFIG_NROWS                                                      \
	((int)(sizeof(rdmx_config_keys) / sizeof(rdmx_config_keys[0])))

/* Index i is log level i - 1: "off" prints nothing. */
static const char *const rdmx_log_level_names[] = { "off", "error", "warn",
						    "info", "debug" };

int rdmx_config_rows(void)
{
	return RDMX_CONFIG_NROWS;
}

static rdmx_status rdmx_config_parse_uint_suffix(const char *s,
						 const char *const *units,
						 const uint64_t *mult,
						 int nunits, uint64_t *out_p)
{
	char *end;
	unsigned long long v;
	uint64_t m = 1;
	int i;

	if (!isdigit((unsigned char)*s))
		return RDMX_ERR_INVALID;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return RDMX_ERR_INVALID;
	if (*end) {
		for (i = 0; i < nunits; i++)
			if (!strcasecmp(end, units[i]))
				break;
		if (i == nunits)
			return RDMX_ERR_INVALID;
		m = mult[i];
	}
	if (m && v > UINT64_MAX / m)
		return RDMX_ERR_INVALID;
	*out_p = v * m;
	return RDMX_OK;
}

rdmx_status rdmx_config_parse_size(const char *s, uint64_t *out_p)
{
	static const char *const units[] = { "k", "m", "g", "kb", "mb", "gb" };
	static const uint64_t mult[] = { 1ull << 10, 1ull << 20, 1ull << 30,
					 1ull << 10, 1ull << 20, 1ull << 30 };

	return rdmx_config_parse_uint_suffix(s, units, mult, 6, out_p);
}

rdmx_status rdmx_config_parse_time(const char *s, uint64_t unit_us,
				   uint64_t *out_p)
{
	static const char *const units[] = { "us", "ms", "s" };
	static const uint64_t mult[] = { 1, 1000, 1000000 };
	uint64_t us;
	rdmx_status st;

	/* A bare number is in the row's own unit. */
	st = rdmx_config_parse_uint_suffix(s, units, mult, 3, &us);
	if (st)
		return st;
	for (const char *p = s; *p; p++)
		if (!isdigit((unsigned char)*p)) {
			*out_p = us / unit_us;
			return RDMX_OK;
		}
	*out_p = us;
	return RDMX_OK;
}

static rdmx_status rdmx_config_parse_bool(const char *s, bool *out_p)
{
	static const char *const yes[] = { "on", "yes", "true", "1" };
	static const char *const no[] = { "off", "no", "false", "0" };

	for (int i = 0; i < 4; i++) {
		if (!strcasecmp(s, yes[i])) {
			*out_p = true;
			return RDMX_OK;
		}
		if (!strcasecmp(s, no[i])) {
			*out_p = false;
			return RDMX_OK;
		}
	}
	return RDMX_ERR_INVALID;
}

static bool rdmx_config_choice_ok(const char *choices, const char *s)
{
	size_t n = strlen(s);
	const char *p = choices;

	while (p && *p) {
		const char *bar = strchr(p, '|');
		size_t len = bar ? (size_t)(bar - p) : strlen(p);

		if (len == n && !strncmp(p, s, n))
			return true;
		p = bar ? bar + 1 : NULL;
	}
	return false;
}

/* Parse @value into the row's field; on error leave the field untouched. */
static rdmx_status rdmx_config_set(const struct rdmx_config_row *row,
				   struct rdmx_config *cfg, const char *value)
{
	char *field = (char *)cfg + row->offset;
	uint64_t v = 0;
	rdmx_status st = RDMX_OK;
	bool b;

	switch (row->type) {
	case RDMX_CFG_UINT:
		st = rdmx_config_parse_size(value, &v);
		break;
	case RDMX_CFG_TIME_MS:
		st = rdmx_config_parse_time(value, 1000, &v);
		break;
	case RDMX_CFG_TIME_US:
		st = rdmx_config_parse_time(value, 1, &v);
		break;
	case RDMX_CFG_BOOL:
		st = rdmx_config_parse_bool(value, &b);
		if (!st)
			*(bool *)field = b;
		return st;
	case RDMX_CFG_STRING:
		if (strlen(value) >= RDMX_CONFIG_STR_MAX)
			return RDMX_ERR_INVALID;
		strcpy(field, value);
		return RDMX_OK;
	case RDMX_CFG_ENUM:
		if (!rdmx_config_choice_ok(row->choices, value) ||
		    strlen(value) >= sizeof(cfg->transport))
			return RDMX_ERR_INVALID;
		strcpy(field, value);
		return RDMX_OK;
	case RDMX_CFG_LOGLEVEL:
		for (int i = 0; i < 5; i++)
			if (!strcasecmp(value, rdmx_log_level_names[i])) {
				*(int *)field = i - 1;
				return RDMX_OK;
			}
		return RDMX_ERR_INVALID;
	case RDMX_CFG_INDEX:
		if (!strcasecmp(value, "auto")) {
			*(int *)field = -1;
			return RDMX_OK;
		}
		st = rdmx_config_parse_size(value, &v);
		if (!st && (v < row->min || v > row->max))
			st = RDMX_ERR_INVALID;
		if (!st)
			*(int *)field = (int)v;
		return st;
	}
	if (st)
		return st;
	if (v < row->min || v > row->max)
		return RDMX_ERR_INVALID;
	*(uint64_t *)field = v;
	return RDMX_OK;
}

static void rdmx_config_env_name(const char *key, char *env, size_t len)
{
	size_t i = 0;

	i = (size_t)snprintf(env, len, "RDMX_");
	for (; *key && i + 1 < len; key++)
		env[i++] = *key == '.' ? '_'
				       : (char)toupper((unsigned char)*key);
	env[i] = '\0';
}

static const struct rdmx_config_row *rdmx_config_find(const char *key)
{
	for (int i = 0; i < RDMX_CONFIG_NROWS; i++)
		if (!strcmp(rdmx_config_keys[i].key, key))
			return &rdmx_config_keys[i];
	return NULL;
}

static void rdmx_config_log_bad(const struct rdmx_config_row *row,
				const char *value, const char *where)
{
	char env[64];

	rdmx_config_env_name(row->key, env, sizeof(env));
	if (row->type == RDMX_CFG_INDEX)
		rdmx_error(
			"invalid value '%s' for %s (%s) in %s: expected auto "
			"or %" PRIu64 "..%" PRIu64,
			value, row->key, env, where, row->min, row->max);
	else if (row->type == RDMX_CFG_ENUM)
		rdmx_error("invalid value '%s' for %s (%s) in %s: expected %s",
			   value, row->key, env, where, row->choices);
	else if (row->max)
		rdmx_error("invalid value '%s' for %s (%s) in %s: expected "
			   "%" PRIu64 "..%" PRIu64 " (%s)",
			   value, row->key, env, where, row->min, row->max,
			   row->doc);
	else
		rdmx_error("invalid value '%s' for %s (%s) in %s: %s", value,
			   row->key, env, where, row->doc);
}

/*
 * Walk a YAML mapping, joining nested keys with '.', and apply each scalar.
 * Returns RDMX_OK at the end of the mapping.
 */
static rdmx_status rdmx_config_yaml_map(yaml_parser_t *p, const char *prefix,
					const char *file,
					struct rdmx_config *cfg,
					enum rdmx_config_source *src)
{
	yaml_event_t key, val;
	char path[128];
	rdmx_status st = RDMX_OK;

	for (;;) {
		if (!yaml_parser_parse(p, &key))
			goto err_parse;
		if (key.type == YAML_MAPPING_END_EVENT) {
			yaml_event_delete(&key);
			return RDMX_OK;
		}
		if (key.type != YAML_SCALAR_EVENT) {
			rdmx_error("%s: line %zu: expected a key", file,
				   key.start_mark.line + 1);
			yaml_event_delete(&key);
			return RDMX_ERR_CONFIG;
		}
		snprintf(path, sizeof(path), "%s%s%s", prefix,
			 *prefix ? "." : "", (char *)key.data.scalar.value);
		yaml_event_delete(&key);
		if (!yaml_parser_parse(p, &val))
			goto err_parse;
		if (val.type == YAML_MAPPING_START_EVENT) {
			yaml_event_delete(&val);
			st = rdmx_config_yaml_map(p, path, file, cfg, src);
		} else if (val.type == YAML_SCALAR_EVENT) {
			const struct rdmx_config_row *row =
				rdmx_config_find(path);
			const char *v = (char *)val.data.scalar.value;

			if (!row) {
				rdmx_error("%s: line %zu: unknown key '%s' "
					   "(rdmx info --config lists them)",
					   file, val.start_mark.line + 1, path);
				st = RDMX_ERR_CONFIG;
			} else if (rdmx_config_set(row, cfg, v)) {
				rdmx_config_log_bad(row, v, file);
				st = RDMX_ERR_CONFIG;
			} else if (src) {
				src[row - rdmx_config_keys] = RDMX_CONFIG_FILE;
			}
			yaml_event_delete(&val);
		} else {
			rdmx_error("%s: line %zu: '%s' must be a value or a "
				   "mapping",
				   file, val.start_mark.line + 1, path);
			yaml_event_delete(&val);
			st = RDMX_ERR_CONFIG;
		}
		if (st)
			return st;
	}

err_parse:
	rdmx_error("%s: line %zu: %s", file, p->problem_mark.line + 1,
		   p->problem ? p->problem : "YAML syntax error");
	return RDMX_ERR_CONFIG;
}

static rdmx_status rdmx_config_load_file(const char *file,
					 struct rdmx_config *cfg,
					 enum rdmx_config_source *src)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	rdmx_status st = RDMX_OK;
	bool done = false;
	FILE *f;

	f = fopen(file, "r");
	if (!f) {
		rdmx_error("cannot open config file %s: %m", file);
		return RDMX_ERR_CONFIG;
	}
	yaml_parser_initialize(&parser);
	yaml_parser_set_input_file(&parser, f);
	while (!done && !st) {
		if (!yaml_parser_parse(&parser, &ev)) {
			rdmx_error("%s: line %zu: %s", file,
				   parser.problem_mark.line + 1,
				   parser.problem ? parser.problem
						  : "YAML syntax error");
			st = RDMX_ERR_CONFIG;
			break;
		}
		switch (ev.type) {
		case YAML_MAPPING_START_EVENT:
			st = rdmx_config_yaml_map(&parser, "", file, cfg, src);
			break;
		case YAML_SCALAR_EVENT:
		case YAML_SEQUENCE_START_EVENT:
			rdmx_error("%s: the top level must be a mapping of "
				   "keys",
				   file);
			st = RDMX_ERR_CONFIG;
			break;
		case YAML_STREAM_END_EVENT:
			done = true;
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&parser);
	fclose(f);
	return st;
}

rdmx_status rdmx_config_load(const char *file, struct rdmx_config *cfg,
			     enum rdmx_config_source *src)
{
	char env[64];
	rdmx_status st;
	int i;

	memset(cfg, 0, sizeof(*cfg));
	for (i = 0; i < RDMX_CONFIG_NROWS; i++) {
		/* Defaults are ours: a failure here is a bug in the table. */
		if (rdmx_config_set(&rdmx_config_keys[i], cfg,
				    rdmx_config_keys[i].dfl))
			return RDMX_ERR_CONFIG;
		if (src)
			src[i] = RDMX_CONFIG_DEFAULT;
	}
	if (!file)
		file = getenv("RDMX_CONFIG");
	if (file && *file) {
		st = rdmx_config_load_file(file, cfg, src);
		if (st)
			return st;
	}
	for (i = 0; i < RDMX_CONFIG_NROWS; i++) {
		const struct rdmx_config_row *row = &rdmx_config_keys[i];
		const char *v;

		rdmx_config_env_name(row->key, env, sizeof(env));
		v = getenv(env);
		if (!v)
			continue;
		if (rdmx_config_set(row, cfg, v)) {
			rdmx_config_log_bad(row, v, "the environment");
			return RDMX_ERR_CONFIG;
		}
		if (src)
			src[i] = RDMX_CONFIG_ENV;
	}
	return RDMX_OK;
}

void rdmx_config_describe(const struct rdmx_config *cfg, int i,
			  const char **key_p, char *value, size_t value_len,
			  const char **dfl_p, const char **doc_p, char *env,
			  size_t env_len)
{
	const struct rdmx_config_row *row = &rdmx_config_keys[i];
	const char *field = (const char *)cfg + row->offset;

	*key_p = row->key;
	*dfl_p = row->dfl;
	*doc_p = row->doc;
	rdmx_config_env_name(row->key, env, env_len);
	switch (row->type) {
	case RDMX_CFG_UINT:
		snprintf(value, value_len, "%" PRIu64,
			 *(const uint64_t *)field);
		break;
	case RDMX_CFG_TIME_MS:
		snprintf(value, value_len, "%" PRIu64 "ms",
			 *(const uint64_t *)field);
		break;
	case RDMX_CFG_TIME_US:
		snprintf(value, value_len, "%" PRIu64 "us",
			 *(const uint64_t *)field);
		break;
	case RDMX_CFG_BOOL:
		snprintf(value, value_len, "%s",
			 *(const bool *)field ? "on" : "off");
		break;
	case RDMX_CFG_STRING:
	case RDMX_CFG_ENUM:
		snprintf(value, value_len, "%s", field);
		break;
	case RDMX_CFG_LOGLEVEL:
		snprintf(value, value_len, "%s",
			 rdmx_log_level_names[*(const int *)field + 1]);
		break;
	case RDMX_CFG_INDEX:
		if (*(const int *)field < 0)
			snprintf(value, value_len, "auto");
		else
			snprintf(value, value_len, "%d", *(const int *)field);
		break;
	}
}

rdmx_status rdmx_config_get(const struct rdmx_config *cfg, const char *key,
			    char *buf, size_t len)
{
	const struct rdmx_config_row *row = rdmx_config_find(key);
	const char *k, *dfl, *doc;
	char env[128], val[RDMX_CONFIG_STR_MAX + 32];

	if (!row) {
		rdmx_error("config: no key %s (rdmx info lists them)", key);
		return RDMX_ERR_NOT_FOUND;
	}
	rdmx_config_describe(cfg, (int)(row - rdmx_config_keys), &k, val,
			     sizeof(val), &dfl, &doc, env, sizeof(env));
	if (strlen(val) >= len) {
		rdmx_error("config: %s is %zu bytes, more than the %zu given",
			   key, strlen(val), len);
		return RDMX_ERR_INVALID;
	}
	memcpy(buf, val, strlen(val) + 1);
	return RDMX_OK;
}

rdmx_status rdmx_config_table(const char *file, rdmx_config_fn fn, void *arg)
{
	static const char *const sources[] = { "default", "file", "env" };
	enum rdmx_config_source src[RDMX_CONFIG_NROWS];
	struct rdmx_config cfg;
	rdmx_status st;

	if (!fn)
		return rdmx_invalid("rdmx_config_table", "NULL function");
	st = rdmx_config_load(file, &cfg, src);
	if (st)
		return st;
	for (int i = 0; i < rdmx_config_rows(); i++) {
		char val[RDMX_CONFIG_STR_MAX], env[64];
		struct rdmx_config_key k = { .source = sources[src[i]],
					     .value = val,
					     .env = env };

		rdmx_config_describe(&cfg, i, &k.key, val, sizeof(val), &k.dflt,
				     &k.doc, env, sizeof(env));
		fn(arg, &k);
	}
	return RDMX_OK;
}
