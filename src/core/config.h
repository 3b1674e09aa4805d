/* SPDX-License-Identifier: MIT */
/*
 * Configuration: one table of rows (key, default with units, bounds, doc,
 * field offset). The YAML key and the environment override come from the
 * same row: "conn.max_send_wr" <-> RDMX_CONN_MAX_SEND_WR. Values are read once,
 * at context create; getenv() appears nowhere else in the library.
 */
#ifndef RDMX_CONFIG_H
#define RDMX_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdmx.h"

#define RDMX_CONFIG_STR_MAX 256

struct rdmx_config {
	int log_level;
	char transport[16]; /* auto | tcp */
	char auth_key_file[RDMX_CONFIG_STR_MAX];
	char auth_allowed_peers[RDMX_CONFIG_STR_MAX];
	uint64_t handshake_timeout_ms;
	char source_addr[RDMX_CONFIG_STR_MAX];
	uint64_t conn_max_send_wr;
	uint64_t conn_max_recv_wr;
	uint64_t conn_max_sge;
	uint64_t conn_max_peer_requests;
	uint64_t conn_max_access_errors;
	uint64_t listen_max_pending;
	uint64_t listen_max_pending_per_addr;
	uint64_t tcp_send_buffer;
	uint64_t tcp_recv_buffer;
	uint64_t tcp_user_timeout_ms;
	uint64_t conn_stall_timeout_ms;
	uint64_t shm_ring_size;
	char verbs_device[RDMX_CONFIG_STR_MAX];
	uint64_t verbs_port;
	uint64_t verbs_max_inline_data;
	int verbs_gid_index; /* -1: auto */
	char verbs_mtu[8]; /* auto | 256 .. 4096 */
	uint64_t verbs_request_timeout_ms;
	uint64_t shm_single_copy_min;
	bool progress_thread;
	bool progress_use_event_channel;
	bool conn_use_srq;
	bool metrics_latency;
	uint64_t progress_wait_spin_us;
	uint64_t progress_idle_after_us;
	int progress_cpu; /* -1: auto */
	/* Read by `rdmx demo lambda`'s server, not by the library: kept here
	 * so one file and one RDMX_* convention configure everything. */
	char registry_url[RDMX_CONFIG_STR_MAX];
	char lambda_native_dir[RDMX_CONFIG_STR_MAX];
	uint64_t lambda_instructions;
	uint64_t lambda_memory;
	uint64_t lambda_time_limit_ms;
};

enum rdmx_config_source {
	RDMX_CONFIG_DEFAULT,
	RDMX_CONFIG_FILE,
	RDMX_CONFIG_ENV,
};

/*
 * rdmx_config_load - defaults, then @file (or $RDMX_CONFIG when @file is
 * NULL), then RDMX_* variables. @sources_p, if not NULL, receives one entry
 * per row (rdmx_config_rows() of them). RDMX_ERR_CONFIG names the culprit.
 */
rdmx_status rdmx_config_load(const char *file, struct rdmx_config *cfg,
			     enum rdmx_config_source *sources_p);

/* For `rdmx info --config`: row count, and one row as text. */
int rdmx_config_rows(void);
/* The value of @key as text (rdmx_ctx_config). */
rdmx_status rdmx_config_get(const struct rdmx_config *cfg, const char *key,
			    char *buf, size_t len);
void rdmx_config_describe(const struct rdmx_config *cfg, int row,
			  const char **key_p, char *value, size_t value_len,
			  const char **dfl_p, const char **doc_p, char *env,
			  size_t env_len);

/* Parse a size with an optional k/m/g suffix ("4k"), or a time with a
 * us/ms/s suffix into the unit of @unit_us. Exposed for the tests. */
rdmx_status rdmx_config_parse_size(const char *s, uint64_t *out_p);
rdmx_status rdmx_config_parse_time(const char *s, uint64_t unit_us,
				   uint64_t *out_p);

#endif
