#!/usr/bin/env bash
# Description: the host-limit programs that bench/compare.sh and
# bench/kv-vs-redis.sh run beside rdmx (build/bench) work as those use
# them: each prints its JSON, with figures in order, and refuses bad
# arguments.
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
# tcp_reqresp: a GET-shaped and a SET-shaped run against one server, many
# connections and a pipeline each, every request answered; answers from
# one buffer, then from a pool (each from a random place of it).
for pool in "" 1000000; do
	for try in 1 2 3; do
		port=$((20000 + RANDOM % 10000))
		# shellcheck disable=SC2086
		"$bin/tcp_reqresp" server $port $pool &
		srv=$!
		good=0
		for shape in "4 2 40 4112" "3 5 4136 16"; do
			# shellcheck disable=SC2086
			j=$(timeout 60 "$bin/tcp_reqresp" client 127.0.0.1 $port $shape 3000) &&
				python3 -c 'import json,sys; d=json.loads(sys.argv[1]); a=sys.argv[2].split()
assert [d["conns"], d["depth"], d["request"], d["answer"]] == [int(x) for x in a]
assert d["ops"] == 3000 and d["ops_per_s"] > 0 and 0 < d["p50_us"] <= d["p99_us"]' "$j" "$shape" 2>/dev/null &&
				good=$((good + 1))
		done
		kill $srv 2>/dev/null
		wait $srv 2>/dev/null
		if [ $good = 2 ]; then
			ok "tcp_reqresp: GET and SET shapes, 4 and 3 connections${pool:+, a pool of $pool bytes}"
			break
		fi
		[ $try = 3 ] && bad "tcp_reqresp${pool:+ (pool $pool)}: $j"
	done
done
if j=$("$bin/host_stalls" 0.2) && python3 -c 'import json,sys; d=json.loads(sys.argv[1])
assert 0.2 <= d["seconds"] < 5 and d["copies"] > 0
assert d["per_s_over_20us"] >= d["per_s_over_50us"] >= d["per_s_over_100us"] >= 0
assert 0 <= d["lost_pct"] <= 100 and d["max_us"] > 0' "$j" 2>/dev/null; then
	ok "host_stalls: counts in order"
else
	bad "host_stalls: $j"
fi
if out=$("$bin/memcpy_bw" 0.05) && [ "$(wc -l <<<"$out")" = 5 ] &&
	python3 -c 'import json,sys
for line in sys.stdin:
    d = json.loads(line); assert d["gb_per_s"] > 0 and d["us_per_copy"] > 0' <<<"$out"; then
	ok "memcpy_bw: five cases"
else
	bad "memcpy_bw: $out"
fi
# bench/placement.py: runs split by the ping-pongs around them. Two
# clusters (0.05-0.09 near, 0.24-0.28 far): a run with one of each counts
# as far; the medians are of each placement's runs alone.
placed=$(mktemp)
printf '%s\n' "w\trdmx\t0.30\t0.25\t0.27" "w\tucx\t0.07\t0.06\t0.09" \
	"w\trdmx\t0.12\t0.05\t0.08" "w\tucx\t0.20\t0.08\t0.24" \
	"w\trdmx\t0.14\t0.07\t0.06" "w\tucx\tn/a\t0.06\t0.06" \
	"s\trdmx\t0.50\t0.24\t0.28" | sed 's/\\t/\t/g' >"$placed"
want=$(printf '%s\n' "w, near\t0.130\t0.070" "w, far\t0.300\t0.200" \
	"s, near\tn/a\tn/a" "s, far\t0.500\tn/a" | sed 's/\\t/\t/g')
got=$(python3 "$(dirname "$0")/../../bench/placement.py" "$placed" 2>&1)
if [ "$got" = "$want" ]; then
	ok "placement.py: runs by placement, medians of each"
else
	bad "placement.py: got $got"
fi
# One cluster only: every run is near.
printf 'w\trdmx\t0.3\t0.25\t0.27\nw\tucx\t0.2\t0.26\t0.24\n' >"$placed"
got=$(python3 "$(dirname "$0")/../../bench/placement.py" "$placed" 2>&1)
if [ "$got" = "$(printf 'w, near\t0.300\t0.200\nw, far\tn/a\tn/a')" ]; then
	ok "placement.py: one cluster, all near"
else
	bad "placement.py, one cluster: got $got"
fi
rm -f "$placed"
for args in "shm_pingpong 0 10 0 0" "tcp_pingpong client 127.0.0.1 1 8 1" "memcpy_bw -1" \
	"tcp_reqresp client 127.0.0.1 1 1 1 4 16 10" "tcp_reqresp client 127.0.0.1 1 1 65 40 16 10" \
	"host_stalls 0" "host_stalls"; do
	# shellcheck disable=SC2086
	if "$bin"/$args >/dev/null 2>&1; then
		bad "refused: $args"
	else
		ok "refused: $args"
	fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
