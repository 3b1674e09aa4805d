#!/usr/bin/env bash
# Description: `make install` as the README gives it, staged with DESTDIR:
# the prefix (PREFIX, default /usr/local) is the one the installed files
# name, the files are all there, and make uninstall takes them away.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
source "$(dirname "$0")/common.sh"

if make -C "$src" --no-print-directory install DESTDIR="$tmp/stage" >"$tmp/out" 2>&1; then
	ok "make install DESTDIR=..."
else
	bad "make install DESTDIR=..."
	tail -20 "$tmp/out"
fi
root=$tmp/stage/usr/local
for f in lib/librdmx.so.0 lib/librdmx.a include/rdmx.h bin/rdmx \
	lib/pkgconfig/rdmx.pc lib/cmake/rdmx/rdmx-config.cmake \
	share/man/man3/rdmx_post_write.3 share/man/man1/rdmx.1; do
	[ -e "$root/$f" ] && ok "installs /usr/local/$f" || bad "installs /usr/local/$f"
done
grep -qx 'prefix=/usr/local' "$root/lib/pkgconfig/rdmx.pc" 2>/dev/null &&
	ok "rdmx.pc names /usr/local" || bad "rdmx.pc names /usr/local"
if make -C "$src" --no-print-directory install PREFIX=/opt/rdmx DESTDIR="$tmp/opt" >"$tmp/out" 2>&1 &&
	grep -qx 'prefix=/opt/rdmx' "$tmp/opt/opt/rdmx/lib/pkgconfig/rdmx.pc"; then
	ok "make install PREFIX=/opt/rdmx: rdmx.pc names it"
else
	bad "make install PREFIX=/opt/rdmx"
	tail -20 "$tmp/out"
fi
if make -C "$src" --no-print-directory uninstall DESTDIR="$tmp/opt" >"$tmp/out" 2>&1 &&
	[ -z "$(find "$tmp/opt" -type f -o -type l)" ]; then
	ok "make uninstall removes what make install put there"
else
	bad "make uninstall removes what make install put there"
	find "$tmp/opt" -type f | head
fi
finish
