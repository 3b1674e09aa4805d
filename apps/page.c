// SPDX-License-Identifier: MIT
/*
 * rdmx page serve|bench - remote memory from the command line (lib/page).
 *
 *   serve [:PORT] --size SIZE [--name NAME] [--file PATH]
 *       export a region until SIGINT/SIGTERM; anonymous memory (or a new
 *       file) is filled with the bench pattern, so clients can check it.
 *   bench HOST[:PORT]/NAME|@NAME [--pattern random|seq] [--threads N] ...
 *       fault pages in through the mapping and report their latency, with
 *       two references measured in the same run: one 4 KiB READ on the
 *       same connection, and a fault served from local memory by the same
 *       handler (the floor of this host).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "rdmx_page.h"

#define PAGE_SZ 4096u

/* The bench pattern: the 8-byte word at region offset @off. */
static uint64_t page_pattern(uint64_t off)
{
	return (off / 8 + 1) * 0x9e3779b97f4a7c15ull;
}

static void page_fill(uint8_t *p, uint64_t len)
{
	for (uint64_t i = 0; i < len / 8; i++)
		((uint64_t *)p)[i] = page_pattern(i * 8);
}

/* ---- serve -------------------------------------------------------------- */

struct serve_opts {
	const char *addr, *name, *file, *config;
	uint64_t size;
};

/* The region: a file mapped shared, or anonymous memory. */
static uint8_t *page_region(const struct serve_opts *o, bool *filled)
{
	int fd;
	struct stat st;
	void *p;

	*filled = false;
	if (!o->file) {
		p = mmap(NULL, o->size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		page_fill(p, o->size);
		*filled = true;
		return p;
	}
	fd = open(o->file, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || fstat(fd, &st) < 0) {
		cli_fail("page", "cannot open %s: %m", o->file);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	if ((uint64_t)st.st_size < o->size && ftruncate(fd, (off_t)o->size)) {
		cli_fail("page", "cannot grow %s to %" PRIu64 " bytes: %m",
			 o->file, o->size);
		close(fd);
		return NULL;
	}
	/* A file of the user's, lengthened: say so, it outlives us. */
	if (st.st_size && (uint64_t)st.st_size < o->size)
		printf("rdmx page: %s grown from %lld to %" PRIu64
		       " bytes (--size), zeros after its end\n",
		       o->file, (long long)st.st_size, o->size);
	p = mmap(NULL, o->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		cli_fail("page", "cannot map %s: %m", o->file);
		return NULL;
	}
	if (!st.st_size) { /* a new file: the pattern, for the bench */
		page_fill(p, o->size);
		*filled = true;
	}
	return p;
}

static int page_serve(const struct serve_opts *o)
{
	struct rdmx_ctx *ctx = NULL;
	struct cli_metrics *metrics = NULL;
	struct rdmx_page_server *srv = NULL;
	struct rdmx_page_server_stats ss;
	char addr[128], size[80];
	struct rdmx_remote rem = { 0 };
	bool filled;
	uint8_t *mem;
	rdmx_status st;
	int rc = 1;

	mem = page_region(o, &filled);
	if (!mem)
		return o->file ? 1
			       : cli_fail("page",
					  "no memory for %" PRIu64 " bytes",
					  o->size);
	if (o->addr)
		snprintf(addr, sizeof(addr), "%s", o->addr);
	else
		snprintf(addr, sizeof(addr), ":%d", RDMX_PAGE_PORT);
	st = cli_ctx_create(o->config, &ctx);
	if (!st)
		st = cli_metrics_start(ctx, &metrics);
	if (!st)
		st = rdmx_page_server_create(ctx, addr, &srv);
	if (st) {
		cli_fail("page", "cannot serve on %s: %s", addr,
			 rdmx_strerror(st));
		goto out;
	}
	st = rdmx_page_server_export(srv, o->name, mem, o->size);
	if (st) {
		cli_fail("page", "cannot export %s: %s", o->name,
			 rdmx_strerror(st));
		goto out;
	}
	/* Before the line that says we serve (as rdmx kv serve). */
	cli_catch_signals();
	printf("rdmx page: server listening on port %d: region %s, %" PRIu64
	       " bytes, %s%s\n",
	       rdmx_page_server_port(srv), o->name, o->size,
	       o->file ? o->file : "anonymous memory",
	       filled ? ", filled with the bench pattern" : "");
	fflush(stdout);
	/* Published under the region's name: "@NAME" finds both. The
	 * payload: the region's size and descriptor, for a user who would
	 * READ it without asking the server first. */
	rdmx_page_server_region(srv, o->name, &rem);
	snprintf(size, sizeof(size),
		 "size=%" PRIu64 " addr=0x%" PRIx64 " rkey=0x%016" PRIx64,
		 o->size, rem.addr, rem.rkey);
	cli_publish(ctx, "page", o->name, addr, rdmx_page_server_port(srv),
		    size, strlen(size));
	while (!cli_stop)
		usleep(100000);
	cli_unpublish(o->name);
	rdmx_page_server_stats(srv, &ss);
	printf("rdmx page: server done: %" PRIu64 " clients, %" PRIu64
	       " lookups (%" PRIu64 " refused)\n",
	       ss.clients_total, ss.lookups, ss.lookups_failed);
	rc = 0;
out:
	rdmx_page_server_destroy(srv);
	cli_metrics_stop(metrics);
	rdmx_ctx_destroy(ctx);
	munmap(mem, o->size);
	return rc;
}

/* ---- bench -------------------------------------------------------------- */

#define BENCH_UNSET UINT64_MAX /* an option not given: the library's */

struct bench_opts {
	const char *url, *config;
	bool seq, json, check;
	uint64_t threads, touches, cache, write_pct, readahead, spin_us;
};

/* What the touching threads share. */
struct bench_run {
	const struct bench_opts *o;
	uint8_t *mem;
	uint64_t npages, *order;
	atomic_uint_fast64_t next;
	uint64_t touches;
	double *lat; /* per touch, µs */
	atomic_uint_fast64_t bad; /* pages whose bytes were wrong */
	atomic_bool lost; /* a touch got SIGBUS: the server is gone */
};

static uint64_t bench_rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Touch one page (a write when @write), time it, then check it whole. */
static void bench_touch(struct bench_run *r, uint64_t i, bool write)
{
	uint64_t p = r->order[i % r->npages], off = p * PAGE_SZ;
	volatile uint64_t *w = (volatile uint64_t *)(r->mem + off);
	double t0 = cli_now_us();

	if (write)
		w[0] = page_pattern(off); /* dirty, pattern kept */
	else
		(void)w[0];
	r->lat[i] = cli_now_us() - t0;
	if (!r->o->check)
		return;
	for (uint64_t k = 0; k < PAGE_SZ / 8; k++)
		if (w[k] != page_pattern(off + k * 8)) {
			atomic_fetch_add(&r->bad, 1);
			return;
		}
}

/*
 * A touch the library can no longer serve (the memory server died, or a
 * fault waited past its timeout) raises SIGBUS in the touching thread
 * (rdmx_page(7)). A bench thread jumps back out of it and stops the run,
 * and the bench says the server was lost, rather than dying of the
 * signal. SIGBUS anywhere else kills the process, as before.
 */
static __thread sigjmp_buf bench_bus_jmp;
static __thread volatile sig_atomic_t bench_bus_armed;

static void bench_on_sigbus(int sig)
{
	if (bench_bus_armed)
		siglongjmp(bench_bus_jmp, 1);
	signal(sig, SIG_DFL);
	raise(sig);
}

static void *bench_thread(void *arg)
{
	struct bench_run *volatile r = arg;
	uint64_t i;

	if (sigsetjmp(bench_bus_jmp, 1)) {
		bench_bus_armed = 0;
		atomic_store(&r->lost, true);
		return NULL;
	}
	bench_bus_armed = 1;
	while (!atomic_load_explicit(&r->lost, memory_order_relaxed) &&
	       (i = atomic_fetch_add(&r->next, 1)) < r->touches)
		bench_touch(r, i, (i * 7919 % 100) < r->o->write_pct);
	bench_bus_armed = 0;
	return NULL;
}

struct bench_lat {
	double min, p50, p90, p99, p999, max;
};

static struct bench_lat bench_stats(double *v, size_t n)
{
	struct bench_lat l;

	l.p50 = cli_quantile(v, n, 0.5); /* sorts */
	l.min = v[0];
	l.max = v[n - 1];
	l.p90 = cli_quantile(v, n, 0.9);
	l.p99 = cli_quantile(v, n, 0.99);
	l.p999 = cli_quantile(v, n, 0.999);
	return l;
}

/*
 * Fault @touches pages of @map in @o's pattern, each once per pass (all
 * pages are dropped between passes, so every touch is a fault). A touch
 * that got SIGBUS stops the run: RDMX_ERR_CONN_LOST, and *@bus set.
 */
static rdmx_status bench_faults(const struct bench_opts *o,
				struct rdmx_page_map *map, uint64_t touches,
				uint64_t threads, struct bench_lat *lat,
				double *secs, bool *bus)
{
	struct bench_run r = { .o = o, .touches = touches };
	uint64_t s = 0x2545f4914f6cdd1dull;
	pthread_t t[64];
	void *addr;
	double t0;
	rdmx_status st = rdmx_page_mmap(map, &addr);

	if (st)
		return st;
	r.mem = addr;
	r.npages = rdmx_page_length(map) / PAGE_SZ;
	r.order = malloc(r.npages * sizeof(uint64_t));
	r.lat = malloc(touches * sizeof(double));
	if (!r.order || !r.lat) {
		free(r.order);
		free(r.lat);
		return RDMX_ERR_NOMEM;
	}
	for (uint64_t i = 0; i < r.npages; i++)
		r.order[i] = i;
	for (uint64_t i = r.npages - 1; i > 0 && !o->seq; i--) {
		uint64_t j = bench_rnd(&s) % (i + 1), x = r.order[i];

		r.order[i] = r.order[j];
		r.order[j] = x;
	}
	sigaction(SIGBUS, &(struct sigaction){ .sa_handler = bench_on_sigbus },
		  NULL);
	t0 = cli_now_us();
	for (uint64_t done = 0; done < touches && !cli_stop;) {
		uint64_t pass = touches - done < r.npages ? touches - done
							  : r.npages;

		r.touches = done + pass;
		atomic_store(&r.next, done);
		for (uint64_t k = 0; k < threads; k++)
			pthread_create(&t[k], NULL, bench_thread, &r);
		for (uint64_t k = 0; k < threads; k++)
			pthread_join(t[k], NULL);
		if (atomic_load(&r.lost)) {
			*bus = true;
			st = RDMX_ERR_CONN_LOST;
			break;
		}
		done += pass;
		if (done < touches) { /* the next pass faults again */
			double d0 = cli_now_us();

			st = rdmx_page_drop(map, addr, rdmx_page_length(map));
			t0 += cli_now_us() - d0;
			if (st)
				break;
		}
	}
	*secs = (cli_now_us() - t0) / 1e6;
	if (!st)
		*lat = bench_stats(r.lat, touches);
	if (atomic_load(&r.bad)) {
		fprintf(stderr,
			"rdmx page: %" PRIu64 " pages held bytes other than "
			"the server's pattern\n",
			(uint64_t)atomic_load(&r.bad));
		st = st ? st : RDMX_ERR_PROTOCOL;
	}
	free(r.order);
	free(r.lat);
	return st;
}

/* One 4 KiB READ on @map's connection, @n times. */
static rdmx_status bench_reads(struct rdmx_page_map *map, uint64_t n,
			       struct bench_lat *lat)
{
	double *v = malloc(n * sizeof(double));
	uint64_t s = 77, pages = rdmx_page_length(map) / PAGE_SZ;
	static uint8_t buf[PAGE_SZ] __attribute__((aligned(4096)));
	rdmx_status st = RDMX_OK;

	if (!v)
		return RDMX_ERR_NOMEM;
	for (uint64_t i = 0; i < n && !st; i++) {
		double t0 = cli_now_us();

		st = rdmx_page_fetch(map, bench_rnd(&s) % pages, buf);
		v[i] = cli_now_us() - t0;
	}
	if (!st)
		*lat = bench_stats(v, n);
	free(v);
	return st;
}

static struct rdmx_page_attr bench_attr(const struct bench_opts *o,
					uint64_t region)
{
	struct rdmx_page_attr a = { .mask = RDMX_PAGE_ATTR_CACHE_BYTES,
				    .cache_bytes = o->cache };

	if (!a.cache_bytes) /* default: a quarter of what is touched */
		a.cache_bytes = region / 4 > PAGE_SZ ? region / 4 : PAGE_SZ;
	if (o->readahead != BENCH_UNSET) {
		a.mask |= RDMX_PAGE_ATTR_READAHEAD;
		a.readahead = (uint32_t)o->readahead;
	}
	if (o->spin_us != BENCH_UNSET) {
		a.mask |= RDMX_PAGE_ATTR_SPIN_US;
		a.spin_us = (uint32_t)o->spin_us;
	}
	return a;
}

static void bench_print_lat(const char *name, const struct bench_lat *l,
			    bool json, bool last)
{
	if (json)
		printf("\"%s\":{\"min_us\":%.2f,\"p50_us\":%.2f,\"p90_us\":%.2f,"
		       "\"p99_us\":%.2f,\"p999_us\":%.2f,\"max_us\":%.2f}%s",
		       name, l->min, l->p50, l->p90, l->p99, l->p999, l->max,
		       last ? "" : ",");
	else
		printf("%-22s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f\n", name,
		       l->min, l->p50, l->p90, l->p99, l->p999, l->max);
}

static void bench_report(const struct bench_opts *o, const char *transport,
			 const struct bench_lat *fault,
			 const struct bench_lat *floor,
			 const struct bench_lat *rd, double secs,
			 const struct rdmx_page_stats *ps, uint64_t cache)
{
	double rate = o->touches / secs;
	double gbs = ps->pages_fetched * (double)PAGE_SZ / secs / 1e9;
	double goal50 = floor->p50 + rd->p50 + 5, goal99 = 2 * goal50;

	if (o->json) {
		printf("{\"url\":\"%s\",\"transport\":\"%s\",\"pattern\":\"%s\","
		       "\"threads\":%" PRIu64 ",\"touches\":%" PRIu64
		       ",\"cache_bytes\":%" PRIu64 ",\"write_pct\":%" PRIu64
		       ",",
		       o->url, transport, o->seq ? "seq" : "random", o->threads,
		       o->touches, cache, o->write_pct);
		bench_print_lat("fault", fault, true, false);
		bench_print_lat("floor", floor, true, false);
		bench_print_lat("read_4k", rd, true, false);
		printf("\"faults_per_s\":%.0f,\"gb_per_s\":%.3f,"
		       "\"faults\":%" PRIu64 ",\"pages_fetched\":%" PRIu64
		       ",\"readahead\":%" PRIu64 ",\"evicted\":%" PRIu64
		       ",\"written_back\":%" PRIu64
		       ",\"checked\":%s,\"goal_p50_us\":%.1f,"
		       "\"goal_p99_us\":%.1f}\n",
		       rate, gbs, ps->faults, ps->pages_fetched, ps->readahead,
		       ps->evicted, ps->written_back,
		       o->check ? "true" : "false", goal50, goal99);
		return;
	}
	printf("rdmx page bench: %s over %s: %" PRIu64 " touches, %s, %" PRIu64
	       " thread%s, cache %" PRIu64 " KiB, %" PRIu64 "%% writes\n",
	       o->url, transport, o->touches, o->seq ? "sequential" : "random",
	       o->threads, o->threads > 1 ? "s" : "", cache >> 10,
	       o->write_pct);
	printf("%-22s %8s %8s %8s %8s %8s %8s\n", "latency (us)", "min", "p50",
	       "p90", "p99", "p99.9", "max");
	bench_print_lat("fault", fault, false, false);
	bench_print_lat("floor: local fault", floor, false, false);
	bench_print_lat("4 KiB READ", rd, false, false);
	printf("%.0f touches/s, %.3f GB/s fetched; %" PRIu64 " faults, %" PRIu64
	       " pages fetched (%" PRIu64 " read ahead), %" PRIu64
	       " evicted, %" PRIu64 " written back%s\n",
	       rate, gbs, ps->faults, ps->pages_fetched, ps->readahead,
	       ps->evicted, ps->written_back,
	       o->check ? "; every byte checked" : "");
	printf("goal: p50 <= floor + READ + 5 = %.1f us (%s), p99 <= %.1f us "
	       "(%s)\n",
	       goal50, fault->p50 <= goal50 ? "met" : "missed", goal99,
	       fault->p99 <= goal99 ? "met" : "missed");
}

static int page_bench(const struct bench_opts *o)
{
	struct rdmx_ctx *ctx = NULL;
	struct rdmx_page_map *map = NULL, *local = NULL;
	struct rdmx_page_attr a;
	struct rdmx_page_stats ps;
	struct rdmx_conn_info info;
	struct bench_lat fault, floor, rd;
	struct bench_opts lo = *o;
	uint64_t len, flen;
	uint8_t *src = NULL;
	double secs, fsecs;
	bool bus = false;
	rdmx_status st;

	st = cli_ctx_create(o->config, &ctx);
	if (!st)
		st = rdmx_page_map(ctx, o->url, NULL, &map);
	if (st) {
		cli_fail("page", "cannot map %s: %s", o->url,
			 rdmx_strerror(st));
		goto out;
	}
	cli_catch_signals();
	len = rdmx_page_length(map);
	rdmx_page_conn_info(map, &info);
	/* A map of the same shape, with the cache the options ask for. */
	rdmx_page_unmap(map);
	a = bench_attr(o, len);
	st = rdmx_page_map(ctx, o->url, &a, &map);
	if (!st)
		st = bench_reads(map, o->touches < 20000 ? o->touches : 20000,
				 &rd);
	if (!st)
		st = bench_faults(o, map, o->touches, o->threads, &fault, &secs,
				  &bus);
	if (st && bus) /* the library's line says why it could not */
		cli_fail("page",
			 "%s: a touch got SIGBUS: the memory server could "
			 "not serve it",
			 o->url);
	else if (st)
		cli_fail("page", "%s: %s", o->url, rdmx_strerror(st));
	if (st)
		goto out;
	rdmx_page_stats(map, &ps);
	/* The floor: one thread, random faults from local memory. */
	flen = len < (256ull << 20) ? len : 256ull << 20;
	src = aligned_alloc(PAGE_SZ, flen);
	lo.seq = false;
	lo.write_pct = 0;
	st = src ? RDMX_OK : RDMX_ERR_NOMEM;
	if (!st) {
		page_fill(src, flen);
		a = bench_attr(o, flen);
		st = rdmx_page_map_local(src, flen, &a, &local);
	}
	if (!st)
		st = bench_faults(&lo, local,
				  o->touches < flen / PAGE_SZ ? o->touches
							      : flen / PAGE_SZ,
				  1, &floor, &fsecs, &bus);
	if (st) {
		cli_fail("page", "the local floor: %s", rdmx_strerror(st));
		goto out;
	}
	bench_report(o, info.transport, &fault, &floor, &rd, secs, &ps,
		     a.cache_bytes);
out:
	rdmx_page_unmap(local);
	free(src);
	if (map && rdmx_page_unmap(map) && !st)
		st = RDMX_ERR_CONN_LOST;
	rdmx_ctx_destroy(ctx);
	return st ? 1 : 0;
}

/* ---- options ------------------------------------------------------------ */

static void page_usage(FILE *f)
{
	fprintf(f,
		"usage: rdmx page serve [:PORT] --size SIZE [options]\n"
		"       rdmx page bench HOST[:PORT]/NAME|@NAME [options]\n"
		"  A memory server exports a region by name; clients fault its\n"
		"  pages in by RDMA READ (port %d when none is given).\n"
		"options (serve):\n"
		"  -s, --size SIZE     bytes to export, a multiple of 4k\n"
		"      --name NAME     the region's name (default mem), under\n"
		"                      which the server is published (@NAME)\n"
		"      --file PATH     a file mapped shared (kept after exit;\n"
		"                      a new one gets the bench pattern), instead\n"
		"                      of anonymous memory with the pattern\n"
		"      --metrics [ADDR:]PORT  Prometheus /metrics and JSON /status\n"
		"                      (the loopback unless ADDR is named)\n"
		"options (bench):\n"
		"      --pattern P     random or seq (default random)\n"
		"  -T, --threads N     threads touching pages (default 1)\n"
		"  -n, --touches N     pages touched, each a fault (default 20000)\n"
		"      --cache SIZE    local cache (default a quarter of the region)\n"
		"      --write PCT     share of touches that write (default 0)\n"
		"      --readahead N   pages fetched ahead of sequential faults\n"
		"                      (default 512)\n"
		"      --spin-us N     the handler spins N us before it sleeps\n"
		"                      (default 50)\n"
		"      --no-check      do not check bytes against the pattern\n"
		"      --json          one JSON object on stdout\n"
		"options (both):\n"
		"  -c, --config FILE   YAML configuration (default: $RDMX_CONFIG)\n"
		"      --transport T   auto, verbs, shm or tcp\n",
		RDMX_PAGE_PORT);
}

static int page_parse(int argc, char **argv, struct serve_opts *so,
		      struct bench_opts *bo)
{
	static const struct option lo[] = {
		{ "size", required_argument, NULL, 's' },
		{ "name", required_argument, NULL, 1 },
		{ "file", required_argument, NULL, 2 },
		{ "metrics", required_argument, NULL, 3 },
		{ "pattern", required_argument, NULL, 4 },
		{ "threads", required_argument, NULL, 'T' },
		{ "touches", required_argument, NULL, 'n' },
		{ "cache", required_argument, NULL, 5 },
		{ "write", required_argument, NULL, 6 },
		{ "readahead", required_argument, NULL, 7 },
		{ "spin-us", required_argument, NULL, 8 },
		{ "no-check", no_argument, NULL, 9 },
		{ "json", no_argument, NULL, 10 },
		{ "config", required_argument, NULL, 'c' },
		{ "transport", required_argument, NULL, 11 },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*so = (struct serve_opts){ .name = "mem" };
	*bo = (struct bench_opts){ .threads = 1,
				   .touches = 20000,
				   .readahead = BENCH_UNSET,
				   .spin_us = BENCH_UNSET,
				   .check = true };
	optind = 1;
	while ((c = getopt_long(argc, argv, "s:T:n:c:h", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			if (!cli_size("page", "--size", optarg, &so->size))
				return 1;
			break;
		case 1:
			so->name = optarg;
			break;
		case 2:
			so->file = optarg;
			break;
		case 3:
			if (!cli_metrics_option("page", optarg))
				return 1;
			break;
		case 4:
			if (strcmp(optarg, "random") && strcmp(optarg, "seq"))
				return cli_fail("page",
						"--pattern is random "
						"or seq, not '%s'",
						optarg);
			bo->seq = !strcmp(optarg, "seq");
			break;
		case 'T':
			if (!cli_size("page", "--threads", optarg,
				      &bo->threads))
				return 1;
			break;
		case 'n':
			if (!cli_size("page", "--touches", optarg,
				      &bo->touches))
				return 1;
			break;
		case 5:
			if (!cli_size("page", "--cache", optarg, &bo->cache))
				return 1;
			break;
		case 6:
			if (!cli_size("page", "--write", optarg,
				      &bo->write_pct))
				return 1;
			break;
		case 7:
			if (!cli_size("page", "--readahead", optarg,
				      &bo->readahead))
				return 1;
			break;
		case 8:
			if (!cli_size("page", "--spin-us", optarg,
				      &bo->spin_us))
				return 1;
			break;
		case 9:
			bo->check = false;
			break;
		case 10:
			bo->json = true;
			break;
		case 'c':
			so->config = bo->config = optarg;
			break;
		case 11:
			if (!cli_transport_option("page", optarg))
				return 1;
			break;
		case 'h':
			page_usage(stdout);
			return -1;
		default:
			return cli_fail("page", "see rdmx page --help");
		}
	}
	if (!bo->threads || bo->threads > 64 || !bo->touches ||
	    bo->write_pct > 100 ||
	    (bo->readahead > 4096 && bo->readahead != BENCH_UNSET) ||
	    (bo->spin_us > 1000000 && bo->spin_us != BENCH_UNSET))
		return cli_fail("page",
				"--threads is 1..64, --touches at least "
				"1, --write 0..100, --readahead 0..4096");
	return 0;
}

int cli_page(int argc, char **argv)
{
	struct serve_opts so;
	struct bench_opts bo;
	const char *what = argc > 1 ? argv[1] : NULL;
	int rc;

	if (!what || (strcmp(what, "serve") && strcmp(what, "bench"))) {
		if (what && (!strcmp(what, "--help") || !strcmp(what, "-h"))) {
			page_usage(stdout);
			return 0;
		}
		page_usage(stderr);
		return 1;
	}
	rc = page_parse(argc - 1, argv + 1, &so, &bo);
	if (rc)
		return rc < 0 ? 0 : rc;
	if (!strcmp(what, "serve")) {
		if (cli_take_addr("page", argc - 1, argv + 1, &so.addr))
			return 1;
		if (so.addr && !cli_is_server(so.addr))
			return cli_fail("page",
					"serve takes [:PORT], not a "
					"host ('%s')",
					so.addr);
		if (!so.size || so.size % PAGE_SZ)
			return cli_fail("page", "--size is required, a "
						"multiple of 4k");
		return page_serve(&so);
	}
	if (argc - 1 - optind != 1)
		return cli_fail("page",
				"bench takes one HOST[:PORT]/NAME or @NAME");
	bo.url = argv[1 + optind];
	return page_bench(&bo);
}
