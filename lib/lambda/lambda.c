/* SPDX-License-Identifier: MIT */
/*
 * lib/lambda - the sandbox. The parent starts one child per call (fork,
 * then exec of its own program: lambda_child_main) and waits on a pipe for
 * its one answer: a status, a length and the bytes (result or message).
 * Every limit ends the child from inside (the hook or the allocator writes
 * the answer and _exit()s), so no pcall in the lambda can catch it; the
 * parent kills a child that misses the wall clock anyway.
 *
 * Why exec: the server has other threads (rdmx's), and a fork copies the
 * locks they held at that instant. A child of an ASan build hung in
 * calloc (libseccomp's, under the sanitizer's allocator lock) about once
 * in 80 calls under load, and was killed at the wall clock. Between fork
 * and exec the child makes only async-signal-safe calls; the new image
 * has no lock held and none of the server's memory either.
 */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/close_range.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "lambda.h"
#include "rdmx_lambda.h"

#define LAMBDA_HOOK_EVERY 1000
#define LAMBDA_NAME_MAX 64
#define LAMBDA_MSG_MAX 512
/* Past the limit the child gets this long to notice by itself. */
#define LAMBDA_GRACE_MS 100

struct lambda_natives {
	char dir[256];
	void **libs;
	size_t n;
};

static uint64_t lambda_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

const char *lambda_status_str(enum lambda_status st)
{
	static const char *const names[] = {
		[LAMBDA_OK] = "ok",
		[LAMBDA_ERROR] = "error",
		[LAMBDA_INSTRUCTIONS] = "instruction budget exceeded",
		[LAMBDA_MEMORY] = "memory cap exceeded",
		[LAMBDA_TIME] = "wall-clock limit exceeded",
		[LAMBDA_TOO_LARGE] = "result too large",
		[LAMBDA_NO_FUNCTION] = "no such function",
		[LAMBDA_CRASHED] = "crashed",
	};

	return (unsigned)st < sizeof(names) / sizeof(names[0]) ? names[st]
							       : "unknown";
}

/* ---- the child ---------------------------------------------------------- */

struct lambda_child {
	int fd; /* the pipe to the parent */
	const struct lambda_limits *lim;
	uint64_t used, steps, deadline_ms;
};

static void lambda_write_all(int fd, const void *p, size_t len)
{
	const char *c = p;

	while (len) {
		ssize_t n = write(fd, c, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(1);
		c += n;
		len -= (size_t)n;
	}
}

/* The child's one answer; then it is gone. */
static _Noreturn void lambda_reply(int fd, enum lambda_status st, const void *p,
				   size_t len)
{
	uint32_t hdr[2] = { (uint32_t)st, (uint32_t)len };

	lambda_write_all(fd, hdr, sizeof(hdr));
	lambda_write_all(fd, p, len);
	_exit(0);
}

static _Noreturn __attribute__((format(printf, 3, 4))) void
lambda_replyf(int fd, enum lambda_status st, const char *fmt, ...)
{
	char msg[LAMBDA_MSG_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	lambda_reply(fd, st, msg,
		     n < 0		       ? 0
		     : (size_t)n < sizeof(msg) ? (size_t)n
					       : sizeof(msg) - 1);
}

/* Lua's allocator, with the cap: going over it ends the call. */
static void *lambda_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	struct lambda_child *c = ud;
	size_t old = ptr ? osize : 0;
	void *p;

	if (nsize == 0) {
		free(ptr);
		c->used -= old;
		return NULL;
	}
	if (nsize > old && c->used + (nsize - old) > c->lim->memory)
		lambda_replyf(c->fd, LAMBDA_MEMORY,
			      "memory cap of %" PRIu64 " bytes exceeded",
			      c->lim->memory);
	p = realloc(ptr, nsize);
	if (p)
		c->used = c->used - old + nsize;
	return p;
}

static void lambda_hook(lua_State *L, lua_Debug *ar)
{
	struct lambda_child *c;

	(void)ar;
	lua_getallocf(L, (void **)&c);
	c->steps += LAMBDA_HOOK_EVERY;
	if (c->steps > c->lim->instructions)
		lambda_replyf(c->fd, LAMBDA_INSTRUCTIONS,
			      "instruction budget of %" PRIu64 " exceeded",
			      c->lim->instructions);
	if (lambda_now_ms() > c->deadline_ms)
		lambda_replyf(c->fd, LAMBDA_TIME,
			      "wall-clock limit of %" PRIu64 " ms exceeded",
			      c->lim->time_ms);
}

/*
 * setmetatable without finalizers: the VM runs __gc with its hooks off, so
 * a finalizer would run outside the instruction budget. A metatable that
 * has __gc when it is set is refused; one given __gc later is never
 * marked for finalization (Lua 5.4), so that is all it takes.
 */
static int lambda_setmetatable(lua_State *L)
{
	if (lua_type(L, 2) == LUA_TTABLE &&
	    lua_getfield(L, 2, "__gc") != LUA_TNIL)
		return luaL_error(L, "__gc finalizers do not run in a lambda");
	lua_settop(L, 2);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, 2, 1);
	return 1;
}

/* Only what cannot reach outside the state: no io, os, package, debug. */
static void lambda_open_sandbox(lua_State *L)
{
	static const luaL_Reg libs[] = {
		{ LUA_GNAME, luaopen_base },
		{ LUA_TABLIBNAME, luaopen_table },
		{ LUA_STRLIBNAME, luaopen_string },
		{ LUA_MATHLIBNAME, luaopen_math },
		{ LUA_UTF8LIBNAME, luaopen_utf8 },
		{ LUA_COLIBNAME, luaopen_coroutine },
		{ NULL, NULL },
	};
	/* Base functions that load code or reach the server's stdout. */
	static const char *const removed[] = { "dofile", "loadfile", "load",
					       "print", NULL };

	for (const luaL_Reg *l = libs; l->name; l++) {
		luaL_requiref(L, l->name, l->func, 1);
		lua_pop(L, 1);
	}
	for (int i = 0; removed[i]; i++) {
		lua_pushnil(L);
		lua_setglobal(L, removed[i]);
	}
	/* Bytecode is never loaded; do not make it either. */
	lua_getglobal(L, LUA_STRLIBNAME);
	lua_pushnil(L);
	lua_setfield(L, -2, "dump");
	lua_pop(L, 1);
	lua_getglobal(L, "setmetatable");
	lua_pushcclosure(L, lambda_setmetatable, 1);
	lua_setglobal(L, "setmetatable");
}

/* ---- the child's confinement -------------------------------------------- */

/* The answer pipe's number in the child; 0-2 are /dev/null. The
 * request (struct lambda_req) comes on the next until it is read. */
#define LAMBDA_CHILD_FD 3
#define LAMBDA_REQ_FD (LAMBDA_CHILD_FD + 1)

static void lambda_limit(int what, rlim_t v)
{
	struct rlimit r = { v, v };

	setrlimit(what, &r);
}

/* The address space the child has now, from /proc/self/statm. */
static uint64_t lambda_vm_bytes(void)
{
	unsigned long long pages = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%llu", &pages) != 1)
			pages = 0;
		fclose(f);
	}
	return pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

/*
 * The syscalls a call may make: memory for the Lua state (no executable
 * mappings), the answer on its pipe, the clock, leaving. Anything else
 * kills the process (SIGSYS), which the parent reports.
 */
static int lambda_filter(void)
{
	static const int allowed[] = {
		SCMP_SYS(brk),
		SCMP_SYS(munmap),
		SCMP_SYS(mremap),
		SCMP_SYS(madvise),
		SCMP_SYS(exit),
		SCMP_SYS(exit_group),
		SCMP_SYS(rt_sigreturn),
		SCMP_SYS(rt_sigprocmask),
		SCMP_SYS(sigaltstack),
		SCMP_SYS(clock_gettime),
		SCMP_SYS(gettimeofday),
		SCMP_SYS(time),
		SCMP_SYS(getpid),
		SCMP_SYS(gettid),
		SCMP_SYS(futex),
		SCMP_SYS(sched_yield),
		SCMP_SYS(getrandom),
		SCMP_SYS(nanosleep),
		SCMP_SYS(clock_nanosleep),
	};
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_KILL_PROCESS);
	int rc = f ? 0 : -1;

	for (size_t i = 0; !rc && i < sizeof(allowed) / sizeof(allowed[0]); i++)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, allowed[i], 0);
	/* The answer, and stderr (/dev/null) for a sanitizer's report. */
	if (!rc)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(write), 1,
				      SCMP_A0(SCMP_CMP_EQ, LAMBDA_CHILD_FD));
	if (!rc)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(write), 1,
				      SCMP_A0(SCMP_CMP_EQ, 2));
	/* Memory, never executable. */
	if (!rc)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1,
				      SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC,
					      0));
	if (!rc)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(mprotect), 1,
				      SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC,
					      0));
	/* abort() signals itself, and only itself. */
	if (!rc)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
				      SCMP_A0(SCMP_CMP_EQ,
					      (scmp_datum_t)getpid()));
	if (!rc)
		rc = seccomp_load(f);
	if (f)
		seccomp_release(f);
	return rc;
}

/*
 * In the child, before any shipped code runs: nothing inherited but the
 * answer pipe (as LAMBDA_CHILD_FD) and /dev/null, no new privileges,
 * limits on address space, CPU time, files, processes and core dumps,
 * then the filter. A confinement that fails ends the call.
 */
static void lambda_confine(struct lambda_child *c)
{
	const struct lambda_limits *lim = c->lim;
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	uint64_t vm = lambda_vm_bytes();

	if (null < 0 || dup2(c->fd, LAMBDA_CHILD_FD) < 0)
		_exit(126);
	c->fd = LAMBDA_CHILD_FD;
	for (int i = 0; i < 3; i++)
		dup2(null, i);
	if (close_range(LAMBDA_CHILD_FD + 1, ~0u, 0))
		for (int i = LAMBDA_CHILD_FD + 1; i < 65536; i++)
			close(i);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		lambda_replyf(c->fd, LAMBDA_CRASHED, "no_new_privs: %s",
			      strerror(errno));
	/* What it has, the Lua cap, and room for the C library. */
	if (vm)
		lambda_limit(RLIMIT_AS, vm + lim->memory + (64u << 20));
	lambda_limit(RLIMIT_CPU, lim->time_ms / 1000 + 1);
	lambda_limit(RLIMIT_CORE, 0);
	lambda_limit(RLIMIT_NPROC, 0);
	lambda_limit(RLIMIT_NOFILE, LAMBDA_CHILD_FD + 1);
	lambda_limit(RLIMIT_FSIZE, 0);
	if (lambda_filter())
		lambda_replyf(c->fd, LAMBDA_CRASHED,
			      "cannot load the syscall filter");
}

static const char *lambda_lua_msg(lua_State *L)
{
	int t = lua_type(L, -1);

	if (t == LUA_TSTRING || t == LUA_TNUMBER)
		return lua_tostring(L, -1);
	return lua_pushfstring(L, "(error object is a %s value)",
			       lua_typename(L, t));
}

static _Noreturn void lambda_child_lua(struct lambda_child *c,
				       const struct lambda_call *call)
{
	lua_State *L = lua_newstate(lambda_alloc, c);
	const char *res;
	size_t len = 0;
	int t;

	if (!L)
		lambda_replyf(c->fd, LAMBDA_MEMORY,
			      "cannot create a Lua state");
	lambda_open_sandbox(L);
	lua_sethook(L, lambda_hook, LUA_MASKCOUNT, LAMBDA_HOOK_EVERY);
	/* "t": text only. Crafted bytecode can break the VM's invariants. */
	if (luaL_loadbufferx(L, call->code, call->code_len, "=lambda", "t"))
		lambda_replyf(c->fd, LAMBDA_ERROR, "%s", lambda_lua_msg(L));
	lua_pushlstring(L, call->input, call->input_len);
	if (lua_pcall(L, 1, 1, 0))
		lambda_replyf(c->fd, LAMBDA_ERROR, "%s", lambda_lua_msg(L));
	t = lua_type(L, -1);
	if (t != LUA_TNIL && t != LUA_TSTRING && t != LUA_TNUMBER)
		lambda_replyf(c->fd, LAMBDA_ERROR,
			      "the lambda returned a %s; return a string, a "
			      "number or nothing",
			      lua_typename(L, t));
	res = t == LUA_TNIL ? "" : lua_tolstring(L, -1, &len);
	if (len > call->out_max)
		lambda_replyf(c->fd, LAMBDA_TOO_LARGE,
			      "a result of %zu bytes does not fit the "
			      "client's %zu-byte buffer",
			      len, call->out_max);
	lambda_reply(c->fd, LAMBDA_OK, res, len);
}

/* The child has its own call->out to write into. */
static _Noreturn void lambda_child_native(struct lambda_child *c,
					  rdmx_lambda_fn *fn,
					  const struct lambda_call *call)
{
	char *out = call->out;
	size_t len = call->out_max;

	if (fn(call->input, call->input_len, out, &len)) {
		size_t room = call->out_max < LAMBDA_MSG_MAX ? call->out_max
							     : LAMBDA_MSG_MAX;

		lambda_replyf(c->fd, LAMBDA_ERROR, "%.*s",
			      (int)strnlen(out, room), out);
	}
	if (len > call->out_max)
		lambda_replyf(c->fd, LAMBDA_TOO_LARGE,
			      "the native function claims %zu bytes of a "
			      "%zu-byte buffer",
			      len, call->out_max);
	lambda_reply(c->fd, LAMBDA_OK, out, len);
}

/* ---- native functions --------------------------------------------------- */

/*
 * What the server loads must be as trusted as the server: owned by its
 * user or root, writable by no one else. @path is resolved first (every
 * symlink on the way), and @sb gets what it names. false, with @why.
 */
static bool lambda_trusted(const char *path, struct stat *sb, char *why,
			   size_t why_len)
{
	char real[PATH_MAX];

	if (!realpath(path, real) || stat(real, sb)) {
		snprintf(why, why_len, "%s: %s", path, strerror(errno));
		return false;
	}
	if (sb->st_uid != geteuid() && sb->st_uid != 0) {
		snprintf(why, why_len,
			 "%s%s%s is owned by uid %u; what the server loads "
			 "must be its own user's (%u) or root's",
			 path, strcmp(path, real) ? " -> " : "",
			 strcmp(path, real) ? real : "", (unsigned)sb->st_uid,
			 (unsigned)geteuid());
		return false;
	}
	if (sb->st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(why, why_len,
			 "%s%s%s is writable by others than its owner; an "
			 "allowlist must not be",
			 path, strcmp(path, real) ? " -> " : "",
			 strcmp(path, real) ? real : "");
		return false;
	}
	return true;
}

/* A library, resolved, and the directory it really lives in. */
static bool lambda_trusted_lib(const char *path, char *why, size_t why_len)
{
	char real[PATH_MAX], *slash;
	struct stat sb;

	if (!lambda_trusted(path, &sb, why, why_len))
		return false;
	if (!S_ISREG(sb.st_mode)) {
		snprintf(why, why_len, "%s is not a regular file", path);
		return false;
	}
	if (!realpath(path, real) || !(slash = strrchr(real, '/')))
		return false;
	*(slash == real ? slash + 1 : slash) = '\0';
	return lambda_trusted(real, &sb, why, why_len);
}

static int lambda_natives_load(struct lambda_natives *nat, DIR *d, char *why,
			       size_t why_len)
{
	struct dirent *e;

	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		char path[sizeof(nat->dir) + 256];
		struct stat sb;
		void *h, **libs;

		if (len < 4 || strcmp(e->d_name + len - 3, ".so"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", nat->dir, e->d_name);
		if (stat(path, &sb) || S_ISDIR(sb.st_mode))
			continue;
		if (!lambda_trusted_lib(path, why, why_len))
			return -1;
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			snprintf(why, why_len, "cannot load %s: %s", path,
				 dlerror());
			return -1;
		}
		libs = realloc(nat->libs, (nat->n + 1) * sizeof(*libs));
		if (!libs) {
			dlclose(h);
			snprintf(why, why_len, "out of memory");
			return -1;
		}
		nat->libs = libs;
		nat->libs[nat->n++] = h;
	}
	return 0;
}

int lambda_natives_open(const char *dir, struct lambda_natives **nat_p,
			char *why, size_t why_len)
{
	struct lambda_natives *nat;
	struct stat sb;
	DIR *d;
	int rc;

	*nat_p = NULL;
	if (strlen(dir) >= sizeof(nat->dir)) {
		snprintf(why, why_len, "native directory name too long");
		return -1;
	}
	if (!lambda_trusted(dir, &sb, why, why_len))
		return -1;
	if (!S_ISDIR(sb.st_mode)) {
		snprintf(why, why_len, "native directory %s: not a directory",
			 dir);
		return -1;
	}
	d = opendir(dir);
	nat = calloc(1, sizeof(*nat));
	if (!d || !nat) {
		snprintf(why, why_len, "cannot read %s: %s", dir,
			 strerror(errno));
		if (d)
			closedir(d);
		free(nat);
		return -1;
	}
	snprintf(nat->dir, sizeof(nat->dir), "%s", dir);
	rc = lambda_natives_load(nat, d, why, why_len);
	closedir(d);
	if (rc) {
		lambda_natives_close(nat);
		return -1;
	}
	*nat_p = nat;
	return 0;
}

void lambda_natives_close(struct lambda_natives *nat)
{
	if (!nat)
		return;
	for (size_t i = 0; i < nat->n; i++)
		dlclose(nat->libs[i]);
	free(nat->libs);
	free(nat);
}

size_t lambda_natives_count(const struct lambda_natives *nat)
{
	return nat ? nat->n : 0;
}

static rdmx_lambda_fn *lambda_native_find(const struct lambda_natives *nat,
					  const char *name, size_t len,
					  char *why, size_t why_len)
{
	char sym[sizeof(RDMX_LAMBDA_SYMBOL_PREFIX) + LAMBDA_NAME_MAX];

	if (!len || len > LAMBDA_NAME_MAX) {
		snprintf(why, why_len,
			 "a native function name has 1 to %d characters",
			 LAMBDA_NAME_MAX);
		return NULL;
	}
	for (size_t i = 0; i < len; i++)
		if (!isalnum((unsigned char)name[i]) && name[i] != '_') {
			snprintf(why, why_len,
				 "'%.*s' is not a function name (letters, "
				 "digits and _ only)",
				 (int)len, name);
			return NULL;
		}
	if (!nat || !nat->n) {
		snprintf(why, why_len,
			 "this server has no native functions (config key "
			 "lambda.native_dir)");
		return NULL;
	}
	snprintf(sym, sizeof(sym), RDMX_LAMBDA_SYMBOL_PREFIX "%.*s", (int)len,
		 name);
	for (size_t i = 0; i < nat->n; i++) {
		void *p = dlsym(nat->libs[i], sym);

		if (p)
			return (rdmx_lambda_fn *)p;
	}
	snprintf(why, why_len, "no native function '%.*s' in %s", (int)len,
		 name, nat->dir);
	return NULL;
}

/* ---- the call's process ------------------------------------------------- */

#define LAMBDA_REQ_MAGIC 0x726c6d31u /* "rlm1" */
#define LAMBDA_REQ_MAX (1ull << 32) /* code or input */

/* What the parent hands the call's process, then the code and the input. */
struct lambda_req {
	uint32_t magic, kind;
	uint64_t code_len, input_len, out_max, deadline_ms;
	struct lambda_limits lim;
	char dir[256]; /* the native functions' directory, or "" */
};

/* Read exactly @len bytes by @deadline_ms: 1 done, 0 EOF, -1 timeout. */
static int lambda_read(int fd, void *p, size_t len, uint64_t deadline_ms)
{
	char *c = p;

	while (len) {
		uint64_t now = lambda_now_ms();
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t n;
		int rc;

		if (now >= deadline_ms)
			return -1;
		rc = poll(&pfd, 1, (int)(deadline_ms - now));
		if (rc < 0 && errno != EINTR)
			return 0;
		if (rc <= 0)
			continue;
		n = read(fd, c, len);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			return 0;
		c += n;
		len -= (size_t)n;
	}
	return 1;
}

_Noreturn int lambda_child_main(void)
{
	struct lambda_req r;
	struct lambda_child c = { .fd = LAMBDA_CHILD_FD };
	struct lambda_natives *nat = NULL;
	rdmx_lambda_fn *fn = NULL;
	struct lambda_call call;
	char why[LAMBDA_MSG_MAX] = "";
	char *code, *input, *out;
	/* A memfd the server filled before the exec: nothing to wait for. */
	uint64_t until = lambda_now_ms() + 1000;

	if (lambda_read(LAMBDA_REQ_FD, &r, sizeof(r), until) != 1 ||
	    r.magic != LAMBDA_REQ_MAGIC || r.code_len > LAMBDA_REQ_MAX ||
	    r.input_len > LAMBDA_REQ_MAX)
		lambda_replyf(c.fd, LAMBDA_CRASHED,
			      "no request from the server");
	r.dir[sizeof(r.dir) - 1] = '\0';
	code = malloc(r.code_len + 1);
	input = malloc(r.input_len + 1);
	out = malloc(r.out_max ? r.out_max : 1);
	if (!code || !input || !out)
		lambda_replyf(c.fd, LAMBDA_MEMORY, "no memory for the call");
	if (lambda_read(LAMBDA_REQ_FD, code, r.code_len, until) != 1 ||
	    lambda_read(LAMBDA_REQ_FD, input, r.input_len, until) != 1)
		lambda_replyf(c.fd, LAMBDA_CRASHED, "a short request");
	call = (struct lambda_call){ .kind = (enum lambda_kind)r.kind,
				     .code = code,
				     .code_len = r.code_len,
				     .input = input,
				     .input_len = r.input_len,
				     .out = out,
				     .out_max = r.out_max };
	c.lim = &r.lim;
	c.deadline_ms = r.deadline_ms;
	if (call.kind == LAMBDA_NATIVE) {
		/* As trusted as the server found them: checked again. */
		if (lambda_natives_open(r.dir, &nat, why, sizeof(why)))
			lambda_replyf(c.fd, LAMBDA_NO_FUNCTION, "%s", why);
		fn = lambda_native_find(nat, code, r.code_len, why,
					sizeof(why));
		if (!fn)
			lambda_replyf(c.fd, LAMBDA_NO_FUNCTION, "%s", why);
	}
	lambda_confine(&c);
	if (fn)
		lambda_child_native(&c, fn, &call);
	lambda_child_lua(&c, &call);
}

/* ---- the parent --------------------------------------------------------- */

static enum lambda_status lambda_died(pid_t pid, char *why, size_t why_len)
{
	int ws = 0;

	waitpid(pid, &ws, 0);
	if (WIFSIGNALED(ws))
		snprintf(why, why_len, "the lambda's process died of %s",
			 strsignal(WTERMSIG(ws)));
	else
		snprintf(why, why_len,
			 "the lambda's process exited (%d) without an answer",
			 WEXITSTATUS(ws));
	return LAMBDA_CRASHED;
}

static enum lambda_status
lambda_collect(int fd, pid_t pid, const struct lambda_limits *lim,
	       uint64_t deadline_ms, const struct lambda_call *call,
	       size_t *out_len_p, char *why, size_t why_len)
{
	char msg[LAMBDA_MSG_MAX];
	uint32_t hdr[2];
	int rc;

	rc = lambda_read(fd, hdr, sizeof(hdr), deadline_ms);
	if (rc > 0 && hdr[0] == LAMBDA_OK && hdr[1] <= call->out_max)
		rc = lambda_read(fd, call->out, hdr[1], deadline_ms);
	else if (rc > 0 && hdr[0] != LAMBDA_OK && hdr[1] < sizeof(msg))
		rc = lambda_read(fd, msg, hdr[1], deadline_ms);
	else if (rc > 0)
		rc = 0; /* not an answer the child can give */
	if (rc < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		snprintf(why, why_len,
			 "wall-clock limit of %" PRIu64 " ms exceeded (the "
			 "lambda's process was killed)",
			 lim->time_ms);
		return LAMBDA_TIME;
	}
	if (rc == 0)
		return lambda_died(pid, why, why_len);
	waitpid(pid, NULL, 0);
	if (hdr[0] == LAMBDA_OK) {
		*out_len_p = hdr[1];
		return LAMBDA_OK;
	}
	snprintf(why, why_len, "%.*s", (int)hdr[1], msg);
	return hdr[0] <= LAMBDA_CRASHED ? (enum lambda_status)hdr[0]
					: LAMBDA_CRASHED;
}

/*
 * The call for its process, in a memfd: a struct lambda_req, the code,
 * the input. Its descriptor (above LAMBDA_REQ_FD), or -1.
 */
static int lambda_request(const struct lambda_limits *lim,
			  const struct lambda_natives *nat,
			  const struct lambda_call *call, uint64_t deadline_ms)
{
	struct lambda_req r = { .magic = LAMBDA_REQ_MAGIC,
				.kind = (uint32_t)call->kind,
				.code_len = call->code_len,
				.input_len = call->input_len,
				.out_max = call->out_max,
				.deadline_ms = deadline_ms,
				.lim = *lim };
	struct iovec iov[3] = { { &r, sizeof(r) },
				{ (void *)call->code, call->code_len },
				{ (void *)call->input, call->input_len } };
	size_t total = sizeof(r) + call->code_len + call->input_len;
	int fd = memfd_create("rdmx-lambda-call", MFD_CLOEXEC), high;
	ssize_t n;

	if (fd < 0)
		return -1;
	if (nat)
		snprintf(r.dir, sizeof(r.dir), "%s", nat->dir);
	n = pwritev(fd, iov, 3, 0);
	high = n == (ssize_t)total
		       ? fcntl(fd, F_DUPFD_CLOEXEC, LAMBDA_REQ_FD + 1)
		       : -1;
	if (n >= 0 && n != (ssize_t)total)
		errno = EIO;
	close(fd);
	return high;
}

enum lambda_status lambda_run(const struct lambda_limits *lim,
			      const struct lambda_natives *nat,
			      const struct lambda_call *call, size_t *out_len_p,
			      char *why, size_t why_len)
{
	static char *const argv[] = { "rdmx", LAMBDA_CHILD_ARG, NULL };
	uint64_t start = lambda_now_ms();
	enum lambda_status st;
	int fds[2], req, ans;
	pid_t pid;

	*out_len_p = 0;
	if (why_len)
		why[0] = '\0';
	if (call->kind == LAMBDA_NATIVE) {
		if (!lambda_native_find(nat, call->code, call->code_len, why,
					why_len))
			return LAMBDA_NO_FUNCTION;
	} else if (call->kind != LAMBDA_LUA) {
		snprintf(why, why_len, "unknown kind of lambda %d", call->kind);
		return LAMBDA_ERROR;
	}
	if (call->out_max > UINT32_MAX) {
		snprintf(why, why_len, "result buffer over 4 GiB");
		return LAMBDA_ERROR;
	}
	req = lambda_request(lim, nat, call, start + lim->time_ms);
	if (req < 0 || pipe2(fds, O_CLOEXEC)) {
		snprintf(why, why_len, "cannot hand the call over: %s",
			 strerror(errno));
		if (req >= 0)
			close(req);
		return LAMBDA_CRASHED;
	}
	/* Above the numbers the child moves them to (dup2 of one onto the
	 * other would close it). */
	ans = fcntl(fds[1], F_DUPFD_CLOEXEC, LAMBDA_REQ_FD + 1);
	close(fds[1]);
	pid = ans < 0 ? -1 : fork();
	if (pid < 0) {
		snprintf(why, why_len, "cannot fork: %s", strerror(errno));
		close(fds[0]);
		if (ans >= 0)
			close(ans);
		close(req);
		return LAMBDA_CRASHED;
	}
	if (pid == 0) {
		/* Async-signal-safe calls only, up to the exec (see the top).
		 * Ctrl-C on the terminal ends a running lambda too. */
		sigset_t none;

		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (dup2(ans, LAMBDA_CHILD_FD) == LAMBDA_CHILD_FD &&
		    dup2(req, LAMBDA_REQ_FD) == LAMBDA_REQ_FD)
			execve("/proc/self/exe", argv, environ);
		_exit(127);
	}
	close(ans);
	close(req);
	st = lambda_collect(fds[0], pid, lim,
			    start + lim->time_ms + LAMBDA_GRACE_MS, call,
			    out_len_p, why, why_len);
	close(fds[0]);
	return st;
}
