#!/usr/bin/env bash
# make demo: start an rdmx demo server and client on this host for each mode
# and size, and print one table (mode, bytes, latency, result).
set -euo pipefail
rdmx=${1:-build/apps/rdmx}
log=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$log"' EXIT

header=""
fail=0
for mode in send write read; do
	for size in 8 4096 1m; do
		iters=2000
		[ "$size" = 1m ] && iters=200
		# Port 0: the server picks a free one and prints it.
		"$rdmx" demo "$mode" :0 --once >"$log/server" 2>&1 &
		server=$!
		port=""
		for _ in $(seq 100); do
			port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$log/server")
			[ -n "$port" ] && break
			sleep 0.05
		done
		[ -n "$port" ] || { cat "$log/server"; exit 1; }
		"$rdmx" demo "$mode" "127.0.0.1:$port" -s "$size" -n "$iters" \
			$header || fail=1
		header=--no-header
		wait "$server" || fail=1
	done
done
echo
echo "p50/p99: one-way latency (half the round trip) for send and write,"
echo "the whole operation for read; client and server spin on completions."
exit $fail
