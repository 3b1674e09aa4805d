#!/usr/bin/env bash
# make demo: start an rdmx demo server and client on this host for each mode
# and size, and print one table (mode, bytes, latency, result).
set -euo pipefail
rdmx=${1:-build/apps/rdmx}
log=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$log"' EXIT

# start CMD...: a server in the background; sets $server, and $port once
# it listens (on the port it picked: port 0).
start() {
	"$@" >"$log/server" 2>&1 &
	server=$!
	port=""
	for _ in $(seq 100); do
		port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$log/server")
		[ -n "$port" ] && return 0
		sleep 0.05
	done
	cat "$log/server"
	exit 1
}
# serve MODE: a one-client demo server.
serve() { start "$rdmx" demo "$1" :0 --once; }

header=""
fail=0
for mode in send write read; do
	for size in 8 4096 1m; do
		iters=2000
		[ "$size" = 1m ] && iters=200
		serve "$mode"
		"$rdmx" demo "$mode" "127.0.0.1:$port" -s "$size" -n "$iters" \
			$header || fail=1
		header=--no-header
		wait "$server" || fail=1
	done
done

# lambda: a Lua function shipped to the server, its result written back.
serve lambda
here=$(dirname "$0")/..
echo
echo "lambda: primes below 100000, counted on the server by examples/lambda/primes.lua:"
"$rdmx" demo lambda "127.0.0.1:$port" -f "$here/examples/lambda/primes.lua" \
	-i 100000 || fail=1
echo
wait "$server" || fail=1
# page: a data set four times its local cache, on a memory server.
start "$rdmx" page serve :0 --size 64m
echo
echo "page: examples/page/histogram.c, its 64 MiB on rdmx page serve:"
"$(dirname "$rdmx")/../examples/histogram" "127.0.0.1:$port/mem" || fail=1
kill -TERM "$server"
wait "$server" || fail=1

echo
echo "p50/p99: one-way latency (half the round trip) for send and write,"
echo "the whole operation for read; client and server spin on completions."
exit $fail
