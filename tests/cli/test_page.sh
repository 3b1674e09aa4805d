#!/usr/bin/env bash
# Description: rdmx page serve and rdmx page bench, run as a user runs them:
# the table and its JSON, every byte checked, a file that outlives the
# server, metrics, SIGTERM, and one clear error for each mistake.
set -u
rdmx=${1:?usage: test_page.sh path/to/rdmx path/to/examples/histogram}
histogram=${2:?}
. "$(dirname "$0")/common.sh"

start "$rdmx" page serve :0 --size 16m --metrics 127.0.0.1:0 || exit 1
url="127.0.0.1:$port/mem"

# Random faults from two threads, a fifth of them writes, through a 1 MiB
# cache: the table with its two references, the goal line, every byte
# checked against the server's pattern.
if run "bench random" 0 "$rdmx" page bench "$url" -n 3000 -T 2 --write 20 \
	--cache 1m && grep -q "^fault " "$tmp/out" &&
	grep -q "^floor: local fault " "$tmp/out" &&
	grep -q "^4 KiB READ " "$tmp/out" &&
	grep -q "every byte checked" "$tmp/out" &&
	grep -qE "[1-9][0-9]* written back" "$tmp/out" &&
	grep -q "^goal: p50 <= floor + READ + 5" "$tmp/out"; then
	ok "page bench: fault, floor and READ latency; writes written back; bytes checked"
else
	bad "page bench random"
fi

# Sequential faults read ahead; --json is one object.
if run "bench seq" 0 "$rdmx" page bench "$url" -n 2000 --pattern seq --json &&
	[ "$(wc -l <"$tmp/out")" -eq 1 ] &&
	grep -q '"pattern":"seq"' "$tmp/out" &&
	grep -qE '"readahead":[1-9]' "$tmp/out" &&
	grep -q '"checked":true' "$tmp/out" &&
	grep -qE '"fault":\{"min_us":[0-9.]+,"p50_us"' "$tmp/out"; then
	ok "page bench --pattern seq --json: read-ahead, one JSON object"
else
	bad "page bench seq json"
fi

# The server's metrics count the clients' READs... on the client side only:
# on the server, one-sided work is invisible, as on a NIC. Its connections
# show.
http_get "$(sed -n 's|.*metrics on http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$tmp/server")" /metrics >"$tmp/metrics"
if grep -qE '^rdmx_connections_total\{transport="[a-z]+"\} [1-9]' "$tmp/metrics"; then
	ok "page serve --metrics: its connections in Prometheus text"
else
	bad "page serve metrics"
	head -30 "$tmp/metrics"
fi

# The example: a data set four times its cache, checked against local memory.
if run "histogram" 0 "$histogram" "$url" &&
	grep -q "same result as local memory" "$tmp/out" &&
	grep -qE "remote [0-9.]+ s \([0-9]+ faults, [0-9]+ pages fetched, [1-9][0-9]* written back\), local" "$tmp/out"; then
	ok "examples/page/histogram: 16 MiB through a 4 MiB cache, same result as local"
else
	bad "examples/page/histogram"
fi

# Mistakes: one clear error each.
if run "no such region" 1 "$rdmx" page bench "127.0.0.1:$port/nosuch" -n 10 &&
	grep -q "has no region nosuch" "$tmp/err"; then
	ok "page bench of an unknown region names it"
else
	bad "page bench unknown region"
fi
if run "no name" 1 "$rdmx" page bench "127.0.0.1:$port" -n 10 &&
	grep -q "is not HOST\[:PORT\]/NAME" "$tmp/err"; then
	ok "page bench without /NAME says the form"
else
	bad "page bench without name"
fi
refused "page bench" "$rdmx" page bench 127.0.0.1:1/mem -n 10
one_line "size not pages" "multiple of 4k" "$rdmx" page serve :0 --size 5000
one_line "no size" "multiple of 4k" "$rdmx" page serve :0
if run "bad name" 1 "$rdmx" page serve :0 --size 1m --name bad/name &&
	grep -q "^rdmx page: cannot export bad/name: invalid argument" "$tmp/err" &&
	grep -q "a name of \[A-Za-z0-9._-\]" "$tmp/err"; then
	ok "page serve --name with a slash: the name and the rule, not the port"
else
	bad "page serve bad name"
fi
one_line "bad pattern" "random or seq" "$rdmx" page bench "$url" --pattern zigzag

kill -TERM "$server"
if wait "$server" && grep -q "server done: [1-9][0-9]* clients" "$tmp/server"; then
	ok "page serve: SIGTERM ends it with exit 0 and a summary"
else
	bad "page serve SIGTERM"
	cat "$tmp/server"
fi

# --file: a new file gets the pattern and keeps what clients wrote after
# the server is gone; served again, it is not refilled.
start "$rdmx" page serve :0 --size 1m --file "$tmp/region" --name disk || exit 1
"$rdmx" page bench "127.0.0.1:$port/disk" -n 256 --write 100 >/dev/null 2>&1
kill -TERM "$server"
wait "$server"
first=$(od -An -tx8 -N8 "$tmp/region" | tr -d ' ')
start "$rdmx" page serve :0 --size 1m --file "$tmp/region" --name disk || exit 1
if [ "$first" = 9e3779b97f4a7c15 ] && ! grep -q "filled" "$tmp/server" &&
	run "file bench" 0 "$rdmx" page bench "127.0.0.1:$port/disk" -n 256; then
	ok "page serve --file: the region outlives the server, served again as it was"
else
	bad "page serve --file ($first)"
	cat "$tmp/server"
fi
kill -TERM "$server"
wait "$server"

# An existing file shorter than --size is lengthened, and the server says
# so (the file is the user's, and stays longer after it).
head -c 5000 /dev/urandom >"$tmp/short"
start "$rdmx" page serve :0 --size 1m --file "$tmp/short" --name short || exit 1
if grep -q "rdmx page: $tmp/short grown from 5000 to 1048576 bytes (--size), zeros after its end" "$tmp/server" &&
	[ "$(stat -c %s "$tmp/short")" = 1048576 ]; then
	ok "page serve --file: a shorter file lengthened, and said so"
else
	bad "page serve --file shorter: $(cat "$tmp/server")"
fi
kill -TERM "$server"
wait "$server"

# The memory server killed while the bench faults: the touching threads
# get SIGBUS (rdmx_page(7)), and the bench ends with exit 1 in two lines:
# the library's, that the server was lost and why, and its own. It died
# of the signal before (exit 135). The faults come after 20000 READs, made
# by the main thread alone (over 3 s under TSan): the kill waits for the
# touching threads to show (5 threads named rdmx: main, fault handler,
# three touching; 1 or 2 before).
start "$rdmx" page serve :0 --size 64m || exit 1
"$rdmx" page bench "127.0.0.1:$port/mem" -n 100000000 -T 3 >"$tmp/out" 2>"$tmp/err" &
bench=$!
for _ in $(seq 600); do
	[ "$(cat /proc/$bench/task/*/comm 2>/dev/null | grep -cx rdmx)" -ge 4 ] && break
	sleep 0.05
done
kill -KILL "$server"
for _ in $(seq 200); do kill -0 "$bench" 2>/dev/null || break; sleep 0.1; done
kill -KILL "$bench" 2>/dev/null && echo "the bench still ran 20 s after its server died" >>"$tmp/err"
wait "$bench"
rc=$?
if [ "$rc" = 1 ] && [ "$(wc -l <"$tmp/err")" -eq 2 ] &&
	grep -q "memory server lost" "$tmp/err" &&
	grep -q "a touch got SIGBUS: the memory server could not serve it" "$tmp/err"; then
	ok "page bench: its server killed mid-run, exit 1 and two lines that say so"
else
	bad "page bench, server killed (exit $rc)"
fi
wait "$server" 2>/dev/null

finish
