#!/usr/bin/env bash
# Description: rdmx kv serve, put, get and del, run as a user runs them:
# a value from an argument, a file and stdin, back byte for byte, a missing
# key, a full pool, and SIGTERM's summary.
set -u
rdmx=${1:?usage: test_kv.sh path/to/rdmx [path/to/slow_send.so]}
slow_send=${2:-}
. "$(dirname "$0")/common.sh"

start "$rdmx" kv serve :0 --memory-mb 16 --threads 2 --metrics 127.0.0.1:0 || exit 1
at="127.0.0.1:$port"
mport=$(sed -n 's|.*metrics on http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$tmp/server")

if run "put" 0 "$rdmx" kv put "$at" greeting "hello, rdmx" &&
	run "get" 0 "$rdmx" kv get "$at" greeting &&
	[ "$(cat "$tmp/out")" = "hello, rdmx" ]; then
	ok "kv put then get: the value back"
else
	bad "kv put/get"
fi

# 3 MiB from a file (pulled by the server's READ), back through -o.
head -c 3000000 /dev/urandom >"$tmp/big"
if run "put -f" 0 "$rdmx" kv put "$at" big -f "$tmp/big" &&
	run "get -o" 0 "$rdmx" kv get "$at" big -o "$tmp/big.out" &&
	cmp -s "$tmp/big" "$tmp/big.out"; then
	ok "kv put -f / get -o: 3 MB byte for byte"
else
	bad "kv put -f / get -o"
fi

# The same 3 MB with --buffer-mb 1: put sizes its buffer to the value, and
# get asks once more with the size the store answered. Both failed before
# (the value larger than the client's buffer). Deleted after: the pool is
# counted below.
if run "put, 1 MiB buffer" 0 "$rdmx" kv put "$at" big1 -f "$tmp/big" --buffer-mb 1 &&
	run "get, 1 MiB buffer" 0 "$rdmx" kv get "$at" big1 -o "$tmp/big1.out" --buffer-mb 1 &&
	cmp -s "$tmp/big" "$tmp/big1.out" && run "del big1" 0 "$rdmx" kv del "$at" big1; then
	ok "kv put / get of a value larger than --buffer-mb: byte for byte"
else
	bad "kv put / get larger than --buffer-mb"
fi

if printf 'from\0stdin' | "$rdmx" kv put "$at" piped >"$tmp/out" 2>"$tmp/err" &&
	run "get piped" 0 "$rdmx" kv get "$at" piped &&
	cmp -s "$tmp/out" <(printf 'from\0stdin'); then
	ok "kv put from stdin, binary-safe"
else
	bad "kv put from stdin"
fi

if run "del" 0 "$rdmx" kv del "$at" piped &&
	fails_one_line "get deleted" "get piped: no such key" "$rdmx" kv get "$at" piped; then
	ok "kv del, then get says: no such key"
else
	bad "kv del"
fi

# 16 MiB of pool, 4 MiB of it holding big: a 6 MB value (an 8 MiB block)
# fits once, not twice.
head -c 6000000 /dev/zero >"$tmp/six"
"$rdmx" kv put "$at" six1 -f "$tmp/six" >/dev/null 2>&1
if fails_one_line "full" "out of memory" "$rdmx" kv put "$at" six2 -f "$tmp/six"; then
	ok "kv put into a full pool: out of memory, one line"
else
	bad "kv full pool"
fi

# bench: four clients, pipelined, every value GET returns checked.
if run "bench" 0 "$rdmx" kv bench "$at" -n 4000 -C 4 -P 8 -k 200 -s 3000 --json &&
	grep -qE '"get":\{"ops":[1-9]' "$tmp/out" && grep -qE '"put":\{"ops":[1-9]' "$tmp/out" &&
	grep -qE '"checked":[1-9][0-9]*,"bad":0,"failed":0,"missing":0' "$tmp/out"; then
	ok "kv bench --json: GETs and PUTs pipelined, every value checked"
else
	bad "kv bench"
fi

# --batch: each client's P requests go together, the next P once all are
# answered (redis-benchmark -P's way); every value still checked. The
# clients draw on one count of -n, as redis-benchmark's do: 4001 in all.
if run "bench batch" 0 "$rdmx" kv bench "$at" -n 4001 -C 4 -P 8 -k 200 -s 3000 --batch --json &&
	grep -qE '"batch":true' "$tmp/out" && grep -qE '"get":\{"ops":[1-9]' "$tmp/out" &&
	[ "$(grep -oE '"(get|put)":\{"ops":[0-9]+' "$tmp/out" | awk -F: '{n += $3} END {print n}')" = 4001 ] &&
	grep -qE '"checked":[1-9][0-9]*,"bad":0,"failed":0,"missing":0' "$tmp/out" &&
	grep -oE '"client_ops":\{"min":[0-9]+,"median":[0-9]+,"max":[0-9]+\}' "$tmp/out" |
	awk -F'[:,}]' '{ exit !($3 >= 1 && $3 <= $5 && $5 <= $7 && $7 <= 4001 && $7 * 4 >= 4001) }'; then
	ok "kv bench --batch: pipelined in whole batches, every value checked, each client's share"
else
	bad "kv bench --batch"
fi

# The bench's clock starts before a request is posted, as redis-benchmark's
# does before its write: its batch leaves at the flush that follows the
# posts. With each request's sendmsg 20 ms slower
# (tests/cli/shims/slow_send.c; frames under 60 bytes, ACKs and credits,
# go at once), every GET takes 20 ms or more. Started after the post, the
# clock measured 30 us to 4 ms.
if [ -n "$slow_send" ]; then
	if run "bench slow sends" 0 env LD_PRELOAD="$slow_send" \
		RDMX_TEST_SEND_DELAY_US=20000 RDMX_TEST_SEND_DELAY_MIN=60 \
		ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
		"$rdmx" kv bench "$at" --transport tcp -n 5 -C 1 -P 1 -k 1 -s 200 -g 100 --json &&
		python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["get"]
assert d["ops"] == 5 and d["min_us"] >= 20000, d' "$tmp/out"; then
		ok "kv bench: a request's latency includes its post (20 ms sends, every GET >= 20 ms)"
	else
		bad "kv bench clock: $(cat "$tmp/out" "$tmp/err")"
	fi
fi

# The check can fail: key 0's value as the bench writes it (key and
# version 0, then byte i is i mod 256), passes; one byte off, every GET of
# it is counted wrong and the bench exits 1.
{
	head -c 16 /dev/zero
	for i in $(seq 16 199); do printf "\\x$(printf %02x $((i % 256)))"; done
} >"$tmp/v0"
{ head -c 150 "$tmp/v0"; printf '\xff'; tail -c +152 "$tmp/v0"; } >"$tmp/v0bad"
if "$rdmx" kv put "$at" key:000000000000 -f "$tmp/v0" >/dev/null 2>&1 &&
	run "bench good" 0 "$rdmx" kv bench "$at" --no-load -n 20 -C 1 -k 1 -s 200 -g 100 --json &&
	grep -q '"checked":20,"bad":0,' "$tmp/out" &&
	"$rdmx" kv put "$at" key:000000000000 -f "$tmp/v0bad" >/dev/null 2>&1 &&
	run "bench bad" 1 "$rdmx" kv bench "$at" --no-load -n 20 -C 1 -k 1 -s 200 -g 100 --json &&
	grep -q '"checked":20,"bad":20,' "$tmp/out"; then
	ok "kv bench: a value one byte off is counted wrong, and the bench fails"
else
	bad "kv bench check"
fi

# Nobody listening. The bench once crashed here, closing a client its
# failed connect had never made; with --no-load it printed a table of
# nothing first.
refused "kv get" "$rdmx" kv get 127.0.0.1:1 k
refused "kv bench" "$rdmx" kv bench 127.0.0.1:1 -n 10
refused "kv bench --no-load" "$rdmx" kv bench 127.0.0.1:1 -n 10 --no-load -C 3 --json

one_line "no key" "takes HOST\[:PORT\] KEY" "$rdmx" kv get "$at"
one_line "bad memory" "memory-mb" "$rdmx" kv serve :0 --memory-mb 0

# --metrics: the store's own counters beside the library's.
http_get "$mport" /metrics >"$tmp/metrics"
http_get "$mport" /status >"$tmp/status"
if grep -qE '^rdmx_kv_keys [1-9]' "$tmp/metrics" &&
	grep -qE '^rdmx_kv_ops_total\{op="get"\} [1-9]' "$tmp/metrics" &&
	grep -qE '^rdmx_kv_out_of_memory_total 1$' "$tmp/metrics" &&
	grep -qE '^rdmx_kv_clients_total\{kind="all"\} [1-9]' "$tmp/metrics" &&
	grep -qE '^rdmx_kv_clients_total\{kind="ejected"\} 0$' "$tmp/metrics" &&
	grep -qE '"clients":\{"open":[0-9]+,"total":[1-9][0-9]*,"ejected":0\}' "$tmp/status" &&
	grep -qE '"kv":\{"keys":[1-9][0-9]*,"bytes_used":[1-9][0-9]*,"pool_bytes":16777216,"ops":\{"get":[1-9]' "$tmp/status" &&
	grep -qE '"hit_ratio":0\.[0-9]+' "$tmp/status"; then
	ok "kv serve --metrics: keys, bytes, ops by kind, hit ratio"
else
	bad "kv serve --metrics"
	grep kv "$tmp/metrics" "$tmp/status" | head
fi

kill -TERM "$server"
if wait "$server" &&
	grep -qE "server done: [0-9]+ clients; [0-9]+ keys, [0-9]+ bytes used; [0-9]+ gets \([0-9]+ hits\), [0-9]+ puts \(1 out of memory\), 2 deletes" "$tmp/server"; then
	ok "kv serve: SIGTERM ends it with exit 0 and a summary"
else
	bad "kv serve SIGTERM"
	cat "$tmp/server"
fi

# --aof: a restarted server has what the last one was told, in order.
start "$rdmx" kv serve :0 --memory-mb 4 --aof "$tmp/aof" --fsync always || exit 1
"$rdmx" kv put "127.0.0.1:$port" a first >/dev/null 2>&1
"$rdmx" kv put "127.0.0.1:$port" a second >/dev/null 2>&1
"$rdmx" kv put "127.0.0.1:$port" gone x >/dev/null 2>&1
"$rdmx" kv del "127.0.0.1:$port" gone >/dev/null 2>&1
kill -KILL "$server"
wait "$server" 2>/dev/null
start "$rdmx" kv serve :0 --memory-mb 4 --aof "$tmp/aof" || exit 1
if grep -q "1 keys from $tmp/aof (4 records)" "$tmp/server" &&
	run "aof get" 0 "$rdmx" kv get "127.0.0.1:$port" a &&
	[ "$(cat "$tmp/out")" = second ] &&
	fails_one_line "aof gone" "no such key" "$rdmx" kv get "127.0.0.1:$port" gone; then
	ok "kv serve --aof: kill -9, restart, the last value of each key"
else
	bad "kv serve --aof"
	cat "$tmp/server"
fi
kill -TERM "$server"
wait "$server"
one_line "bad fsync" "always, everysec or no" "$rdmx" kv serve :0 --fsync sometimes

# --resp-port: the Redis tools, unchanged, on the same store.
start "$rdmx" kv serve :0 --memory-mb 64 --resp-port 127.0.0.1:0 || exit 1
rport=$(sed -n 's/.*Redis protocol on port \([0-9]*\).*/\1/p' "$tmp/server")
if [ -n "$rport" ] &&
	[ "$(redis-cli -p "$rport" ping)" = PONG ] &&
	[ "$(redis-cli -p "$rport" set shared "from redis-cli")" = OK ] &&
	run "get via rdmx" 0 "$rdmx" kv get "127.0.0.1:$port" shared &&
	[ "$(cat "$tmp/out")" = "from redis-cli" ] &&
	"$rdmx" kv put "127.0.0.1:$port" back "from rdmx" >/dev/null 2>&1 &&
	[ "$(redis-cli -p "$rport" get back)" = "from rdmx" ] &&
	[ "$(redis-cli -p "$rport" exists shared back nope)" = 2 ] &&
	[ "$(redis-cli -p "$rport" del shared)" = 1 ] &&
	redis-cli -p "$rport" info | grep -q "^db0:keys=1,"; then
	ok "kv --resp-port: redis-cli SET, rdmx kv get, and back"
else
	bad "kv --resp-port with redis-cli"
fi
if redis-benchmark -p "$rport" -t get,set -d 4096 -n 2000 -c 8 -q \
	>"$tmp/out" 2>"$tmp/err" && grep -q "SET: [0-9.]* requests per second" "$tmp/out" &&
	grep -q "GET: [0-9.]* requests per second" "$tmp/out" &&
	! grep -q WARNING "$tmp/err" "$tmp/out"; then
	ok "kv --resp-port: redis-benchmark -t get,set runs, no warnings"
else
	bad "kv --resp-port with redis-benchmark"
fi
kill -TERM "$server"
wait "$server"

finish
