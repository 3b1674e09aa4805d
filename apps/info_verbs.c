/* SPDX-License-Identifier: MIT */
/*
 * rdmx info, RDMA part: devices, ports, GIDs, the memlock limit, and one
 * line for each thing that keeps the verbs transport from working here.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"

#ifdef RDMX_HAVE_VERBS
#include <infiniband/verbs.h>

static const char *info_port_state(enum ibv_port_state s)
{
	return s == IBV_PORT_ACTIVE  ? "ACTIVE"
	       : s == IBV_PORT_DOWN  ? "DOWN"
	       : s == IBV_PORT_INIT  ? "INIT"
	       : s == IBV_PORT_ARMED ? "ARMED"
				     : "other";
}

/* "RoCE v2", "IB/RoCE v1", from sysfs; "" when it does not say. */
static void info_gid_type(const char *dev, int port, int idx, char *out,
			  size_t len)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path),
		 "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d", dev,
		 port, idx);
	out[0] = '\0';
	f = fopen(path, "r");
	if (f) {
		if (fgets(out, (int)len, f))
			out[strcspn(out, "\n")] = '\0';
		fclose(f);
	}
}

/* List the GIDs of a port; true when a RoCEv2 one carries an IPv4 address. */
static bool info_gids(struct ibv_context *ctx, const char *dev, int port,
		      int len)
{
	static const uint8_t v4[12] = {
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
	};
	bool v2_ip = false;

	for (int i = 0; i < len; i++) {
		char s[INET6_ADDRSTRLEN], type[32], ip[INET_ADDRSTRLEN] = "";
		union ibv_gid gid;
		static const union ibv_gid zero;

		if (ibv_query_gid(ctx, (uint8_t)port, i, &gid) ||
		    !memcmp(&gid, &zero, sizeof(gid)))
			continue;
		inet_ntop(AF_INET6, gid.raw, s, sizeof(s));
		info_gid_type(dev, port, i, type, sizeof(type));
		if (!memcmp(gid.raw, v4, sizeof(v4))) {
			inet_ntop(AF_INET, gid.raw + 12, ip, sizeof(ip));
			v2_ip |= !strcmp(type, "RoCE v2");
		}
		printf("    gid %-3d %-40s %-10s %s\n", i, s, type, ip);
	}
	return v2_ip;
}

static int info_device(struct ibv_device *d)
{
	const char *name = ibv_get_device_name(d);
	struct ibv_context *ctx = ibv_open_device(d);
	struct ibv_device_attr a;
	int problems = 0;

	if (!ctx || ibv_query_device(ctx, &a)) {
		printf("  %s: cannot open: %m\n", name);
		return 1;
	}
	printf("  %s: %d port(s), atomics %s, max %d QPs\n", name,
	       a.phys_port_cnt, a.atomic_cap == IBV_ATOMIC_NONE ? "no" : "yes",
	       a.max_qp);
	for (int p = 1; p <= a.phys_port_cnt; p++) {
		struct ibv_port_attr pa;
		bool eth;

		if (ibv_query_port(ctx, (uint8_t)p, &pa))
			continue;
		eth = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
		printf("   port %d: %s, mtu %d (active) / %d, link %s\n", p,
		       info_port_state(pa.state), 128 << pa.active_mtu,
		       128 << pa.max_mtu,
		       eth ? "Ethernet (RoCE or iWARP)" : "InfiniBand");
		if (!info_gids(ctx, name, p, pa.gid_tbl_len) && eth &&
		    !strstr(name, "siw")) {
			printf("  diagnosis: %s port %d has no RoCEv2 GID with an "
			       "IP address: give its netdev an address (ip addr "
			       "add)\n",
			       name, p);
			problems++;
		}
		if (pa.state != IBV_PORT_ACTIVE) {
			printf("  diagnosis: %s port %d is %s: check its link "
			       "(ibv_devinfo, ip link)\n",
			       name, p, info_port_state(pa.state));
			problems++;
		}
	}
	ibv_close_device(ctx);
	return problems;
}

/* Why there may be no device at all: kernel, devices, providers. */
static int info_no_devices(void)
{
	DIR *dir = opendir("/sys/class/infiniband");
	struct dirent *e;
	int n = 0;

	if (!dir) {
		printf("  diagnosis: no RDMA support in this kernel "
		       "(/sys/class/infiniband is missing); rdmx uses shm and "
		       "tcp\n");
		return 1;
	}
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	if (!n)
		printf("  diagnosis: no RDMA device (/sys/class/infiniband is "
		       "empty): add one, e.g. modprobe rdma_rxe; rdma link add "
		       "rxe0 type rxe netdev eth0\n");
	else
		printf("  diagnosis: %d RDMA device(s) in sysfs but none "
		       "opened: the provider library is missing (apt-get "
		       "install ibverbs-providers)\n",
		       n);
	return 1;
}

int cli_info_verbs(void)
{
	struct ibv_device **list;
	struct rlimit rl;
	int n = 0, problems = 0;

	printf("rdma devices:\n");
	list = ibv_get_device_list(&n);
	if (!list || !n)
		problems += info_no_devices();
	for (int i = 0; i < n; i++)
		problems += info_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	getrlimit(RLIMIT_MEMLOCK, &rl);
	if (rl.rlim_cur == RLIM_INFINITY) {
		printf("memlock: unlimited\n");
	} else {
		printf("memlock: %llu KiB (ulimit -l)\n",
		       (unsigned long long)rl.rlim_cur / 1024);
		if (n && rl.rlim_cur < (64u << 20))
			printf("  diagnosis: registrations beyond %llu KiB in "
			       "all fail; raise it: ulimit -l unlimited, or "
			       "memlock in /etc/security/limits.conf\n",
			       (unsigned long long)rl.rlim_cur / 1024);
	}
	return problems;
}
#else
int cli_info_verbs(void)
{
	printf("rdma devices: this build has no verbs transport (libibverbs-dev "
	       "and librdmacm-dev were missing when it was built)\n");
	return 0;
}
#endif
