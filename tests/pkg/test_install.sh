#!/usr/bin/env bash
# Description: rdmx as another project uses it. Installs the build into a
# temporary prefix (cmake --install, DESTDIR too), then builds examples/ out
# of the tree twice, with pkg-config (examples/Makefile) and with CMake's
# find_package(rdmx) (examples/CMakeLists.txt), and one statically
# (rdmx-static.pc); runs their programs against each other, and the
# installed rdmx CLI, linked against the installed librdmx.so.
set -u
build=${1:?usage: test_install.sh BUILD_DIR SOURCE_DIR [SANITIZERS]}
src=${2:?}
if [ -n "${3:-}" ]; then # the sanitizers' runtime is not the user's
	echo "skip: a build with -fsanitize=$3 is not one to install"
	exit 77
fi
source "$(dirname "$0")/common.sh"

prefix=$tmp/prefix
check "cmake --install --prefix" cmake --install "$build" --prefix "$prefix"
lib=$(dirname "$(find "$prefix" -name librdmx.so.0 | head -1)")
[ -n "$lib" ] || { bad "librdmx.so.0 installed"; exit 1; }
for f in share/bash-completion/completions/rdmx include/rdmx.h include/rdmx_page.h include/rdmx_kv.h \
	include/rdmx_registry.h bin/rdmx; do
	[ -e "$prefix/$f" ] && ok "installs $f" || bad "installs $f"
done
for f in share/man/man3/rdmx_post_write.3 share/man/man3/rdmx_mr_dereg.3 \
	share/man/man1/rdmx.1 share/man/man7/rdmx.7; do
	[ -e "$prefix/$f" ] && ok "installs $f" || bad "installs $f"
done
[ "$(man -M "$prefix/share/man" -w rdmx_post_write)" = "$prefix/share/man/man3/rdmx_post_write.3" ] &&
	ok "man -w rdmx_post_write finds the installed page" ||
	bad "man -w rdmx_post_write finds the installed page"
for f in librdmx.so librdmx.a librdmx_page.a librdmx_kv.a \
	librdmx_registry.a pkgconfig/rdmx.pc pkgconfig/rdmx_kv.pc \
	cmake/rdmx/rdmx-config.cmake; do
	[ -e "$lib/$f" ] && ok "installs $f" || bad "installs $f"
done

# The shared library: its soname, versioned symbols, nothing else exported.
soname=$(readelf -d "$lib/librdmx.so.0" | grep -o 'SONAME.*\[.*\]')
[[ $soname == *"[librdmx.so.0]"* ]] && ok "soname librdmx.so.0" ||
	bad "soname librdmx.so.0 ($soname)"
exported=$(objdump -T "$lib/librdmx.so.0" | awk '$2 == "g" && $4 == ".text" {print $6, $7}')
if [ -n "$exported" ] && ! grep -qv '^RDMX_0\.1 rdmx_' <<<"$exported"; then
	ok "every exported function is rdmx_*@RDMX_0.1 ($(wc -l <<<"$exported"))"
else
	bad "exported functions outside RDMX_0.1 rdmx_*: $(grep -v '^RDMX_0\.1 rdmx_' <<<"$exported" | head -3)"
fi

# The CLI is linked against the installed librdmx.so.0.
export LD_LIBRARY_PATH=$lib
needed=$(readelf -d "$prefix/bin/rdmx" | grep NEEDED)
grep -q 'librdmx.so.0' <<<"$needed" && ok "rdmx CLI needs librdmx.so.0" ||
	bad "rdmx CLI needs librdmx.so.0"
[ "$(ldd "$prefix/bin/rdmx" | awk '/librdmx.so/ {print $3}')" = "$lib/librdmx.so.0" ] &&
	ok "rdmx CLI loads the installed library" || bad "rdmx CLI loads the installed library"
check "installed rdmx info" "$prefix/bin/rdmx" info

# DESTDIR: staged under it, with the final prefix inside the pc file.
check "DESTDIR install" env DESTDIR="$tmp/stage" cmake --install "$build" --prefix /opt/rdmx
pc=$(find "$tmp/stage" -name rdmx.pc | head -1)
[ -n "$pc" ] && grep -qx 'prefix=/opt/rdmx' "$pc" &&
	ok "DESTDIR: rdmx.pc says prefix=/opt/rdmx" || bad "DESTDIR: rdmx.pc says prefix=/opt/rdmx"

# Out of the tree: pkg-config, then CMake's find_package.
export PKG_CONFIG_PATH=$lib/pkgconfig
cp -r "$src/examples" "$tmp/examples"
check "pkg-config --cflags --libs rdmx" pkg-config --cflags --libs rdmx
check "examples with pkg-config (make)" make -C "$tmp/examples" OUT="$tmp/pc"
check "examples with find_package (cmake configure)" \
	cmake -S "$tmp/examples" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$prefix"
check "examples with find_package (cmake build)" cmake --build "$tmp/cm"
check "pingpong linked statically (rdmx-static.pc)" \
	sh -c "cc -o '$tmp/pingpong-static' '$tmp/examples/basic/pingpong.c' \
		\$(pkg-config --cflags --libs rdmx-static)"
if readelf -d "$tmp/pingpong-static" 2>/dev/null | grep -q librdmx; then
	bad "the static pingpong needs no librdmx.so"
else
	ok "the static pingpong needs no librdmx.so"
fi

# Programs of the two builds against each other, over tcp and shm, and
# the static one, which has nowhere to go.
for t in tcp shm; do
	run_pair "pingpong (cmake build) against pingpong -l (pkg-config build)" \
		$t "$tmp/pc/pingpong" "$tmp/cm/examples/pingpong" "1000 round trips"
	grep -q "served 1000 round trips" "$tmp/srv" && ok "$t: the server served them all" ||
		bad "$t: the server served them all"
	run_pair "read (pkg-config build) READs the region of read -l (cmake build)" \
		$t "$tmp/cm/examples/read" "$tmp/pc/read" "the server's region, 4096 bytes"
	run_pair "write_imm (cmake build) WRITEs into write_imm -l (pkg-config build)" \
		$t "$tmp/pc/write_imm" "$tmp/cm/examples/write_imm" "wrote"
	grep -q "the region holds 'hello from write_imm'" "$tmp/srv" &&
		ok "$t: the WRITE's bytes are in the server's region" ||
		bad "$t: the WRITE's bytes are in the server's region"
	if RDMX_TRANSPORT=$t timeout 30 "$tmp/pingpong-static" 127.0.0.1:1 >/dev/null 2>&1; then
		bad "$t: a client with nowhere to go fails"
	else
		ok "$t: a client with nowhere to go fails"
	fi
done
finish
