#!/usr/bin/env bash
# Description: the rdmx command line as a user runs it: server and client as
# separate processes in every demo mode, bad input, signals, info --config.
set -u
rdmx=${1:?usage: test_cli.sh path/to/rdmx}
. "$(dirname "$0")/common.sh"

for mode in send write read; do
	serve "$mode" :0 --once || exit 1
	if run "demo $mode" 0 "$rdmx" demo "$mode" "127.0.0.1:$port" -s 4097 -n 300 &&
		grep -q "ok, bytes verified" "$tmp/out" && wait "$server" &&
		grep -q "served $mode: 300 x 4097 B, all bytes verified" "$tmp/server"; then
		ok "demo $mode: separate server and client, bytes verified"
	else
		bad "demo $mode"
	fi
done

serve read :0 --once || exit 1
if run "read window" 0 "$rdmx" demo read "localhost:$port" -o 1000 -l 5000 -n 10 &&
	grep -qE "^read +5000 +10 " "$tmp/out"; then
	ok "demo read: a chosen offset and length"
else
	bad "demo read window"
fi
wait "$server"

serve write :0 --once || exit 1
if run "mode mismatch" 1 "$rdmx" demo send "127.0.0.1:$port" -n 5 &&
	grep -q "server refused: this server runs the write demo" "$tmp/out"; then
	ok "demo: a client of the wrong mode is told why"
else
	bad "demo mode mismatch"
fi
wait "$server"

# The client's word decides what the server allocates: within --max-size.
serve send :0 --max-size 1m || exit 1
if run "over max size" 1 "$rdmx" demo send "127.0.0.1:$port" -s 2m -n 1 &&
	grep -q "server refused: over the server's --max-size" "$tmp/out" &&
	run "within max size" 0 "$rdmx" demo send "127.0.0.1:$port" -s 1m -n 2; then
	ok "demo server: a client over --max-size is refused, the next served"
else
	bad "demo server --max-size"
fi
kill -TERM "$server"
wait "$server"

if run "no command" 1 "$rdmx" && grep -q "^usage: rdmx <command>" "$tmp/err"; then
	ok "no command: usage on stderr, exit 1"
else
	bad "no command"
fi
one_line "unknown command" "unknown command 'fly'" "$rdmx" fly
one_line "unknown mode" "unknown mode 'teleport'" "$rdmx" demo teleport
one_line "bad size" "--size expects a size" "$rdmx" demo send localhost -s 12q
one_line "zero iterations" "--iters must be at least 1" "$rdmx" demo send localhost -n 0
one_line "huge size" "limited to 1g" "$rdmx" demo write localhost -s 2g
one_line "extra argument" "unexpected argument 'b'" "$rdmx" demo send a b
one_line "bad port" "invalid address '127.0.0.1:99999'" "$rdmx" demo send 127.0.0.1:99999 -n 1

# Nobody listening: the library's detail and the command's fix.
refused "demo" "$rdmx" demo send 127.0.0.1:1 -n 1
refused "bench" "$rdmx" bench 127.0.0.1:1 --bw

# SIGTERM: a server that serves forever stops cleanly with a summary.
serve send :0 || exit 1
"$rdmx" demo send "127.0.0.1:$port" -n 50 >/dev/null 2>&1
# The client is gone once it has its 50 answers; the server may not have
# seen it go yet (on a loaded host the signal came first: "1 stopped by a
# signal").
wait_grep "$tmp/server" "served send: 50 x"
kill -TERM "$server"
if wait "$server" && grep -q "server done: 1 sessions ok, 0 failed" "$tmp/server"; then
	ok "demo server: SIGTERM ends it with exit 0 and a summary"
else
	bad "demo server SIGTERM"
	cat "$tmp/server"
fi
# It listened on every address with no key and no allowed list: one warning.
if [ "$(grep -c "with neither auth.key_file nor auth.allowed_peers" "$tmp/server")" -eq 1 ]; then
	ok "demo server open to every host: one warning at start"
else
	bad "demo server open to every host did not warn once"
fi

# SIGTERM in the middle of a session: the server flushes, deregisters and
# exits 0 with its summary, leak-free under valgrind; the client learns of
# the end at once (one line), not by a timeout.
if ! command -v valgrind >/dev/null; then
	echo "skip valgrind shutdown: valgrind is not installed"
elif sanitized; then
	echo "skip valgrind shutdown: $rdmx is a sanitizer build"
else
	# Its stderr must stay empty: the allowed list keeps the warning for
	# a server open to every host away.
	RDMX_TRANSPORT=tcp RDMX_AUTH_ALLOWED_PEERS=127.0.0.0/8,::1 \
		server_err=$tmp/vg start valgrind -q --leak-check=full \
		--errors-for-leak-kinds=definite,indirect,possible --error-exitcode=9 \
		"$rdmx" bench :0
	RDMX_TRANSPORT=tcp "$rdmx" bench "127.0.0.1:$port" --op write -n 50 >/dev/null 2>&1
	RDMX_TRANSPORT=tcp "$rdmx" bench "127.0.0.1:$port" --op read -n 100000000 \
		>"$tmp/out" 2>"$tmp/err" &
	client=$!
	sleep 2
	kill -TERM "$server"
	wait "$server"
	src=$?
	wait "$client"
	crc=$?
	if [ $src -eq 0 ] && [ ! -s "$tmp/vg" ] &&
		grep -q "server done: 1 sessions ok, 0 failed, 1 stopped by a signal" "$tmp/server" &&
		[ $crc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
		grep -q "read latency failed: connection lost" "$tmp/err"; then
		ok "bench server: SIGTERM mid-session, exit 0, summary, no leak (valgrind)"
	else
		bad "bench server SIGTERM mid-session (server rc $src, client rc $crc)"
		cat "$tmp/server" "$tmp/vg"
	fi
fi

# --metrics: the bench server's endpoint, scraped as Prometheus would.
metric() { sed -n "s/^$1 \([0-9.e+-]*\)\r\?$/\1/p" "$tmp/metrics"; }
start "$rdmx" bench :0 --metrics 127.0.0.1:0 || exit 1
mport=$(sed -n 's|.*metrics on http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$tmp/server")
"$rdmx" bench "127.0.0.1:$port" --op send -n 1000 -s 100 >/dev/null 2>&1
"$rdmx" bench "127.0.0.1:$port" --op write -n 500 -s 4k --transport tcp >/dev/null 2>&1
# The server ends a session once it has seen the client's close, which
# may come after the client exits: scrape until it has (up to 5 s).
for _ in $(seq 50); do
	http_get "$mport" /metrics >"$tmp/metrics"
	grep -q '^rdmx_cli_sessions_total{command="bench",result="ok"} 2' "$tmp/metrics" &&
		grep -q '^rdmx_connections{transport="tcp"} 0' "$tmp/metrics" && break
	sleep 0.1
done
http_get "$mport" /status >"$tmp/status"
http_get "$mport" /nope >"$tmp/nope"
recv=$(metric 'rdmx_ops_total{op="recv",dir="in"}')
recv_bytes=$(metric 'rdmx_bytes_total{op="recv",dir="in"}')
sends=$(metric 'rdmx_op_latency_seconds_count{op="send"}')
inf=$(metric 'rdmx_op_latency_seconds_bucket{op="send",le="+Inf"}')
first=$(metric 'rdmx_op_latency_seconds_bucket{op="send",le="1e-06"}')
writes=$(metric 'rdmx_op_latency_seconds_count{op="write"}')
if head -1 "$tmp/metrics" | grep -q "200 OK" &&
	grep -q "^Content-Type: text/plain; version=0.0.4" "$tmp/metrics" &&
	[ "${recv:-0}" -ge 1100 ] && [ "${recv_bytes:-0}" -ge 110000 ] &&
	[ "${sends:-0}" -ge 1100 ] && [ "$inf" = "$sends" ] && [ "${first:-x}" -le "$inf" ] &&
	[ "${writes:-0}" -ge 500 ] &&
	[ "$(metric 'rdmx_connections_total{transport="shm"}')" = 1 ] &&
	[ "$(metric 'rdmx_connections_total{transport="tcp"}')" = 1 ] &&
	[ "$(metric 'rdmx_connections{transport="tcp"}')" = 0 ] &&
	grep -q '^rdmx_errors_total{status="remote_access"} 0' "$tmp/metrics" &&
	grep -q '^rdmx_cli_sessions_total{command="bench",result="ok"} 2' "$tmp/metrics"; then
	ok "bench --metrics: Prometheus ops, bytes, latency histograms, errors, connections"
else
	bad "bench --metrics /metrics (recv $recv, bytes $recv_bytes, send lat $sends/$inf, write lat $writes)"
	grep -v ' 0.\?$' "$tmp/metrics" | head -40
fi
if grep -q "^Content-Type: application/json" "$tmp/status" &&
	grep -q '"sessions":{"ok":2,"failed":0,"stopped":0}' "$tmp/status" &&
	grep -q '"connections_total":{"tcp":1,"shm":1}' "$tmp/status" &&
	grep -q '"ops_in":{"recv":[0-9]*}' "$tmp/status" &&
	head -1 "$tmp/nope" | grep -q "404"; then
	ok "bench --metrics: /status as JSON, 404 elsewhere"
else
	bad "bench --metrics /status"
	cat "$tmp/status" "$tmp/nope"
fi
# A slowloris on the endpoint: 200 requests never finished. The server
# holds a bounded number of them (fds), serves a bench run meanwhile, and
# a scrape succeeds once they are gone.
fds=()
trap '' PIPE # connections past the limit are closed under our writes
for _ in $(seq 200); do
	exec {fd}<>"/dev/tcp/127.0.0.1/$mport" 2>/dev/null || continue
	printf 'GET /metrics HTTP/1.1\r\nHost: x\r\n' >&$fd 2>/dev/null
	fds+=("$fd")
done
held=$(ls "/proc/$server/fd" | wc -l)
if "$rdmx" bench "127.0.0.1:$port" --op send -n 200 -s 64 >/dev/null 2>&1; then
	bench_ok=1
else
	bench_ok=0
fi
for fd in "${fds[@]}"; do exec {fd}>&-; done
trap - PIPE
scraped=0
for _ in $(seq 100); do
	http_get "$mport" /metrics 2>/dev/null | head -1 | grep -q "200 OK" &&
		{ scraped=1; break; }
	sleep 0.1
done
if [ "$bench_ok" = 1 ] && [ "$held" -lt 100 ] && [ "$scraped" = 1 ]; then
	ok "metrics under a slowloris of ${#fds[@]}: server holds $held fds, serves a bench run, scrapes come back"
else
	bad "metrics slowloris (bench ok $bench_ok, server fds $held of ${#fds[@]} opened, scrape $scraped)"
fi
kill -TERM "$server"
wait "$server"
# A port alone listens on the loopback only.
start "$rdmx" bench :0 --metrics 0 || exit 1
if grep -q "metrics on http://127.0.0.1:[0-9]*/metrics" "$tmp/server"; then
	ok "--metrics PORT: the loopback only"
else
	bad "--metrics PORT: $(cat "$tmp/server")"
fi
kill -TERM "$server"
wait "$server"
one_line "bad metrics address" "--metrics expects PORT (loopback) or ADDR:PORT" "$rdmx" bench :0 --metrics nowhere
one_line "bad transport" "--transport is auto, verbs, shm or tcp" "$rdmx" bench :0 --transport ib

# A client killed mid-run: the server serves the next ones. The flushes of
# the dead session's work stayed in the server's cq, and every later
# session took them for its own and failed.
for tr in shm tcp; do
	start "$rdmx" bench :0 --transport $tr || exit 1
	"$rdmx" bench "127.0.0.1:$port" --transport $tr --op send -s 8 -D 60 >"$tmp/victim" 2>&1 &
	victim=$!
	wait_grep "$tmp/victim" "transp" # connected: its header
	kill -KILL $victim
	wait $victim 2>/dev/null
	if run "after a killed client ($tr)" 0 "$rdmx" bench "127.0.0.1:$port" --transport $tr --op read -s 4096 -n 100 &&
		run "the next ($tr)" 0 "$rdmx" bench "127.0.0.1:$port" --transport $tr --op send -s 8 -n 100; then
		ok "bench server over $tr: a client killed mid-run, the next ones served"
	else
		bad "bench server over $tr after a killed client"
	fi
	kill -TERM "$server"
	wait "$server"
done

# tcp.send_buffer / tcp.recv_buffer size the server's connection socket
# (the kernel reports twice the value).
if command -v ss >/dev/null; then
	RDMX_TCP_SEND_BUFFER=60000 RDMX_TCP_RECV_BUFFER=100000 \
		start "$rdmx" bench :0 --transport tcp || exit 1
	"$rdmx" bench "127.0.0.1:$port" --op write -n 100000000 >/dev/null 2>&1 &
	client=$!
	# Until the client is in (a sanitizer build starts slowly).
	for _ in $(seq 100); do
		ss -tmnH state established "( sport = :$port )" >"$tmp/ss"
		grep -q "rb200000" "$tmp/ss" && break
		sleep 0.1
	done
	kill "$client"
	wait "$client"
	kill -TERM "$server"
	wait "$server"
	if grep -q "rb200000" "$tmp/ss" && grep -q "tb120000" "$tmp/ss"; then
		ok "tcp.send_buffer and tcp.recv_buffer reach the socket"
	else
		bad "tcp socket buffers"
		cat "$tmp/ss"
	fi
else
	echo "skip tcp socket buffers: no ss"
fi

# Which transport a peer gets, and why: shm here; tcp when forced.
serve send :0 || exit 1
if run "info --peer" 0 "$rdmx" info --peer "127.0.0.1:$port" &&
	grep -qE "transport shm: best both sides support" "$tmp/out" &&
	RDMX_TRANSPORT=tcp run "info --peer tcp" 0 "$rdmx" info --peer "127.0.0.1:$port" &&
	grep -q "transport tcp: forced by transport=tcp" "$tmp/out"; then
	ok "info --peer: the transport chosen and why"
else
	bad "info --peer"
fi
kill -TERM "$server" 2>/dev/null
wait "$server" 2>/dev/null

# A server whose clients' RECVs come from a srq: send latency and bandwidth
# (the RECV path), on both transports, two clients one after the other.
for t in shm tcp; do
	start "$rdmx" bench :0 --use_srq || exit 1
	if RDMX_TRANSPORT=$t run "bench srq lat $t" 0 "$rdmx" bench "127.0.0.1:$port" --op send -s 4k -n 300 &&
		RDMX_TRANSPORT=$t run "bench srq bw $t" 0 "$rdmx" bench "127.0.0.1:$port" --op send --bw -s 1k -n 2000 -t 32 --json &&
		python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
assert d["transport"]==sys.argv[2] and d["mode"]=="bw" and d["msg_per_s"] > 0' "$tmp/out" "$t" &&
		kill -TERM "$server" && wait "$server" &&
		[ "$(grep -c "RECVs come from a shared receive queue" "$tmp/server")" = 2 ] &&
		grep -q "2 sessions ok, 0 failed" "$tmp/server"; then
		ok "bench --use_srq over $t: send latency and bandwidth through a srq"
	else
		bad "bench --use_srq $t"
		kill -TERM "$server" 2>/dev/null
		wait "$server" 2>/dev/null
	fi
done
# The config key does the same for demo's server.
RDMX_CONN_USE_SRQ=on serve send :0 --once || exit 1
if run "demo send srq" 0 "$rdmx" demo send "127.0.0.1:$port" -n 20 &&
	wait "$server" && grep -q "RECVs come from a shared receive queue" "$tmp/server"; then
	ok "demo send with conn.use_srq: the server's RECVs from a srq"
else
	bad "demo send srq"
fi

# rdmx bench as a user runs it: both transports, latency and bandwidth.
for t in shm tcp; do
	start "$rdmx" bench :0 --once
	if RDMX_TRANSPORT=$t run "bench $t" 0 "$rdmx" bench "127.0.0.1:$port" --op write -s 4k -n 200 --json &&
		python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); l=d["lat_us"]
assert d["transport"]==sys.argv[2] and d["op"]=="write" and d["size"]==4096 and d["iters"]==200
assert 0 < l["min"] <= l["median"] <= l["p90"] <= l["p99"] <= l["p99_9"] <= l["max"]' "$tmp/out" "$t" &&
		wait "$server"; then
		ok "bench --json over $t: write latency percentiles in order"
	else
		bad "bench $t"
	fi
done
# --last N: the quantiles of the last N samples too, as ucx_perftest takes
# its own; over all of them when N covers the run.
start "$rdmx" bench :0 --once
if RDMX_TRANSPORT=tcp run "bench --last" 0 "$rdmx" bench "127.0.0.1:$port" --op send -n 300 --last 100 --json &&
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); l=d["lat_us"]; w=d["last"]
assert w["samples"]==100 and l["min"] <= w["median"] <= w["p99"] <= w["p99_9"] <= l["max"]' "$tmp/out" &&
	wait "$server" && start "$rdmx" bench :0 --once &&
	RDMX_TRANSPORT=tcp run "bench --last all" 0 "$rdmx" bench "127.0.0.1:$port" --op send -n 300 --last 1000 --json &&
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); l=d["lat_us"]; w=d["last"]
assert w["samples"]==300 and (w["median"], w["p99"], w["p99_9"])==(l["median"], l["p99"], l["p99_9"])' "$tmp/out" &&
	wait "$server"; then
	ok "bench --last: quantiles of the last N samples, all of them when N covers the run"
else
	bad "bench --last"
fi
one_line "bench --last with --bw" "not with --bw" "$rdmx" bench 127.0.0.1:1 --bw --last 10
# --wait: the client sleeps (rdmx_cq_wait, or poll on rdmx_cq_fd) for each
# completion; the JSON says how it waited.
for w in sleep fd; do
	start "$rdmx" bench :0 --once
	if RDMX_PROGRESS_WAIT_SPIN=0 run "bench --wait $w" 0 "$rdmx" bench "127.0.0.1:$port" \
		--op read -s 4k -n 200 --wait $w --json &&
		python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
assert d["wait"]==sys.argv[2] and d["op"]=="read" and d["iters"]==200 and d["lat_us"]["median"] > 0' \
			"$tmp/out" "$w" && wait "$server"; then
		ok "bench --wait $w: read latency, sleeping for each completion"
	else
		bad "bench --wait $w"
	fi
done
# --mem: mapped buffers (the default) and heap ones, both sides, over shm.
for m in mapped malloc; do
	start "$rdmx" bench :0 --once --mem $m
	if RDMX_TRANSPORT=shm run "bench --mem $m" 0 "$rdmx" bench "127.0.0.1:$port" \
		--op read -s 4k -n 200 --mem $m --json &&
		python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
assert d["transport"]=="shm" and d["iters"]==200 and d["lat_us"]["median"] > 0' \
			"$tmp/out" && wait "$server"; then
		ok "bench --mem $m: read latency over shm"
	else
		bad "bench --mem $m"
	fi
done
one_line "bench --mem unknown" "unknown --mem 'huge'" "$rdmx" bench 127.0.0.1:1 --mem huge
one_line "bench --wait for write" "write latency is seen by spinning" "$rdmx" bench 127.0.0.1:1 --op write --wait fd
one_line "bench --wait unknown" "unknown --wait 'nap'" "$rdmx" bench 127.0.0.1:1 --wait nap
start "$rdmx" bench :0 --once
if run "bench bw" 0 "$rdmx" bench "127.0.0.1:$port" --op read --bw -s 64k -n 500 -t 16 --json &&
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
assert d["mode"]=="bw" and d["depth"]==16 and d["gb_per_s"] > 0 and d["msg_per_s"] > 0' "$tmp/out" &&
	wait "$server"; then
	ok "bench --bw --json: read bandwidth"
else
	bad "bench bw"
fi
# -a: every size 2 B .. 8 MiB on one connection, then the server's session ends well.
start "$rdmx" bench :0 --once
if run "bench -a" 0 "$rdmx" bench "127.0.0.1:$port" -a --op send -n 20 --json &&
	python3 -c 'import json,sys
rows=[json.loads(l) for l in open(sys.argv[1])]
assert [r["size"] for r in rows]==[2**i for i in range(1,24)], [r["size"] for r in rows]
assert all(r["op"]=="send" and r["iters"]==20 and r["lat_us"]["min"] > 0 for r in rows)' "$tmp/out" &&
	wait "$server" && grep -q "1 sessions ok, 0 failed" "$tmp/server"; then
	ok "bench -a --json: 23 sizes from 2 B to 8 MiB on one connection"
else
	bad "bench -a"
fi
# -D: runs of --iters until the time is up, reported as one.
start "$rdmx" bench :0 --once
if run "bench -D" 0 "$rdmx" bench "127.0.0.1:$port" -D 1 -n 200 --op write --json &&
	python3 -c 'import json,sys
r=json.load(open(sys.argv[1]))
assert r["iters"] > 200 and r["iters"] % 200 == 0, r["iters"]
assert 0 < r["lat_us"]["min"] <= r["lat_us"]["median"] <= r["lat_us"]["max"]' "$tmp/out" &&
	wait "$server" && grep -q "1 sessions ok, 0 failed" "$tmp/server"; then
	ok "bench -D 1: several runs of -n 200 in one report"
else
	bad "bench -D"
fi
one_line "bench -D with -a" "--duration is 1..3600 seconds, and not with -a" \
	"$rdmx" bench 127.0.0.1 -D 2 -a
# --plot: an SVG of the latency distribution, one point per sampled operation.
start "$rdmx" bench :0 --once
if RDMX_TRANSPORT=tcp run "bench --plot" 0 "$rdmx" bench "127.0.0.1:$port" --op read -s 4k -n 3000 \
	--plot "$tmp/lat.svg" && wait "$server" &&
	python3 -c 'import sys, xml.etree.ElementTree as E
ns="{http://www.w3.org/2000/svg}"
root=E.parse(sys.argv[1]).getroot()
assert "read 4096 B over tcp, 3000 iterations" in root.find(ns+"title").text
pts=[tuple(map(float,p.split(","))) for p in root.find(ns+"polyline").get("points").split()]
assert len(pts)==1000, len(pts)
assert all(a[0]<=b[0] and a[1]>=b[1] for a,b in zip(pts,pts[1:])), "not a cumulative curve"' "$tmp/lat.svg"; then
	ok "bench --plot: an SVG latency distribution, monotone, titled"
else
	bad "bench --plot"
fi
one_line "bench --plot bad path" "cannot write /nonexistent/l.svg" "$rdmx" bench localhost --plot /nonexistent/l.svg
one_line "bench --plot with --bw" "not with --bw or -a" "$rdmx" bench localhost --bw --plot "$tmp/x.svg"

# A progress bar on a terminal for runs longer than 2 s (script gives a pty).
# -D 3 makes the run last 3 s however fast the host is; its bar counts seconds.
RDMX_TRANSPORT=tcp start "$rdmx" bench :0 --once
RDMX_TRANSPORT=tcp script -qec "$rdmx bench 127.0.0.1:$port --op write -n 2000 -D 3" \
	/dev/null >"$tmp/pty"
wait "$server"
RDMX_TRANSPORT=tcp start "$rdmx" bench :0 --once
RDMX_TRANSPORT=tcp "$rdmx" bench "127.0.0.1:$port" --op write -n 2000 -D 3 >"$tmp/out" 2>"$tmp/err"
wait "$server"
if grep -qE '\[#+ *\] +[0-9]+% [0-9]/3 s' "$tmp/pty" &&
	grep -qE "write  *8  *[0-9]+000 " "$tmp/pty" && [ ! -s "$tmp/err" ] &&
	grep -qE "write  *8  *[0-9]+000 " "$tmp/out"; then
	ok "bench -D 3: a progress bar in seconds on a terminal, none when stderr is a file"
else
	bad "bench progress bar"
	tr '\r' '\n' <"$tmp/pty" | tail -5
fi
one_line "bench unknown op" "unknown --op 'teleport'" "$rdmx" bench localhost --op teleport
one_line "bench buffer too large" "must stay within 1g" "$rdmx" bench localhost --bw -s 64m -t 64

# --op reg: registration and deregistration, measured on this host.
if run "bench --op reg" 0 "$rdmx" bench --op reg -s 64k -n 300 --json &&
	grep -qE '^\{"transport":"local","op":"reg","mode":"lat","size":65536,"iters":300,"lat_us":\{"min":[0-9.]+,' "$tmp/out"; then
	ok "bench --op reg: one JSON row of 300 registrations of 64 KiB"
else
	bad "bench --op reg"
fi
one_line "bench --op reg with a host" "measures this host" "$rdmx" bench localhost --op reg
# --cpu: a CPU this process may use pins the bench; another is one line.
cpu=$(taskset -pc $$ | sed 's/.*: *//; s/[,-].*//')
if run "bench --cpu" 0 "$rdmx" bench --op reg -s 4k -n 50 --cpu "$cpu"; then
	ok "bench --cpu $cpu"
else
	bad "bench --cpu"
fi
one_line "bench --cpu out of reach" "not a CPU this process may run on" "$rdmx" bench --op reg --cpu 1000

if RDMX_CONN_MAX_SEND_WR=7 run "info" 0 "$rdmx" info --config &&
	grep -qE "^conn.max_send_wr +7 +1024 +env +RDMX_CONN_MAX_SEND_WR" "$tmp/out"; then
	ok "info --config: value, default, source and variable"
else
	bad "info --config"
fi
if RDMX_CONN_MAX_SEND_WR=lots run "info bad value" 1 "$rdmx" info --config &&
	grep -q "invalid value 'lots' for conn.max_send_wr (RDMX_CONN_MAX_SEND_WR)" "$tmp/err"; then
	ok "info --config: an invalid value names the key and the variable"
else
	bad "info bad value"
fi
# The file as the next argument, as with =FILE.
printf 'conn:\n  max_send_wr: 9\n' >"$tmp/nine.yaml"
if run "info --config FILE" 0 "$rdmx" info --config "$tmp/nine.yaml" &&
	grep -qE "^conn.max_send_wr +9 +1024 +file " "$tmp/out"; then
	ok "info --config FILE: the file's values"
else
	bad "info --config FILE"
fi
one_line "info, extra argument" "unexpected argument 'extra'" "$rdmx" info extra
one_line "version, extra argument" "unexpected argument 'extra'" "$rdmx" version extra
# A configuration no command could start with: info says so, and fails.
printf 'nosuch:\n  key: 1\n' >"$tmp/bad.yaml"
if RDMX_CONFIG="$tmp/bad.yaml" run "info, bad config" 1 "$rdmx" info &&
	grep -q "^configuration: not usable" "$tmp/out" &&
	grep -q "unknown key 'nosuch.key'" "$tmp/err"; then
	ok "info with an unusable configuration: says so, exit 1"
else
	bad "info with an unusable configuration"
fi

finish
