/* SPDX-License-Identifier: MIT */
/*
 * lib/lambda - run a function a remote client shipped, safely.
 *
 * Two kinds of function:
 *   - Lua 5.4 source, in a sandbox: only the base (without load, loadfile,
 *     dofile, print), string, table, math, utf8 and coroutine libraries;
 *     text chunks only (never bytecode); an instruction budget, a memory
 *     cap and a wall-clock limit that no pcall can catch.
 *   - native C functions, found only in the shared libraries of one
 *     directory the operator names (the allowlist); the client sends a
 *     name, never code. See rdmx_lambda.h for how to write one.
 * Every call runs in a process of its own (fork, then exec of the same
 * program, which hands it to lambda_child_main), so a function that
 * crashes, or spins inside one C call where no hook can stop it, is killed
 * at the wall-clock limit and the server goes on.
 */
#ifndef RDMX_LIB_LAMBDA_H
#define RDMX_LIB_LAMBDA_H

#include <stddef.h>
#include <stdint.h>

struct lambda_limits {
	uint64_t instructions; /* Lua VM instructions per call */
	uint64_t memory; /* bytes the Lua state may hold */
	uint64_t time_ms; /* wall clock per call, fork and exec included */
};

enum lambda_status {
	LAMBDA_OK,
	LAMBDA_ERROR, /* the function failed: syntax, runtime, native */
	LAMBDA_INSTRUCTIONS, /* instruction budget exceeded */
	LAMBDA_MEMORY, /* memory cap exceeded */
	LAMBDA_TIME, /* wall-clock limit exceeded */
	LAMBDA_TOO_LARGE, /* the result does not fit the caller's buffer */
	LAMBDA_NO_FUNCTION, /* no such native function */
	LAMBDA_CRASHED, /* the child died some other way */
};

enum lambda_kind { LAMBDA_LUA = 1, LAMBDA_NATIVE = 2 };

struct lambda_call {
	enum lambda_kind kind;
	const char *code; /* Lua source, or the native function's name */
	size_t code_len;
	const void *input;
	size_t input_len;
	void *out; /* the result goes here */
	size_t out_max;
};

/* The shared libraries of one allowlisted directory, loaded at start. */
struct lambda_natives;

/*
 * lambda_natives_open - dlopen every *.so in @dir. A directory or library
 * that others may write to is refused: it would be no allowlist. Returns 0,
 * or -1 with the reason in @why.
 */
int lambda_natives_open(const char *dir, struct lambda_natives **nat_p,
			char *why, size_t why_len);
void lambda_natives_close(struct lambda_natives *nat);
/* How many libraries were loaded. */
size_t lambda_natives_count(const struct lambda_natives *nat);

/*
 * lambda_run - run @call in a child process within @lim. On LAMBDA_OK the
 * result is in call->out and *out_len_p; otherwise @why says what happened
 * in one line. @nat may be NULL (no native functions).
 */
enum lambda_status lambda_run(const struct lambda_limits *lim,
			      const struct lambda_natives *nat,
			      const struct lambda_call *call, size_t *out_len_p,
			      char *why, size_t why_len);

const char *lambda_status_str(enum lambda_status st);

/*
 * A program that calls lambda_run must, first thing in main, hand a run
 * with the one argument LAMBDA_CHILD_ARG to lambda_child_main (the call's
 * process: it never returns).
 */
#define LAMBDA_CHILD_ARG "__rdmx-lambda-call"
_Noreturn int lambda_child_main(void);

#endif
