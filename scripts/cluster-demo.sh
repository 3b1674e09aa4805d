#!/usr/bin/env bash
# A cluster you can start by hand, on this host: an etcd (Debian's, on
# loopback ports, a temporary data directory), three KV servers in cluster
# "demo" and a page server, all published there; then clients that reach
# each by name only, a line for what each did, and everything stopped.
#   scripts/cluster-demo.sh [path/to/rdmx]
set -euo pipefail
rdmx=${1:-build/apps/rdmx}
dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT

source "$(dirname "${BASH_SOURCE[0]}")/free-port.sh"

# start NAME CMD...: in the background, output in $dir/NAME; wait until
# it publishes itself (or, for etcd, answers).
start() {
	local name=$1
	shift
	"$@" >"$dir/$name" 2>&1 &
	pids+=($!)
}
wait_for() { # file pattern
	for _ in $(seq 100); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "cluster-demo: $1 never said '$2':"
	cat "$1"
	exit 1
}

# etcd on two free ports; a port taken before etcd binds it: others.
up=0
for try in 1 2 3; do
	cp=$(free_port)
	pp=$(free_port)
	[ "$cp" = "$pp" ] && continue
	rm -rf "$dir/etcd-data"
	start etcd etcd --name demo --data-dir "$dir/etcd-data" \
		--listen-client-urls "http://127.0.0.1:$cp" \
		--advertise-client-urls "http://127.0.0.1:$cp" \
		--listen-peer-urls "http://127.0.0.1:$pp" \
		--initial-advertise-peer-urls "http://127.0.0.1:$pp" \
		--initial-cluster "demo=http://127.0.0.1:$pp"
	for _ in $(seq 200); do
		kill -0 "${pids[-1]}" 2>/dev/null || break
		"$rdmx" registry ls "etcd://127.0.0.1:$cp/ping" >/dev/null 2>&1 &&
			{ up=1; break; }
		sleep 0.1
	done
	[ $up -eq 1 ] && break
	echo "cluster-demo: etcd on $cp/$pp did not come up (try $try)"
	tail -5 "$dir/etcd"
	kill "${pids[-1]}" 2>/dev/null || true
done
[ $up -eq 1 ] || exit 1
export RDMX_REGISTRY_URL="etcd://127.0.0.1:$cp/rdmx-demo"
export RDMX_LOG_LEVEL=error
echo "etcd           $RDMX_REGISTRY_URL (pid ${pids[-1]})"

for i in 1 2 3; do
	start "kv$i" "$rdmx" kv serve :0 --memory-mb 64 --cluster demo --name "kv$i"
	[ "$i" = 1 ] && kv1_pid=${pids[-1]}
	wait_for "$dir/kv$i" "published @"
done
start page "$rdmx" page serve :0 --size 64m --name mem0
wait_for "$dir/page" "published @"
echo "servers        3 KV servers in cluster demo, a page server as @mem0:"
"$rdmx" registry ls | sed 's/^/               /'

# Clients, by name only.
for k in alpha bravo charlie delta echo foxtrot; do
	"$rdmx" kv put @cluster:demo "$k" "value of $k"
done
got=0
for k in alpha bravo charlie delta echo foxtrot; do
	[ "$("$rdmx" kv get @cluster:demo "$k")" = "value of $k" ] && got=$((got + 1))
done
echo "kv cluster     6 keys put through @cluster:demo, $got read back"
[ "$got" -eq 6 ]
# One member by its own name, past the cluster's placement.
"$rdmx" kv put @kv/cluster/demo/kv2 direct "by its own name"
echo "kv2 by name    $("$rdmx" kv get @kv/cluster/demo/kv2 direct)"
line=$("$rdmx" page bench @mem0 -n 2000 | grep -E '^fault ')
echo "page @mem0     $(awk '{printf "2000 random faults: p50 %s us, p99 %s us", $3, $5}' <<<"$line")"

# A member stops cleanly: it leaves at once.
kill -TERM "$kv1_pid"
wait "$kv1_pid" 2>/dev/null || true
for _ in $(seq 50); do
	"$rdmx" registry ls kv/cluster/demo/ | grep -q kv1 || break
	sleep 0.1
done
n=$("$rdmx" registry ls kv/cluster/demo/ | wc -l)
echo "kv1 stopped    the cluster has $n members now"
echo "cluster-demo: done; stopping etcd and the servers"
