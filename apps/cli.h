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

/*
 * --transport T: auto, verbs, shm or tcp, set as RDMX_TRANSPORT (which it
 * overrides). False (and says why) for anything else.
 */
bool cli_transport_option(const char *cmd, const char *t);

/* True when @addr (or NULL) is a well-formed address; else logs why. */
bool cli_addr_ok(const char *addr);

/*
 * After getopt: take the optional [HOST][:PORT] argument into *addr_p and
 * refuse anything after it. Returns 0, or 1 when the user was told why.
 */
int cli_take_addr(const char *cmd, int argc, char **argv, const char **addr_p);

double cli_now_us(void);

/*
 * A clock for measured intervals, as perftest and ucx_perftest read theirs:
 * the CPU's time-stamp counter where it is invariant (x86 with constant_tsc
 * and nonstop_tsc: ~8 ns a read here, where clock_gettime takes ~17 ns, a
 * tenth of a mapped 4 KiB READ), else CLOCK_MONOTONIC. cli_ticks_init
 * calibrates the counter against CLOCK_MONOTONIC (~2 ms, once);
 * cli_ticks_us turns a difference of two cli_ticks into microseconds.
 */
void cli_ticks_init(void);
uint64_t cli_ticks(void);
double cli_ticks_us(uint64_t ticks);
/*
 * The microseconds since *@mark, which moves to now: one read per sample,
 * and consecutive samples leave no gap between them. perftest and
 * ucx_perftest time each iteration so, from the end of the one before.
 */
double cli_lap_us(uint64_t *mark);

/* Sort @v and return the @q quantile (0..1). */
double cli_quantile(double *v, size_t n, double q);

/*
 * How cli_wait waits between empty polls: spin on rdmx_poll (the default,
 * as perftest), sleep in rdmx_cq_wait, or sleep in poll(2) on rdmx_cq_fd.
 */
enum cli_wait_how { CLI_WAIT_SPIN, CLI_WAIT_SLEEP, CLI_WAIT_FD };
extern enum cli_wait_how cli_wait_how;

/* Take one completion, waiting as cli_wait_how says, or time out. */
rdmx_status cli_wait(struct rdmx_cq *cq, struct rdmx_completion *wc,
		     int timeout_ms);
/* @n completions, in any order, each a success (else its status). */
rdmx_status cli_wait_ok(struct rdmx_cq *cq, int n, int timeout_ms);

/* ---- a session: context, cq, connection and 64-byte control messages ---- */

#define CLI_MSG 64
#define CLI_TIMEOUT_MS 10000

struct cli_session {
	struct rdmx_ctx *ctx;
	struct rdmx_cq *cq;
	struct rdmx_conn *conn;
	uint8_t out[CLI_MSG], in[CLI_MSG]; /* control messages */
	struct rdmx_mr *out_mr, *in_mr;
	/* A completion that came before the one awaited (cli_next). */
	struct rdmx_completion early;
	bool has_early;
	struct cli_metrics *metrics; /* with --metrics */
	bool use_srq; /* cli_serve: RECVs from a srq (conn.use_srq) */
	struct rdmx_srq *srq; /* the session's, while one is served */
};

rdmx_status cli_session_open(struct cli_session *s, const char *config);
/* Closes the connection too. */
void cli_session_close(struct cli_session *s);
/*
 * How long a command gives rdmx_connect, which bounds the whole setup with
 * it: twice conn.handshake_timeout (the handshake, then the transport's
 * setup), so the one setting stretches both in a slow place (an emulator).
 */
int cli_connect_timeout_ms(struct rdmx_ctx *ctx);
rdmx_status cli_connect(struct cli_session *s, const char *addr);
/*
 * A client's start: open @s with @config, connect to @addr and catch
 * SIGINT/SIGTERM. On failure it says why ("<cmd>: cannot connect to ...")
 * and returns 1 with @s closed.
 */
int cli_client_open(const char *cmd, struct cli_session *s, const char *config,
		    const char *addr);

/*
 * A registered data buffer, zeroed, 64-byte aligned, at least 8 bytes:
 * from rdmx_mem_alloc while cli_buf_mapped (a same-host peer then does
 * one-sided requests on it itself), else from the heap.
 */
struct cli_buf {
	uint8_t *p;
	size_t len;
	struct rdmx_mr *mr;
	struct rdmx_ctx *mem; /* rdmx_mem_alloc's context, or NULL */
};

extern bool cli_buf_mapped;

rdmx_status cli_buf_alloc(struct cli_session *s, struct cli_buf *b, size_t len,
			  unsigned access);
void cli_buf_free(struct cli_buf *b);
/* Post a RECV on the session's connection, or its srq when it has one. */
rdmx_status cli_post_recv(struct cli_session *s, const struct rdmx_sge *sg,
			  int num_sge, uint64_t wr_id);
/* Post a RECV for the next control message into s->in. */
rdmx_status cli_recv_ctl(struct cli_session *s);
/* SEND s->out (@len bytes) and wait for its completion. */
rdmx_status cli_send_ctl(struct cli_session *s, uint32_t len);
/*
 * Wait for a completion of @op. A NIC reports its send and receive queues
 * independently, so the peer's next message may complete before our own
 * SEND does: one successful completion of another opcode is kept for the
 * next call. An error status, or a second stray completion, fails.
 */
rdmx_status cli_expect(struct cli_session *s, enum rdmx_opcode op,
		       struct rdmx_completion *wc);
/* The next completion: the one cli_expect kept aside, else a new one. */
rdmx_status cli_next(struct cli_session *s, struct rdmx_completion *wc);

/*
 * Serve clients one at a time on @addr until SIGINT or SIGTERM (or after
 * one with @once), calling @fn for each, then print a one-line summary.
 * With s->use_srq, each client's connection takes its RECVs from a srq
 * made for it (cli_post_recv posts there). Returns the exit code.
 */
typedef rdmx_status (*cli_serve_fn)(struct cli_session *s, void *arg);
int cli_serve(const char *cmd, struct cli_session *s, const char *addr,
	      bool once, cli_serve_fn fn, void *arg);

static inline void cli_put64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

static inline uint64_t cli_get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

/* ---- --metrics [ADDR:]PORT (metrics.c) ---------------------------------- */

/* cli_serve's session results, read by the metrics thread (atomics). */
struct cli_counts {
	unsigned ok, failed, stopped;
};
extern struct cli_counts cli_counts;

/*
 * The option: check @arg and remember it; the next cli_session_open
 * serves /metrics and /status for its context (and turns the config key
 * metrics.latency on, unless set). False (and says why) when malformed.
 */
bool cli_metrics_option(const char *cmd, const char *arg);
struct cli_metrics;
rdmx_status cli_metrics_start(struct rdmx_ctx *ctx, struct cli_metrics **m_p);
void cli_metrics_stop(struct cli_metrics *m);
/*
 * A subcommand's own counters, for every scrape: @fn writes them into
 * @buf as snprintf does (returns the length needed), as Prometheus text,
 * or with @json as members of /status's object ("\"kv\":{...}").
 */
typedef int (*cli_metrics_extra_fn)(void *arg, char *buf, size_t len,
				    bool json);
void cli_metrics_extra(struct cli_metrics *m, cli_metrics_extra_fn fn,
		       void *arg);

/* ---- the registry (registry.c) ------------------------------------------ */

/*
 * rdmx_ctx_create with @config (NULL: none) whose "@NAME" addresses resolve
 * through the configured registry, opened on first use.
 */
rdmx_status cli_ctx_create(const char *config, struct rdmx_ctx **ctx_p);
/* The CLI's registry (NULL when it cannot be opened: logged). */
struct rdmx_registry *cli_registry(struct rdmx_ctx *ctx);
/*
 * A server publishes itself as @name at @port of @listen (its ":PORT" or
 * "HOST:PORT"), with @payload; one line either way, never fatal.
 */
void cli_publish(struct rdmx_ctx *ctx, const char *cmd, const char *name,
		 const char *listen, int port, const void *payload, size_t len);
void cli_unpublish(const char *name);

/* Subcommands. */
int cli_registry_cmd(int argc, char **argv);
int cli_demo(int argc, char **argv);
/* rdmx demo lambda, in its own file. */
int cli_lambda(int argc, char **argv);
int cli_bench(int argc, char **argv);
/* rdmx page serve|bench (lib/page). */
int cli_page(int argc, char **argv);
/* rdmx kv serve|put|get|del (lib/kv). */
int cli_kv(int argc, char **argv);
/* rdmx kv bench, in its own file. */
int cli_kv_bench(int argc, char **argv);
/* rdmx info's RDMA part; returns the number of problems found. */
int cli_info_verbs(void);
int cli_info(int argc, char **argv);

#endif
