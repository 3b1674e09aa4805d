#!/usr/bin/env bash
# Description: the host-limit programs bench/compare.sh runs beside rdmx
# (build/bench) work as it uses them: each prints its JSON, with figures in
# order, and refuses bad arguments.
#   test_programs.sh BINDIR
set -u
bin=$1
pass=0 fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
cpus=$(nproc)
b=$((cpus > 1 ? 1 : 0))
lat_ok() { # json size
	python3 -c 'import json,sys; d=json.loads(sys.argv[1]); l=d["lat_us"]
assert d["size"]==int(sys.argv[2])
assert 0 < l["min"] <= l["median"] <= l["p99"] <= l["p99_9"] <= l["max"]' "$1" "$2" 2>/dev/null
}
for size in 8 4096; do
	if j=$("$bin/shm_pingpong" $size 2000 0 $b) && lat_ok "$j" $size; then
		ok "shm_pingpong $size B"
	else
		bad "shm_pingpong $size B: $j"
	fi
	for mode in "" --spin; do
		# Below the ephemeral range (another test's client may hold a
		# port in it); a port some listener holds gets two more tries.
		for try in 1 2 3; do
			port=$((20000 + RANDOM % 10000))
			"$bin/tcp_pingpong" server $port $mode &
			srv=$!
			if j=$(timeout 60 "$bin/tcp_pingpong" client 127.0.0.1 $port $size 500 $mode) &&
				lat_ok "$j" $size && wait $srv; then
				ok "tcp_pingpong $size B ${mode:-blocking}"
				break
			fi
			kill $srv 2>/dev/null
			wait $srv 2>/dev/null
			[ $try = 3 ] && bad "tcp_pingpong $size B ${mode:-blocking}: $j"
		done
	done
done
if out=$("$bin/memcpy_bw" 0.05) && [ "$(wc -l <<<"$out")" = 5 ] &&
	python3 -c 'import json,sys
for line in sys.stdin:
    d = json.loads(line); assert d["gb_per_s"] > 0 and d["us_per_copy"] > 0' <<<"$out"; then
	ok "memcpy_bw: five cases"
else
	bad "memcpy_bw: $out"
fi
for args in "shm_pingpong 0 10 0 0" "tcp_pingpong client 127.0.0.1 1 8 1" "memcpy_bw -1"; do
	# shellcheck disable=SC2086
	if "$bin"/$args >/dev/null 2>&1; then
		bad "refused: $args"
	else
		ok "refused: $args"
	fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
