#!/usr/bin/env bash
# Description: names as a user uses them: an etcd started here (Debian's
# etcd-server, loopback ports, a temporary directory, stopped by its pid),
# page and kv servers that publish themselves, clients that connect by
# @NAME, rdmx registry ls|get|watch|publish, rdmx info, a clean stop that
# unpublishes, etcd down, the directory backend, and one line per mistake.
set -u
rdmx=${1:?usage: test_registry.sh path/to/rdmx}
. "$(dirname "$0")/common.sh"

start_etcd || exit 1
export RDMX_REGISTRY_URL="$etcd_url/clitest"

if run "info" 0 "$rdmx" info &&
	grep -q "^registry: $RDMX_REGISTRY_URL: answers" "$tmp/out"; then
	ok "rdmx info: the registry in use, and that it answers"
else
	bad "info"
fi

"$rdmx" registry watch >"$tmp/watch" 2>&1 &
watch_pid=$!
# It says "watching" once its start revision is fixed: what is published
# after that line is seen. Started unwaited, it missed mem0's PUT under
# ASan in a CI run (the page server published first).
wait_grep "$tmp/watch" "^rdmx registry: watching " ||
	bad "registry watch did not start: $(cat "$tmp/watch")"

start "$rdmx" page serve :0 --size 16m --name mem0 || exit 1
page_pid=$server
page_port=$port
wait_grep "$tmp/server" "published @mem0 as [^ ]+:$port in $RDMX_REGISTRY_URL" ||
	bad "page serve did not publish: $(cat "$tmp/server")"
if run "page bench @mem0" 0 "$rdmx" page bench @mem0 -n 500 &&
	grep -q "every byte checked" "$tmp/out"; then
	ok "rdmx page bench @mem0: resolved through etcd, every byte checked"
else
	bad "page bench @mem0"
fi

start "$rdmx" kv serve :0 --memory-mb 16 --name kv1 || exit 1
kv_pid=$server
kv_port=$port
wait_grep "$tmp/server" "published @kv1" || bad "kv serve did not publish: $(cat "$tmp/server")"
if run "kv put @kv1" 0 "$rdmx" kv put @kv1 greeting "hello by name" &&
	run "kv get @kv1" 0 "$rdmx" kv get @kv1 greeting &&
	[ "$(cat "$tmp/out")" = "hello by name" ]; then
	ok "rdmx kv put/get @kv1: resolved through etcd"
else
	bad "kv @kv1"
fi

if run "ls" 0 "$rdmx" registry ls &&
	grep -qE "^kv1 +[^ ]+:$kv_port +pid $kv_pid " "$tmp/out" &&
	grep -qE "^mem0 .* size=16777216 addr=0x[0-9a-f]+ rkey=0x[0-9a-f]{16}$" "$tmp/out" &&
	run "get --json" 0 "$rdmx" registry get kv1 --json &&
	grep -qE "\"name\":\"kv1\",\"addr\":\"[^\"]+:$kv_port\",\"pid\":$kv_pid" "$tmp/out"; then
	ok "rdmx registry ls and get --json: both servers, address, pid, payload"
else
	bad "registry ls/get"
fi

# A demo server named by hand: rdmx registry publish holds the name.
serve read :0 || exit 1
demo_pid=$server
"$rdmx" registry publish srv "127.0.0.1:$port" >"$tmp/pub" 2>&1 &
pub_pid=$!
for _ in $(seq 50); do grep -q published "$tmp/pub" && break; sleep 0.1; done
if run "demo read @srv" 0 "$rdmx" demo read @srv; then
	ok "rdmx demo read @srv: a name published by rdmx registry publish"
else
	bad "demo read @srv"
fi
kill "$pub_pid" "$demo_pid"
wait "$pub_pid" "$demo_pid" 2>/dev/null

# A clean stop unpublishes; the watch saw it all.
kill -TERM "$kv_pid"
wait "$kv_pid" 2>/dev/null
for _ in $(seq 50); do grep -q "^DELETE kv1" "$tmp/watch" && break; sleep 0.1; done
if grep -q "^PUT mem0 " "$tmp/watch" && grep -q "^PUT kv1 " "$tmp/watch" &&
	grep -q "^DELETE kv1$" "$tmp/watch" &&
	run "ls after stop" 0 "$rdmx" registry ls && ! grep -q "^kv1 " "$tmp/out"; then
	ok "kv serve unpublishes on SIGTERM; rdmx registry watch saw PUT and DELETE"
else
	bad "unpublish/watch: $(cat "$tmp/watch")"
fi
kill "$watch_pid"

one_line "no such name" "no nosuch in the registry $RDMX_REGISTRY_URL" \
	"$rdmx" registry get nosuch
# Arguments: each mistake in one line, before anything is asked of etcd.
one_line "registry: extra argument" "unexpected argument 'extra'" \
	"$rdmx" registry get somename extra
one_line "registry: missing argument" "publish takes \[URL\] NAME HOST:PORT" \
	"$rdmx" registry publish onlyname
one_line "registry: bad --ttl" "--ttl expects milliseconds, 1..86400000, not 'soon'" \
	"$rdmx" registry publish n 127.0.0.1:1 --ttl soon
one_line "registry: unknown command" "unknown command 'frob'" "$rdmx" registry frob
RDMX_REGISTRY_URL=bogus one_line "bad registry URL" "is neither etcd://" \
	"$rdmx" registry ls

# etcd killed under a publisher, then started again as it was: the
# publisher says so once when its renewals start failing (the etcd line
# and its own), once when one succeeds again, and nothing for each try
# between (every tenth of the TTL: here 100 ms). It printed two lines a
# try before.
"$rdmx" registry publish blip 127.0.0.1:7 --ttl 1000 >"$tmp/blip" 2>&1 &
blip_pid=$!
wait_grep "$tmp/blip" "published blip" || bad "publish blip: $(cat "$tmp/blip")"
kill -9 "$etcd_pid"
wait "$etcd_pid" 2>/dev/null
sleep 1.5
run_etcd || { echo "etcd did not come back"; tail -5 "$tmp/etcd.log"; exit 1; }
if wait_grep "$tmp/blip" "renewed blip in $RDMX_REGISTRY_URL again, after [1-9][0-9]* failed tries" &&
	[ "$(grep -c "no etcd member of $RDMX_REGISTRY_URL answers" "$tmp/blip")" = 1 ] &&
	[ "$(grep -c "cannot renew blip" "$tmp/blip")" = 1 ] &&
	run "get blip" 0 "$rdmx" registry get blip; then
	ok "etcd down and back: the publisher says each once, and its entry is there again"
else
	bad "publisher through an etcd outage: $(cat "$tmp/blip")"
fi
kill "$blip_pid"
wait "$blip_pid" 2>/dev/null

# etcd gone: one line; the server already running keeps serving by address.
kill -9 "$etcd_pid"
wait "$etcd_pid" 2>/dev/null
one_line "etcd down" "no etcd member of $RDMX_REGISTRY_URL answers" \
	"$rdmx" registry ls
if run "bench by address, etcd down" 0 "$rdmx" page bench \
	"127.0.0.1:$page_port/mem0" -n 200; then
	ok "etcd down: the memory server serves on by address"
else
	bad "bench by address with etcd down"
fi
kill -TERM "$page_pid"
wait "$page_pid" 2>/dev/null

# The directory backend, no server at all.
export RDMX_REGISTRY_URL="dir:$tmp/reg"
start "$rdmx" kv serve :0 --memory-mb 16 --name kvd || exit 1
if run "dir get" 0 "$rdmx" kv put @kvd k v && run "dir ls" 0 "$rdmx" registry ls &&
	grep -q "^kvd " "$tmp/out"; then
	ok "dir: registry: publish, resolve and list without a server"
else
	bad "dir registry"
fi
kill -9 "$server"
wait "$server" 2>/dev/null
if run "dir ls after kill" 0 "$rdmx" registry ls && ! grep -q "^kvd " "$tmp/out" &&
	[ ! -e "$tmp/reg/kvd" ]; then
	ok "dir: a SIGKILLed publisher's entry is ignored and removed"
else
	bad "dir kill"
fi
finish
