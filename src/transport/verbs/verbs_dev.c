/* SPDX-License-Identifier: MIT */
/* The verbs transport's device: choosing it, opening it, registering memory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sock.h"
#include "verbs.h"

static bool rdmx_verbs_port_active(struct ibv_context *dev, uint8_t port)
{
	struct ibv_port_attr pa;

	return !ibv_query_port(dev, port, &pa) && pa.state == IBV_PORT_ACTIVE;
}

/*
 * verbs.device, or the first device whose port is active: the context's
 * first device, opened with it. The contexts are librdmacm's own
 * (rdma_get_devices): the PD and CQs of a QP that rdma_cm creates must
 * belong to the context its cm_id uses.
 */
static struct ibv_context *rdmx_verbs_pick(struct rdmx_verbs_ctx *v)
{
	const char *want = v->ctx->cfg.verbs_device;
	uint8_t port = (uint8_t)v->ctx->cfg.verbs_port;

	v->list = rdma_get_devices(&v->nlist);
	if (!v->list || !v->nlist) {
		rdmx_debug("verbs: no RDMA device (/sys/class/infiniband is "
			   "empty)");
		return NULL;
	}
	for (int i = 0; i < v->nlist; i++) {
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

static void rdmx_verbs_dev_close(struct rdmx_verbs_dev *d)
{
	if (d->refuse_mr)
		ibv_dereg_mr(d->refuse_mr);
	if (d->chan)
		ibv_destroy_comp_channel(d->chan);
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	free(d);
}

/* @fd, non-blocking, in the context's epoll set as @ptr; 0 or -1. */
static int rdmx_verbs_watch(struct rdmx_verbs_ctx *v, int fd, void *ptr)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = ptr };

	return rdmx_set_nonblock(fd)
		       ? -1
		       : epoll_ctl(v->epfd, EPOLL_CTL_ADD, fd, &ev);
}

/*
 * Open @dev as the context's next device: its PD, its completion channel
 * and its asynchronous events in the context's epoll set. dev_lock held
 * (or the context not yet shared).
 */
static rdmx_status rdmx_verbs_dev_open(struct rdmx_verbs_ctx *v,
				       struct ibv_context *dev,
				       struct rdmx_verbs_dev **d_p)
{
	unsigned n = atomic_load(&v->ndevs);
	struct rdmx_verbs_dev *d;

	if (n == RDMX_VERBS_MAX_DEVS) {
		rdmx_error("verbs: %s would be this context's device number "
			   "%u; it opens at most %u",
			   ibv_get_device_name(dev->device), n + 1,
			   RDMX_VERBS_MAX_DEVS);
		return RDMX_ERR_NO_TRANSPORT;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return RDMX_ERR_NOMEM;
	d->idx = n;
	d->dev = dev;
	snprintf(d->name, sizeof(d->name), "%s",
		 ibv_get_device_name(dev->device));
	if (ibv_query_device(dev, &d->attr))
		goto err_sys;
	d->pd = ibv_alloc_pd(dev);
	d->chan = d->pd ? ibv_create_comp_channel(dev) : NULL;
	d->refuse_mr = d->chan ? ibv_reg_mr(d->pd, &d->refuse_word,
					    sizeof(d->refuse_word), 0)
			       : NULL;
	if (!d->refuse_mr)
		goto err_sys;
	if (rdmx_verbs_watch(v, d->chan->fd, d->chan))
		goto err_sys;
	/* The device's asynchronous events: a QP it moved to error. */
	if (rdmx_verbs_watch(v, dev->async_fd, d)) {
		epoll_ctl(v->epfd, EPOLL_CTL_DEL, d->chan->fd, NULL);
		goto err_sys;
	}
	v->devs[n] = d;
	atomic_store(&v->ndevs, n + 1);
	rdmx_info("verbs: using %s port %u (atomics %s)", d->name,
		  (unsigned)v->ctx->cfg.verbs_port,
		  d->attr.atomic_cap == IBV_ATOMIC_NONE ? "no" : "yes");
	*d_p = d;
	return RDMX_OK;

err_sys:
	rdmx_error("verbs: cannot set up %s: %m", d->name);
	rdmx_verbs_dev_close(d);
	return RDMX_ERR_SYSTEM;
}

rdmx_status rdmx_verbs_open(struct rdmx_ctx *ctx, void **priv_p)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	struct rdmx_verbs_ctx *v;
	struct rdmx_verbs_dev *d;
	struct ibv_context *dev;

	/* Only where the kernel lacks fork-safe pinning (before 5.13). */
	if (ibv_is_fork_initialized() == IBV_FORK_DISABLED && ibv_fork_init())
		rdmx_warn("verbs: ibv_fork_init failed: %m");
	v = calloc(1, sizeof(*v));
	if (!v)
		return RDMX_ERR_NOMEM;
	v->ctx = ctx;
	v->epfd = v->stop_efd = -1;
	pthread_mutex_init(&v->lock, NULL);
	pthread_mutex_init(&v->dev_lock, NULL);
	dev = rdmx_verbs_pick(v);
	if (!dev) {
		rdmx_verbs_close(v);
		return RDMX_ERR_UNSUPPORTED;
	}
	v->epfd = epoll_create1(EPOLL_CLOEXEC);
	v->stop_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (v->epfd < 0 || v->stop_efd < 0 ||
	    epoll_ctl(v->epfd, EPOLL_CTL_ADD, v->stop_efd, &ev)) {
		rdmx_error("verbs: cannot set up: %m");
		rdmx_verbs_close(v);
		return RDMX_ERR_SYSTEM;
	}
	if (rdmx_verbs_dev_open(v, dev, &d)) {
		rdmx_verbs_close(v);
		return RDMX_ERR_SYSTEM;
	}
	if (ctx->cfg.progress_thread) {
		/* Set before the thread starts, as the sw transports do. */
		v->thread_running = true;
		if (rdmx_progress_thread_start(ctx, &v->thread,
					       rdmx_verbs_thread, v, "verbs")) {
			rdmx_error("verbs: cannot start the progress thread");
			v->thread_running = false; /* none to stop */
			rdmx_verbs_close(v);
			return RDMX_ERR_SYSTEM;
		}
	}
	*priv_p = v;
	return RDMX_OK;
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
	for (unsigned i = 0; i < atomic_load(&v->ndevs); i++)
		rdmx_verbs_dev_close(v->devs[i]);
	if (v->list)
		rdma_free_devices(v->list);
	pthread_mutex_destroy(&v->dev_lock);
	pthread_mutex_destroy(&v->lock);
	free(v);
}

/* Our open device that is @dev, or NULL. */
static struct rdmx_verbs_dev *rdmx_verbs_dev_find(struct rdmx_verbs_ctx *v,
						  const struct ibv_device *dev)
{
	unsigned n = atomic_load(&v->ndevs);

	for (unsigned i = 0; i < n; i++)
		if (v->devs[i]->dev->device == dev)
			return v->devs[i];
	return NULL;
}

/* The context of librdmacm's list that is @dev, or NULL. */
static struct ibv_context *rdmx_verbs_listed_dev(struct rdmx_verbs_ctx *v,
						 const struct ibv_device *dev)
{
	for (int i = 0; i < v->nlist; i++)
		if (v->list[i]->device == dev)
			return v->list[i];
	return NULL;
}

/*
 * Why verbs cannot serve control socket @fd, whose local address belongs
 * to @dev (NULL: to none): a warning where the transport setting forces
 * verbs (the connection then fails with RDMX_ERR_NO_TRANSPORT and this is
 * its reason), else a debug line (another transport serves it).
 */
static void rdmx_verbs_why_not(struct rdmx_verbs_ctx *v, int fd,
			       struct ibv_device *dev, bool inactive)
{
	const struct rdmx_config *cfg = &v->ctx->cfg;
	enum rdmx_log_level lvl = strcmp(cfg->transport, "verbs")
					  ? RDMX_LOG_DEBUG
					  : RDMX_LOG_WARN;
	char addr[64];

	rdmx_sock_name(fd, false, addr, sizeof(addr));
	if (!dev)
		rdmx_log_at(lvl,
			    "verbs: this side's address %s belongs to no RDMA "
			    "device (loopback, or a netdev without one)",
			    addr);
	else if (inactive)
		rdmx_log_at(lvl,
			    "verbs: this side's address %s belongs to %s, "
			    "whose port %u is not active",
			    addr, ibv_get_device_name(dev),
			    (unsigned)cfg->verbs_port);
	else
		rdmx_log_at(lvl,
			    "verbs: this side's address %s belongs to %s, and "
			    "verbs.device limits this context to %s: unset "
			    "RDMX_VERBS_DEVICE, or set RDMX_VERBS_DEVICE=%s, "
			    "to serve it",
			    addr, ibv_get_device_name(dev), cfg->verbs_device,
			    ibv_get_device_name(dev));
}

int rdmx_verbs_local_addr(int fd, struct sockaddr_storage *ss)
{
	socklen_t sl = sizeof(*ss);

	if (getsockname(fd, (struct sockaddr *)ss, &sl))
		return -1;
	((struct sockaddr_in *)ss)->sin_port = 0; /* same offset in v6 */
	return 0;
}

/*
 * The device that owns our address of control socket @fd (RoCE and iWARP
 * alike: rdma_cm says which). Loopback addresses belong to none.
 */
rdmx_status rdmx_verbs_dev_of(struct rdmx_verbs_ctx *v, int fd,
			      struct rdmx_verbs_dev **d_p)
{
	struct sockaddr_storage ss;
	struct ibv_device *dev = NULL;
	struct ibv_context *listed;
	struct rdma_cm_id *id;
	rdmx_status st = RDMX_ERR_NO_TRANSPORT;

	if (rdmx_verbs_local_addr(fd, &ss) ||
	    rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP))
		return RDMX_ERR_SYSTEM;
	if (!rdma_bind_addr(id, (struct sockaddr *)&ss) && id->verbs)
		dev = id->verbs->device;
	rdma_destroy_id(id);
	if (!dev) {
		rdmx_verbs_why_not(v, fd, NULL, false);
		return st;
	}
	*d_p = rdmx_verbs_dev_find(v, dev);
	if (*d_p)
		return RDMX_OK;
	pthread_mutex_lock(&v->dev_lock);
	listed = rdmx_verbs_listed_dev(v, dev);
	*d_p = rdmx_verbs_dev_find(v, dev); /* another thread's, meanwhile */
	if (*d_p)
		st = RDMX_OK;
	else if (*v->ctx->cfg.verbs_device || !listed)
		rdmx_verbs_why_not(v, fd, dev, false);
	else if (!rdmx_verbs_port_active(listed,
					 (uint8_t)v->ctx->cfg.verbs_port))
		rdmx_verbs_why_not(v, fd, dev, true);
	else
		st = rdmx_verbs_dev_open(v, listed, d_p);
	pthread_mutex_unlock(&v->dev_lock);
	return st;
}

/* Verbs reaches the peer of control socket @fd when a device owns our
 * address of it and the context may use that device. */
bool rdmx_verbs_usable(struct rdmx_ctx *ctx, int fd)
{
	struct rdmx_verbs_ctx *v;
	struct rdmx_verbs_dev *d;

	if (rdmx_ctx_transport(ctx, RDMX_TRANSPORT_VERBS, (void **)&v))
		return false;
	return fd < 0 || !rdmx_verbs_dev_of(v, fd, &d);
}

static void rdmx_verbs_memlock_hint(const struct rdmx_verbs_dev *d, size_t len)
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
		(unsigned long long)rl.rlim_cur / 1024, len, d->name);
}

/* Register @mr on @d with its access; NULL when the device refuses. */
static struct ibv_mr *rdmx_verbs_reg_on(struct rdmx_verbs_dev *d,
					const struct rdmx_mr *mr)
{
	struct ibv_mr *imr;
	int access = 0;

	if (mr->access & RDMX_ACCESS_LOCAL_WRITE)
		access |= IBV_ACCESS_LOCAL_WRITE;
	if (mr->access & RDMX_ACCESS_REMOTE_WRITE)
		access |= IBV_ACCESS_REMOTE_WRITE;
	if (mr->access & RDMX_ACCESS_REMOTE_READ)
		access |= IBV_ACCESS_REMOTE_READ;
	if ((mr->access & RDMX_ACCESS_REMOTE_ATOMIC) &&
	    d->attr.atomic_cap != IBV_ATOMIC_NONE)
		access |= IBV_ACCESS_REMOTE_ATOMIC;
	imr = ibv_reg_mr(d->pd, mr->addr, mr->length, access);
	if (!imr) {
		int err = errno;

		rdmx_error("verbs: ibv_reg_mr of %zu bytes on %s: %m",
			   mr->length, d->name);
		if (err == ENOMEM || err == EPERM || err == EAGAIN)
			rdmx_verbs_memlock_hint(d, mr->length);
	}
	return imr;
}

rdmx_status rdmx_verbs_reg_mr(void *priv, struct rdmx_mr *mr, uint32_t *rkey_p)
{
	struct rdmx_verbs_ctx *v = priv;
	struct rdmx_verbs_mr *vm;

	if (!mr->length) /* nothing to pin; zero-length sges need no key */
		return RDMX_OK;
	vm = calloc(1, sizeof(*vm));
	if (!vm)
		return RDMX_ERR_NOMEM;
	/* The first device at once: its key is the rkey's low half. */
	vm->imr[0] = rdmx_verbs_reg_on(v->devs[0], mr);
	if (!vm->imr[0]) {
		free(vm);
		return RDMX_ERR_NOMEM;
	}
	mr->tp_mr[RDMX_TRANSPORT_VERBS] = vm;
	*rkey_p = vm->imr[0]->rkey;
	return RDMX_OK;
}

struct ibv_mr *rdmx_verbs_mr_on(struct rdmx_verbs_ctx *v,
				struct rdmx_verbs_dev *d,
				const struct rdmx_mr *mr)
{
	struct rdmx_verbs_mr *vm = mr->tp_mr[RDMX_TRANSPORT_VERBS];
	struct ibv_mr *imr;

	if (!vm)
		return NULL;
	imr = __atomic_load_n(&vm->imr[d->idx], __ATOMIC_ACQUIRE);
	if (imr)
		return imr;
	pthread_mutex_lock(&v->dev_lock);
	imr = vm->imr[d->idx];
	if (!imr) {
		imr = rdmx_verbs_reg_on(d, mr);
		__atomic_store_n(&vm->imr[d->idx], imr, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&v->dev_lock);
	return imr;
}

void rdmx_verbs_dereg_mr(void *priv, struct rdmx_mr *mr)
{
	struct rdmx_verbs_mr *vm = mr->tp_mr[RDMX_TRANSPORT_VERBS];

	(void)priv;
	for (unsigned i = 0; vm && i < RDMX_VERBS_MAX_DEVS; i++)
		if (vm->imr[i] && ibv_dereg_mr(vm->imr[i]))
			rdmx_error("verbs: ibv_dereg_mr: %m");
	free(vm);
	mr->tp_mr[RDMX_TRANSPORT_VERBS] = NULL;
}
