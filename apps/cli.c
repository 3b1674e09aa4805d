/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cli.h"
#include "sock.h"

volatile sig_atomic_t cli_stop;

static void cli_on_signal(int sig)
{
	(void)sig;
	cli_stop = 1;
}

void cli_catch_signals(void)
{
	struct sigaction sa = { .sa_handler = cli_on_signal };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

int cli_fail(const char *cmd, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "rdmx %s: %s\n", cmd, msg);
	return 1;
}

bool cli_size(const char *cmd, const char *opt, const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	if (!s || !*s || *s == '-')
		goto bad;
	v = strtoull(s, &end, 10);
	if (end == s)
		goto bad;
	if (!strcasecmp(end, "k") || !strcasecmp(end, "kb"))
		mult = 1ull << 10;
	else if (!strcasecmp(end, "m") || !strcasecmp(end, "mb"))
		mult = 1ull << 20;
	else if (!strcasecmp(end, "g") || !strcasecmp(end, "gb"))
		mult = 1ull << 30;
	else if (*end)
		goto bad;
	if (v > UINT64_MAX / mult)
		goto bad;
	*out = v * mult;
	return true;
bad:
	cli_fail(cmd, "%s expects a size like 4096, 64k or 1m, not '%s'", opt,
		 s ? s : "");
	return false;
}

bool cli_addr_ok(const char *addr)
{
	char host[256], port[16];

	/* The library's own parser; it logs the one line that explains. */
	return !addr ||
	       !rdmx_addr_split(addr, host, sizeof(host), port, sizeof(port));
}

bool cli_is_server(const char *arg)
{
	if (!arg || !*arg || *arg == ':')
		return true;
	return strspn(arg, "0123456789") == strlen(arg);
}

double cli_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cli_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double cli_quantile(double *v, size_t n, double q)
{
	size_t i;

	if (!n)
		return 0;
	qsort(v, n, sizeof(*v), cli_cmp_double);
	i = (size_t)(q * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

rdmx_status cli_wait(struct rdmx_cq *cq, struct rdmx_completion *wc,
		     int timeout_ms)
{
	double deadline = cli_now_us() + timeout_ms * 1e3;
	int n;

	/* Spin, as perftest does: waking a sleeping thread costs more than
	 * the operation on these machines. */
	for (;;) {
		n = rdmx_poll(cq, wc, 1);
		if (n < 0)
			return (rdmx_status)n;
		if (n == 1)
			return RDMX_OK;
		if (cli_stop)
			return RDMX_ERR_TIMEOUT;
		if (cli_now_us() > deadline)
			return RDMX_ERR_TIMEOUT;
	}
}
