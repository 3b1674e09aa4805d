/* SPDX-License-Identifier: MIT */
/*
 * rdmx.h - the one public API of rdmx, an RDMA transport library.
 *
 * Objects and their lifetimes (a parent must outlive its children):
 *
 *   rdmx_ctx       rdmx_ctx_create / rdmx_ctx_destroy
 *   rdmx_cq        rdmx_cq_create / rdmx_cq_destroy         (child of ctx)
 *   rdmx_mr        rdmx_mr_reg / rdmx_mr_dereg              (child of ctx)
 *   memory         rdmx_mem_alloc / rdmx_mem_free           (child of ctx)
 *   rdmx_listener  rdmx_listen / rdmx_listener_close        (child of ctx)
 *   rdmx_srq       rdmx_srq_create / rdmx_srq_destroy       (child of ctx)
 *   rdmx_conn      rdmx_connect or rdmx_accept / rdmx_conn_close
 *                                    (child of ctx, uses a cq, maybe a srq)
 *
 * A connection behaves like an RDMA reliable-connected queue pair on every
 * transport: work requests execute and complete in order, and every posted
 * request produces exactly one completion, with an error status when the peer
 * dies or the connection is closed. One-sided operations (WRITE, READ,
 * atomics) need no action from the target application.
 *
 * Every call returns an rdmx_status; RDMX_OK is 0 and errors are negative.
 * rdmx_strerror() names any status in one line. The library never sets errno,
 * never aborts on bad input and prints only through its logger.
 *
 * Thread safety: distinct objects may be used from distinct threads freely.
 * Posting to one connection and polling one cq from several threads is safe;
 * destroying an object while another thread uses it is not.
 */
#ifndef RDMX_H
#define RDMX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RDMX_VERSION_MAJOR 0
#define RDMX_VERSION_MINOR 1

/*
 * Status codes, grouped by what the caller must tear down:
 *   -1 .. -19   the operation failed; the object is still usable;
 *   -20 .. -39  the connection is lost or was never made; close it;
 *   -40 .. -59  the context or the environment is unusable.
 */
typedef enum {
	RDMX_OK = 0,
	RDMX_ERR_AGAIN = -1, /* queue full: poll completions, then retry */
	RDMX_ERR_TIMEOUT = -2, /* nothing happened within the timeout */
	RDMX_ERR_INVALID = -3, /* an argument is wrong (details in the log) */
	RDMX_ERR_UNSUPPORTED = -4, /* the transport lacks this capability */
	RDMX_ERR_NOMEM = -5, /* out of memory */
	RDMX_ERR_BUSY = -6, /* the object still has children */
	RDMX_ERR_REMOTE_ACCESS = -7, /* target refused: rkey, bounds or access
				      */
	RDMX_ERR_LOCAL_LENGTH = -8, /* incoming SEND larger than the RECV */
	RDMX_ERR_REMOTE_INVALID = -9, /* the peer's RECV was too small */
	RDMX_ERR_FLUSHED = -10, /* flushed: the connection was closed */
	RDMX_ERR_NOT_FOUND = -11, /* no such name, key or device */

	RDMX_ERR_CONN_REFUSED = -20, /* nobody listens at the address */
	RDMX_ERR_UNREACHABLE = -21, /* the address does not resolve or route */
	RDMX_ERR_AUTH = -22, /* pre-shared key missing or wrong */
	RDMX_ERR_PROTOCOL = -23, /* the peer broke the protocol or version */
	RDMX_ERR_CONN_LOST = -24, /* the peer died or closed the connection */
	RDMX_ERR_NO_TRANSPORT = -25, /* no transport both sides can use */

	RDMX_ERR_CONFIG = -40, /* a configuration value is invalid */
	RDMX_ERR_SYSTEM = -41, /* a system call failed (logged with %m) */
} rdmx_status;

/* One line naming the status and, where there is one, the usual fix. */
const char *rdmx_strerror(rdmx_status status);

/* ------------------------------------------------------------------------ */
/* Context                                                                  */

struct rdmx_ctx;

enum {
	RDMX_CTX_ATTR_CONFIG_FILE = 1 << 0, /* config_file is valid */
};

struct rdmx_ctx_attr {
	uint64_t mask; /* RDMX_CTX_ATTR_* bits of valid fields */
	const char *config_file; /* YAML file read after the defaults */
};

/*
 * rdmx_ctx_create - read the configuration and open a context.
 * @attr:  optional (NULL for defaults).
 * @ctx_p: set to the new context on success only.
 *
 * Configuration is read once, here: built-in defaults, then the YAML file
 * (attr->config_file, else $RDMX_CONFIG if set), then RDMX_* environment
 * variables. An invalid value fails with RDMX_ERR_CONFIG and the log names
 * the key and the variable. Other errors: RDMX_ERR_INVALID (a NULL @ctx_p;
 * logged), RDMX_ERR_NOMEM.
 */
rdmx_status rdmx_ctx_create(const struct rdmx_ctx_attr *attr,
			    struct rdmx_ctx **ctx_p);

/*
 * rdmx_ctx_destroy - close a context. Returns RDMX_ERR_BUSY (and does
 * nothing) while connections, listeners, cqs, registrations or memory from
 * rdmx_mem_alloc remain.
 * NULL is a no-op.
 */
rdmx_status rdmx_ctx_destroy(struct rdmx_ctx *ctx);

/*
 * rdmx_ctx_config - the value of configuration key @key ("registry.url",
 * as in the YAML file) as @ctx read it, in text: counts as numbers, times
 * with their unit ("30000ms"), switches "on" or "off", strings as given.
 * For the systems built on rdmx, which read their keys through it.
 * RDMX_ERR_NOT_FOUND for a key the table does not have; RDMX_ERR_INVALID
 * if @len cannot hold the value and its NUL.
 */
rdmx_status rdmx_ctx_config(const struct rdmx_ctx *ctx, const char *key,
			    char *buf, size_t len);

/*
 * A resolver turns a name into "host:port": rdmx_connect takes "@NAME"
 * where it takes an address, on a context that has one (lib/registry's
 * rdmx_registry_attach installs the registry as the resolver). It writes
 * the address of @name (without the '@') into @addr, @len bytes, and
 * returns RDMX_OK, RDMX_ERR_NOT_FOUND (no such name) or why it could not
 * ask. It may be called from any thread that connects.
 */
typedef rdmx_status (*rdmx_resolve_fn)(void *arg, const char *name, char *addr,
				       size_t len);

/* rdmx_ctx_set_resolver - install @fn (NULL: none) for @ctx's "@NAME"s. */
void rdmx_ctx_set_resolver(struct rdmx_ctx *ctx, rdmx_resolve_fn fn, void *arg);

/*
 * rdmx_config_table - the configuration as rdmx_ctx_create would read it
 * (built-in defaults, then @file, else $RDMX_CONFIG, then RDMX_* variables;
 * @file NULL: no file but $RDMX_CONFIG), one call of @fn per key in table
 * order, for tools that show it (rdmx info --config). The strings live for
 * the call only. RDMX_ERR_CONFIG, logged, if it does not load;
 * RDMX_ERR_INVALID, logged, for a NULL @fn.
 */
struct rdmx_config_key {
	const char *key; /* "conn.max_send_wr", as in the YAML file */
	const char *value; /* in effect, in text, as rdmx_ctx_config gives it */
	const char *dflt; /* the built-in default ("" if none) */
	const char *source; /* "default", "file" or "env" */
	const char *env; /* the variable that overrides it */
	const char *doc; /* one line */
};
typedef void (*rdmx_config_fn)(void *arg, const struct rdmx_config_key *key);
rdmx_status rdmx_config_table(const char *file, rdmx_config_fn fn, void *arg);

/*
 * rdmx_addr_split - split an address as rdmx_connect and rdmx_listen read
 * it: "host:port", "[v6]:port", ":port", "port" or "host". A missing host
 * is "" (any address when listening, the local host when connecting); a
 * missing port is rdmx's default, 18515. RDMX_ERR_INVALID, logged, when
 * malformed or when @host_len or @port_len is too small.
 */
rdmx_status rdmx_addr_split(const char *addr, char *host, size_t host_len,
			    char *port, size_t port_len);

/* ------------------------------------------------------------------------ */
/* Memory registration                                                      */

struct rdmx_mr;

enum rdmx_access {
	RDMX_ACCESS_LOCAL_WRITE = 1 << 0, /* RECV, READ and atomic results */
	RDMX_ACCESS_REMOTE_WRITE = 1 << 1, /* target of a peer's WRITE */
	RDMX_ACCESS_REMOTE_READ = 1 << 2, /* source of a peer's READ */
	RDMX_ACCESS_REMOTE_ATOMIC = 1 << 3, /* target of a peer's atomics */
};

/*
 * A registration as a peer sees it: what to put in a one-sided work request.
 * Hand it over with rdmx_remote_pack() / rdmx_remote_unpack().
 */
struct rdmx_remote {
	uint64_t addr; /* address of the first byte, in the owner's space */
	uint64_t length; /* bytes */
	/*
	 * Unpredictable, never reused while registered. 64 bits: the
	 * software transports check all of them; on verbs the low 32 are
	 * the key of the context's first device, which is all a NIC checks,
	 * and a connection on another device has the owner check all 64 as
	 * it translates them (rdmx_verbs(7)). One descriptor serves every
	 * connection.
	 */
	uint64_t rkey;
};

#define RDMX_REMOTE_PACKED_LEN 24

/*
 * rdmx_mr_reg - register [addr, addr + length) for the accesses in @access
 * (enum rdmx_access bits). The memory stays owned by the caller and must stay
 * valid until rdmx_mr_dereg() returns. REMOTE_WRITE and REMOTE_ATOMIC need
 * LOCAL_WRITE, as in verbs. Errors: RDMX_ERR_INVALID (NULL arguments,
 * unknown access bits, a range that is not all mapped memory; logged) and
 * RDMX_ERR_NOMEM (out of memory, or the locked-memory limit on verbs:
 * ulimit -l), the same on every transport.
 */
rdmx_status rdmx_mr_reg(struct rdmx_ctx *ctx, void *addr, size_t length,
			unsigned access, struct rdmx_mr **mr_p);

/*
 * rdmx_mr_dereg - end a registration. From the moment it is called, peer
 * operations naming its rkey fail with a remote access error; it returns once
 * no transfer into or out of the region is in progress, after which the
 * memory may be freed. Requests this process posted that still use the
 * region (a SEND waiting for the peer's RECV, say) end their connection
 * first, as a NIC's protection error would: they and every other request
 * on it complete with RDMX_ERR_FLUSHED. A RECV posted on the region (to a
 * connection or a srq) stays posted, and a SEND that takes it ends its
 * connection the same way, placing nothing. NULL is a no-op.
 */
rdmx_status rdmx_mr_dereg(struct rdmx_mr *mr);

/*
 * rdmx_mem_alloc - @length bytes of zeroed, page-aligned memory that a peer
 * on this host can map. Registered with rdmx_mr_reg(), it is where a shm
 * peer does WRITE, READ and atomics itself, with its own loads and stores:
 * the data is copied once and this process's CPU takes no part (the same
 * access checks apply; rdmx_shm(7)). Resident from the start, as a NIC's
 * registered memory is pinned: no request pays a page fault. On tcp and
 * verbs it is memory like any other. @flags: RDMX_MEM_HUGE backs it with huge
 * pages when the system has them reserved, else with ordinary pages (logged).
 * Errors: RDMX_ERR_INVALID (NULL arguments, a zero length, unknown flags;
 * logged), RDMX_ERR_NOMEM. Freed by rdmx_mem_free(), before rdmx_ctx_destroy().
 */
enum rdmx_mem_flags {
	RDMX_MEM_HUGE = 1 << 0,
};

rdmx_status rdmx_mem_alloc(struct rdmx_ctx *ctx, size_t length, unsigned flags,
			   void **addr_p);

/*
 * rdmx_mem_free - free memory from rdmx_mem_alloc(), by the address it
 * returned. RDMX_ERR_BUSY (and nothing freed) while a registration lies in
 * it; RDMX_ERR_INVALID for an address it did not return. NULL is a no-op.
 * Peers that mapped it let go when their connections close.
 */
rdmx_status rdmx_mem_free(struct rdmx_ctx *ctx, void *addr);

/*
 * rdmx_memcpy - memcpy(3) for payloads: copies @n bytes from @src to @dst
 * (which must not overlap) and returns @dst, at the memory's speed however
 * the two lie. glibc copies 2 KiB and more with rep movsb on CPUs with
 * FSRM, and on AMD's that runs 15-25 times slower when @dst lies 1 to 31
 * bytes past @src modulo 4096 (glibc bug 30994): a value copied from the
 * start of a page of a registered buffer into a large malloc(3) block,
 * which begins 16 bytes past a page, meets it every time. From 2 to 16 KiB,
 * where rep movsb is slower than vector moves anyway, it moves 32 bytes at
 * a time on CPUs with AVX2. rdmx copies its own payloads this way; a
 * program that copies out of or into registered memory may too.
 */
void *rdmx_memcpy(void *dst, const void *src, size_t n);

/* rdmx_mr_remote - fill @remote_p with the descriptor of the whole region. */
void rdmx_mr_remote(const struct rdmx_mr *mr, struct rdmx_remote *remote_p);

/* Serialize to exactly RDMX_REMOTE_PACKED_LEN bytes, byte-order independent. */
void rdmx_remote_pack(const struct rdmx_remote *remote,
		      uint8_t buf[RDMX_REMOTE_PACKED_LEN]);

/*
 * Parse a packed descriptor; RDMX_ERR_INVALID if @len or the bytes are bad
 * (logged through rdmx_log_peer: they come from a peer) or for NULLs.
 */
rdmx_status rdmx_remote_unpack(const void *buf, size_t len,
			       struct rdmx_remote *remote_p);

/* ------------------------------------------------------------------------ */
/* Completion queues                                                        */

struct rdmx_cq;
struct rdmx_conn;

enum rdmx_opcode {
	RDMX_OP_SEND = 1,
	RDMX_OP_WRITE,
	RDMX_OP_WRITE_IMM, /* WRITE whose immediate consumes a peer RECV */
	RDMX_OP_READ,
	RDMX_OP_FETCH_ADD, /* 8 bytes, 8-byte aligned */
	RDMX_OP_CMP_SWAP, /* 8 bytes, 8-byte aligned */
	RDMX_OP_RECV, /* completion of a RECV consumed by a SEND */
	RDMX_OP_RECV_IMM, /* completion of a RECV consumed by a WRITE_IMM */
};

/* One completed work request. */
struct rdmx_completion {
	uint64_t wr_id; /* as posted */
	rdmx_status status; /* RDMX_OK or why it failed */
	enum rdmx_opcode opcode;
	uint32_t byte_len; /* RECV: bytes received; RECV_IMM: bytes written */
	uint32_t imm; /* RECV_IMM only: the immediate */
	/*
	 * Closed since? Still there to compare and to ask its user_ctx:
	 * a closed connection's memory (and address) is not reused before
	 * its cq has given out every completion naming it and is polled
	 * again (by the one thread that polls it; rdmx_conn_close).
	 */
	struct rdmx_conn *conn;
};

/*
 * rdmx_cq_create - create a completion queue that connections deliver to.
 * It grows as needed, so completions are never dropped. Errors:
 * RDMX_ERR_INVALID (NULL arguments; logged), RDMX_ERR_NOMEM.
 */
rdmx_status rdmx_cq_create(struct rdmx_ctx *ctx, struct rdmx_cq **cq_p);

/* RDMX_ERR_BUSY while connections use it. NULL is a no-op. */
rdmx_status rdmx_cq_destroy(struct rdmx_cq *cq);

/*
 * rdmx_poll - take up to @max completions without blocking. Drives progress
 * on the calling thread first, so a caller that spins here gets the lowest
 * latency. Returns the number taken (0 when none) or a negative status:
 * RDMX_ERR_INVALID (a NULL @cq or @wc, or a negative @max; logged).
 */
int rdmx_poll(struct rdmx_cq *cq, struct rdmx_completion *wc, int max);

/*
 * rdmx_cq_wait - block until at least one completion is ready or
 * @timeout_ms passes (-1: forever). Spins for progress.wait_spin first.
 * Returns RDMX_OK (completions ready), RDMX_ERR_TIMEOUT, or
 * RDMX_ERR_INVALID for a NULL @cq (logged).
 */
rdmx_status rdmx_cq_wait(struct rdmx_cq *cq, int timeout_ms);

/*
 * rdmx_cq_fd - a file descriptor that is readable while completions are
 * ready, for an epoll or poll loop; drain with rdmx_poll(). Owned by the cq.
 * Also readable when the transports have input, so that the sleeper itself
 * wakes on its peer's signal: rdmx_poll() may then return 0 (it made the
 * progress). Without the progress thread, rdmx_poll() on each wake-up is
 * what serves the connections.
 */
int rdmx_cq_fd(struct rdmx_cq *cq);

/* ------------------------------------------------------------------------ */
/* Connections                                                              */

struct rdmx_listener;
struct rdmx_srq;

enum {
	RDMX_CONN_ATTR_USER_CTX = 1 << 0,
	RDMX_CONN_ATTR_SRQ = 1 << 1,
	RDMX_CONN_ATTR_PRIVATE_DATA = 1 << 2,
	RDMX_CONN_ATTR_TRANSPORTS = 1 << 3,
	RDMX_CONN_ATTR_SOURCE_ADDR = 1 << 4,
};

/* Transports, as bits of rdmx_conn_attr.transports. */
enum rdmx_transport_bits {
	RDMX_TP_TCP = 1 << 0,
	RDMX_TP_SHM = 1 << 1,
	RDMX_TP_VERBS = 1 << 2,
};

/*
 * rdmx_transports_built - the RDMX_TP_* this librdmx carries (verbs only
 * where it was built with rdma-core). Bit n is transport n of
 * rdmx_transport_name and of rdmx_ctx_stats.
 */
unsigned rdmx_transports_built(void);

/* The most private data a side may send with a connection. */
#define RDMX_PRIVATE_DATA_MAX 256

struct rdmx_conn_attr {
	uint64_t mask; /* RDMX_CONN_ATTR_* bits of optional fields */
	struct rdmx_cq *cq; /* required: where both directions complete */
	void *user_ctx; /* returned by rdmx_conn_user_ctx() */
	/*
	 * RDMX_CONN_ATTR_SRQ: incoming SENDs and WRITE_IMMs consume RECVs
	 * of this shared receive queue instead of the connection's own, and
	 * rdmx_post_recv() on the connection is RDMX_ERR_INVALID. The
	 * transport is then one the srq can serve (rdmx_srq_create).
	 */
	struct rdmx_srq *srq;
	/*
	 * RDMX_CONN_ATTR_PRIVATE_DATA: up to RDMX_PRIVATE_DATA_MAX bytes
	 * that the peer gets with the connection (rdmx_conn_private_data),
	 * as rdma_cm's private data: a region's packed descriptor, say, so
	 * that one-sided work can start with no SEND/RECV first. Exchanged
	 * once rdmx_accept has taken the client, before the transport is
	 * set up; like all data on the wire, not encrypted.
	 */
	const void *private_data;
	size_t private_data_len;
	/*
	 * RDMX_CONN_ATTR_TRANSPORTS: the transports this one connection may
	 * use (RDMX_TP_* bits), within the context's transport setting: two
	 * connections of one context can differ, with no setenv between
	 * contexts. No common one: RDMX_ERR_NO_TRANSPORT, saying why.
	 */
	unsigned transports;
	/*
	 * RDMX_CONN_ATTR_SOURCE_ADDR (rdmx_connect): the numeric address of
	 * this host this one connection connects from, instead of
	 * conn.source_addr. Verbs goes through the device that owns it, so
	 * it picks the connection's device (rdmx_verbs(7)). Not an address
	 * of this host: RDMX_ERR_INVALID (logged). rdmx_accept ignores it:
	 * its connections use the address the client reached.
	 */
	const char *source_addr;
};

/*
 * rdmx_listen - listen for connections on "host:port", ":port" or "port"
 * (host defaults to all addresses; port 0 picks a free one, see
 * rdmx_listener_port()). Errors: RDMX_ERR_INVALID for a malformed address,
 * RDMX_ERR_UNREACHABLE when the host does not resolve, RDMX_ERR_SYSTEM when
 * the port is taken (logged).
 */
rdmx_status rdmx_listen(struct rdmx_ctx *ctx, const char *addr,
			struct rdmx_listener **lst_p);

/* The port the listener is bound to. */
int rdmx_listener_port(const struct rdmx_listener *lst);

/* Stop listening. NULL is a no-op. */
void rdmx_listener_close(struct rdmx_listener *lst);

/*
 * rdmx_accept - wait up to @timeout_ms (-1: forever) for a peer, run the
 * handshake (version, transport choice, pre-shared key) and the
 * connection's setup, and return the connection. Handshakes and setups run
 * concurrently, each peer's in a thread of its own (listen.max_pending,
 * listen.max_pending_per_addr bound them), so a slow, silent or stalling
 * peer holds up only itself, and the connection returned is the first
 * whose setup finished, not necessarily the first to connect. A peer is
 * set up for the transports the call that first saw it allows; the call
 * that returns it (one that allows the same) gives it its cq, srq,
 * user_ctx and private data, and until then it completes nothing.
 * A peer that fails the handshake is refused and logged, and the call goes
 * on waiting until the timeout; so does a failure to accept (out of file
 * descriptors: it backs off). Errors: RDMX_ERR_TIMEOUT, RDMX_ERR_INVALID,
 * RDMX_ERR_NOMEM (no memory to set one connection up; call again).
 */
rdmx_status rdmx_accept(struct rdmx_listener *lst,
			const struct rdmx_conn_attr *attr, int timeout_ms,
			struct rdmx_conn **conn_p);

/*
 * rdmx_connect - connect to "host:port" and run the handshake, all within
 * @timeout_ms: TCP connect, handshake and transport setup (-1: no bound of
 * its own; each step then waits at most conn.handshake_timeout for a
 * silent server). A server's rdmx_accept returns a connection only for a
 * client that finished its handshake, so a client that timed out is no
 * connection on the server either. @addr is "host:port", "[v6addr]:port",
 * "host" (port 18515), ":port" (this host) or "@NAME". Errors:
 * RDMX_ERR_INVALID (a malformed address, NULL arguments, a source
 * address not of this host; logged), RDMX_ERR_CONN_REFUSED,
 * RDMX_ERR_UNREACHABLE, RDMX_ERR_TIMEOUT, RDMX_ERR_AUTH, RDMX_ERR_PROTOCOL,
 * RDMX_ERR_NO_TRANSPORT, and RDMX_ERR_CONN_LOST (the server closed during the
 * handshake: it refused this client, see its log).
 * "@NAME" asks the context's resolver (rdmx_ctx_set_resolver) first: its
 * errors (RDMX_ERR_NOT_FOUND: no such name), or RDMX_ERR_INVALID when the
 * context has none.
 */
rdmx_status rdmx_connect(struct rdmx_ctx *ctx, const char *addr,
			 const struct rdmx_conn_attr *attr, int timeout_ms,
			 struct rdmx_conn **conn_p);

/*
 * rdmx_conn_close - disconnect and free. Work still posted completes in the
 * cq with RDMX_ERR_FLUSHED before this returns; the peer's outstanding work
 * completes with RDMX_ERR_CONN_LOST. NULL is a no-op. Completions already
 * in the cq keep naming it: until they are all polled, and the cq polled
 * once more, @conn's address goes to no other connection and
 * rdmx_conn_user_ctx still answers for it (nothing else does).
 */
void rdmx_conn_close(struct rdmx_conn *conn);

enum {
	/*
	 * An error completion ends the connection, as on every RDMA NIC (the
	 * QP moves to the error state): later work completes with
	 * RDMX_ERR_FLUSHED, and a new connection is needed. Without it (tcp,
	 * shm), the connection goes on after a refused operation.
	 */
	RDMX_CONN_ERRORS_CLOSE = 1 << 0,
	/* Fetch-and-add and compare-and-swap work (not on siw, for one). */
	RDMX_CONN_ATOMICS = 1 << 1,
	/*
	 * SEND and WRITE complete once sent, not once placed (iWARP; a READ
	 * posted after a WRITE completes once the WRITE is placed): a
	 * refusal at the target (rkey, bounds, a too-small RECV) ends the
	 * connection (a Terminate) instead of failing that request; work
	 * then completes with RDMX_ERR_CONN_LOST. A READ learns of its own
	 * refusal either as RDMX_ERR_REMOTE_ACCESS or as that end.
	 */
	RDMX_CONN_COMPLETES_LOCALLY = 1 << 2,
	/*
	 * This process maps the peer's memory from rdmx_mem_alloc (shm): a
	 * WRITE, READ or atomic on such memory is done inside rdmx_post, by
	 * this process's own loads and stores, one copy with no round trip
	 * and no work by the peer (when nothing posted before it is still in
	 * flight; otherwise in order, through the peer). Other memory of the
	 * peer still goes through it.
	 */
	RDMX_CONN_MAPPED = 1 << 3,
};

struct rdmx_conn_info {
	unsigned flags; /* RDMX_CONN_* */
	char transport[16]; /* "tcp", "shm", "verbs" */
	char reason[128]; /* why that transport was chosen */
	char local_addr[64]; /* "ip:port" of the control connection */
	char peer_addr[64];
};

/* What the connection runs on and why; never fails on a valid conn. */
void rdmx_conn_info(const struct rdmx_conn *conn,
		    struct rdmx_conn_info *info_p);

/*
 * rdmx_remote_attach - get ready for one-sided requests on @conn to the
 * peer's region @remote, now, on the caller's thread, so that the first
 * request does not pay for it. Over shm, when the region lies in the peer's
 * rdmx_mem_alloc memory (RDMX_CONN_MAPPED), this maps it: ~0.05 ms a MiB
 * here, which the first WRITE, READ or atomic on it would otherwise take,
 * while every other peer its thread serves waits. Elsewhere, and for a
 * region that cannot be mapped, there is nothing to do. A hint: requests
 * work the same without it. RDMX_OK, or RDMX_ERR_INVALID for NULL
 * arguments (logged).
 */
rdmx_status rdmx_remote_attach(struct rdmx_conn *conn,
			       const struct rdmx_remote *remote);

/*
 * rdmx_conn_check - RDMX_OK while the connection is up; once it has ended,
 * the status its work completes with (RDMX_ERR_CONN_LOST when the peer
 * died or closed, RDMX_ERR_FLUSHED after an error completion where errors
 * close it). For connections whose RECVs come from a srq: their end
 * completes nothing there, so a server with nothing else posted on one
 * learns of it here. RDMX_ERR_INVALID (logged) for a NULL @conn.
 */
rdmx_status rdmx_conn_check(const struct rdmx_conn *conn);

/*
 * rdmx_conn_private_data - what the peer sent as its attr's private data
 * (NULL and *len_p 0 when nothing); valid while the connection is.
 */
const void *rdmx_conn_private_data(const struct rdmx_conn *conn, size_t *len_p);

/* The attr's user_ctx, or NULL. */
void *rdmx_conn_user_ctx(const struct rdmx_conn *conn);

/* ------------------------------------------------------------------------ */
/* Work requests                                                            */

#define RDMX_MAX_SGE 16

/* A piece of registered local memory. */
struct rdmx_sge {
	void *addr;
	uint32_t length;
	struct rdmx_mr *mr; /* must cover [addr, addr + length) */
};

/* The general form of an initiator work request (SEND, WRITE, READ, ...). */
struct rdmx_wr {
	uint64_t wr_id;
	enum rdmx_opcode opcode; /* any but RECV / RECV_IMM */
	const struct rdmx_sge *sg_list; /* data, or the 8-byte atomic result */
	int num_sge; /* 0 .. RDMX_MAX_SGE */
	uint32_t imm; /* WRITE_IMM */
	uint64_t remote_addr; /* one-sided ops */
	uint64_t rkey; /* one-sided ops: rdmx_remote.rkey */
	uint64_t compare_add; /* FETCH_ADD: add; CMP_SWAP: compare */
	uint64_t swap; /* CMP_SWAP */
	unsigned flags; /* RDMX_WR_* */
};

enum {
	/*
	 * Selective signaling: no completion if the request succeeds. A
	 * failed one still completes with its error. Requests complete in
	 * order, so the completion of a later signaled request says every
	 * unsignaled one before it succeeded; until then they hold send
	 * queue slots, so signal one request in every few (rdmx_post returns
	 * RDMX_ERR_AGAIN when unsignaled ones fill the queue). Unsignaled
	 * requests still outstanding when the connection ends may or may
	 * not complete with RDMX_ERR_FLUSHED or RDMX_ERR_CONN_LOST.
	 */
	RDMX_WR_UNSIGNALED = 1 << 0,
	/*
	 * Start only once every READ and atomic posted before it on the
	 * connection has completed (IBV_SEND_FENCE). Requests complete in
	 * order, but a later request may execute at the target before an
	 * earlier READ or atomic has read its data there: a READ followed
	 * by a WRITE of the same place may return the WRITE's bytes unless
	 * the WRITE is fenced. rdmx(7), ORDERING, has the rules.
	 */
	RDMX_WR_FENCE = 1 << 1,
	/*
	 * A WRITE, READ or atomic that need not keep its place behind the
	 * work posted before it on the connection: it may be placed (or read)
	 * at the target, and complete, before earlier SENDs, WRITEs and READs
	 * are; work posted after it still comes after it. For memory no
	 * earlier request touches, as a server's WRITE of each answer's value
	 * into a room of its own. Over shm on mapped memory
	 * (RDMX_CONN_MAPPED) it is then done at once, inside rdmx_post, even
	 * while earlier work waits; elsewhere it keeps its place as without
	 * the flag. Not on SEND or WRITE_IMM, nor with RDMX_WR_FENCE.
	 */
	RDMX_WR_UNORDERED = 1 << 2,
};

/*
 * rdmx_post - post one initiator work request; it completes later in the
 * connection's cq. Returns RDMX_OK (exactly one completion will follow,
 * unless RDMX_WR_UNSIGNALED says otherwise),
 * RDMX_ERR_AGAIN (send queue full: poll, then retry), RDMX_ERR_INVALID
 * (bad sge, opcode or alignment; logged), RDMX_ERR_UNSUPPORTED, or
 * RDMX_ERR_CONN_LOST (the connection is dead; nothing was posted).
 *
 * SEND and WRITE_IMM each consume one RECV the peer posted; with none posted
 * they wait (as do the requests behind them) and are never dropped.
 * A WRITE completes only once its data is placed at the target, except
 * where the connection says RDMX_CONN_COMPLETES_LOCALLY (iWARP): there it
 * completes once sent, and a READ posted after it completes only once it
 * is placed (rdmx_post_write(3)).
 */
rdmx_status rdmx_post(struct rdmx_conn *conn, const struct rdmx_wr *wr);

/*
 * rdmx_post_list - post @n work requests, in order, as rdmx_post() would
 * one by one, but with one doorbell where the transport has one (verbs:
 * a single ibv_post_send). It stops at the first request it cannot post:
 * *posted_p (if not NULL) says how many were posted, each of which will
 * complete, and the status is that request's (RDMX_ERR_AGAIN: post the
 * rest later; RDMX_ERR_INVALID: that request is wrong).
 */
rdmx_status rdmx_post_list(struct rdmx_conn *conn, const struct rdmx_wr *wrs,
			   int n, int *posted_p);

/*
 * rdmx_post_recv - post a buffer for one incoming SEND or WRITE_IMM. The sge
 * memory needs RDMX_ACCESS_LOCAL_WRITE. RECVs are consumed in order; a SEND
 * larger than the buffer completes with RDMX_ERR_LOCAL_LENGTH here and
 * RDMX_ERR_REMOTE_INVALID at the sender. Returns as rdmx_post(), and
 * RDMX_ERR_INVALID on a connection that takes its RECVs from a srq.
 */
rdmx_status rdmx_post_recv(struct rdmx_conn *conn, const struct rdmx_sge *sg,
			   int num_sge, uint64_t wr_id);

/* Simple forms of rdmx_post(), for one sge each. */
rdmx_status rdmx_post_send(struct rdmx_conn *conn, const struct rdmx_sge *sg,
			   uint64_t wr_id);
rdmx_status rdmx_post_write(struct rdmx_conn *conn, const struct rdmx_sge *sg,
			    uint64_t remote_addr, uint64_t rkey,
			    uint64_t wr_id);
rdmx_status rdmx_post_write_imm(struct rdmx_conn *conn,
				const struct rdmx_sge *sg, uint64_t remote_addr,
				uint64_t rkey, uint32_t imm, uint64_t wr_id);
rdmx_status rdmx_post_read(struct rdmx_conn *conn, const struct rdmx_sge *sg,
			   uint64_t remote_addr, uint64_t rkey, uint64_t wr_id);
/* @result: 8 bytes of LOCAL_WRITE memory that receive the value before. */
rdmx_status rdmx_post_fetch_add(struct rdmx_conn *conn,
				const struct rdmx_sge *result,
				uint64_t remote_addr, uint64_t rkey,
				uint64_t add, uint64_t wr_id);
rdmx_status rdmx_post_cmp_swap(struct rdmx_conn *conn,
			       const struct rdmx_sge *result,
			       uint64_t remote_addr, uint64_t rkey,
			       uint64_t compare, uint64_t swap, uint64_t wr_id);

/* ------------------------------------------------------------------------ */
/* Shared receive queues                                                    */

enum {
	RDMX_SRQ_ATTR_MAX_WR = 1 << 0,
};

struct rdmx_srq_attr {
	uint64_t mask; /* RDMX_SRQ_ATTR_* bits of optional fields */
	/* required: where RECVs still posted at rdmx_srq_destroy() complete */
	struct rdmx_cq *cq;
	uint32_t max_wr; /* RECVs it holds at once; default conn.max_recv_wr */
};

/*
 * rdmx_srq_create - a receive queue that many connections share (give it
 * in rdmx_conn_attr.srq): a server posts RECVs for all its clients in one
 * place, sized for the traffic rather than per connection. RECVs are taken
 * in posting order by whichever connection's SEND or WRITE_IMM arrives,
 * and complete in that connection's cq with that connection in `conn`.
 *
 * A SEND towards a srq with no RECV free waits (with the work behind it on
 * its connection) until one is posted; it is never dropped, and RECVs that
 * one connection was promised but does not use are taken back for others.
 *
 * The srq serves the transports of one kind, chosen here: the first usable
 * of verbs, shm and tcp that has shared receive queues (tcp and shm serve
 * the same srq). Connections that use it are set up over those only; a
 * peer that has none of them is refused with RDMX_ERR_NO_TRANSPORT.
 * Errors: RDMX_ERR_INVALID (no cq, or max_wr 0 or above 65536),
 * RDMX_ERR_UNSUPPORTED (no usable transport has them), RDMX_ERR_NOMEM.
 */
rdmx_status rdmx_srq_create(struct rdmx_ctx *ctx,
			    const struct rdmx_srq_attr *attr,
			    struct rdmx_srq **srq_p);

/*
 * rdmx_srq_destroy - free a srq. RDMX_ERR_BUSY (and nothing done) while
 * connections use it. RECVs still posted complete in attr.cq with
 * RDMX_ERR_FLUSHED and a NULL `conn` before it returns. NULL is a no-op.
 */
rdmx_status rdmx_srq_destroy(struct rdmx_srq *srq);

/*
 * rdmx_srq_post_recv - post a buffer for one incoming SEND or WRITE_IMM on
 * any connection of the srq; as rdmx_post_recv() otherwise. Returns
 * RDMX_OK, RDMX_ERR_AGAIN (max_wr RECVs are posted: wait for completions),
 * RDMX_ERR_INVALID (bad sge; logged) or RDMX_ERR_NOMEM.
 */
rdmx_status rdmx_srq_post_recv(struct rdmx_srq *srq, const struct rdmx_sge *sg,
			       int num_sge, uint64_t wr_id);

/* ------------------------------------------------------------------------ */
/* Statistics                                                               */

/* Arrays below are indexed by enum rdmx_opcode (0 unused). */
#define RDMX_STATS_OPS 9
/* Latency buckets: upper bounds in rdmx_stats_bucket_us(), the last +Inf. */
#define RDMX_STATS_BUCKETS 16
#define RDMX_STATS_STATUSES 64 /* errors[-status] */
#define RDMX_STATS_TRANSPORTS 3 /* tcp, shm, verbs */

/* Why a peer's one-sided request was refused here (rdmx_stats.refused_by). */
enum rdmx_refusal {
	RDMX_REFUSED_RKEY = 0, /* no region has that rkey (or no longer) */
	RDMX_REFUSED_BOUNDS, /* bytes outside the region of the rkey */
	RDMX_REFUSED_ACCESS, /* the region does not grant that access */
	RDMX_REFUSED_ALIGN, /* an atomic's address is not 8-byte aligned */
	RDMX_REFUSED_FAULT, /* shm single copy: the peer's memory failed */
};
#define RDMX_STATS_REFUSALS 5

/*
 * Counters of one context since it was created. "out": work requests this
 * process posted (SEND, WRITE, WRITE_IMM, READ and atomics, counted when
 * posted, bytes as posted); "in": messages it received (RECV, RECV_IMM,
 * counted when they complete). Latency, from post to completion, is kept
 * for signaled requests only with the config key metrics.latency on (it
 * costs a clock read and a lock per request).
 */
struct rdmx_stats {
	uint64_t ops_out[RDMX_STATS_OPS], bytes_out[RDMX_STATS_OPS];
	uint64_t ops_in[RDMX_STATS_OPS], bytes_in[RDMX_STATS_OPS];
	uint64_t errors[RDMX_STATS_STATUSES]; /* completions, by -status */
	uint64_t lat_bucket[RDMX_STATS_OPS][RDMX_STATS_BUCKETS];
	uint64_t lat_count[RDMX_STATS_OPS], lat_sum_ns[RDMX_STATS_OPS];
	uint64_t conns_open[RDMX_STATS_TRANSPORTS];
	uint64_t conns_total[RDMX_STATS_TRANSPORTS];
	/* One-sided requests of peers this side refused (bad rkey, bounds,
	 * access), and peers cut off for too many (conn.max_access_errors). */
	uint64_t refused, peers_cut;
	/*
	 * The target side: one-sided requests of peers (WRITE, WRITE_IMM,
	 * READ, atomics) served here, and their payload bytes, by
	 * transport and opcode. On verbs the NIC serves them without the
	 * CPU, unseen: only tcp and shm count. refused, by reason.
	 */
	uint64_t served_ops[RDMX_STATS_TRANSPORTS][RDMX_STATS_OPS];
	uint64_t served_bytes[RDMX_STATS_TRANSPORTS][RDMX_STATS_OPS];
	uint64_t refused_by[RDMX_STATS_REFUSALS]; /* enum rdmx_refusal */
};

/* A snapshot of @ctx's counters. */
void rdmx_ctx_stats(struct rdmx_ctx *ctx, struct rdmx_stats *stats_p);

/*
 * rdmx_stats_prometheus - @stats in the Prometheus text format, into @buf
 * as snprintf does: returns the length the whole text needs.
 */
size_t rdmx_stats_prometheus(const struct rdmx_stats *stats, char *buf,
			     size_t len);

/* Upper bound of latency bucket @i in microseconds; the last is +Inf. */
double rdmx_stats_bucket_us(int i);

/* ------------------------------------------------------------------------ */
/* Logging                                                                  */

enum rdmx_log_level {
	RDMX_LOG_ERROR = 0,
	RDMX_LOG_WARN,
	RDMX_LOG_INFO,
	RDMX_LOG_DEBUG,
};

/*
 * rdmx_log - one line through rdmx's logger, "rdmx: <level>: <message>" on
 * stderr, when @level is within the config key log.level (of the last
 * context created). For the systems built on rdmx, so that their lines
 * look and filter like the library's. printf format; %m works.
 */
void rdmx_log(enum rdmx_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * rdmx_log_peer - rdmx_log for a line a peer's doing causes (a refused
 * handshake, a malformed request): at most 10 such lines a second in the
 * process, so that a flood of failing or hostile peers cannot bury the
 * log; the rest are counted, and how many went unsaid is told with the
 * first line said after.
 */
void rdmx_log_peer(enum rdmx_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Short lower-case names: "send", "remote_access", "tcp". */
const char *rdmx_opcode_name(enum rdmx_opcode op);
const char *rdmx_status_name(rdmx_status status);
const char *rdmx_transport_name(int transport);

#ifdef __cplusplus
}
#endif

#endif /* RDMX_H */
