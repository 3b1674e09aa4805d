// SPDX-License-Identifier: MIT
/*
 * userfaultfd, opened the way the caller's privileges allow, and the few
 * ioctls the fault handler uses. Debian 12's headers predate UFFDIO_POISON
 * (Linux 6.6), so its ABI is spelled out here when they lack it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "page.h"
#include "page_uffd.h"

#ifndef UFFDIO_POISON
#define UFFD_FEATURE_POISON (1 << 14)
#define _UFFDIO_POISON (0x08)
struct uffdio_poison {
	struct uffdio_range range;
	__u64 mode;
	__s64 updated;
};
#define UFFDIO_POISON _IOWR(UFFDIO, _UFFDIO_POISON, struct uffdio_poison)
#endif

static int page_uffd_new(int flags)
{
	int fd = (int)syscall(SYS_userfaultfd, flags);

	if (fd >= 0 || errno != EPERM)
		return fd;
	/* Access to the device stands in for the sysctl (Linux 6.1). */
	int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);

	if (dev >= 0) {
		fd = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
		close(dev);
		if (fd >= 0)
			return fd;
	}
	/* Faults in user mode only: allowed to every user. */
	fd = (int)syscall(SYS_userfaultfd, flags | UFFD_USER_MODE_ONLY);
	if (fd < 0)
		errno = EPERM;
	return fd;
}

static int page_uffd_refuse(void)
{
	if (errno == ENOSYS)
		page_log(
			RDMX_LOG_ERROR,
			"userfaultfd: this kernel has none (CONFIG_USERFAULTFD): "
			"use rdmx_page_fetch and rdmx_page_store");
	else if (errno == EPERM)
		page_log(RDMX_LOG_ERROR,
			 "userfaultfd: not permitted: set sysctl "
			 "vm.unprivileged_userfaultfd=1 or give this user "
			 "/dev/userfaultfd; rdmx_page_fetch still works");
	else
		page_log(RDMX_LOG_ERROR, "userfaultfd: %m");
	return -1;
}

int page_uffd_open(uint64_t *features_p)
{
	const uint64_t want = UFFD_FEATURE_PAGEFAULT_FLAG_WP |
			      UFFD_FEATURE_THREAD_ID | UFFD_FEATURE_POISON;
	struct uffdio_api api = { .api = UFFD_API };
	int fd = page_uffd_new(O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return page_uffd_refuse();
	/* UFFDIO_API is once per fd: ask what there is on a probe. */
	if (ioctl(fd, UFFDIO_API, &api) < 0) {
		page_log(RDMX_LOG_ERROR, "userfaultfd: UFFDIO_API: %m");
		close(fd);
		return -1;
	}
	close(fd);
	if (!(api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP)) {
		page_log(RDMX_LOG_ERROR,
			 "userfaultfd: no write protection for anonymous "
			 "memory (Linux 5.7): cannot track dirty pages");
		errno = EOPNOTSUPP;
		return -1;
	}
	fd = page_uffd_new(O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return page_uffd_refuse();
	api = (struct uffdio_api){ .api = UFFD_API,
				   .features = api.features & want };
	if (ioctl(fd, UFFDIO_API, &api) < 0) {
		page_log(RDMX_LOG_ERROR, "userfaultfd: UFFDIO_API: %m");
		close(fd);
		return -1;
	}
	*features_p = api.features;
	return fd;
}

bool page_uffd_has_poison(uint64_t features)
{
	return features & UFFD_FEATURE_POISON;
}

int page_uffd_register(int fd, void *base, uint64_t len)
{
	struct uffdio_register reg = {
		.range = { (uintptr_t)base, len },
		.mode = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
	};
	const uint64_t need = 1ull << _UFFDIO_COPY | 1ull << _UFFDIO_WAKE |
			      1ull << _UFFDIO_WRITEPROTECT;

	if (ioctl(fd, UFFDIO_REGISTER, &reg) < 0) {
		page_log(RDMX_LOG_ERROR, "userfaultfd: UFFDIO_REGISTER: %m");
		return -1;
	}
	if ((reg.ioctls & need) != need) {
		page_log(RDMX_LOG_ERROR,
			 "userfaultfd: the kernel lacks copy, wake or "
			 "write-protect for anonymous memory");
		return -1;
	}
	return 0;
}

int page_uffd_copy(int fd, void *dst, const void *src, uint64_t len, bool wp)
{
	struct uffdio_copy c;
	uint64_t done = 0;

	while (done < len) {
		c = (struct uffdio_copy){
			.dst = (uintptr_t)dst + done,
			.src = (uintptr_t)src + done,
			.len = len - done,
			.mode = wp ? UFFDIO_COPY_MODE_WP : 0,
		};
		if (ioctl(fd, UFFDIO_COPY, &c) == 0)
			return 0;
		if (c.copy > 0) { /* a part went in; go on with the rest */
			done += (uint64_t)c.copy;
			continue;
		}
		if (errno == EAGAIN) /* the address space changed: retry */
			continue;
		if (errno == EEXIST) { /* already there: the next page */
			done += PAGE_SIZE_BYTES;
			continue;
		}
		page_log(RDMX_LOG_ERROR, "userfaultfd: UFFDIO_COPY: %m");
		return -1;
	}
	return 0;
}

int page_uffd_protect(int fd, void *addr, uint64_t len, bool wp)
{
	struct uffdio_writeprotect w = {
		.range = { (uintptr_t)addr, len },
		.mode = wp ? UFFDIO_WRITEPROTECT_MODE_WP : 0,
	};

	while (ioctl(fd, UFFDIO_WRITEPROTECT, &w) < 0) {
		if (errno != EAGAIN) {
			page_log(RDMX_LOG_ERROR,
				 "userfaultfd: UFFDIO_WRITEPROTECT: %m");
			return -1;
		}
	}
	return 0;
}

void page_uffd_wake(int fd, void *addr, uint64_t len)
{
	struct uffdio_range r = { (uintptr_t)addr, len };

	ioctl(fd, UFFDIO_WAKE, &r);
}

int page_uffd_poison(int fd, void *addr, uint64_t len)
{
	struct uffdio_poison p = { .range = { (uintptr_t)addr, len } };

	while (ioctl(fd, UFFDIO_POISON, &p) < 0) {
		if (errno == EEXIST)
			return 0; /* a page there already: it is served */
		if (errno != EAGAIN)
			return -1;
	}
	return 0;
}
