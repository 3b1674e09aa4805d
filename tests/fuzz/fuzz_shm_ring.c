/* SPDX-License-Identifier: MIT */
/*
 * Description: libFuzzer target for the shm transport's ring reader: the
 * bytes and the indices a peer can write. The peer maps both rings, so it
 * writes the stream we read (in chunks, shm_proto.h), their stamps and
 * the consumer index of the ring we write. The input is
 *   u8 flags, be64 tail skew, be64 head skew, then the stream;
 * flag 1 adds the tail skew to the last chunk's stamp, flag 2 the head
 * skew to the head of our transmit ring. The connection must refuse what
 * is wrong and never touch memory outside the rings and its registrations.
 * "RKEYRKEY" and "ADDRADDR" in the stream stand for the test registration, as
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
#include "fuzz_rig.h"
#include "shm.h"

#define RING 4096

static struct fuzz_rig rig;
static void *shm;
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
	setenv("RDMX_SHM_SINGLE_COPY_MIN", "64", 1);
	peer = fork();
	if (peer == 0) {
		pause();
		_exit(0);
	}
	atexit(kill_peer);
	fuzz_rig_init(&rig);
	if (rdmx_ctx_transport(rig.ctx, RDMX_TRANSPORT_SHM, &shm))
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rdmx_conn_attr attr = { .cq = rig.cq };
	struct rdmx_completion wc[16];
	struct rdmx_shm_pipe *p;
	struct rdmx_conn *conn;
	uint8_t *stream;
	uint64_t tail_skew, head_skew, fed = 0, n;
	size_t len, lim;
	int flags, idle = 0;

	if (size < 17 || size > 60000)
		return 0;
	flags = data[0];
	tail_skew = rdmx_get_be(data + 1, 8);
	head_skew = rdmx_get_be(data + 9, 8);
	stream = malloc(size - 17 + RDMX_SW_HDR_LEN);
	/* The peer's limit first, so our requests go out. */
	lim = rdmx_sw_hdr_pack(
		&(struct rdmx_sw_hdr){ .type = RDMX_SW_CREDIT,
				       .op = RDMX_SW_CREDIT_LIMIT,
				       .arg0 = 64 },
		stream);
	len = size - 17 + lim;
	memcpy(stream + lim, data + 17, size - 17);
	fuzz_rig_resolve(&rig, stream + lim, size - 17);

	p = pipe_new();
	if (rdmx_sw_conn_create(shm, p->door, -1, p, &attr, &conn) ||
	    rdmx_sw_conn_start(conn))
		abort();
	fuzz_rig_post(&rig, &rdmx_shm_ops, conn);
	if (flags & 2)
		atomic_fetch_add(&p->tx->head, head_skew);
	/* Until the stream is in and the connection has gone quiet. */
	for (int round = 0; idle < 3 && round < 100000; round++) {
		uint64_t tail = atomic_load(&p->rx->tail);
		uint64_t head = rdmx_shm_line(atomic_load(&p->rx->head));
		uint64_t room = RING - (tail - head), end, next;

		/* As a producer: one chunk (shm_proto.h), the next chunk's
		 * stamp slot zeroed, then its stamp; flag 1 skews the last. */
		if (fed < len && room > RDMX_SHM_RESERVE) {
			n = room - RDMX_SHM_RESERVE;
			if (n > len - fed)
				n = len - fed;
			for (uint64_t i = 0; i < n; i++)
				p->rx_data[(tail + RDMX_SHM_STAMP + i) % RING] =
					stream[fed + i];
			fed += n;
			end = tail + RDMX_SHM_STAMP + n;
			next = rdmx_shm_next_chunk(end);
			atomic_store(rdmx_shm_stamp(p->rx_data, RING, next), 0);
			if (fed == len && (flags & 1))
				end += tail_skew;
			atomic_store(rdmx_shm_stamp(p->rx_data, RING, tail),
				     end);
			atomic_store(&p->rx->tail, next);
			idle = 0;
		}
		idle = rdmx_shm_ops.progress(shm, false) ? 0 : idle + 1;
		if (rdmx_sw_conn_check(conn))
			break; /* refused: what is left in the ring is moot */
		/* The peer reads what we sent. */
		atomic_store(&p->tx->head, atomic_load(&p->tx->tail));
	}
	rdmx_shm_ops.conn_close(conn);
	while (rdmx_poll(rig.cq, wc, 16) > 0)
		;
	free(stream);
	return 0;
}
