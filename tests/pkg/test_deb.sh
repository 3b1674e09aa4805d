#!/usr/bin/env bash
# Description: rdmx as Debian packages. Builds librdmx0, librdmx-dev and
# rdmx-tools (make deb), has lintian check them, installs them with dpkg -i,
# uses them as a user would (rdmx info, man, pkg-config, find_package, a
# program built against them talking to itself), removes them, and checks
# that nothing is left. Needs root, as CI is; skipped elsewhere, and where
# the packages are installed already (their owner's, not ours to remove).
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" -ne 0 ]; then
	echo "skip: installing packages needs root"
	exit 77
fi
for p in librdmx0 librdmx-dev rdmx-tools; do
	if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
		echo "skip: $p is installed already; this test would remove it"
		exit 77
	fi
done
pkg_cleanup() { dpkg -r rdmx-tools librdmx-dev librdmx0 >/dev/null 2>&1; }
source "$(dirname "$0")/common.sh"

check "make deb" make -C "$src" --no-print-directory deb
debs=()
for p in librdmx0 librdmx-dev rdmx-tools; do
	f=$(ls "$src"/build/deb/"${p}"_*.deb 2>/dev/null | head -1)
	[ -n "$f" ] && ok "built $(basename "$f")" || bad "built $p"
	debs+=("$f")
done
[ "$fail" -eq 0 ] || { echo "$pass passed, $fail failed"; exit 1; }

# lintian: errors fail, the rest is shown.
lintian -I "$src"/build/deb/*.changes >"$tmp/lintian" 2>&1
grep -E '^[EWI]: ' "$tmp/lintian" | sed 's/^/     /'
if grep -q '^E: ' "$tmp/lintian"; then bad "lintian reports errors"; else
	ok "lintian: no errors ($(grep -c '^W: ' "$tmp/lintian") warnings)"
fi

check "dpkg -i" dpkg -i "${debs[@]}"
lib=$(dpkg -L librdmx0 | grep '/librdmx.so.0$')
[ -n "$lib" ] && ok "librdmx0 holds $lib" || bad "librdmx0 holds librdmx.so.0"
check "rdmx info" /usr/bin/rdmx info
[ -f /usr/share/bash-completion/completions/rdmx ] &&
	ok "rdmx-tools installs the bash completion" ||
	bad "rdmx-tools installs the bash completion"
loaded=$(ldd /usr/bin/rdmx | awk '/librdmx.so/ {print $3}')
[ -n "$loaded" ] && [ "$(realpath "$loaded")" = "$(realpath "$lib")" ] &&
	ok "/usr/bin/rdmx loads the packaged librdmx" ||
	bad "/usr/bin/rdmx loads the packaged librdmx"
if readelf -d /usr/bin/rdmx "$lib" | grep -qE 'RPATH|RUNPATH'; then
	bad "no rpath in the packaged binaries"
else
	ok "no rpath in the packaged binaries"
fi
for page in rdmx_post_write rdmx_mr_dereg rdmx rdmx-bench; do
	if where=$(man -w "$page" 2>/dev/null) && [[ $where == /usr/share/man/* ]]; then
		ok "man -w $page: $where"
	else
		bad "man -w $page (got '$where')"
	fi
done
man rdmx_post_write 2>/dev/null | grep -q 'rdmx_post_write_imm' &&
	ok "man rdmx_post_write reads" || bad "man rdmx_post_write reads"

# The service units: valid to systemd, and their command lines, with the
# default options, start a server that SIGTERM ends with exit 0.
for unit in rdmx-kv rdmx-page; do
	file=/lib/systemd/system/$unit.service
	check "$unit.service: systemd-analyze verify" sh -c "cd / && systemd-analyze verify '$file'"
	# As systemd runs it: ${VAR} one word, $VAR split at blanks.
	port=0 # the kernel picks one no other test holds
	opts=$(sed -n 's/^Environment="RDMX_[A-Z]*_OPTS=\(.*\)"$/\1/p' "$file")
	cmd=$(sed -n 's/^ExecStart=//p' "$file")
	cmd=${cmd/\$\{RDMX_*_PORT\}/$port}
	cmd=${cmd/\$RDMX_*_OPTS/$opts}
	(unset RDMX_CONFIG && exec $cmd) >"$tmp/$unit.log" 2>&1 &
	pid=$!
	pids+=("$pid")
	for _ in $(seq 100); do grep -q "listening on port" "$tmp/$unit.log" 2>/dev/null && break; sleep 0.1; done
	kill -TERM "$pid" 2>/dev/null
	if wait "$pid" && grep -q "listening on port" "$tmp/$unit.log"; then
		ok "$unit.service's command serves with its defaults and ends on SIGTERM, exit 0"
	else
		bad "$unit.service's command"
		cat "$tmp/$unit.log"
	fi
done

# A program built against the packages, as a user builds one.
[ "$(pkg-config --libs rdmx | xargs)" = "-lrdmx" ] && ok "pkg-config --libs rdmx: -lrdmx" ||
	bad "pkg-config --libs rdmx: $(pkg-config --libs rdmx 2>&1)"
check "pingpong built with pkg-config" sh -c \
	"cc -o '$tmp/pingpong' '$src/examples/basic/pingpong.c' \$(pkg-config --cflags --libs rdmx)"
cp -r "$src/examples" "$tmp/examples"
check "examples built with find_package(rdmx)" sh -c \
	"cmake -S '$tmp/examples' -B '$tmp/cm' >/dev/null && cmake --build '$tmp/cm'"
run_pair "pingpong (pkg-config) against pingpong (find_package)" tcp \
	"$tmp/pingpong" "$tmp/cm/examples/pingpong" "1000 round trips"

check "dpkg -r" dpkg -r rdmx-tools librdmx-dev librdmx0
[ ! -e "$lib" ] && [ ! -e /usr/bin/rdmx ] && [ ! -e /usr/include/rdmx.h ] &&
	ok "removed: no library, CLI or header left" || bad "files left after dpkg -r"
man -w rdmx_post_write >/dev/null 2>&1 && bad "man pages left after dpkg -r" ||
	ok "man pages gone with the packages"

finish
