/* SPDX-License-Identifier: MIT */
/*
 * Connecting a verbs QP: each side registers its credit word and tells the
 * peer over the control socket; the accepting side listens with rdma_cm on
 * its address of the control connection, the connecting side resolves the
 * route to the peer's address and connects. rdma_cm picks the GID from the
 * address: on RoCE the RoCEv2 GID of that IP, never a link-local one.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sock.h"
#include "verbs.h"
#include "verbs_proto.h"

/*
 * Wait for the next CM event, which must be @want; acks it. @token_p, if
 * not NULL, receives the first RDMX_VERBS_TOKEN_LEN bytes of its private
 * data (zeros where there are fewer).
 */
static rdmx_status rdmx_verbs_cm_wait_data(struct rdmx_verbs_conn *c,
					   enum rdma_cm_event_type want,
					   uint64_t deadline,
					   struct rdma_cm_id **id_p,
					   uint8_t *token_p)
{
	/* The control socket too: a peer that gives up ends the wait. */
	struct pollfd pfd[2] = { { .fd = c->ech->fd, .events = POLLIN },
				 { .fd = c->ctl, .events = POLLRDHUP } };
	struct rdma_cm_event *ev;
	enum rdma_cm_event_type got;
	int status, ms = rdmx_ms_left(deadline);

	if (!ms || poll(pfd, 2, ms) <= 0) {
		rdmx_error("verbs: no %s from %s in time", rdma_event_str(want),
			   c->base.info.peer_addr);
		return RDMX_ERR_TIMEOUT;
	}
	if (!(pfd[0].revents & POLLIN)) {
		rdmx_error("verbs: %s closed the connection while setting up "
			   "(waiting for %s; see its log)",
			   c->base.info.peer_addr, rdma_event_str(want));
		return RDMX_ERR_CONN_LOST;
	}
	if (rdma_get_cm_event(c->ech, &ev)) {
		rdmx_error("verbs: rdma_get_cm_event: %m");
		return RDMX_ERR_SYSTEM;
	}
	got = ev->event;
	status = ev->status;
	if (id_p)
		*id_p = ev->id;
	if (token_p) {
		size_t n = ev->param.conn.private_data_len;

		memset(token_p, 0, RDMX_VERBS_TOKEN_LEN);
		if (ev->param.conn.private_data)
			memcpy(token_p, ev->param.conn.private_data,
			       n < RDMX_VERBS_TOKEN_LEN ? n
							: RDMX_VERBS_TOKEN_LEN);
	}
	rdma_ack_cm_event(ev);
	if (got != want) {
		rdmx_error("verbs: %s with %s while waiting for %s (status %d)",
			   rdma_event_str(got), c->base.info.peer_addr,
			   rdma_event_str(want), status);
		return got == RDMA_CM_EVENT_REJECTED ? RDMX_ERR_CONN_REFUSED
						     : RDMX_ERR_UNREACHABLE;
	}
	return RDMX_OK;
}

static rdmx_status rdmx_verbs_cm_wait(struct rdmx_verbs_conn *c,
				      enum rdma_cm_event_type want,
				      uint64_t deadline,
				      struct rdma_cm_id **id_p)
{
	return rdmx_verbs_cm_wait_data(c, want, deadline, id_p, NULL);
}

/*
 * The CONNECT_REQUEST of the peer that authenticated on the control
 * connection: it carries the token we sent there. Anyone else's (another
 * host may find the port first) is rejected, and we wait on.
 */
static rdmx_status rdmx_verbs_cm_request(struct rdmx_verbs_conn *c,
					 const uint8_t *token,
					 uint64_t deadline,
					 struct rdma_cm_id **id_p)
{
	uint8_t got[RDMX_VERBS_TOKEN_LEN];
	struct rdma_cm_id *id;
	rdmx_status st;

	for (;;) {
		st = rdmx_verbs_cm_wait_data(c, RDMA_CM_EVENT_CONNECT_REQUEST,
					     deadline, &id, got);
		if (st)
			return st;
		if (!sodium_memcmp(got, token, sizeof(got))) {
			*id_p = id;
			return RDMX_OK;
		}
		rdmx_warn("verbs: rejected a CONNECT_REQUEST without the token "
			  "of %s's control connection (from another peer)",
			  c->base.info.peer_addr);
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
	}
}

static rdmx_status rdmx_verbs_ring_alloc(struct rdmx_verbs_ring *r,
					 uint32_t size)
{
	r->rec = calloc(size, sizeof(*r->rec));
	r->size = size;
	return r->rec ? RDMX_OK : RDMX_ERR_NOMEM;
}

/*
 * Bounded failure: with the ACK timeout at 4.096 us * 2^14 (~67 ms) and 7
 * retries, a request the peer's NIC never answers fails in about half a
 * second (retries exhausted) instead of the many seconds of the defaults.
 */
#define RDMX_VERBS_ACK_TIMEOUT 14

static enum ibv_mtu rdmx_verbs_mtu_enum(uint32_t bytes)
{
	return bytes >= 4096   ? IBV_MTU_4096
	       : bytes >= 2048 ? IBV_MTU_2048
	       : bytes >= 1024 ? IBV_MTU_1024
	       : bytes >= 512  ? IBV_MTU_512
			       : IBV_MTU_256;
}

/*
 * verbs.mtu: rdma_cm takes the path MTU from the route and moves a QP it
 * created through its states by itself, so a capped MTU needs a QP of our
 * own, moved to INIT here and to RTR and RTS by rdmx_verbs_ready (the
 * librdmacm man pages' manual path: rdma_init_qp_attr, then qp_num in the
 * connection parameters and rdma_establish on the active side).
 */
static int rdmx_verbs_own_qp(struct rdmx_verbs_conn *c, struct rdma_cm_id *id,
			     struct ibv_qp_init_attr *qa)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT };
	int mask;

	c->qp = ibv_create_qp(c->d->pd, qa);
	if (!c->qp)
		return -1;
	if (rdma_init_qp_attr(id, &a, &mask) ||
	    ibv_modify_qp(c->qp, &a, mask)) {
		ibv_destroy_qp(c->qp);
		c->qp = NULL;
		return -1;
	}
	return 0;
}

/* Our QP to RTR, its path MTU capped, then RTS. @param: the passive
 * side's, as it accepts; NULL on the active side (as negotiated). */
static rdmx_status rdmx_verbs_ready(struct rdmx_verbs_conn *c,
				    struct rdma_cm_id *id,
				    const struct rdma_conn_param *param)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT };
	enum ibv_mtu cap = rdmx_verbs_mtu_enum(c->mtu);
	struct ibv_port_attr pa;
	int mask;

	/* INIT again: the connection changed its attributes (as librdmacm
	 * does before RTR). */
	if (rdma_init_qp_attr(id, &a, &mask) || ibv_modify_qp(c->qp, &a, mask))
		goto fail;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
	if (rdma_init_qp_attr(id, &a, &mask))
		goto fail;
	/* As librdmacm: old kernels set RoCE-only bits on InfiniBand. */
	if (!ibv_query_port(c->d->dev, id->port_num, &pa) &&
	    pa.link_layer == IBV_LINK_LAYER_INFINIBAND)
		mask &= ~0xe00000;
	if (a.path_mtu > cap)
		a.path_mtu = cap;
	if (param)
		a.max_dest_rd_atomic = param->responder_resources;
	if (ibv_modify_qp(c->qp, &a, mask))
		goto fail;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS };
	if (rdma_init_qp_attr(id, &a, &mask))
		goto fail;
	if (param)
		a.max_rd_atomic = param->initiator_depth;
	if (ibv_modify_qp(c->qp, &a, mask))
		goto fail;
	return RDMX_OK;
fail:
	rdmx_error("verbs: moving the QP to state %d for %s: %m",
		   (int)a.qp_state, c->base.info.peer_addr);
	return RDMX_ERR_SYSTEM;
}

/* The CQ and the RC QP on @id, sized from the config and the device. */
static rdmx_status rdmx_verbs_qp(struct rdmx_verbs_conn *c,
				 struct rdma_cm_id *id)
{
	uint8_t ack_timeout = RDMX_VERBS_ACK_TIMEOUT;

	struct rdmx_verbs_dev *d = c->d;
	const struct rdmx_config *cfg = &c->vctx->ctx->cfg;
	/* One credit update in flight beside the user's work. */
	uint32_t sq = (uint32_t)cfg->conn_max_send_wr + 2;
	uint32_t rq = (uint32_t)cfg->conn_max_recv_wr, cqe;
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC };
	int sge = d->attr.max_sge < (int)cfg->conn_max_sge
			  ? d->attr.max_sge
			  : (int)cfg->conn_max_sge;

	if (id->verbs->device != d->dev->device) {
		rdmx_error("verbs: %s is reached through %s, not %s, which "
			   "owns our address",
			   c->base.info.peer_addr,
			   ibv_get_device_name(id->verbs->device), d->name);
		return RDMX_ERR_UNREACHABLE;
	}
	if (sq > (uint32_t)d->attr.max_qp_wr)
		sq = (uint32_t)d->attr.max_qp_wr;
	if (rq > (uint32_t)d->attr.max_qp_wr)
		rq = (uint32_t)d->attr.max_qp_wr;
	/* With a srq, every RECV it holds may complete in our CQ. */
	cqe = sq + (c->srq ? c->srq->size : rq);
	c->cq = ibv_create_cq(d->dev, (int)cqe, c, d->chan, 0);
	if (!c->cq || ibv_req_notify_cq(c->cq, 0)) {
		rdmx_error("verbs: ibv_create_cq of %u entries: %m", cqe);
		return RDMX_ERR_SYSTEM;
	}
	qa.send_cq = qa.recv_cq = c->cq;
	qa.cap.max_send_wr = sq;
	qa.cap.max_recv_wr = c->srq ? 0 : rq;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = (uint32_t)sge;
	if (c->srq) {
		qa.srq = c->srq->ibsrq;
		qa.cap.max_recv_sge = 0;
		rq = 1; /* the ring stays unused */
	}
	qa.cap.max_inline_data = (uint32_t)cfg->verbs_max_inline_data;
	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
			    &ack_timeout, sizeof(ack_timeout)))
		rdmx_warn("verbs: cannot set the ACK timeout: %m");
	c->own_qp = c->mtu &&
		    d->dev->device->transport_type == IBV_TRANSPORT_IB;
	if (c->own_qp ? rdmx_verbs_own_qp(c, id, &qa)
		      : rdma_create_qp(id, d->pd, &qa)) {
		rdmx_error("verbs: creating the QP (send %u, recv %u, sge %d, "
			   "inline %u): %m",
			   sq, rq, sge, (unsigned)cfg->verbs_max_inline_data);
		return RDMX_ERR_SYSTEM;
	}
	c->max_inline = qa.cap.max_inline_data;
	if (!c->own_qp)
		c->qp = id->qp;
	c->id = id;
	if (rdmx_verbs_ring_alloc(&c->sq, sq) ||
	    rdmx_verbs_ring_alloc(&c->rq, rq))
		return RDMX_ERR_NOMEM;
	return RDMX_OK;
}

static struct rdma_conn_param rdmx_verbs_param(const struct rdmx_verbs_conn *c)
{
	const struct ibv_device_attr *a = &c->d->attr;
	/*
	 * READ and atomics need responder resources. RNR never happens with
	 * credits; towards a srq it does, and rnr_retry_count is what the
	 * peer's QP will do then (rdma_cm hands each side's to the other):
	 * 7, retry for as long as it takes.
	 */
	struct rdma_conn_param p = { .retry_count = 7,
				     .rnr_retry_count = c->srq ? 7 : 0 };

	p.responder_resources =
		(uint8_t)(a->max_qp_rd_atom < 16 ? a->max_qp_rd_atom : 16);
	p.initiator_depth = (uint8_t)(a->max_qp_init_rd_atom < 16
					      ? a->max_qp_init_rd_atom
					      : 16);
	return p;
}

/*
 * Say which port and GID carry the connection, and add it to its reason
 * (core's, when the QP is made after core filled it in: accepting).
 */
static void rdmx_verbs_log_gid(struct rdmx_verbs_conn *c)
{
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;
	union ibv_gid gid;
	char s[INET6_ADDRSTRLEN] = "?", where[192];
	char *reason = c->base.info.reason;
	size_t n = strlen(reason);
	uint8_t idx;

	if (ibv_query_qp(c->qp, &qa, IBV_QP_AV | IBV_QP_PATH_MTU, &ia))
		return;
	idx = qa.ah_attr.grh.sgid_index;
	if (!ibv_query_gid(c->d->dev, c->id->port_num, idx, &gid))
		inet_ntop(AF_INET6, gid.raw, s, sizeof(s));
	if (snprintf(where, sizeof(where), "%s port %u, gid %u %s", c->d->name,
		     c->id->port_num, idx, s) < 0)
		return;
	if (c->d->dev->device->transport_type == IBV_TRANSPORT_IB) {
		size_t w = strlen(where);

		snprintf(where + w, sizeof(where) - w, ", mtu %d",
			 128 << qa.path_mtu);
	}
	/* The reason is for people: cut to its room if need be. */
	if (snprintf(reason + n, sizeof(c->base.info.reason) - n, "%s%s",
		     n ? "; " : "", where) < 0)
		return;
	rdmx_info("verbs: %s -> %s on %s", c->base.info.local_addr,
		  c->base.info.peer_addr, where);
}

/* verbs.mtu in bytes; 0 for auto. */
static uint32_t rdmx_verbs_mtu_wanted(const struct rdmx_config *cfg)
{
	return (uint32_t)strtoul(cfg->verbs_mtu, NULL, 10);
}

/*
 * Send our setup, then read the peer's (both sides write first). The MTU
 * is the smaller of the two wishes, so both QPs agree.
 */
static rdmx_status rdmx_verbs_exchange(struct rdmx_verbs_conn *c,
				       const struct rdmx_verbs_setup *mine,
				       struct rdmx_verbs_setup *theirs,
				       uint64_t deadline)
{
	uint8_t b[RDMX_VERBS_SETUP_LEN];
	rdmx_status st;

	rdmx_verbs_setup_pack(mine, b);
	st = rdmx_sock_write_full(c->ctl, b, sizeof(b), deadline);
	if (!st)
		st = rdmx_sock_read_full(c->ctl, b, sizeof(b), deadline);
	if (!st && rdmx_verbs_setup_unpack(b, theirs))
		st = RDMX_ERR_PROTOCOL;
	if (st)
		return st;
	c->mtu = mine->mtu;
	if (theirs->mtu && (!c->mtu || theirs->mtu < c->mtu))
		c->mtu = theirs->mtu;
	return st;
}

/*
 * Towards our srq, a SEND that finds it empty is told to come back after
 * the RNR timer of our QP: rdma_cm leaves it at 0, which means 655 ms.
 * 1 (10 us) lets it in soon after a RECV is posted.
 */
static void rdmx_verbs_rnr_timer(struct rdmx_verbs_conn *c)
{
	struct ibv_qp_attr a = { .min_rnr_timer = 1 };

	if (ibv_modify_qp(c->qp, &a, IBV_QP_MIN_RNR_TIMER))
		rdmx_warn("verbs: cannot shorten the RNR timer of the QP to "
			  "%s (a SEND to an empty srq then waits 655 ms per "
			  "retry): %m",
			  c->base.info.peer_addr);
}

/* The QP is connected, on either side: say where, shorten its RNR wait. */
static void rdmx_verbs_qp_up(struct rdmx_verbs_conn *c)
{
	rdmx_verbs_log_gid(c);
	if (c->srq)
		rdmx_verbs_rnr_timer(c);
}

/*
 * Accepting side, first half (a listener's worker): listen on our address
 * of the control connection, swap setups and wait for the peer's
 * CONNECT_REQUEST, which is kept for rdmx_verbs_accept_finish.
 */
static rdmx_status rdmx_verbs_accept_request(struct rdmx_verbs_conn *c,
					     struct rdmx_verbs_setup *mine,
					     struct rdmx_verbs_setup *theirs,
					     uint64_t deadline)
{
	struct sockaddr_storage ss;
	struct rdma_cm_id *lid;
	rdmx_status st = RDMX_ERR_SYSTEM;

	if (rdmx_verbs_local_addr(c->ctl, &ss) ||
	    rdma_create_id(c->ech, &lid, c, RDMA_PS_TCP))
		return RDMX_ERR_SYSTEM;
	/*
	 * On iWARP the listener is a real TCP socket: the port rdma_cm picks
	 * may already be a TCP connection's (seen with 64 connections on
	 * siw), so a fresh id tries another.
	 */
	for (int tries = 1;
	     rdma_bind_addr(lid, (struct sockaddr *)&ss) || rdma_listen(lid, 1);
	     tries++) {
		if (errno != EADDRINUSE || tries == 8) {
			rdmx_error("verbs: rdma_cm cannot listen on %s: %m",
				   c->base.info.local_addr);
			goto out;
		}
		rdma_destroy_id(lid);
		if (rdma_create_id(c->ech, &lid, c, RDMA_PS_TCP))
			return RDMX_ERR_SYSTEM;
	}
	mine->cm_port = ntohs(rdma_get_src_port(lid));
	randombytes_buf(mine->token, sizeof(mine->token));
	st = RDMX_OK;
out:
	/* The connector sends its setup before it connects: no deadlock. */
	if (!st)
		st = rdmx_verbs_exchange(c, mine, theirs, deadline);
	if (!st)
		st = rdmx_verbs_cm_request(c, mine->token, deadline, &c->req);
	if (st)
		rdma_destroy_id(lid);
	else
		c->lid = lid;
	return st;
}

/* A srq lives on the context's first device: a connection on another
 * one cannot take its RECVs. */
static rdmx_status rdmx_verbs_srq_here(const struct rdmx_verbs_conn *c)
{
	if (!c->srq || c->srq->d == c->d)
		return RDMX_OK;
	rdmx_error("verbs: the connection with %s goes through %s, and its "
		   "srq lives on %s: a srq serves connections on the "
		   "context's first device (verbs.device picks it)",
		   c->base.info.peer_addr, c->d->name, c->srq->d->name);
	return RDMX_ERR_NO_TRANSPORT;
}

/*
 * Accepting side, second half (rdmx_accept): the QP, now that the srq is
 * known, and the answer, which tells the peer whether our RECVs come from
 * a srq. What is left to wait for is the peer's kernel.
 */
static rdmx_status rdmx_verbs_accept_finish(struct rdmx_verbs_conn *c,
					    uint64_t deadline)
{
	struct rdma_cm_id *id = c->req;
	struct rdma_conn_param param;
	uint8_t pd[RDMX_VERBS_TOKEN_LEN] = { 0 };
	rdmx_status st;

	c->req = NULL;
	c->srq = c->base.srq ? c->base.srq->tp : NULL;
	st = rdmx_verbs_srq_here(c);
	if (st) {
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		rdma_destroy_id(c->lid);
		c->lid = NULL;
		return st;
	}
	param = rdmx_verbs_param(c);
	pd[0] = c->srq ? RDMX_VERBS_F_SRQ : 0;
	param.private_data = pd;
	param.private_data_len = sizeof(pd);
	st = rdmx_verbs_qp(c, id);
	if (!st && c->own_qp) {
		param.qp_num = c->qp->qp_num;
		st = rdmx_verbs_ready(c, id, &param);
	}
	if (st) {
		rdma_reject(id, NULL, 0);
		if (c->id != id)
			rdma_destroy_id(id);
	} else if (rdma_accept(id, &param)) {
		rdmx_error("verbs: rdma_accept of %s: %m",
			   c->base.info.peer_addr);
		st = RDMX_ERR_SYSTEM;
	}
	if (!st)
		st = rdmx_verbs_cm_wait(c, RDMA_CM_EVENT_ESTABLISHED, deadline,
					NULL);
	rdma_destroy_id(c->lid);
	c->lid = NULL;
	if (!st) {
		rdmx_verbs_qp_up(c);
		c->quiet = rdmx_verbs_iwarp(c->d);
		c->quiet_since = rdmx_now_us();
	}
	return st;
}

/*
 * verbs.gid_index: connect from that GID's address. rdma_cm derives the
 * GID from the source IP, so the GID must carry one: a RoCE GID mapped from
 * IPv4. Others (link-local fe80::, IB GIDs) are refused with the reason.
 */
static rdmx_status rdmx_verbs_gid_source(struct rdmx_verbs_conn *c,
					 struct sockaddr_storage *src)
{
	static const uint8_t v4[12] = {
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
	};
	int idx = c->vctx->ctx->cfg.verbs_gid_index;
	struct sockaddr_in *sin = (struct sockaddr_in *)src;
	char s[INET6_ADDRSTRLEN] = "?";
	union ibv_gid gid;

	if (idx < 0)
		return RDMX_OK;
	if (ibv_query_gid(c->d->dev, (uint8_t)c->vctx->ctx->cfg.verbs_port, idx,
			  &gid)) {
		rdmx_error("verbs.gid_index %d: %s has no such GID", idx,
			   c->d->name);
		return RDMX_ERR_CONFIG;
	}
	inet_ntop(AF_INET6, gid.raw, s, sizeof(s));
	if (memcmp(gid.raw, v4, sizeof(v4))) {
		rdmx_error(
			"verbs.gid_index %d of %s is %s, which carries no IPv4 "
			"address (link-local or IB): rdmx connects only from "
			"a RoCEv2 GID with an address (rdmx info lists them)",
			idx, c->d->name, s);
		return RDMX_ERR_CONFIG;
	}
	memset(src, 0, sizeof(*src));
	sin->sin_family = AF_INET;
	memcpy(&sin->sin_addr, gid.raw + 12, 4);
	rdmx_info("verbs: connecting from gid %d %s (verbs.gid_index)", idx, s);
	return RDMX_OK;
}

/*
 * iWARP connects over a kernel TCP socket bound to the cm_id's port, but
 * rdma_cm picks that port in its own port space without asking the TCP
 * stack: one a TCP socket holds (our control connection's, say) makes
 * rdma_connect fail with EADDRINUSE. True when @id's port is so taken.
 */
static bool rdmx_verbs_port_taken(struct rdma_cm_id *id)
{
	struct sockaddr *a = rdma_get_local_addr(id);
	socklen_t len = a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
						 : sizeof(struct sockaddr_in);
	int fd, rc;

	if (!id->verbs ||
	    id->verbs->device->transport_type != IBV_TRANSPORT_IWARP)
		return false;
	fd = socket(a->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	rc = bind(fd, a, len);
	close(fd);
	return rc && errno == EADDRINUSE;
}

/*
 * A new id, bound to a port, with @dst's address resolved from @src.
 * Resolution is part of setup: the setup's deadline bounds it, not a fixed
 * 2 s that an emulated guest under load can miss.
 */
static rdmx_status rdmx_verbs_resolve(struct rdmx_verbs_conn *c,
				      struct sockaddr *src,
				      struct sockaddr *dst, uint64_t deadline,
				      struct rdma_cm_id **id_p)
{
	rdmx_status st;

	if (rdma_create_id(c->ech, id_p, c, RDMA_PS_TCP)) {
		rdmx_error("verbs: rdma_create_id: %m");
		return RDMX_ERR_SYSTEM;
	}
	if (rdma_resolve_addr(*id_p, src, dst, rdmx_ms_left(deadline))) {
		rdmx_error("verbs: rdma_resolve_addr %s: %m",
			   c->base.info.peer_addr);
		st = RDMX_ERR_UNREACHABLE;
	} else {
		st = rdmx_verbs_cm_wait(c, RDMA_CM_EVENT_ADDR_RESOLVED,
					deadline, NULL);
	}
	if (st)
		rdma_destroy_id(*id_p);
	return st;
}

/* Connecting side: resolve the peer's address and route, then connect. */
static rdmx_status rdmx_verbs_connect(struct rdmx_verbs_conn *c,
				      const struct rdmx_verbs_setup *theirs,
				      uint64_t deadline)
{
	struct rdma_conn_param param = rdmx_verbs_param(c);
	uint8_t answer[RDMX_VERBS_TOKEN_LEN] = { 0 }; /* the acceptor's flags */
	struct sockaddr_storage src, dst;
	socklen_t dl = sizeof(dst);
	struct rdma_cm_id *id;
	rdmx_status st;

	if (rdmx_verbs_local_addr(c->ctl, &src) ||
	    getpeername(c->ctl, (struct sockaddr *)&dst, &dl))
		return RDMX_ERR_SYSTEM;
	st = rdmx_verbs_gid_source(c, &src);
	if (st)
		return st;
	((struct sockaddr_in *)&dst)->sin_port =
		htons((uint16_t)theirs->cm_port);
	for (int tries = 0;; tries++) {
		st = rdmx_verbs_resolve(c, (struct sockaddr *)&src,
					(struct sockaddr *)&dst, deadline, &id);
		if (st)
			return st;
		if (tries == 8 || !rdmx_verbs_port_taken(id))
			break;
		rdmx_info("verbs: rdma_cm gave port %u, which a TCP socket "
			  "holds (iWARP connects over TCP): another",
			  ntohs(rdma_get_src_port(id)));
		rdma_destroy_id(id);
	}
	if (rdma_resolve_route(id, rdmx_ms_left(deadline)))
		st = RDMX_ERR_UNREACHABLE;
	if (!st)
		st = rdmx_verbs_cm_wait(c, RDMA_CM_EVENT_ROUTE_RESOLVED,
					deadline, NULL);
	if (!st)
		st = rdmx_verbs_qp(c, id);
	if (!st && c->own_qp)
		param.qp_num = c->qp->qp_num;
	/* Proves this request comes from the peer of the control connection. */
	param.private_data = theirs->token;
	param.private_data_len = RDMX_VERBS_TOKEN_LEN;
	if (!st && rdma_connect(id, &param)) {
		rdmx_error("verbs: rdma_connect to %s: %m",
			   c->base.info.peer_addr);
		st = RDMX_ERR_SYSTEM;
	}
	if (!st && c->own_qp) { /* the response; then RTR, RTS, and RTU */
		st = rdmx_verbs_cm_wait_data(c, RDMA_CM_EVENT_CONNECT_RESPONSE,
					     deadline, NULL, answer);
		if (!st)
			st = rdmx_verbs_ready(c, id, NULL);
		if (!st && rdma_establish(id)) {
			rdmx_error("verbs: rdma_establish with %s: %m",
				   c->base.info.peer_addr);
			st = RDMX_ERR_SYSTEM;
		}
	} else if (!st) {
		st = rdmx_verbs_cm_wait_data(c, RDMA_CM_EVENT_ESTABLISHED,
					     deadline, NULL, answer);
	}
	if (st && !c->id)
		rdma_destroy_id(id);
	c->peer_srq = answer[0] & RDMX_VERBS_F_SRQ;
	if (!st && rdmx_verbs_iwarp(c->d)) {
		uint8_t up = RDMX_VERBS_UP;

		st = rdmx_sock_write_full(c->ctl, &up, 1, deadline);
	}
	return st;
}

static pthread_mutex_t rdmx_verbs_qps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdmx_verbs_conn *rdmx_verbs_qps;

void rdmx_verbs_qp_list(struct rdmx_verbs_conn *c, bool add)
{
	struct rdmx_verbs_conn **pp;

	pthread_mutex_lock(&rdmx_verbs_qps_lock);
	for (pp = &rdmx_verbs_qps; *pp && *pp != c; pp = &(*pp)->qp_next)
		;
	if (add && !*pp) {
		c->qp_next = rdmx_verbs_qps;
		rdmx_verbs_qps = c;
	} else if (!add && *pp) {
		*pp = c->qp_next;
	}
	pthread_mutex_unlock(&rdmx_verbs_qps_lock);
}

/* Read @d's asynchronous events (its context's thread, or its poller). */
void rdmx_verbs_async(struct rdmx_verbs_dev *d)
{
	struct ibv_async_event ev;

	while (!ibv_get_async_event(d->dev, &ev)) {
		enum ibv_event_type t = ev.event_type;

		if (t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR ||
		    t == IBV_EVENT_QP_ACCESS_ERR) {
			pthread_mutex_lock(&rdmx_verbs_qps_lock);
			for (struct rdmx_verbs_conn *c = rdmx_verbs_qps; c;
			     c = c->qp_next)
				if (c->qp == ev.element.qp) {
					atomic_store(&c->qp_event, (int)t);
					rdmx_verbs_wake(c->vctx);
				}
			pthread_mutex_unlock(&rdmx_verbs_qps_lock);
		} else {
			rdmx_debug("verbs: %s: %s", d->name,
				   ibv_event_type_str(t));
		}
		ibv_ack_async_event(&ev);
	}
}

static void rdmx_verbs_conn_free(struct rdmx_verbs_conn *c)
{
	rdmx_verbs_qp_list(c, false);
	if (c->own_qp && c->qp)
		ibv_destroy_qp(c->qp);
	if (c->id) {
		if (c->id->qp)
			rdma_destroy_qp(c->id);
		rdma_destroy_id(c->id);
	}
	if (c->req) { /* set up, never accepted */
		rdma_reject(c->req, NULL, 0);
		rdma_destroy_id(c->req);
	}
	if (c->lid)
		rdma_destroy_id(c->lid);
	if (c->cq && ibv_destroy_cq(c->cq))
		rdmx_error("verbs: ibv_destroy_cq: %m");
	if (c->ech)
		rdma_destroy_event_channel(c->ech);
	if (c->credit_mr)
		ibv_dereg_mr(c->credit_mr);
	free(c->credit_in);
	free(c->keys);
	free(c->sq.rec);
	free(c->rq.rec);
	if (c->ctl >= 0)
		close(c->ctl);
	pthread_mutex_destroy(&c->lock);
	rdmx_conn_mem_put(&c->base);
}

/* Register the credit words: [0] the peer writes, [1] we write from. */
static rdmx_status rdmx_verbs_credits(struct rdmx_verbs_conn *c,
				      struct rdmx_verbs_setup *mine)
{
	c->credit_in = aligned_alloc(64, 64);
	if (!c->credit_in)
		return RDMX_ERR_NOMEM;
	memset(c->credit_in, 0, 64);
	c->credit_out = c->credit_in + 1;
	c->credit_mr =
		ibv_reg_mr(c->d->pd, c->credit_in, 64,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!c->credit_mr) {
		rdmx_error("verbs: ibv_reg_mr of the credit word: %m");
		return RDMX_ERR_NOMEM;
	}
	mine->credit_addr = (uintptr_t)c->credit_in;
	mine->credit_rkey = c->credit_mr->rkey;
	return RDMX_OK;
}

rdmx_status rdmx_verbs_conn_create(void *priv, int fd, bool accepting,
				   const struct rdmx_conn_attr *attr,
				   uint64_t deadline, struct rdmx_conn **conn_p)
{
	struct rdmx_verbs_ctx *v = priv;
	struct rdmx_verbs_setup mine = { 0 }, theirs;
	struct rdmx_verbs_conn *c;
	rdmx_status st;

	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return RDMX_ERR_NOMEM;
	}
	rdmx_conn_init(&c->base, v->ctx, &rdmx_verbs_ops, attr);
	c->vctx = v;
	c->ctl = fd;
	c->base.info.flags |= RDMX_CONN_ERRORS_CLOSE;
	pthread_mutex_init(&c->lock, NULL);
	rdmx_sock_name(fd, false, c->base.info.local_addr,
		       sizeof(c->base.info.local_addr));
	rdmx_sock_name(fd, true, c->base.info.peer_addr,
		       sizeof(c->base.info.peer_addr));
	st = rdmx_verbs_dev_of(v, fd, &c->d);
	if (st)
		goto err;
	if (c->d->attr.atomic_cap == IBV_ATOMIC_NONE)
		c->base.caps &= ~(uint64_t)RDMX_CAP_ATOMIC;
	/* iWARP: no immediate data with WRITE, and local completion. */
	if (rdmx_verbs_iwarp(c->d)) {
		c->base.caps &= ~(uint64_t)RDMX_CAP_WRITE_IMM;
		c->base.info.flags |= RDMX_CONN_COMPLETES_LOCALLY;
	}
	/* Our rkeys' low half is the first device's key: ask us for ours. */
	if (c->d->idx)
		mine.flags |= RDMX_VERBS_F_KEYS;
	c->ech = rdma_create_event_channel();
	mine.mtu = rdmx_verbs_mtu_wanted(&v->ctx->cfg);
	st = c->ech ? rdmx_verbs_credits(c, &mine) : RDMX_ERR_SYSTEM;
	/*
	 * Each side's setup: the peer's credit word, its MTU wish and,
	 * accepting, our rdma_cm port. The acceptor's QP waits for
	 * conn_start, which knows its srq; the connector's srq is known.
	 */
	if (!st && accepting) {
		st = rdmx_verbs_accept_request(c, &mine, &theirs, deadline);
		c->peer_srq = theirs.flags & RDMX_VERBS_F_SRQ;
	} else if (!st) {
		if (c->base.srq) {
			c->srq = c->base.srq->tp;
			mine.flags |= RDMX_VERBS_F_SRQ;
		}
		st = rdmx_verbs_srq_here(c);
		if (!st)
			st = rdmx_verbs_exchange(c, &mine, &theirs, deadline);
		if (!st)
			st = rdmx_verbs_connect(c, &theirs, deadline);
	}
	if (st)
		goto err;
	c->peer_credit_addr = theirs.credit_addr;
	c->peer_credit_rkey = theirs.credit_rkey;
	if (theirs.flags & RDMX_VERBS_F_KEYS) {
		c->keys = calloc(RDMX_VERBS_KEYS, sizeof(*c->keys));
		if (!c->keys) {
			st = RDMX_ERR_NOMEM;
			goto err;
		}
	}
	if (!accepting)
		rdmx_verbs_qp_up(c);
	*conn_p = &c->base;
	return RDMX_OK;

err:
	rdmx_verbs_conn_free(c);
	return st;
}

/*
 * Into the context's list: from here its completions are polled. What the
 * device completed before (a SEND into our srq) waits in its cq, whose
 * events were ignored while it was unlisted: arm it and poll once.
 */
rdmx_status rdmx_verbs_conn_start(struct rdmx_conn *conn)
{
	struct rdmx_verbs_conn *c = to_verbs_conn(conn);
	struct rdmx_verbs_ctx *v = c->vctx;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP,
				  .data.ptr = c };
	rdmx_status st;

	if (c->req) {
		st = rdmx_verbs_accept_finish(
			c,
			rdmx_deadline((int)v->ctx->cfg.handshake_timeout_ms));
		if (st)
			return st;
	}
	/* Our heartbeats go unanswered for that long: the host is gone. */
	rdmx_sock_user_timeout(c->ctl,
			       (unsigned)v->ctx->cfg.tcp_user_timeout_ms);
	pthread_mutex_lock(&v->lock);
	if (epoll_ctl(v->epfd, EPOLL_CTL_ADD, c->ctl, &ev)) {
		pthread_mutex_unlock(&v->lock);
		rdmx_error("verbs: epoll_ctl: %m");
		return RDMX_ERR_SYSTEM;
	}
	c->next = v->conns;
	v->conns = c;
	c->started = true;
	pthread_mutex_lock(&c->lock);
	ibv_req_notify_cq(c->cq, 0);
	rdmx_verbs_poll_conn(c);
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&v->lock);
	rdmx_verbs_qp_list(c, true);
	rdmx_verbs_wake(v); /* it may sleep with no timeout: there were none */
	return RDMX_OK;
}

void rdmx_verbs_mark_dead(struct rdmx_verbs_conn *c, rdmx_status st)
{
	c->dead = true;
	c->flush_status = st;
	c->dead_since = rdmx_now_us();
	/* Those waiting were posted after all the NIC has: they complete
	 * after it (rdmx_verbs_poll_conn, rdmx_verbs_flush_sw). */
	if (!c->sq.count)
		rdmx_verbs_flush_pending(c, st);
}

void rdmx_verbs_conn_fail(struct rdmx_verbs_conn *c, rdmx_status st)
{
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };
	struct rdmx_sigpipe sp;
	bool held;
	int rc;

	if (c->dead)
		return;
	rdmx_verbs_mark_dead(c, st);
	held = rdmx_verbs_sigpipe_hold(c->d, &sp);
	rc = ibv_modify_qp(c->qp, &qa, IBV_QP_STATE);
	if (held)
		rdmx_sigpipe_release(&sp);
	if (rc)
		rdmx_error("verbs: cannot move the QP to error: %m");
}

rdmx_status rdmx_verbs_conn_check(struct rdmx_conn *conn)
{
	struct rdmx_verbs_conn *c = to_verbs_conn(conn);
	rdmx_status st;

	pthread_mutex_lock(&c->lock);
	st = c->dead ? c->flush_status : RDMX_OK;
	pthread_mutex_unlock(&c->lock);
	return st;
}

void rdmx_verbs_conn_close(struct rdmx_conn *conn)
{
	struct rdmx_verbs_conn *c = to_verbs_conn(conn), **pp;
	struct rdmx_verbs_ctx *v = c->vctx;
	uint64_t deadline = rdmx_now_us() + RDMX_VERBS_FLUSH_GRACE_US;

	if (!c->started) { /* nothing posted, nobody else knows it */
		if (c->id)
			rdma_disconnect(c->id);
		rdmx_verbs_conn_free(c);
		return;
	}
	/* Out of the list first: no other thread reaches it after this. */
	pthread_mutex_lock(&v->lock);
	for (pp = &v->conns; *pp != c; pp = &(*pp)->next)
		;
	*pp = c->next;
	epoll_ctl(v->epfd, EPOLL_CTL_DEL, c->ctl, NULL);
	pthread_mutex_unlock(&v->lock);

	pthread_mutex_lock(&c->lock);
	rdmx_verbs_conn_fail(c, RDMX_ERR_FLUSHED);
	/*
	 * The NIC flushes everything posted; collect it for the cq. An
	 * unsignaled request it already did has no completion to collect.
	 * Polled once at least: RECVs of a srq that SENDs filled wait in
	 * our cq, whatever we posted (with nothing of ours outstanding, they
	 * went with it, and the srq's RECVs with them).
	 */
	do
		rdmx_verbs_poll_conn(c);
	while ((c->sq.signaled || c->rq.count) && rdmx_now_us() < deadline);
	rdmx_verbs_flush_sw(c);
	pthread_mutex_unlock(&c->lock);
	rdma_disconnect(c->id);
	rdmx_verbs_conn_free(c);
}
