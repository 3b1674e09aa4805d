/* SPDX-License-Identifier: MIT */
/* The small harness every rdmx subcommand shares. */
#ifndef RDMX_CLI_H
#define RDMX_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rdmx.h"

/* Set by SIGINT / SIGTERM once cli_catch_signals() ran. */
extern volatile sig_atomic_t cli_stop;
void cli_catch_signals(void);

/* "rdmx demo: <message>" on stderr; returns 1 for `return cli_fail(...)`. */
int cli_fail(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Parse "4096", "4k", "1m"; false (and says why) when malformed. */
bool cli_size(const char *cmd, const char *opt, const char *s, uint64_t *out);

/*
 * The address convention of rdmx demo and rdmx bench: no argument, ":PORT"
 * or "PORT" serves; "HOST" or "HOST:PORT" connects.
 */
bool cli_is_server(const char *arg);

/* True when @addr (or NULL) is a well-formed address; else logs why. */
bool cli_addr_ok(const char *addr);

double cli_now_us(void);

/* Sort @v and return the @q quantile (0..1). */
double cli_quantile(double *v, size_t n, double q);

/* Spin on rdmx_poll until one completion arrives or @timeout_ms passes. */
rdmx_status cli_wait(struct rdmx_cq *cq, struct rdmx_completion *wc,
		     int timeout_ms);

/* Subcommands. */
int cli_demo(int argc, char **argv);
int cli_info(int argc, char **argv);

#endif
