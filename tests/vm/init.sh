#!/bin/sh
# PID 1 of the rdmx test guest (busybox): load the modules, mount the host's
# root read-only under a tmpfs overlay, the run and work shares read-write at
# their host paths, then run stage2.sh from the work tree in a chroot and
# power off. Kernel arguments: rdmx.run=DIR rdmx.work=DIR.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for a in $(cat /proc/cmdline); do
	case $a in
	rdmx.run=*) RUN=${a#rdmx.run=} ;;
	rdmx.work=*) WORK=${a#rdmx.work=} ;;
	esac
done
for m in $(cat /modules.list); do
	insmod "/mod/$m" 2>/dev/null || echo "[init] insmod $m failed"
done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /lower &&
	mount -t tmpfs tmpfs /ov && mkdir /ov/up /ov/wk &&
	mount -t overlay overlay -o lowerdir=/lower,upperdir=/ov/up,workdir=/ov/wk /newroot ||
	{ echo "[init] cannot mount the host root"; poweroff -f; }
mount -t proc proc /newroot/proc
mount -t sysfs sysfs /newroot/sys
mount -t devtmpfs devtmpfs /newroot/dev
mount -t tmpfs tmpfs /newroot/tmp
mount -t tmpfs tmpfs /newroot/run
mkdir -p "/newroot$RUN" "/newroot$WORK"
mount -t 9p -o trans=virtio,version=9p2000.L,cache=none,msize=512000 run "/newroot$RUN"
mount -t 9p -o trans=virtio,version=9p2000.L,cache=mmap,msize=512000 work "/newroot$WORK"
chroot /newroot /bin/bash "$WORK/tests/vm/stage2.sh" "$RUN" "$WORK" "$(cat /kver)"
sync
poweroff -f
