#!/usr/bin/env bash
# rdmx's RDMA test guest: a Debian kernel under qemu with SoftRoCE (rxe) and,
# where the kernel has it, Soft-iWARP (siw), running host-built binaries.
#
#   tests/vm/vm.sh check        exit 0 if a guest can boot here, else say why
#   tests/vm/vm.sh prepare      packages, kernel, vmlinux, initramfs (idempotent)
#   tests/vm/vm.sh run CMD...   boot, run CMD in the work tree, power off;
#                               the exit code is CMD's (124: timeout, 125: VM)
#
# Everything comes from Debian's packages. The guest sees the host's root
# read-only (9p, under a tmpfs overlay) and this work tree read-write, so
# nothing is copied or rebuilt for it. Under TCG (no usable KVM here) a boot
# takes ~5 s and every fork+exec ~50-150 ms: run suites, not loops of tools.
# Timings inside measure the emulator, never rdmx.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(cd "$HERE/../.." && pwd)
DIR=${RDMX_VM_DIR:-/var/tmp/rdmx-vm}
TIMEOUT=${RDMX_VM_TIMEOUT:-1200}
PKGS="qemu-system-x86 busybox-static kmod cpio xz-utils zstd binutils iproute2
      rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest"
MODS="rdma_rxe siw rdma_ucm crc32_generic libcrc32c crc32c_generic
      9pnet_virtio 9p overlay dummy veth virtio_pci sch_netem"

say() { echo "[vm] $*" >&2; }

check() {
	[ "$(id -u)" -eq 0 ] || { echo "needs root (apt-get, qemu)"; return 1; }
	[ "$(uname -m)" = x86_64 ] || { echo "needs an x86_64 host"; return 1; }
	[ -r /dev/zero ] || return 1
	return 0
}

install_pkgs() {
	local missing=()
	for p in $PKGS; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
}

# The kernel package behind linux-image-amd64 (6.1 on Debian 12). It has
# rxe but not Soft-iWARP (CONFIG_RDMA_SIW unset, as in Debian's 6.12):
# build_siw makes siw.ko from Debian's own source of that kernel.
kernel_pkg() {
	apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}'
}

prepare_kernel() {
	local pkg=$1 kdir deb
	kdir=$DIR/kernel/$pkg
	[ -f "$kdir/.done" ] && { echo "$kdir"; return; }
	mkdir -p "$DIR/debs" "$kdir"
	say "fetching $pkg"
	(cd "$DIR/debs" && ls "$pkg"_*.deb >/dev/null 2>&1 || apt-get download "$pkg" >/dev/null)
	deb=$(ls "$DIR/debs/$pkg"_*.deb | tail -1)
	dpkg-deb -x "$deb" "$kdir"
	depmod -b "$kdir" "$(ls "$kdir/lib/modules")"
	touch "$kdir/.done"
	rm -f "$deb"
	echo "$kdir"
}

# The uncompressed vmlinux boots through its PVH entry, skipping the
# emulated real-mode setup and decompression (seconds under TCG).
extract_vmlinux() {
	local bz=$1 out=$2 off
	for off in $(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$bz" | cut -d: -f1); do
		# Not a pipe: xz stops at the stream's end, and tail's SIGPIPE
		# would fail it under pipefail.
		if xz -dc --single-stream < <(tail -c +$((off + 1)) "$bz") \
			>"$out.tmp" 2>/dev/null &&
			[ "$(head -c 4 "$out.tmp" | od -An -c | tr -d ' ')" = '177ELF' ]; then
			mv "$out.tmp" "$out"
			return 0
		fi
	done
	rm -f "$out.tmp"
	return 1
}

# siw.ko for kernel @kver, from Debian's linux-source and linux-headers of
# the same version, unless the kernel ships it. Prints its path, or nothing.
build_siw() {
	local kdir=$1 kver=$2 out=$DIR/siw/$kver src hdr
	if [ -n "$(find "$kdir/lib/modules/$kver" -name 'siw.ko*' | head -1)" ]; then
		return 0
	fi
	[ -f "$out/siw.ko" ] && { echo "$out/siw.ko"; return 0; }
	src="linux-source-$(echo "$kver" | cut -d. -f1-2)"
	hdr="linux-headers-$kver"
	say "building siw.ko from $src and $hdr"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends "$src" "$hdr" >/dev/null 2>&1 ||
		{ say "cannot install $src $hdr: no siw"; return 0; }
	rm -rf "$out" && mkdir -p "$out"
	tar -xJf "/usr/src/$src.tar.xz" -C "$out" --strip-components=5 \
		"$src/drivers/infiniband/sw/siw" &&
		make -s -C "/usr/src/$hdr" M="$out" CONFIG_RDMA_SIW=m modules \
			>"$out/build.log" 2>&1 ||
		{ say "siw.ko did not build (see $out/build.log): no siw"; return 0; }
	echo "$out/siw.ko"
}

build_initramfs() {
	local kdir=$1 kver=$2 out=$3 siw=$4 root m name
	root=$(mktemp -d)
	mkdir -p "$root"/{bin,proc,sys,dev,lower,ov,newroot,mod}
	cp /bin/busybox "$root/bin/busybox"
	for a in sh mount umount insmod mkdir cat poweroff reboot sleep chroot echo cut mknod; do
		ln -s busybox "$root/bin/$a"
	done
	: >"$root/modules.list"
	# shellcheck disable=SC2086
	for m in $(modprobe -a -d "$kdir" -S "$kver" --show-depends $MODS 2>/dev/null |
		awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++'); do
		name=$(basename "$m")
		name=${name%.xz}
		name=${name%.zst}
		case $m in
		*.xz) xz -dc "$m" >"$root/mod/$name" ;;
		*.zst) zstd -qdc "$m" >"$root/mod/$name" ;;
		*) cp "$m" "$root/mod/$name" ;;
		esac
		echo "$name" >>"$root/modules.list"
	done
	if [ -n "$siw" ]; then # after its dependencies, loaded above
		cp "$siw" "$root/mod/siw.ko"
		echo siw.ko >>"$root/modules.list"
	fi
	cp "$HERE/init.sh" "$root/init"
	chmod +x "$root/init"
	echo "$kver" >"$root/kver"
	(cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1) >"$out"
	rm -rf "$root"
}

prepare() {
	local pkg kdir kver siw
	check >/dev/null || { say "cannot prepare: $(check)"; return 1; }
	install_pkgs
	pkg=$(kernel_pkg)
	kdir=$(prepare_kernel "$pkg")
	kver=$(ls "$kdir/lib/modules")
	if [ ! -f "$DIR/vmlinux" ] || [ "$kdir/.done" -nt "$DIR/vmlinux" ]; then
		extract_vmlinux "$kdir/boot/vmlinuz-$kver" "$DIR/vmlinux" ||
			{ say "no vmlinux in $kdir"; return 1; }
	fi
	siw=$(build_siw "$kdir" "$kver")
	# shellcheck disable=SC2086
	if [ ! -f "$DIR/initramfs.gz" ] || [ "$HERE/init.sh" -nt "$DIR/initramfs.gz" ] ||
		[ "$kdir/.done" -nt "$DIR/initramfs.gz" ] ||
		[ "$(cat "$DIR/initramfs.mods" 2>/dev/null)" != "$(echo $MODS)" ] ||
		{ [ -n "$siw" ] && [ "$siw" -nt "$DIR/initramfs.gz" ]; }; then
		build_initramfs "$kdir" "$kver" "$DIR/initramfs.gz" "$siw"
		echo $MODS >"$DIR/initramfs.mods"
	fi
	say "guest ready: $pkg"
}

run() {
	local run rc=125 start=$SECONDS
	prepare >&2
	run=$(mktemp -d "$DIR/run.XXXXXX")
	printf '%q ' "$@" >"$run/cmd"
	env | grep -E '^(RDMX_|FUZZ_|CI=)' | sed 's/^/export /' >"$run/env" || true
	timeout -k 5 "$TIMEOUT" qemu-system-x86_64 -machine pc -accel tcg,thread=multi \
		-cpu max -smp 2 -m 2048 -nographic -no-reboot -nic none \
		-kernel "$DIR/vmlinux" -initrd "$DIR/initramfs.gz" \
		-append "console=ttyS0 quiet panic=-1 rdmx.run=$run rdmx.work=$WORK" \
		-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
		-virtfs "local,path=$run,mount_tag=run,security_model=none" \
		-virtfs "local,path=$WORK,mount_tag=work,security_model=none" \
		>"$run/console" 2>&1 || rc=$?
	cat "$run/out" 2>/dev/null || true
	if [ -f "$run/rc" ]; then
		rc=$(cat "$run/rc")
	elif [ "$rc" -ne 124 ]; then
		rc=125
		say "the guest failed before the command ran; its console:"
		tail -30 "$run/console" >&2
	fi
	say "guest done: rc=$rc, $((SECONDS - start)) s"
	rm -rf "$run"
	return "$rc"
}

case ${1:-} in
check) check ;;
prepare) prepare ;;
run) shift; run "$@" ;;
*) echo "usage: $0 check | prepare | run CMD..." >&2; exit 2 ;;
esac
