/* SPDX-License-Identifier: MIT */
/*
 * Shared setup for the conformance suite: connected pairs, buffers,
 * completion waits and child processes. Every suite file runs unchanged
 * over each transport; CTest picks the transport with RDMX_TRANSPORT.
 */
#ifndef RDMX_TEST_HARNESS_H
#define RDMX_TEST_HARNESS_H

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <cmocka.h>

#include "rdmx.h"

/*
 * Time bounds scale with RDMX_TEST_TIME_SCALE (default 1): inside an
 * emulated guest, process teardown and connection setup take the
 * emulator's time, and the bounds are about rdmx, not about qemu.
 */
double time_scale(void);

/*
 * Built with ASan or TSan: their shadow memory, and ASan's quarantine of
 * freed blocks, make resident-memory bounds meaningless.
 */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HARNESS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HARNESS_SANITIZED 1
#endif
#endif
/* Seconds on the monotonic clock. */
double now_s(void);
#define T_TIMEOUT_MS ((int)(10000 * time_scale()))
/* The bound on a flush after a peer's death: 2 s, scaled. */
#define T_FLUSH_S (2.0 * time_scale())

/* One side: a context with a cq. */
struct side {
	struct rdmx_ctx *ctx;
	struct rdmx_cq *cq;
};

/* Two connected sides in this process (server = target, client = initiator). */
struct pair {
	struct side s, c;
	struct rdmx_listener *lst;
	struct rdmx_conn *sconn, *cconn;
};

/* A registered buffer. */
struct buf {
	uint8_t *p;
	size_t len;
	struct rdmx_mr *mr;
	struct rdmx_ctx *mem; /* from rdmx_mem_alloc of this context */
};

/* Buffers come from rdmx_mem_alloc (RDMX_TEST_MEM=mapped), else malloc. */
bool suite_mem_mapped(void);
/* A buffer from rdmx_mem_alloc (@mapped) or malloc, whatever the suite's. */
void buf_alloc_from(struct side *side, struct buf *b, size_t len,
		    unsigned access, bool mapped);

void side_open(struct side *side);
void side_close(struct side *side);
/* Listen on 127.0.0.1, port 0; returns the port. */
int side_listen(struct side *side, struct rdmx_listener **lst_p);
struct rdmx_conn *side_connect(struct side *side, int port);

/*
 * A pair, its client across a link when RDMX_TEST_PEER_ADDR names this
 * host's other end of one (and RDMX_TEST_PEER_DEVICE its verbs device).
 */
void pair_open(struct pair *p);
/* The same with the environment variable @var set to @value while the
 * contexts read their configuration (RDMX_* overrides), then as it was. */
void pair_open_with(struct pair *p, const char *var, const char *value);
/* A side so; with @var NULL, as side_open. */
void side_open_with(struct side *side, const char *var, const char *value);
void pair_close(struct pair *p);

void buf_alloc(struct side *side, struct buf *b, size_t len, unsigned access);
void buf_free(struct buf *b);
void buf_fill(struct buf *b, uint8_t seed);
/* Assert @len bytes at @p follow the pattern of seed, starting at @off. */
void assert_pattern(const uint8_t *p, size_t len, uint8_t seed, size_t off);

struct rdmx_sge sge_of(struct buf *b, size_t off, size_t len);

/* Wait for one completion (fails the test after T_TIMEOUT_MS). */
struct rdmx_completion wait_wc(struct rdmx_cq *cq);
/* Wait for one completion and check its status and opcode (a refusal
 * may be the end of the connection on a lossy link: suite_lossy). */
struct rdmx_completion expect_wc(struct rdmx_cq *cq, rdmx_status st,
				 enum rdmx_opcode op);
/*
 * The next completion of @cq, which must succeed and be of @op, polled
 * without sleeping while @other's context is driven too: without progress
 * threads nobody else serves it. @other_idle: @other must give no
 * completion meanwhile; else what it holds stays there for later.
 */
void spin_wc(struct rdmx_cq *cq, struct rdmx_cq *other, enum rdmx_opcode op,
	     bool other_idle);

/*
 * rdmx_accept on @lst in a thread of its own (attr: @attr when its cq is
 * set, else @s's cq only), for tests that drive the client side by hand.
 * @timeout 0: T_TIMEOUT_MS. acc_join waits for the accept's end; acc_stop,
 * for a client that was refused or gave up, ends it within 0.1 s (a
 * refused peer never becomes a connection to take, and the accept would
 * wait out its timeout: seconds each under the guest's time scale).
 */
struct acc {
	struct side *s;
	struct rdmx_listener *lst;
	struct rdmx_conn_attr attr;
	int timeout;
	rdmx_status st;
	struct rdmx_conn *conn;
	pthread_t thread;
	int stop;
};
void acc_start(struct acc *a);
void acc_join(struct acc *a);
void acc_stop(struct acc *a);
/* One more connection in this process: @c connects to @lst, which @s
 * accepts (with @s's cq) in a thread of its own. */
void side_pair_connect(struct side *s, struct rdmx_listener *lst,
		       struct side *c, struct rdmx_conn **sconn_p,
		       struct rdmx_conn **cconn_p);

/* Exchange a registration's descriptor over SEND/RECV (server -> client). */
struct rdmx_remote share_remote(struct pair *p, struct buf *b);

/*
 * Child processes start from a fresh image (fork, then exec of this test):
 * a process that has used RDMA verbs cannot hand them to a fork child.
 * A test file lists its children and calls harness_children() first thing
 * in main(); spawn() runs one by name with two integers.
 */
struct child {
	const char *name;
	int (*fn)(int port, int flag);
};

void harness_children(int argc, char **argv, const struct child *table);
/*
 * fork(), from the test's main thread, of a child that dies with the test
 * process (killed by ctest at its timeout too). spawn and spawn_fork
 * make theirs with it.
 */
pid_t harness_fork(void);
pid_t spawn(const char *name, int port, int flag);
/* fork only, for children that need the parent's memory (namespaces). */
pid_t spawn_fork(int (*fn)(void *), void *arg);
/* Wait for @pid; assert it exited 0. */
void reap_ok(pid_t pid);

/*
 * A port on suite_addr() that was free a moment ago (bound, read, closed),
 * for a server in a child process that the test must reach; never one
 * this process was given before.
 */
int harness_free_port(void);

/*
 * What this process writes to stderr between log_catch_begin and
 * log_catch_end, in @log (@size bytes at most, NUL-terminated); the log
 * goes to the real stderr too once caught, so a failure still shows it.
 */
struct log_catch {
	FILE *f;
	int saved;
};
void log_catch_begin(struct log_catch *lc);
void log_catch_end(struct log_catch *lc, char *log, size_t size);
/* How many times @what is in @log. */
int log_count(const char *log, const char *what);

/* This process's open descriptors and resident bytes, from /proc. */
void harness_usage(long *fds, long *rss);
/* Write system calls of this process so far (/proc/self/io syscw), or -1.
 */
long harness_syscw(void);
/*
 * The mappings of this process whose line in /proc/self/smaps names
 * @name: the kB of each, in @size, and the kB resident, in @rss (at most
 * @max); returns how many.
 */
int harness_maps(const char *name, long *size, long *rss, int max);

/* The transport the suite runs over ("tcp" unless RDMX_TRANSPORT says). */
const char *suite_transport(void);
/* Does an error completion end this connection (RDMX_CONN_ERRORS_CLOSE)? */
bool errors_close(const struct rdmx_conn *conn);
/* rdmx_conn_info(conn).flags has all of @flags. */
bool conn_has(const struct rdmx_conn *conn, unsigned flags);
/* The connection's transport as an index of rdmx_stats' per-transport
 * arrays (rdmx_transport_name). */
int transport_index(const struct rdmx_conn *conn);
/*
 * The link drops packets (RDMX_TEST_LOSSY, tests/vm/suite.sh netem): a
 * NIC whose refusal (a NAK) is lost retries a request the peer's QP, in
 * error since it refused, no longer answers.
 */
bool suite_lossy(void);
/*
 * @st is a READ's refusal: RDMX_ERR_REMOTE_ACCESS, or, where completion is
 * local (iWARP), possibly the end of the connection the Terminate brings;
 * over verbs on a lossy link, possibly the end of the connection.
 */
void assert_refused(const struct rdmx_conn *conn, rdmx_status st);
/*
 * Does a refused WRITE on @conn complete with its refusal? Not where it
 * completes once sent (RDMX_CONN_COMPLETES_LOCALLY, iWARP): the Terminate
 * that follows ends the connection, which a later request finds over only
 * once the provider notices (a minute on siw). There it says so (a
 * message) and returns false: check the target's memory instead.
 */
bool write_refusal_reported(const struct rdmx_conn *conn);

/* The address to listen and connect on (RDMX_TEST_ADDR, else 127.0.0.1):
 * rdma_cm cannot use loopback, so the verbs suite names a device's. */
const char *suite_addr(void);

/* Print a skip reason the way the suite reports it and skip. */
#define suite_skip(...)                                                        \
	do {                                                                   \
		print_message("skip: " __VA_ARGS__);                           \
		print_message("\n");                                           \
		skip();                                                        \
	} while (0)

#endif
