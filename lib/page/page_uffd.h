/* SPDX-License-Identifier: MIT */
/* userfaultfd for the fault handler (page_uffd.c); -1 and a log line on error.
 */
#ifndef RDMX_PAGE_UFFD_H
#define RDMX_PAGE_UFFD_H

#include <linux/userfaultfd.h>
#include <stdbool.h>
#include <stdint.h>

/*
 * A non-blocking userfaultfd with write-protect faults, thread ids and
 * poison where the kernel has them; *features_p gets what was enabled.
 * errno is EPERM when the caller may not have one (the log says which
 * sysctl or device to change), ENOSYS or EOPNOTSUPP when the kernel lacks it.
 */
int page_uffd_open(uint64_t *features_p);
bool page_uffd_has_poison(uint64_t features);
/* Register [base, base + len) for missing and write-protect faults. */
int page_uffd_register(int fd, void *base, uint64_t len);
/* Install @len bytes at @dst from @src, write-protected if @wp; wakes. */
int page_uffd_copy(int fd, void *dst, const void *src, uint64_t len, bool wp);
/* Set or clear write protection; clearing wakes the writers. */
int page_uffd_protect(int fd, void *addr, uint64_t len, bool wp);
void page_uffd_wake(int fd, void *addr, uint64_t len);
/* Make access to [addr, +len) raise SIGBUS (Linux 6.6); wakes. */
int page_uffd_poison(int fd, void *addr, uint64_t len);

#endif
