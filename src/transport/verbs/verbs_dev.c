/* SPDX-License-Identifier: MIT */
/* The verbs transport's device: choosing it, opening it, registering memory. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "verbs.h"

static bool rdmx_verbs_port_active(struct ibv_context *dev, uint8_t port)
{
	struct ibv_port_attr pa;

	return !ibv_query_port(dev, port, &pa) && pa.state == IBV_PORT_ACTIVE;
}

/*
 * verbs.device, or the first device whose port is active. The context is
 * librdmacm's own (rdma_get_devices): the PD and CQs of a QP that rdma_cm
 * creates must belong to the context its cm_id uses.
 */
static struct ibv_context *rdmx_verbs_pick(struct rdmx_verbs_ctx *v)
{
	const char *want = v->ctx->cfg.verbs_device;
	uint8_t port = (uint8_t)v->ctx->cfg.verbs_port;
	int n = 0;

	v->list = rdma_get_devices(&n);
	if (!v->list || !n) {
		rdmx_debug("verbs: no RDMA device (/sys/class/infiniband is "
			   "empty)");
		return NULL;
	}
	for (int i = 0; i < n; i++) {
		const char *name = ibv_get_device_name(v->list[i]->device);

		if (*want && strcmp(want, name))
			continue;
		if (rdmx_verbs_port_active(v->list[i], port))
			return v->list[i];
		rdmx_log_at(*want ? RDMX_LOG_WARN : RDMX_LOG_DEBUG,
			    "verbs: %s port %u is not active", name, port);
	}
	if (*want)
		rdmx_warn("verbs: device %s (verbs.device) not found or not "
			  "active",
			  want);
	return NULL;
}

rdmx_status rdmx_verbs_open(struct rdmx_ctx *ctx, void **priv_p)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	struct rdmx_verbs_ctx *v;

	/* Only where the kernel lacks fork-safe pinning (before 5.13). */
	if (ibv_is_fork_initialized() == IBV_FORK_DISABLED && ibv_fork_init())
		rdmx_warn("verbs: ibv_fork_init failed: %m");
	v = calloc(1, sizeof(*v));
	if (!v)
		return RDMX_ERR_NOMEM;
	v->ctx = ctx;
	v->epfd = v->stop_efd = -1;
	pthread_mutex_init(&v->lock, NULL);
	v->dev = rdmx_verbs_pick(v);
	if (!v->dev) {
		if (v->list)
			rdma_free_devices(v->list);
		free(v);
		return RDMX_ERR_UNSUPPORTED;
	}
	snprintf(v->name, sizeof(v->name), "%s",
		 ibv_get_device_name(v->dev->device));
	if (ibv_query_device(v->dev, &v->attr))
		goto err_sys;
	v->pd = ibv_alloc_pd(v->dev);
	v->chan = v->pd ? ibv_create_comp_channel(v->dev) : NULL;
	if (!v->chan)
		goto err_sys;
	fcntl(v->chan->fd, F_SETFL, fcntl(v->chan->fd, F_GETFL) | O_NONBLOCK);
	v->epfd = epoll_create1(EPOLL_CLOEXEC);
	v->stop_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (v->epfd < 0 || v->stop_efd < 0 ||
	    epoll_ctl(v->epfd, EPOLL_CTL_ADD, v->stop_efd, &ev))
		goto err_sys;
	ev.data.ptr = v->chan;
	if (epoll_ctl(v->epfd, EPOLL_CTL_ADD, v->chan->fd, &ev))
		goto err_sys;
	/* The device's asynchronous events: a QP it moved to error. */
	fcntl(v->dev->async_fd, F_SETFL,
	      fcntl(v->dev->async_fd, F_GETFL) | O_NONBLOCK);
	ev.data.ptr = v->dev;
	if (epoll_ctl(v->epfd, EPOLL_CTL_ADD, v->dev->async_fd, &ev))
		goto err_sys;
	if (ctx->cfg.progress_thread) {
		if (rdmx_progress_thread_start(ctx, &v->thread,
					       rdmx_verbs_thread, v, "verbs"))
			goto err_sys;
		v->thread_running = true;
	}
	rdmx_info("verbs: using %s port %u (atomics %s)", v->name,
		  (unsigned)ctx->cfg.verbs_port,
		  v->attr.atomic_cap == IBV_ATOMIC_NONE ? "no" : "yes");
	*priv_p = v;
	return RDMX_OK;

err_sys:
	rdmx_error("verbs: cannot set up %s: %m", v->name);
	rdmx_verbs_close(v);
	return RDMX_ERR_SYSTEM;
}

void rdmx_verbs_wake(struct rdmx_verbs_ctx *v)
{
	uint64_t one = 1;

	if (v->thread_running &&
	    write(v->stop_efd, &one, sizeof(one)) != sizeof(one))
		rdmx_debug("verbs: cannot wake the progress thread: %m");
}

void rdmx_verbs_close(void *priv)
{
	struct rdmx_verbs_ctx *v = priv;
	uint64_t one = 1;

	if (v->thread_running) {
		atomic_store(&v->stopping, true);
		if (write(v->stop_efd, &one, sizeof(one)) != sizeof(one))
			rdmx_error(
				"verbs: cannot stop the progress thread: %m");
		pthread_join(v->thread, NULL);
	}
	if (v->stop_efd >= 0)
		close(v->stop_efd);
	if (v->epfd >= 0)
		close(v->epfd);
	if (v->chan)
		ibv_destroy_comp_channel(v->chan);
	if (v->pd)
		ibv_dealloc_pd(v->pd);
	rdma_free_devices(v->list);
	pthread_mutex_destroy(&v->lock);
	free(v);
}

/*
 * Why verbs cannot serve control socket @fd, whose local address @id is
 * bound to: a warning where the transport setting forces verbs (the
 * connection then fails with RDMX_ERR_NO_TRANSPORT and this is its reason),
 * else a debug line (another transport serves it).
 */
static void rdmx_verbs_why_not(struct rdmx_ctx *ctx,
			       const struct rdmx_verbs_ctx *v, int fd,
			       const struct rdma_cm_id *id)
{
	enum rdmx_log_level lvl = strcmp(ctx->cfg.transport, "verbs")
					  ? RDMX_LOG_DEBUG
					  : RDMX_LOG_WARN;
	char addr[64];

	rdmx_sock_name(fd, false, addr, sizeof(addr));
	if (!id || !id->verbs)
		rdmx_log_at(lvl,
			    "verbs: this side's address %s belongs to no RDMA "
			    "device (loopback, or a netdev without one): %s "
			    "cannot serve it",
			    addr, v->name);
	else
		rdmx_log_at(lvl,
			    "verbs: this side's address %s belongs to %s, and "
			    "this context uses %s (verbs.device, else the "
			    "first active device): RDMX_VERBS_DEVICE=%s "
			    "would serve it",
			    addr, ibv_get_device_name(id->verbs->device),
			    v->name, ibv_get_device_name(id->verbs->device));
}

/*
 * Verbs reaches the peer of control socket @fd when our local address of it
 * belongs to our device (RoCE and iWARP alike: rdma_cm says which device
 * owns an address). Loopback addresses belong to none.
 */
bool rdmx_verbs_usable(struct rdmx_ctx *ctx, int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct rdma_cm_id *id;
	struct rdmx_verbs_ctx *v;
	bool bound, ok;

	if (rdmx_ctx_transport(ctx, RDMX_TRANSPORT_VERBS, (void **)&v))
		return false;
	if (fd < 0)
		return true;
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) ||
	    rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP))
		return false;
	((struct sockaddr_in *)&ss)->sin_port = 0; /* same offset in v6 */
	bound = !rdma_bind_addr(id, (struct sockaddr *)&ss);
	ok = bound && id->verbs && id->verbs->device == v->dev->device;
	if (!ok)
		rdmx_verbs_why_not(ctx, v, fd, bound ? id : NULL);
	rdma_destroy_id(id);
	return ok;
}

static void rdmx_verbs_memlock_hint(const struct rdmx_verbs_ctx *v, size_t len)
{
	struct rlimit rl;

	getrlimit(RLIMIT_MEMLOCK, &rl);
	if (rl.rlim_cur == RLIM_INFINITY)
		return;
	rdmx_error(
		"verbs: registered memory is pinned, and locked memory is "
		"limited to %llu bytes (ulimit -l: %llu KiB) while %zu bytes "
		"were asked on %s; raise it: ulimit -l unlimited, or memlock "
		"in /etc/security/limits.conf",
		(unsigned long long)rl.rlim_cur,
		(unsigned long long)rl.rlim_cur / 1024, len, v->name);
}

rdmx_status rdmx_verbs_reg_mr(void *priv, struct rdmx_mr *mr, uint32_t *rkey_p)
{
	struct rdmx_verbs_ctx *v = priv;
	struct ibv_mr *imr;
	int access = 0;

	if (!mr->length) /* nothing to pin; zero-length sges need no key */
		return RDMX_OK;
	if (mr->access & RDMX_ACCESS_LOCAL_WRITE)
		access |= IBV_ACCESS_LOCAL_WRITE;
	if (mr->access & RDMX_ACCESS_REMOTE_WRITE)
		access |= IBV_ACCESS_REMOTE_WRITE;
	if (mr->access & RDMX_ACCESS_REMOTE_READ)
		access |= IBV_ACCESS_REMOTE_READ;
	if ((mr->access & RDMX_ACCESS_REMOTE_ATOMIC) &&
	    v->attr.atomic_cap != IBV_ATOMIC_NONE)
		access |= IBV_ACCESS_REMOTE_ATOMIC;
	imr = ibv_reg_mr(v->pd, mr->addr, mr->length, access);
	if (!imr) {
		int err = errno;

		rdmx_error("verbs: ibv_reg_mr of %zu bytes on %s: %m",
			   mr->length, v->name);
		if (err == ENOMEM || err == EPERM || err == EAGAIN)
			rdmx_verbs_memlock_hint(v, mr->length);
		return RDMX_ERR_NOMEM;
	}
	mr->tp_mr[RDMX_TRANSPORT_VERBS] = imr;
	*rkey_p = imr->rkey;
	return RDMX_OK;
}

void rdmx_verbs_dereg_mr(void *priv, struct rdmx_mr *mr)
{
	struct ibv_mr *imr = mr->tp_mr[RDMX_TRANSPORT_VERBS];

	(void)priv;
	if (imr && ibv_dereg_mr(imr))
		rdmx_error("verbs: ibv_dereg_mr: %m");
	mr->tp_mr[RDMX_TRANSPORT_VERBS] = NULL;
}
