/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "handshake.h"
#include "sock.h"

/* What of @attr the application sees its connection by. */
static void rdmx_conn_take_attr(struct rdmx_conn *conn,
				const struct rdmx_conn_attr *attr)
{
	conn->cq = attr->cq;
	conn->srq = (attr->mask & RDMX_CONN_ATTR_SRQ) ? attr->srq : NULL;
	conn->user_ctx = (attr->mask & RDMX_CONN_ATTR_USER_CTX) ? attr->user_ctx
								: NULL;
}

void rdmx_conn_init(struct rdmx_conn *conn, struct rdmx_ctx *ctx,
		    const struct rdmx_transport_ops *ops,
		    const struct rdmx_conn_attr *attr)
{
	conn->ctx = ctx;
	conn->ops = ops;
	conn->lat = NULL;
	conn->caps = ops->caps;
	rdmx_conn_take_attr(conn, attr);
}

static const void *rdmx_attr_data(const struct rdmx_conn_attr *attr,
				  size_t *len_p)
{
	bool has = attr->mask & RDMX_CONN_ATTR_PRIVATE_DATA;

	*len_p = has ? attr->private_data_len : 0;
	return has ? attr->private_data : NULL;
}

rdmx_status rdmx_conn_setup(struct rdmx_ctx *ctx, int fd, bool accepting,
			    const struct rdmx_hs_result *res,
			    const struct rdmx_conn_attr *attr,
			    uint64_t deadline, struct rdmx_conn **conn_p)
{
	struct rdmx_conn_info info = { 0 };
	uint8_t data[RDMX_PRIVATE_DATA_MAX];
	uint16_t dlen = 0;
	struct rdmx_conn *conn;
	const void *mine;
	size_t len;
	void *priv;
	rdmx_status st;

	rdmx_sock_name(fd, false, info.local_addr, sizeof(info.local_addr));
	rdmx_sock_name(fd, true, info.peer_addr, sizeof(info.peer_addr));
	mine = rdmx_attr_data(attr, &len);
	st = accepting ? rdmx_hs_private_recv(ctx, fd, info.peer_addr, deadline,
					      data, &dlen)
		       : rdmx_hs_private_send(ctx, fd, info.peer_addr, mine,
					      len, deadline);
	if (!st)
		st = rdmx_ctx_transport(ctx, res->transport, &priv);
	if (st) {
		close(fd);
		return st;
	}
	snprintf(info.transport, sizeof(info.transport), "%s",
		 rdmx_transport_by_id(res->transport)->name);
	snprintf(info.reason, sizeof(info.reason), "%s", res->reason);
	st = ctx->tp[res->transport].ops->conn_create(priv, fd, accepting, attr,
						      deadline, &conn);
	if (st)
		return st;
	/* Nothing reads @fd until conn_start: the server's answer is ours. */
	if (!accepting) {
		st = rdmx_hs_private_recv(ctx, fd, info.peer_addr, deadline,
					  data, &dlen);
		if (st) {
			conn->ops->conn_close(conn);
			return st;
		}
	}
	info.flags = conn->info.flags; /* the transport's */
	if (conn->caps & RDMX_CAP_ATOMIC)
		info.flags |= RDMX_CONN_ATOMICS;
	if (conn->info.reason[0]) { /* the transport's detail, e.g. the GID */
		size_t n = strlen(info.reason);

		snprintf(info.reason + n, sizeof(info.reason) - n, "; %s",
			 conn->info.reason);
	}
	conn->info = info;
	conn->ctl_fd = fd;
	memcpy(conn->peer_data, data, dlen);
	conn->peer_data_len = dlen;
	*conn_p = conn;
	return RDMX_OK;
}

rdmx_status rdmx_conn_start(struct rdmx_conn *conn, bool accepting,
			    const struct rdmx_conn_attr *attr,
			    uint64_t deadline, struct rdmx_conn **conn_p)
{
	struct rdmx_ctx *ctx = conn->ctx;
	const void *mine;
	size_t len;
	rdmx_status st = RDMX_OK;

	mine = rdmx_attr_data(attr, &len);
	if (accepting)
		st = rdmx_hs_private_send(ctx, conn->ctl_fd,
					  conn->info.peer_addr, mine, len,
					  deadline);
	if (!st && rdmx_lat_create(conn))
		st = RDMX_ERR_NOMEM;
	if (st) {
		conn->ops->conn_close(conn);
		return st;
	}
	/* The accepting call's, which may not be the one it was set up for. */
	rdmx_conn_take_attr(conn, attr);
	rdmx_stats_conn(conn, 1);
	rdmx_cq_attach(conn->cq, 1);
	if (conn->srq)
		atomic_fetch_add(&conn->srq->nconns, 1);
	rdmx_ctx_child(ctx, &ctx->nconns, 1);
	st = conn->ops->conn_start(conn);
	if (st) {
		rdmx_conn_close(conn);
		return st;
	}
	rdmx_info("connected %s -> %s over %s: %s", conn->info.local_addr,
		  conn->info.peer_addr, conn->info.transport,
		  conn->info.reason);
	*conn_p = conn;
	return RDMX_OK;
}

void rdmx_conn_discard(struct rdmx_conn *conn)
{
	if (conn)
		conn->ops->conn_close(conn);
}

bool rdmx_conn_attr_ok(const struct rdmx_ctx *ctx,
		       const struct rdmx_conn_attr *attr, void *out)
{
	if (!ctx || !attr || !out) {
		rdmx_error("connect/accept: NULL %s",
			   !ctx	   ? "context"
			   : !attr ? "attr"
				   : "output pointer");
		return false;
	}
	if (!attr->cq || attr->cq->ctx != ctx) {
		rdmx_error("connection attr needs a cq of the same context");
		return false;
	}
	if ((attr->mask & RDMX_CONN_ATTR_TRANSPORTS) &&
	    (!attr->transports ||
	     (attr->transports &
	      ~(unsigned)(RDMX_TP_TCP | RDMX_TP_SHM | RDMX_TP_VERBS)))) {
		rdmx_error("connection attr: transports 0x%x: a non-empty set "
			   "of RDMX_TP_TCP, RDMX_TP_SHM, RDMX_TP_VERBS",
			   attr->transports);
		return false;
	}
	if ((attr->mask & RDMX_CONN_ATTR_PRIVATE_DATA) &&
	    (attr->private_data_len > RDMX_PRIVATE_DATA_MAX ||
	     (attr->private_data_len && !attr->private_data))) {
		rdmx_error("connection attr: private data of %zu bytes at %p "
			   "(at most %d, not NULL)",
			   attr->private_data_len, attr->private_data,
			   RDMX_PRIVATE_DATA_MAX);
		return false;
	}
	if ((attr->mask & RDMX_CONN_ATTR_SOURCE_ADDR) && !attr->source_addr) {
		rdmx_error("connection attr: NULL source address");
		return false;
	}
	if ((attr->mask & RDMX_CONN_ATTR_SRQ) &&
	    (!attr->srq || attr->srq->ctx != ctx)) {
		rdmx_error("connection attr names no srq, or one of another "
			   "context");
		return false;
	}
	return true;
}

rdmx_status rdmx_connect(struct rdmx_ctx *ctx, const char *addr,
			 const struct rdmx_conn_attr *attr, int timeout_ms,
			 struct rdmx_conn **conn_p)
{
	/* The call's bound covers all of it: name, TCP, handshake, setup. */
	uint64_t call = rdmx_deadline(timeout_ms), step;
	struct rdmx_hs_result res;
	struct rdmx_conn *conn;
	char peer[64], named[256];
	rdmx_status st;
	int fd;

	if (!addr)
		return rdmx_invalid("rdmx_connect", "NULL address");
	if (!rdmx_conn_attr_ok(ctx, attr, conn_p))
		return RDMX_ERR_INVALID;
	if (*addr == '@') {
		st = rdmx_ctx_resolve(ctx, addr + 1, named, sizeof(named));
		if (st)
			return st;
		addr = named;
	}
	st = rdmx_sock_connect(addr,
			       (attr->mask & RDMX_CONN_ATTR_SOURCE_ADDR)
				       ? attr->source_addr
				       : ctx->cfg.source_addr,
			       rdmx_ms_left(call), &fd);
	if (st)
		return st;
	rdmx_sock_name(fd, true, peer, sizeof(peer));
	rdmx_sock_liveness(fd, (unsigned)ctx->cfg.tcp_user_timeout_ms);
	/* Forever (-1) still gives a silent server conn.handshake_timeout
	 * per step, as the server gives a silent client. */
	step = timeout_ms < 0
		       ? rdmx_deadline((int)ctx->cfg.handshake_timeout_ms)
		       : call;
	st = rdmx_hs_client(ctx, fd, peer, rdmx_conn_attr_transports(attr),
			    step, &res);
	if (st) {
		close(fd);
		return st;
	}
	if (timeout_ms < 0)
		step = rdmx_deadline((int)ctx->cfg.handshake_timeout_ms);
	st = rdmx_conn_setup(ctx, fd, false, &res, attr, step, &conn);
	if (st)
		return st;
	return rdmx_conn_start(conn, false, attr, step, conn_p);
}

void rdmx_conn_mem_put(struct rdmx_conn *conn)
{
	/* keep counts the holders beyond one: the last one sees 0. */
	if (atomic_fetch_sub(&conn->keep, 1) == 0)
		free(conn);
}

void rdmx_conn_close(struct rdmx_conn *conn)
{
	struct rdmx_ctx *ctx;
	struct rdmx_cq *cq;
	struct rdmx_srq *srq;
	struct rdmx_lat *lat;

	if (!conn)
		return;
	ctx = conn->ctx;
	cq = conn->cq;
	srq = conn->srq;
	lat = conn->lat;
	rdmx_stats_conn(conn, -1);
	atomic_fetch_add(&conn->keep, 1); /* the cq's, for rdmx_cq_closed */
	conn->ops->conn_close(conn); /* its flush still uses lat */
	rdmx_lat_destroy(lat);
	rdmx_cq_closed(cq, conn);
	rdmx_cq_attach(cq, -1);
	if (srq)
		atomic_fetch_sub(&srq->nconns, 1);
	rdmx_ctx_child(ctx, &ctx->nconns, -1);
}

void rdmx_conn_info(const struct rdmx_conn *conn, struct rdmx_conn_info *info_p)
{
	*info_p = conn->info;
}

rdmx_status rdmx_remote_attach(struct rdmx_conn *conn,
			       const struct rdmx_remote *remote)
{
	if (!conn || !remote)
		return rdmx_invalid("rdmx_remote_attach", "NULL %s",
				    conn ? "region" : "connection");
	if (conn->ops->remote_attach)
		conn->ops->remote_attach(conn, remote);
	return RDMX_OK;
}

rdmx_status rdmx_conn_check(const struct rdmx_conn *conn)
{
	if (!conn)
		return rdmx_invalid("rdmx_conn_check", "NULL connection");
	return conn->ops->conn_check((struct rdmx_conn *)conn);
}

const void *rdmx_conn_private_data(const struct rdmx_conn *conn, size_t *len_p)
{
	size_t len = conn ? conn->peer_data_len : 0;

	if (len_p)
		*len_p = len;
	return len ? conn->peer_data : NULL;
}

void *rdmx_conn_user_ctx(const struct rdmx_conn *conn)
{
	return conn->user_ctx;
}

/* ---- posting ------------------------------------------------------------ */

static uint64_t rdmx_opcode_cap(enum rdmx_opcode op)
{
	switch (op) {
	case RDMX_OP_SEND:
		return RDMX_CAP_SEND;
	case RDMX_OP_WRITE:
		return RDMX_CAP_WRITE;
	case RDMX_OP_WRITE_IMM:
		return RDMX_CAP_WRITE_IMM;
	case RDMX_OP_READ:
		return RDMX_CAP_READ;
	case RDMX_OP_FETCH_ADD:
	case RDMX_OP_CMP_SWAP:
		return RDMX_CAP_ATOMIC;
	default:
		return 0;
	}
}

/* Everything about @wr that can be checked before it is posted; @total_p
 * gets its bytes. */
static rdmx_status rdmx_wr_check(const struct rdmx_conn *conn,
				 const struct rdmx_wr *wr, uint64_t *total_p)
{
	uint64_t cap, total = 0;
	bool atomic, into_local;
	rdmx_status st;

	if (wr->flags & ~(unsigned)(RDMX_WR_UNSIGNALED | RDMX_WR_FENCE |
				    RDMX_WR_UNORDERED)) {
		rdmx_error("post: unknown flags 0x%x", wr->flags);
		return RDMX_ERR_INVALID;
	}
	cap = rdmx_opcode_cap(wr->opcode);
	if (!cap) {
		rdmx_error("post: opcode %d is not an initiator operation",
			   wr->opcode);
		return RDMX_ERR_INVALID;
	}
	if ((wr->flags & RDMX_WR_UNORDERED) &&
	    (cap == RDMX_CAP_SEND || cap == RDMX_CAP_WRITE_IMM ||
	     (wr->flags & RDMX_WR_FENCE))) {
		rdmx_error("post: RDMX_WR_UNORDERED is for a WRITE, READ or "
			   "atomic without RDMX_WR_FENCE");
		return RDMX_ERR_INVALID;
	}
	if (!(conn->caps & cap))
		return RDMX_ERR_UNSUPPORTED;
	atomic = cap == RDMX_CAP_ATOMIC;
	into_local = atomic || wr->opcode == RDMX_OP_READ;
	st = rdmx_sge_check(wr->sg_list, wr->num_sge,
			    (int)conn->ctx->cfg.conn_max_sge, into_local,
			    &total);
	if (st)
		return st;
	if (atomic && (total != 8 || (wr->remote_addr & 7))) {
		rdmx_error("post: atomics need an 8-byte result sge and an "
			   "8-byte aligned remote address (got %llu bytes at "
			   "0x%llx)",
			   (unsigned long long)total,
			   (unsigned long long)wr->remote_addr);
		return RDMX_ERR_INVALID;
	}
	*total_p = total;
	return RDMX_OK;
}

rdmx_status rdmx_post(struct rdmx_conn *conn, const struct rdmx_wr *wr)
{
	uint64_t total;
	rdmx_status st;

	if (!conn || !wr)
		return rdmx_invalid("rdmx_post", "NULL %s",
				    !conn ? "connection" : "work request");
	st = rdmx_wr_check(conn, wr, &total);
	if (st)
		return st;
	rdmx_lat_stamp(conn, wr, 1);
	st = conn->ops->post_send(conn, wr);
	if (st)
		rdmx_lat_unstamp(conn, wr, 1);
	else
		rdmx_stats_posted(conn, wr->opcode, total);
	return st;
}

rdmx_status rdmx_post_list(struct rdmx_conn *conn, const struct rdmx_wr *wrs,
			   int n, int *posted_p)
{
	struct rdmx_stats_tally tally = { 0 };
	rdmx_status st = RDMX_OK, bad = RDMX_OK;
	int valid = 0, posted = 0;
	uint64_t total;

	if (!conn || n < 0 || (n && !wrs))
		return rdmx_invalid("rdmx_post_list",
				    "NULL connection, or %d requests at %p", n,
				    (const void *)wrs);
	/* The good prefix goes; the first bad request stops the list. */
	while (valid < n && !(bad = rdmx_wr_check(conn, &wrs[valid], &total))) {
		tally.ops[wrs[valid].opcode]++;
		tally.bytes[wrs[valid].opcode] += total;
		valid++;
	}
	rdmx_lat_stamp(conn, wrs, valid);
	if (conn->ops->post_list)
		st = conn->ops->post_list(conn, wrs, valid, &posted);
	else
		while (posted < valid &&
		       !(st = conn->ops->post_send(conn, &wrs[posted])))
			posted++;
	rdmx_lat_unstamp(conn, wrs + posted, valid - posted);
	for (int i = posted; i < valid; i++)
		rdmx_stats_unposted(&tally, &wrs[i]);
	rdmx_stats_posted_tally(conn, &tally);
	if (posted_p)
		*posted_p = posted;
	return st ? st : bad;
}

rdmx_status rdmx_post_recv(struct rdmx_conn *conn, const struct rdmx_sge *sg,
			   int num_sge, uint64_t wr_id)
{
	rdmx_status st;

	if (!conn)
		return rdmx_invalid("rdmx_post_recv", "NULL connection");
	if (conn->srq) {
		rdmx_error("rdmx_post_recv: the connection to %s takes its "
			   "RECVs from a srq; use rdmx_srq_post_recv",
			   conn->info.peer_addr);
		return RDMX_ERR_INVALID;
	}
	if (!conn->ops->post_recv)
		return RDMX_ERR_UNSUPPORTED;
	st = rdmx_recv_check(conn->ctx, sg, num_sge);
	if (st)
		return st;
	return conn->ops->post_recv(conn, sg, num_sge, wr_id);
}

static rdmx_status rdmx_post_one(struct rdmx_conn *conn, enum rdmx_opcode op,
				 const struct rdmx_sge *sg, uint64_t raddr,
				 uint64_t rkey, uint64_t wr_id, uint32_t imm,
				 uint64_t a0, uint64_t a1)
{
	struct rdmx_wr wr = { .wr_id = wr_id,
			      .opcode = op,
			      .sg_list = sg,
			      .num_sge = sg ? 1 : 0,
			      .imm = imm,
			      .remote_addr = raddr,
			      .rkey = rkey,
			      .compare_add = a0,
			      .swap = a1 };

	return rdmx_post(conn, &wr);
}

rdmx_status rdmx_post_send(struct rdmx_conn *conn, const struct rdmx_sge *sg,
			   uint64_t wr_id)
{
	return rdmx_post_one(conn, RDMX_OP_SEND, sg, 0, 0, wr_id, 0, 0, 0);
}

rdmx_status rdmx_post_write(struct rdmx_conn *conn, const struct rdmx_sge *sg,
			    uint64_t raddr, uint64_t rkey, uint64_t wr_id)
{
	return rdmx_post_one(conn, RDMX_OP_WRITE, sg, raddr, rkey, wr_id, 0, 0,
			     0);
}

rdmx_status rdmx_post_write_imm(struct rdmx_conn *conn,
				const struct rdmx_sge *sg, uint64_t raddr,
				uint64_t rkey, uint32_t imm, uint64_t wr_id)
{
	return rdmx_post_one(conn, RDMX_OP_WRITE_IMM, sg, raddr, rkey, wr_id,
			     imm, 0, 0);
}

rdmx_status rdmx_post_read(struct rdmx_conn *conn, const struct rdmx_sge *sg,
			   uint64_t raddr, uint64_t rkey, uint64_t wr_id)
{
	return rdmx_post_one(conn, RDMX_OP_READ, sg, raddr, rkey, wr_id, 0, 0,
			     0);
}

rdmx_status rdmx_post_fetch_add(struct rdmx_conn *conn,
				const struct rdmx_sge *result, uint64_t raddr,
				uint64_t rkey, uint64_t add, uint64_t wr_id)
{
	return rdmx_post_one(conn, RDMX_OP_FETCH_ADD, result, raddr, rkey,
			     wr_id, 0, add, 0);
}

rdmx_status rdmx_post_cmp_swap(struct rdmx_conn *conn,
			       const struct rdmx_sge *result, uint64_t raddr,
			       uint64_t rkey, uint64_t compare, uint64_t swap,
			       uint64_t wr_id)
{
	return rdmx_post_one(conn, RDMX_OP_CMP_SWAP, result, raddr, rkey, wr_id,
			     0, compare, swap);
}
