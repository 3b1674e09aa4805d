/* SPDX-License-Identifier: MIT */
/*
 * An etcd for a test: Debian's etcd-server, 1 to 3 members on free
 * loopback ports with a temporary data directory, started by the test and
 * stopped by pid (by an exit handler, too, when a failed assertion left
 * the test before etcd_stop). Fails the test (with the fix) when etcd is
 * missing.
 */
#ifndef RDMX_ETCD_RIG_H
#define RDMX_ETCD_RIG_H

#include <sys/types.h>

struct etcd {
	int n;
	pid_t pid[3];
	int client[3], peer[3];
	char dir[64];
	char url[256]; /* etcd://127.0.0.1:P[,...]/test */
};

/* Start @n members and wait until they answer (10 s, scaled). */
void etcd_start(struct etcd *e, int n);
/* Wait until the registry at @url answers. */
void etcd_wait(const char *url);
/* SIGKILL member @i; start it again, on its ports and data. */
void etcd_kill(struct etcd *e, int i);
/* Make member @i the cluster's leader (etcd's leadership transfer). */
void etcd_lead(struct etcd *e, int i);
void etcd_restart(struct etcd *e, int i);
/* Kill every member, remove the data. */
void etcd_stop(struct etcd *e);

#endif
