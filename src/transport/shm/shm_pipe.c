/* SPDX-License-Identifier: MIT */
/*
 * The shm pipe: byte-stream I/O on the two rings of a connection. We are the
 * only producer of `tx` and the only consumer of `rx` (the engine calls us
 * with the connection's lock held), so each index has one writer.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "copy.h"
#include "shm.h"
#include "tsan.h"

/*
 * ThreadSanitizer tracks memory by virtual address. When both ends of a
 * connection live in one process (tests do that), each ring is mapped
 * twice, and TSan cannot pair the producer's release store with the
 * consumer's acquire load at the other address. Both mappings name one
 * sync object, chosen by the ring's id. Nothing of this exists in other
 * builds.
 */
#ifdef RDMX_TSAN
static char rdmx_shm_tsan_sync[4096];
#define rdmx_shm_sync(r, fn) fn(&rdmx_shm_tsan_sync[(r)->id % 4096])
#else
#define rdmx_shm_sync(r, fn) ((void)(r))
#endif

/*
 * Publish @v in @idx (a ring's tail or head), then read the other side's
 * waiting @flag: a Dekker pair with the waiter, which stores its flag and
 * then reads the index. Fenced pipes (both processes registered for
 * membarrier) need only a compiler barrier here, the waiter fencing both
 * with rdmx_membarrier (rdmx_shm_fence_waiter); else a full fence each.
 */
static bool rdmx_shm_publish(const struct rdmx_shm_pipe *p,
			     _Atomic uint64_t *idx, uint64_t v,
			     _Atomic uint32_t *flag)
{
	if (!p->fenced) {
		atomic_store(idx, v);
		return atomic_load(flag);
	}
	atomic_store_explicit(idx, v, memory_order_release);
	atomic_signal_fence(memory_order_seq_cst);
	return atomic_load_explicit(flag, memory_order_relaxed);
}

/* The waiter's side: @flag set, now fence before reading the index. */
static void rdmx_shm_fence_waiter(const struct rdmx_shm_pipe *p)
{
	if (p->fenced)
		rdmx_membarrier();
}

static void rdmx_shm_ring_door(int fd)
{
	uint64_t one = 1;

	/* A full counter (EAGAIN) already means "wake up": nothing lost. */
	if (write(fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		rdmx_debug("shm: doorbell write: %m");
}

static void rdmx_shm_put(uint8_t *data, uint64_t size, uint64_t pos,
			 const uint8_t *src, size_t n)
{
	size_t off = (size_t)(pos & (size - 1)), first = size - off;

	if (first > n)
		first = n;
	rdmx_copy(data + off, src, first);
	if (n > first) /* it wraps (a call for 0 bytes was ~15 instructions) */
		rdmx_copy(data, src + first, n - first);
}

static void rdmx_shm_get(const uint8_t *data, uint64_t size, uint64_t pos,
			 uint8_t *dst, size_t n)
{
	size_t off = (size_t)(pos & (size - 1)), first = size - off;

	if (first > n)
		first = n;
	rdmx_copy(dst, data + off, first);
	if (n > first)
		rdmx_copy(dst + first, data, n - first);
}

/*
 * The peer writes one index of each ring: a wild one (more bytes in use
 * than the ring holds, or a head past the tail) would make us copy past
 * the mapping. Such a peer is broken or hostile: the pipe is.
 */
static bool rdmx_shm_wild(struct rdmx_sw_conn *c, uint64_t used, uint64_t size)
{
	if (used <= size)
		return false;
	rdmx_peer_error(
		"shm connection to %s: the peer wrote an impossible ring "
		"index (%llu bytes in use of %llu); closing it",
		c->base.info.peer_addr, (unsigned long long)used,
		(unsigned long long)size);
	return true;
}

/*
 * Where the free part of tx ends: a lap past the line of the head we last
 * read (chunks start on a line, so the rest of head's may still be read).
 */
static uint64_t rdmx_shm_free_end(const struct rdmx_shm_pipe *p)
{
	return rdmx_shm_line(p->tx_head) + p->tx_size;
}

/*
 * Zero the stamp slots of the free lines after tx_tail, up to
 * RDMX_SHM_ZERO_AHEAD of them, in batches. Done after a publish, not before
 * its stamp: a line the consumer read a lap ago may still be in its cache,
 * and a store to it (~35 ns of a small SEND's one-way time here) would
 * hold up the stamp behind it in the store order. Only free lines: none
 * holds a byte the consumer has yet to read.
 */
static void rdmx_shm_zero_ahead(struct rdmx_shm_pipe *p)
{
	uint64_t z = p->tx_zeroed, to = p->tx_tail + RDMX_SHM_ZERO_AHEAD;

	if (z >= p->tx_tail + RDMX_SHM_ZERO_AHEAD / 2)
		return;
	if (to > rdmx_shm_free_end(p)) {
		/* Our copy of head is a lap old at most: look again, once
		 * per batch that it holds up (a wild one is sendv's to
		 * find). */
		uint64_t head = atomic_load_explicit(&p->tx->head,
						     memory_order_acquire);

		if (p->tx_tail - head <= p->tx_size)
			p->tx_head = head;
		if (to > rdmx_shm_free_end(p))
			to = rdmx_shm_free_end(p);
	}
	for (; z < to; z += RDMX_SHM_ALIGN)
		atomic_store_explicit(rdmx_shm_stamp(p->tx_data, p->tx_size, z),
				      0, memory_order_relaxed);
	p->tx_zeroed = z;
}

/*
 * Producer side: copy as much of @iov as fits as one chunk (shm_proto.h),
 * stamp it, publish, ring.
 */
static ssize_t rdmx_shm_sendv(struct rdmx_sw_conn *c, const struct iovec *iov,
			      int iovcnt)
{
	struct rdmx_shm_pipe *p = to_shm_pipe(c);
	uint64_t tail = p->tx_tail, want = 0, space, n, done = 0;

	if (p->peer_gone ||
	    atomic_load_explicit(&p->tx->closed, memory_order_acquire))
		return -EPIPE;
	for (int i = 0; i < iovcnt; i++)
		want += iov[i].iov_len;
	space = rdmx_shm_free_end(p) - tail;
	/* The consumer's line only when our copy of head says full. */
	if (space < want + RDMX_SHM_RESERVE) {
		uint64_t head = atomic_load_explicit(&p->tx->head,
						     memory_order_acquire);

		if (rdmx_shm_wild(c, tail - head, p->tx_size))
			return -EPROTO;
		p->tx_head = head;
		space = rdmx_shm_free_end(p) - tail;
	}
	/* Room for the stamp, a byte, and the next chunk's stamp slot. */
	if (space <= RDMX_SHM_RESERVE || !want)
		return -EAGAIN;
	n = want < space - RDMX_SHM_RESERVE ? want : space - RDMX_SHM_RESERVE;
	for (int i = 0; i < iovcnt && done < n; i++) {
		size_t k = iov[i].iov_len < n - done ? iov[i].iov_len
						     : (size_t)(n - done);

		rdmx_shm_put(p->tx_data, p->tx_size,
			     tail + RDMX_SHM_STAMP + done, iov[i].iov_base, k);
		done += k;
	}
	p->tx_tail = rdmx_shm_next_chunk(tail + RDMX_SHM_STAMP + n);
	/*
	 * Where the consumer looks next may hold a byte of the last lap
	 * unless it was zeroed ahead. A chunk that ran past the zeroed
	 * lines, or a ring too full to zero ahead, zeroes it here.
	 */
	if (p->tx_tail >= p->tx_zeroed) {
		atomic_store_explicit(rdmx_shm_stamp(p->tx_data, p->tx_size,
						     p->tx_tail),
				      0, memory_order_relaxed);
		p->tx_zeroed = p->tx_tail + RDMX_SHM_ALIGN;
	}
	rdmx_shm_sync(p->tx, __tsan_release);
	atomic_store_explicit(rdmx_shm_stamp(p->tx_data, p->tx_size, tail),
			      tail + RDMX_SHM_STAMP + n, memory_order_release);
	/* Pairs with rdmx_shm_arm. */
	if (rdmx_shm_publish(p, &p->tx->tail, p->tx_tail,
			     &p->tx->consumer_waiting))
		rdmx_shm_ring_door(p->peer_door);
	rdmx_shm_zero_ahead(p);
	return (ssize_t)n;
}

/*
 * The chunk after the one that ends at *@end_p: 1 when it is there
 * (*@pos_p, *@end_p its bytes), 0 when not yet, -1 when its stamp is wild.
 */
static int rdmx_shm_chunk(struct rdmx_sw_conn *c, uint64_t *pos_p,
			  uint64_t *end_p)
{
	struct rdmx_shm_pipe *p = to_shm_pipe(c);
	uint64_t next = rdmx_shm_next_chunk(*end_p);
	uint64_t stamp = atomic_load_explicit(rdmx_shm_stamp(p->rx_data,
							     p->rx_size, next),
					      memory_order_acquire);

	if (stamp <= next)
		return 0;
	if (stamp - next <= RDMX_SHM_STAMP ||
	    rdmx_shm_wild(c, stamp - next, p->rx_size))
		return -1;
	rdmx_shm_sync(p->rx, __tsan_acquire);
	*pos_p = next + RDMX_SHM_STAMP;
	*end_p = stamp;
	return 1;
}

/*
 * Consumer side: copy out what is there, chunk after chunk, free it, wake
 * a waiting producer.
 */
static ssize_t rdmx_shm_readv(struct rdmx_sw_conn *c, const struct iovec *iov,
			      int iovcnt)
{
	struct rdmx_shm_pipe *p = to_shm_pipe(c);
	/* closed before the stamps: bytes published before it are seen. */
	bool closed =
		atomic_load_explicit(&p->rx->closed, memory_order_acquire);
	uint64_t pos = atomic_load_explicit(&p->rx_pos, memory_order_relaxed);
	uint64_t end = atomic_load_explicit(&p->rx_end, memory_order_relaxed);
	bool idle = atomic_load_explicit(&p->rx_idle, memory_order_relaxed);
	size_t done = 0, off = 0;
	int i = 0, got;

	/*
	 * A load and a store, not an exchange, on the read path: a flag
	 * ready() sets in between is lost, and costs one look ahead.
	 * Armed (the progress thread serves us, woken by the doorbell, which
	 * one publish or many rang once): everything, always.
	 */
	if (idle) {
		atomic_store_explicit(&p->rx_idle, false, memory_order_relaxed);
		idle = !atomic_load_explicit(&p->rx->consumer_waiting,
					     memory_order_relaxed);
	}
	for (;;) {
		while (i < iovcnt && off == iov[i].iov_len)
			i++, off = 0;
		if (i == iovcnt)
			break;
		if (pos == end && done && idle)
			break;
		if (pos == end && (got = rdmx_shm_chunk(c, &pos, &end)) <= 0) {
			if (got < 0)
				return -EPROTO;
			break;
		}
		size_t n = iov[i].iov_len - off < end - pos
				   ? iov[i].iov_len - off
				   : (size_t)(end - pos);

		rdmx_shm_get(p->rx_data, p->rx_size, pos,
			     (uint8_t *)iov[i].iov_base + off, n);
		pos += n;
		off += n;
		done += n;
	}
	atomic_store_explicit(&p->rx_pos, pos, memory_order_relaxed);
	atomic_store_explicit(&p->rx_end, end, memory_order_relaxed);
	if (!done)
		return closed || p->peer_gone ? 0 : -EAGAIN;
	/*
	 * Pairs with rdmx_shm_want_out. Only the producer clears its flag
	 * (the engine arms it once per stall), so every read that frees
	 * space while it waits rings it.
	 */
	if (rdmx_shm_publish(p, &p->rx->head,
			     pos == end ? rdmx_shm_next_chunk(end) : pos,
			     &p->rx->producer_waiting))
		rdmx_shm_ring_door(p->peer_door);
	return (ssize_t)done;
}

static ssize_t rdmx_shm_recv(struct rdmx_sw_conn *c, void *buf, size_t len)
{
	struct iovec iov = { buf, len };

	return rdmx_shm_readv(c, &iov, 1);
}

static void rdmx_shm_want_out(struct rdmx_sw_conn *c, bool want)
{
	struct rdmx_shm_pipe *p = to_shm_pipe(c);
	uint64_t tail, head;

	atomic_store(&p->tx->producer_waiting, want ? 1 : 0);
	if (!want)
		return;
	rdmx_shm_fence_waiter(p);
	/* The consumer may have freed room for a chunk before it saw our
	 * flag. */
	tail = p->tx_tail;
	head = rdmx_shm_line(atomic_load(&p->tx->head));
	if (tail - head + RDMX_SHM_RESERVE < p->tx_size)
		rdmx_shm_ring_door(p->door);
}

static void rdmx_shm_wake(struct rdmx_sw_conn *c, bool aux)
{
	struct rdmx_shm_pipe *p = to_shm_pipe(c);
	uint64_t v;

	/*
	 * The control socket carries nothing after setup: any event on it
	 * is the peer closing or dying.
	 */
	if (aux) {
		p->peer_gone = true;
		return;
	}
	if (read(p->door, &v, sizeof(v)) < 0 && errno != EAGAIN)
		rdmx_debug("shm: doorbell read: %m");
}

/*
 * Single copy (CMA) between our memory and the peer's. The engine calls
 * these on the target, after its own registration check, with the
 * initiator's buffers as @remote. The peer's death is known from the
 * control socket; a process_vm call on a dead pid fails with ESRCH.
 */
static ssize_t rdmx_shm_cma(struct rdmx_sw_conn *c, bool to_peer,
			    const struct iovec *local, int nlocal,
			    const struct iovec *remote, int nremote)
{
	struct rdmx_shm_pipe *p = to_shm_pipe(c);
	ssize_t n;
	struct pollfd pfd = { .fd = p->pidfd, .events = POLLIN };

	/*
	 * process_vm_* take a pid: make sure it is still our peer's (its
	 * pidfd turns readable when it exits, before the pid can be reused).
	 */
	if (p->peer_gone || poll(&pfd, 1, 0) != 0)
		return -ESRCH;
	rdmx_shm_copy_begin(p); /* then load: pairs with rdmx_shm_shutdown */
	if (atomic_load(&p->rx->closed)) {
		/* The peer has closed: its buffers may be reused already. */
		rdmx_shm_copy_end(p);
		return -ESRCH;
	}
	n = (to_peer ? process_vm_writev : process_vm_readv)(
		p->peer_pid, local, (unsigned long)nlocal, remote,
		(unsigned long)nremote, 0);
	if (n < 0)
		n = -errno;
	rdmx_shm_copy_end(p);
	return n;
}

static ssize_t rdmx_shm_pull(struct rdmx_sw_conn *c, const struct iovec *local,
			     int nlocal, const struct iovec *remote,
			     int nremote)
{
	return rdmx_shm_cma(c, false, local, nlocal, remote, nremote);
}

static ssize_t rdmx_shm_push(struct rdmx_sw_conn *c, const struct iovec *local,
			     int nlocal, const struct iovec *remote,
			     int nremote)
{
	return rdmx_shm_cma(c, true, local, nlocal, remote, nremote);
}

/*
 * Our consumer side: ask the peer for doorbells, or let it skip them.
 * Armed on a fenced pipe, the engine issues rdmx_membarrier before it
 * looks at the ring again.
 */
static bool rdmx_shm_arm(struct rdmx_sw_conn *c, bool on)
{
	struct rdmx_shm_pipe *p = to_shm_pipe(c);

	atomic_store(&p->rx->consumer_waiting, on ? 1 : 0);
	return on && p->fenced;
}

static bool rdmx_shm_ready(struct rdmx_sw_conn *c)
{
	struct rdmx_shm_pipe *p = to_shm_pipe(c);

	uint64_t pos = atomic_load_explicit(&p->rx_pos, memory_order_relaxed);
	uint64_t end = atomic_load_explicit(&p->rx_end, memory_order_relaxed);
	uint64_t next = rdmx_shm_next_chunk(end);

	/* A wild stamp says "ready" too: the read finds it out. */
	if (pos != end ||
	    atomic_load_explicit(rdmx_shm_stamp(p->rx_data, p->rx_size, next),
				 memory_order_acquire) > next)
		return true;
	if (!atomic_load_explicit(&p->rx_idle, memory_order_relaxed))
		atomic_store_explicit(&p->rx_idle, true, memory_order_relaxed);
	return false;
}

/*
 * Before our work is flushed, make sure the peer is not copying into our
 * memory: after this no copy starts, and we wait out one that runs.
 * Runs with the connection's lock held.
 */
static void rdmx_shm_shutdown(struct rdmx_sw_conn *c)
{
	struct rdmx_shm_pipe *p = to_shm_pipe(c);

	atomic_store_explicit(&p->rx->closed, 1, memory_order_release);
	/* seq_cst store, then seq_cst load: pairs with rdmx_shm_cma. */
	atomic_store(&p->tx->closed, 1);
	rdmx_shm_copy_wait(p, c->base.info.peer_addr, "close");
	rdmx_shm_ring_door(p->peer_door);
	shutdown(p->ctl, SHUT_RDWR);
}

static void rdmx_shm_seal(struct rdmx_sw_conn *c)
{
	struct rdmx_shm_pipe *p = to_shm_pipe(c);

	/* seq_cst store, then seq_cst load: pairs with rdmx_shm_direct. */
	atomic_store(&p->tx->sealed, 1);
	rdmx_shm_copy_wait(p, c->base.info.peer_addr, "cutting it off");
}

static void rdmx_shm_destroy(struct rdmx_sw_conn *c)
{
	rdmx_shm_pipe_free(to_shm_pipe(c));
}

const struct rdmx_sw_pipe rdmx_shm_pipe = {
	.name = "shm",
	.recv = rdmx_shm_recv,
	.readv = rdmx_shm_readv,
	.sendv = rdmx_shm_sendv,
	.want_out = rdmx_shm_want_out,
	.wake = rdmx_shm_wake,
	.arm = rdmx_shm_arm,
	.pull = rdmx_shm_pull,
	.push = rdmx_shm_push,
	.direct = rdmx_shm_direct,
	.ready = rdmx_shm_ready,
	.seal = rdmx_shm_seal,
	.shutdown = rdmx_shm_shutdown,
	.destroy = rdmx_shm_destroy,
};
