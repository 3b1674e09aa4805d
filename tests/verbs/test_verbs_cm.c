/* SPDX-License-Identifier: MIT */
/*
 * Description: the verbs acceptor takes only the CONNECT_REQUEST of the
 * peer that authenticated on the control connection. A stranger's request
 * that reaches its rdma_cm port first (without the token the acceptor sent
 * on the control connection) is rejected, and the real one accepted; the
 * acceptor used to take whichever came first. Runs over verbs only (the
 * guest); elsewhere it skips.
 */
#include <arpa/inet.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "core.h"
#include "handshake.h"
#include "sock.h"
#include "verbs_proto.h"

/* The next CM event on @ch; returns its type. */
static enum rdma_cm_event_type cm_next(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev;
	enum rdma_cm_event_type t;

	assert_int_equal(rdma_get_cm_event(ch, &ev), 0);
	t = ev->event;
	rdma_ack_cm_event(ev);
	return t;
}

/* An RC connect to @dst carrying @token; returns the answer's type. */
static enum rdma_cm_event_type cm_connect(const struct sockaddr_in *dst,
					  const uint8_t *token)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4,
						.max_recv_wr = 4,
						.max_send_sge = 1,
						.max_recv_sge = 1 } };
	struct rdma_conn_param param = { .private_data = token,
					 .private_data_len =
						 RDMX_VERBS_TOKEN_LEN,
					 .responder_resources = 1,
					 .initiator_depth = 1,
					 .retry_count = 7 };
	struct rdma_cm_id *id;
	struct ibv_cq *cq;
	enum rdma_cm_event_type t;

	assert_non_null(ch);
	assert_int_equal(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	assert_int_equal(rdma_resolve_addr(id, NULL, (struct sockaddr *)dst,
					   T_TIMEOUT_MS),
			 0);
	assert_int_equal(cm_next(ch), RDMA_CM_EVENT_ADDR_RESOLVED);
	assert_int_equal(rdma_resolve_route(id, T_TIMEOUT_MS), 0);
	assert_int_equal(cm_next(ch), RDMA_CM_EVENT_ROUTE_RESOLVED);
	cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	assert_non_null(cq);
	qa.send_cq = qa.recv_cq = cq;
	assert_int_equal(rdma_create_qp(id, NULL, &qa), 0);
	assert_int_equal(rdma_connect(id, &param), 0);
	t = cm_next(ch);
	if (t == RDMA_CM_EVENT_ESTABLISHED)
		rdma_disconnect(id);
	rdma_destroy_qp(id);
	ibv_destroy_cq(cq);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return t;
}

static void test_verbs_stranger_connect_request_is_rejected(void **state)
{
	struct side s, c;
	struct acc a = { .s = &s };
	struct rdmx_verbs_setup mine = { 0 }, theirs;
	struct rdmx_hs_result res;
	struct sockaddr_in dst = { .sin_family = AF_INET };
	uint8_t b[RDMX_VERBS_SETUP_LEN], wrong[RDMX_VERBS_TOKEN_LEN];
	uint8_t pd[RDMX_PRIVATE_DATA_MAX];
	uint16_t pd_len = 1;
	uint64_t deadline = rdmx_deadline(T_TIMEOUT_MS);
	char addr[64];
	int fd;

	(void)state;
	if (strcmp(suite_transport(), "verbs"))
		suite_skip("%s: rdma_cm requests exist only over verbs",
			   suite_transport());
	side_open(&s);
	side_open(&c);
	snprintf(addr, sizeof(addr), "%s:%d", suite_addr(),
		 side_listen(&s, &a.lst));
	acc_start(&a);
	/* The real peer: handshake and setup on the control connection. */
	assert_int_equal(rdmx_sock_connect(addr, NULL, T_TIMEOUT_MS, &fd),
			 RDMX_OK);
	assert_int_equal(rdmx_hs_client(c.ctx, fd, "server",
					1ull << RDMX_TRANSPORT_VERBS, 0, &res),
			 RDMX_OK);
	assert_int_equal(res.transport, RDMX_TRANSPORT_VERBS);
	/* No private data from us, then the verbs setup. */
	assert_int_equal(rdmx_hs_private_send(c.ctx, fd, "server", NULL, 0,
					      deadline),
			 RDMX_OK);
	rdmx_verbs_setup_pack(&mine, b);
	assert_int_equal(rdmx_sock_write_full(fd, b, sizeof(b), deadline),
			 RDMX_OK);
	assert_int_equal(rdmx_sock_read_full(fd, b, sizeof(b), deadline),
			 RDMX_OK);
	assert_int_equal(rdmx_verbs_setup_unpack(b, &theirs), 0);
	inet_pton(AF_INET, suite_addr(), &dst.sin_addr);
	dst.sin_port = htons((uint16_t)theirs.cm_port);
	/* A stranger gets to the rdma_cm port first. */
	memcpy(wrong, theirs.token, sizeof(wrong));
	wrong[0] ^= 1;
	assert_int_equal(cm_connect(&dst, wrong), RDMA_CM_EVENT_REJECTED);
	/* The real peer's request, with the token, is the one accepted. */
	assert_int_equal(cm_connect(&dst, theirs.token),
			 RDMA_CM_EVENT_ESTABLISHED);
	acc_join(&a);
	assert_int_equal(a.st, RDMX_OK);
	/* The server's private data, sent as rdmx_accept handed it out. */
	assert_int_equal(rdmx_hs_private_recv(c.ctx, fd, "server", deadline, pd,
					      &pd_len),
			 RDMX_OK);
	assert_int_equal(pd_len, 0);
	close(fd);
	rdmx_conn_close(a.conn);
	rdmx_listener_close(a.lst);
	side_close(&c);
	side_close(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
			test_verbs_stranger_connect_request_is_rejected),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
