/* SPDX-License-Identifier: MIT */
/*
 * Description: libFuzzer target for the shm transport's ring reader: the
 * bytes and the indices a peer can write. The peer maps both rings, so it
 * writes the stream we read, the producer index of that ring and the
 * consumer index of the ring we write. The input is
 *   u8 flags, be64 tail skew, be64 head skew, then the stream;
 * flag 1 adds the tail skew to the published tail once, flag 2 the head
 * skew to the head of our transmit ring. The connection must refuse what
 * is wrong and never touch memory outside the rings and its registrations.
 * "RKEY" and "ADDRADDR" in the stream stand for the test registration, as
 * in fuzz_tcp_frames. Single-copy frames go to a child process's memory.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bytes.h"
#include "core.h"
#include "shm.h"

#define RING 4096
#define REGION 4096

static struct rdmx_ctx *ctx;
static struct rdmx_cq *cq;
static void *shm;
static uint8_t *region, *local;
static struct rdmx_mr *region_mr, *local_mr;
static pid_t peer; /* single-copy frames reach into it, harmlessly */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void kill_peer(void)
{
	kill(peer, SIGKILL);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	setenv("RDMX_PROGRESS_THREAD", "off", 1);
	setenv("RDMX_LOG_LEVEL", "off", 1);
	setenv("RDMX_SHM_SINGLE_COPY_MIN", "64", 1);
	peer = fork();
	if (peer == 0) {
		pause();
		_exit(0);
	}
	atexit(kill_peer);
	if (rdmx_ctx_create(NULL, &ctx) || rdmx_cq_create(ctx, &cq) ||
	    rdmx_ctx_transport(ctx, RDMX_TRANSPORT_SHM, &shm))
		abort();
	region = aligned_alloc(64, REGION);
	local = aligned_alloc(64, REGION);
	if (rdmx_mr_reg(ctx, region, REGION, 0xf, &region_mr) ||
	    rdmx_mr_reg(ctx, local, REGION, RDMX_ACCESS_LOCAL_WRITE, &local_mr))
		abort();
	return 0;
}

static struct rdmx_shm_ring *ring_new(void)
{
	struct rdmx_shm_ring *r = mmap(NULL, RDMX_SHM_RING_HDR + RING,
				       PROT_READ | PROT_WRITE,
				       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (r == MAP_FAILED)
		abort();
	r->magic = RDMX_SHM_MAGIC;
	r->size = RING;
	return r;
}

/* A pipe whose peer is this harness: it writes rx, and drains tx. */
static struct rdmx_shm_pipe *pipe_new(void)
{
	struct rdmx_shm_pipe *p = calloc(1, sizeof(*p));

	if (!p)
		abort();
	p->rx = ring_new();
	p->tx = ring_new();
	p->rx_data = (uint8_t *)p->rx + RDMX_SHM_RING_HDR;
	p->tx_data = (uint8_t *)p->tx + RDMX_SHM_RING_HDR;
	p->rx_size = p->tx_size = RING;
	p->door = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	p->peer_door = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	p->ctl = -1;
	p->peer_pid = peer;
	p->pidfd = (int)syscall(SYS_pidfd_open, peer, 0);
	if (p->door < 0 || p->peer_door < 0 || p->pidfd < 0)
		abort();
	return p;
}

/* Replace the symbolic rkey and address with the live ones. */
static void resolve(uint8_t *b, size_t size)
{
	for (size_t i = 0; i + 4 <= size; i++) {
		if (i + 8 <= size && !memcmp(b + i, "ADDRADDR", 8))
			rdmx_put_be(b + i, (uintptr_t)region + 64, 8);
		else if (!memcmp(b + i, "RKEY", 4))
			rdmx_put_be(b + i, region_mr->rkey, 4);
	}
}

/* Our own requests, so that answers have something to match. */
static void post_requests(struct rdmx_conn *conn)
{
	struct rdmx_sge s = { local, 128, local_mr },
			a = { local + 128, 8, local_mr };
	struct rdmx_sge r = { local + 256, 256, local_mr };

	rdmx_shm_ops.post_recv(conn, &r, 1, 100);
	rdmx_shm_ops.post_send(conn, &(struct rdmx_wr){ .opcode = RDMX_OP_READ,
							.sg_list = &s,
							.num_sge = 1,
							.remote_addr = 64,
							.rkey = 1 });
	rdmx_shm_ops.post_send(conn,
			       &(struct rdmx_wr){ .opcode = RDMX_OP_FETCH_ADD,
						  .sg_list = &a,
						  .num_sge = 1 });
	rdmx_shm_ops.post_send(conn, &(struct rdmx_wr){ .opcode = RDMX_OP_WRITE,
							.sg_list = &s,
							.num_sge = 1,
							.remote_addr = 64,
							.rkey = 1 });
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rdmx_conn_attr attr = { .cq = cq };
	struct rdmx_completion wc[16];
	struct rdmx_shm_pipe *p;
	struct rdmx_conn *conn;
	uint8_t limit[RDMX_SW_HDR_LEN], *stream;
	uint64_t tail_skew, head_skew, fed = 0, n;
	size_t len;
	int flags, idle = 0;

	if (size < 17 || size > 60000)
		return 0;
	flags = data[0];
	tail_skew = rdmx_get_be(data + 1, 8);
	head_skew = rdmx_get_be(data + 9, 8);
	len = size - 17 + sizeof(limit);
	stream = malloc(len);
	/* The peer's limit first, so our requests go out. */
	rdmx_sw_hdr_pack(&(struct rdmx_sw_hdr){ .type = RDMX_SW_CREDIT,
						.op = RDMX_SW_CREDIT_LIMIT,
						.arg0 = 64 },
			 stream);
	memcpy(stream + sizeof(limit), data + 17, size - 17);
	resolve(stream + sizeof(limit), size - 17);

	p = pipe_new();
	if (rdmx_sw_conn_create(shm, p->door, -1, p, &attr, &conn))
		abort();
	post_requests(conn);
	if (flags & 2)
		atomic_fetch_add(&p->tx->head, head_skew);
	/* Until the stream is in and the connection has gone quiet. */
	for (int round = 0; idle < 3 && round < 100000; round++) {
		uint64_t tail = atomic_load(&p->rx->tail);
		uint64_t head = atomic_load(&p->rx->head);

		if (fed < len && tail - head < RING) {
			n = RING - (tail - head);
			if (n > len - fed)
				n = len - fed;
			for (uint64_t i = 0; i < n; i++)
				p->rx_data[(tail + i) % RING] = stream[fed + i];
			fed += n;
			if (fed == len && (flags & 1))
				n += tail_skew;
			atomic_store(&p->rx->tail, tail + n);
			idle = 0;
		}
		idle = rdmx_shm_ops.progress(shm, false) ? 0 : idle + 1;
		if (rdmx_sw_conn_check(conn))
			break; /* refused: what is left in the ring is moot */
		/* The peer reads what we sent. */
		atomic_store(&p->tx->head, atomic_load(&p->tx->tail));
	}
	rdmx_shm_ops.conn_close(conn);
	while (rdmx_poll(cq, wc, 16) > 0)
		;
	free(stream);
	return 0;
}
