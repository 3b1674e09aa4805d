// SPDX-License-Identifier: MIT
/*
 * The memory server: regions registered for remote read and write, and two
 * threads. One accepts clients; the other answers their lookups (SEND and
 * RECV on one cq) and notices when they go. Pages never pass through
 * here: clients READ and WRITE the regions, and on verbs no server CPU is
 * involved at all.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "page.h"

#define PAGE_MAX_REGIONS 64

struct page_region {
	char name[RDMX_PAGE_NAME_MAX + 1];
	struct rdmx_mr *mr;
	struct rdmx_remote remote;
};

struct page_client {
	uint64_t id; /* wr_id of its work: clients are looked up by it */
	struct rdmx_conn *conn;
	uint8_t *msg; /* in, then out: PAGE_MSG each */
	struct rdmx_mr *mr;
	bool refused; /* a malformed lookup was logged: log no more */
	struct page_client *next;
};

struct rdmx_page_server {
	struct rdmx_ctx *ctx;
	struct rdmx_cq *cq;
	struct rdmx_listener *lst;
	pthread_t accepter, answerer;
	atomic_bool stop;
	pthread_mutex_t lock; /* regions, clients */
	struct page_region region[PAGE_MAX_REGIONS];
	int nregions;
	struct page_client *clients;
	uint64_t next_id;
	struct rdmx_page_server_stats stats;
};

static struct page_region *page_region_find(struct rdmx_page_server *srv,
					    const char *name)
{
	for (int i = 0; i < srv->nregions; i++)
		if (!strcmp(srv->region[i].name, name))
			return &srv->region[i];
	return NULL;
}

rdmx_status rdmx_page_server_export(struct rdmx_page_server *srv,
				    const char *name, void *addr,
				    uint64_t length)
{
	const unsigned access = RDMX_ACCESS_LOCAL_WRITE |
				RDMX_ACCESS_REMOTE_READ |
				RDMX_ACCESS_REMOTE_WRITE;
	struct page_region *r;
	rdmx_status st = RDMX_OK;

	if (!srv || !name || !page_name_ok(name, strlen(name)) || !length ||
	    length % PAGE_SIZE_BYTES || (uintptr_t)addr % PAGE_SIZE_BYTES) {
		page_log(RDMX_LOG_ERROR,
			 "export: a name of [A-Za-z0-9._-], and a page-aligned "
			 "region a multiple of %u bytes long",
			 PAGE_SIZE_BYTES);
		return RDMX_ERR_INVALID;
	}
	pthread_mutex_lock(&srv->lock);
	if (page_region_find(srv, name) || srv->nregions == PAGE_MAX_REGIONS) {
		page_log(RDMX_LOG_ERROR,
			 "export: %s is taken, or %d regions "
			 "are exported already",
			 name, PAGE_MAX_REGIONS);
		st = RDMX_ERR_INVALID;
		goto out;
	}
	r = &srv->region[srv->nregions];
	st = rdmx_mr_reg(srv->ctx, addr, length, access, &r->mr);
	if (st != RDMX_OK)
		goto out;
	rdmx_mr_remote(r->mr, &r->remote);
	snprintf(r->name, sizeof(r->name), "%s", name);
	srv->nregions++;
out:
	pthread_mutex_unlock(&srv->lock);
	return st;
}

rdmx_status rdmx_page_server_region(struct rdmx_page_server *srv,
				    const char *name,
				    struct rdmx_remote *remote_p)
{
	struct page_region *r;

	if (!srv || !name || !remote_p)
		return RDMX_ERR_INVALID;
	pthread_mutex_lock(&srv->lock);
	r = page_region_find(srv, name);
	if (r)
		*remote_p = r->remote;
	pthread_mutex_unlock(&srv->lock);
	return r ? RDMX_OK : RDMX_ERR_NOT_FOUND;
}

/* ---- clients ------------------------------------------------------------ */

static rdmx_status page_client_recv(struct page_client *cl)
{
	struct rdmx_sge in = { cl->msg, PAGE_MSG, cl->mr };

	return rdmx_post_recv(cl->conn, &in, 1, cl->id);
}

static void page_client_free(struct page_client *cl)
{
	rdmx_conn_close(cl->conn);
	rdmx_mr_dereg(cl->mr);
	free(cl->msg);
	free(cl);
}

static void page_client_add(struct rdmx_page_server *srv,
			    struct rdmx_conn *conn)
{
	struct page_client *cl = calloc(1, sizeof(*cl));

	if (!cl || !(cl->msg = aligned_alloc(64, 2 * PAGE_MSG)) ||
	    rdmx_mr_reg(srv->ctx, cl->msg, 2 * PAGE_MSG,
			RDMX_ACCESS_LOCAL_WRITE, &cl->mr) != RDMX_OK) {
		page_log(RDMX_LOG_WARN, "no memory for a client: closed");
		if (cl)
			free(cl->msg);
		free(cl);
		rdmx_conn_close(conn);
		return;
	}
	cl->conn = conn;
	pthread_mutex_lock(&srv->lock);
	cl->id = ++srv->next_id;
	if (page_client_recv(cl) != RDMX_OK) {
		pthread_mutex_unlock(&srv->lock);
		page_client_free(cl);
		return;
	}
	cl->next = srv->clients;
	srv->clients = cl;
	srv->stats.clients_open++;
	srv->stats.clients_total++;
	pthread_mutex_unlock(&srv->lock);
}

/* Take the client @id out of the list (NULL if gone). Under srv->lock. */
static struct page_client *page_client_take(struct rdmx_page_server *srv,
					    uint64_t id)
{
	for (struct page_client **pp = &srv->clients; *pp; pp = &(*pp)->next) {
		struct page_client *cl = *pp;

		if (cl->id == id) {
			*pp = cl->next;
			srv->stats.clients_open--;
			return cl;
		}
	}
	return NULL;
}

static struct page_client *page_client_find(struct rdmx_page_server *srv,
					    uint64_t id)
{
	for (struct page_client *cl = srv->clients; cl; cl = cl->next)
		if (cl->id == id)
			return cl;
	return NULL;
}

/* What a malformed lookup held: the client's log says only "refused". */
static void page_refusal_log(const struct page_client *cl, uint32_t len)
{
	struct rdmx_conn_info info;
	char why[160];

	rdmx_conn_info(cl->conn, &info);
	page_lookup_explain(cl->msg, len, why, sizeof(why));
	page_log_peer(RDMX_LOG_WARN, "lookup from %s refused: %s",
		      info.peer_addr, why);
}

/* Answer one lookup of @cl; @len bytes arrived. Under srv->lock. */
static rdmx_status page_answer(struct rdmx_page_server *srv,
			       struct page_client *cl, uint32_t len)
{
	char name[RDMX_PAGE_NAME_MAX + 1];
	struct page_reply r = { .page_size = PAGE_SIZE_BYTES };
	struct page_region *reg = NULL;
	struct rdmx_sge out = { cl->msg + PAGE_MSG, 0, cl->mr };

	srv->stats.lookups++;
	if (!page_lookup_decode(cl->msg, len, name)) {
		r.status = PAGE_REPLY_BAD_REQUEST;
		if (!cl->refused)
			page_refusal_log(cl, len);
		cl->refused = true;
	} else if (!(reg = page_region_find(srv, name)))
		r.status = PAGE_REPLY_NOT_FOUND;
	else
		r.region = reg->remote;
	if (r.status != PAGE_REPLY_OK)
		srv->stats.lookups_failed++;
	out.length = page_reply_encode(cl->msg + PAGE_MSG, &r);
	/* The reply's SEND is signaled; the next RECV goes first. */
	if (page_client_recv(cl) != RDMX_OK)
		return RDMX_ERR_CONN_LOST;
	return rdmx_post_send(cl->conn, &out, cl->id);
}

static void page_serve_wc(struct rdmx_page_server *srv,
			  const struct rdmx_completion *wc)
{
	struct page_client *cl;

	pthread_mutex_lock(&srv->lock);
	cl = page_client_find(srv, wc->wr_id);
	if (!cl || (wc->status == RDMX_OK && wc->opcode == RDMX_OP_SEND)) {
		pthread_mutex_unlock(&srv->lock);
		return; /* a reply went out, or a closed client's flush */
	}
	if (wc->status != RDMX_OK || wc->opcode != RDMX_OP_RECV ||
	    page_answer(srv, cl, wc->byte_len) != RDMX_OK) {
		/* Gone, or broke the protocol: its RECV is the only work. */
		page_client_take(srv, cl->id);
		pthread_mutex_unlock(&srv->lock);
		page_client_free(cl);
		return;
	}
	pthread_mutex_unlock(&srv->lock);
}

static void *page_answerer(void *arg)
{
	struct rdmx_page_server *srv = arg;
	struct rdmx_completion wc[16];

	while (!atomic_load(&srv->stop)) {
		int n = rdmx_poll(srv->cq, wc, 16);

		if (n <= 0) {
			rdmx_cq_wait(srv->cq, 100);
			continue;
		}
		for (int i = 0; i < n; i++)
			page_serve_wc(srv, &wc[i]);
	}
	return NULL;
}

static void *page_accepter(void *arg)
{
	struct rdmx_page_server *srv = arg;
	struct rdmx_conn_attr ca = { .cq = srv->cq };

	while (!atomic_load(&srv->stop)) {
		struct rdmx_conn *conn;

		if (rdmx_accept(srv->lst, &ca, 100, &conn) == RDMX_OK)
			page_client_add(srv, conn);
	}
	return NULL;
}

/* ---- the server --------------------------------------------------------- */

rdmx_status rdmx_page_server_create(struct rdmx_ctx *ctx, const char *addr,
				    struct rdmx_page_server **srv_p)
{
	struct rdmx_page_server *srv;
	rdmx_status st;

	if (!ctx || !srv_p)
		return RDMX_ERR_INVALID;
	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return RDMX_ERR_NOMEM;
	srv->ctx = ctx;
	pthread_mutex_init(&srv->lock, NULL);
	st = rdmx_cq_create(ctx, &srv->cq);
	if (st == RDMX_OK)
		st = rdmx_listen(ctx, addr, &srv->lst);
	if (st != RDMX_OK)
		goto err;
	if (pthread_create(&srv->answerer, NULL, page_answerer, srv)) {
		st = RDMX_ERR_SYSTEM;
		goto err;
	}
	if (pthread_create(&srv->accepter, NULL, page_accepter, srv)) {
		atomic_store(&srv->stop, true);
		pthread_join(srv->answerer, NULL);
		st = RDMX_ERR_SYSTEM;
		goto err;
	}
	*srv_p = srv;
	return RDMX_OK;
err:
	rdmx_listener_close(srv->lst);
	rdmx_cq_destroy(srv->cq);
	pthread_mutex_destroy(&srv->lock);
	free(srv);
	return st;
}

int rdmx_page_server_port(const struct rdmx_page_server *srv)
{
	return rdmx_listener_port(srv->lst);
}

void rdmx_page_server_stats(struct rdmx_page_server *srv,
			    struct rdmx_page_server_stats *stats_p)
{
	pthread_mutex_lock(&srv->lock);
	*stats_p = srv->stats;
	pthread_mutex_unlock(&srv->lock);
}

void rdmx_page_server_destroy(struct rdmx_page_server *srv)
{
	if (!srv)
		return;
	atomic_store(&srv->stop, true);
	pthread_join(srv->accepter, NULL);
	pthread_join(srv->answerer, NULL);
	rdmx_listener_close(srv->lst);
	while (srv->clients) {
		struct page_client *cl = srv->clients;

		srv->clients = cl->next;
		page_client_free(cl);
	}
	for (int i = 0; i < srv->nregions; i++)
		rdmx_mr_dereg(srv->region[i].mr);
	/* The closed clients' flushed RECVs are in the cq: drop them. */
	struct rdmx_completion wc[16];

	while (rdmx_poll(srv->cq, wc, 16) > 0) {
	}
	rdmx_cq_destroy(srv->cq);
	pthread_mutex_destroy(&srv->lock);
	free(srv);
}
