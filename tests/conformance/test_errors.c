/* SPDX-License-Identifier: MIT */
/*
 * Description: the statuses and log lines rdmx.h documents are what the
 * calls do, on every transport: RDMX_ERR_INVALID comes with one line in
 * the log naming the call; a registration must be mapped memory; connect
 * says INVALID for a malformed address and CONN_LOST for a server that
 * closes at once.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* Run @st = @expr with stderr caught; the log in @log (@len bytes). */
#define CAUGHT(st, expr, log, len)                                             \
	do {                                                                   \
		FILE *f_ = tmpfile();                                          \
		int saved_ = dup(2);                                           \
		size_t n_;                                                     \
                                                                               \
		assert_non_null(f_);                                           \
		fflush(stderr);                                                \
		dup2(fileno(f_), 2);                                           \
		(st) = (expr);                                                 \
		fflush(stderr);                                                \
		dup2(saved_, 2);                                               \
		close(saved_);                                                 \
		rewind(f_);                                                    \
		n_ = fread((log), 1, (len)-1, f_);                             \
		(log)[n_] = 0;                                                 \
		fclose(f_);                                                    \
	} while (0)

/* @expr is RDMX_ERR_INVALID, and the log has one line that names @call. */
#define EXPECT_INVALID(expr, call)                                             \
	do {                                                                   \
		char log_[1024];                                               \
		rdmx_status st_;                                               \
                                                                               \
		CAUGHT(st_, (expr), log_, sizeof(log_));                       \
		if (st_ != RDMX_ERR_INVALID || !strstr(log_, (call)))          \
			fail_msg("%s: %s, log '%s'", #expr,                    \
				 rdmx_strerror(st_), log_);                    \
	} while (0)

static void test_invalid_arguments_say_why(void **state)
{
	struct pair p;
	struct rdmx_mr *mr = NULL;
	struct rdmx_completion wc;
	struct rdmx_wr wr = { .opcode = RDMX_OP_WRITE };
	struct rdmx_remote rem;
	uint8_t buf[64];
	struct rdmx_cq *cq;

	(void)state;
	pair_open(&p);
	EXPECT_INVALID(rdmx_mr_reg(NULL, buf, 64, 0, &mr), "rdmx_mr_reg");
	EXPECT_INVALID(rdmx_mr_reg(p.c.ctx, NULL, 64, 0, &mr), "rdmx_mr_reg");
	EXPECT_INVALID(rdmx_mr_reg(p.c.ctx, buf, 64, 1u << 9, &mr),
		       "rdmx_mr_reg");
	EXPECT_INVALID(rdmx_mr_reg(p.c.ctx, buf, 64, 0, NULL), "rdmx_mr_reg");
	EXPECT_INVALID(rdmx_post(NULL, &wr), "rdmx_post");
	EXPECT_INVALID(rdmx_post(p.cconn, NULL), "rdmx_post");
	EXPECT_INVALID(rdmx_post_list(NULL, &wr, 1, NULL), "rdmx_post_list");
	EXPECT_INVALID(rdmx_post_recv(NULL, NULL, 0, 0), "rdmx_post_recv");
	EXPECT_INVALID(rdmx_poll(NULL, &wc, 1), "rdmx_poll");
	EXPECT_INVALID(rdmx_cq_wait(NULL, 0), "rdmx_cq_wait");
	EXPECT_INVALID(rdmx_cq_create(NULL, &cq), "rdmx_cq_create");
	EXPECT_INVALID(rdmx_conn_check(NULL), "rdmx_conn_check");
	EXPECT_INVALID(rdmx_remote_unpack(buf, 3, &rem), "rdmx_remote_unpack");
	EXPECT_INVALID(rdmx_connect(p.c.ctx, NULL, NULL, 0, NULL),
		       "rdmx_connect");
	assert_null(mr);
	pair_close(&p);
}

/*
 * A registration is of mapped memory, with one status everywhere: 1 PiB
 * over an 8 KiB buffer was accepted on tcp and shm and refused on verbs
 * as NOMEM; a range with a hole in it likewise.
 */
static void test_mr_reg_needs_mapped_memory(void **state)
{
	struct side s;
	struct rdmx_mr *mr = NULL;
	long pg = sysconf(_SC_PAGESIZE);
	uint8_t *m = mmap(NULL, (size_t)pg * 3, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	(void)state;
	assert_true(m != MAP_FAILED);
	side_open(&s);
	EXPECT_INVALID(rdmx_mr_reg(s.ctx, m, 1ull << 50,
				   RDMX_ACCESS_LOCAL_WRITE, &mr),
		       "not all mapped memory");
	munmap(m + pg, (size_t)pg); /* a hole in the middle */
	EXPECT_INVALID(rdmx_mr_reg(s.ctx, m, (size_t)pg * 3,
				   RDMX_ACCESS_LOCAL_WRITE, &mr),
		       "not all mapped memory");
	/* Either side of the hole is fine, unaligned too. */
	assert_int_equal(rdmx_mr_reg(s.ctx, m + 8, (size_t)pg - 8,
				     RDMX_ACCESS_LOCAL_WRITE, &mr),
			 RDMX_OK);
	assert_int_equal(rdmx_mr_dereg(mr), RDMX_OK);
	side_close(&s);
	munmap(m, (size_t)pg);
	munmap(m + 2 * pg, (size_t)pg);
}

/*
 * rdmx_connect's documented errors: a malformed address is INVALID, and a
 * server that closes at once is CONN_LOST.
 */
static void test_connect_statuses(void **state)
{
	struct side c;
	struct rdmx_conn_attr attr;
	struct rdmx_conn *conn = NULL;
	char addr[64];
	int port = harness_free_port(), lfd, fd;
	pid_t pid;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	(void)state;
	side_open(&c);
	attr = (struct rdmx_conn_attr){ .cq = c.cq };
	EXPECT_INVALID(rdmx_connect(c.ctx, "127.0.0.1:notaport", &attr, 1000,
				    &conn),
		       "notaport");
	/* A server that accepts and closes at once. */
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(lfd >= 0);
	{
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_port = htons((uint16_t)port) };

		inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
		assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)),
				 0);
	}
	assert_int_equal(listen(lfd, 4), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	pid = fork();
	if (pid == 0) {
		fd = accept(lfd, (struct sockaddr *)&ss, &sl);
		close(fd);
		_exit(0);
	}
	assert_int_equal(rdmx_connect(c.ctx, addr, &attr, 2000, &conn),
			 RDMX_ERR_CONN_LOST);
	waitpid(pid, NULL, 0);
	assert_null(conn);
	close(lfd);
	side_close(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_invalid_arguments_say_why),
		cmocka_unit_test(test_mr_reg_needs_mapped_memory),
		cmocka_unit_test(test_connect_statuses),
	};

	return cmocka_run_group_tests_name(suite_transport(), tests, NULL,
					   NULL);
}
