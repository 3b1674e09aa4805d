#!/bin/bash
# Description: what make test runs inside the RDMA guest (tests/vm/vm.sh).
#   suite.sh BUILD conformance TEST...  conformance files over verbs, on
#                                       each device
#   suite.sh BUILD netem TEST...      the same files over tcp and over rxe,
#                                     each pair's client across a veth pair
#                                     that loses 1% and delays 5 ms each way
#   suite.sh BUILD extras             rdmx info, the demo between two rxe
#                                     devices over a veth pair, perftest's
#                                     latency beside rdmx bench on rxe0 (a
#                                     check of the path: under TCG the
#                                     figures measure the emulator)
# Prints "N passed, N failed, N skipped" last.
set -u
build=${1:-build}
what=${2:-extras}
# Setting up a verbs connection takes seconds under TCG: give handshakes
# emulator time (tests with two peers wait on each other's setup).
export RDMX_CONN_HANDSHAKE_TIMEOUT=60s RDMX_TEST_TIME_SCALE=10
rdmx=$build/apps/rdmx
pass=0 fail=0 skip=0
failures=""

# One conformance binary in an environment; counts its cmocka cases.
suite() { # label test VAR=VALUE...
	local label=$1 t=$2 out rc=0 start=$SECONDS
	shift 2
	out=$(env "$@" timeout 600 "$build/tests/test_$t" 2>&1) || rc=$?
	echo "$label.$t: $((SECONDS - start)) s"
	# A binary that hung or died names no failed case: it failed.
	if [ $rc -ne 0 ] && ! grep -qE '^\[ +FAILED' <<<"$out"; then
		out+=$'\n'"ERROR: test_$t exited with status $rc"
		out+=$' (124: killed by its 600 s timeout)\n[  FAILED  ] test_'"$t"
	fi
	grep -E '^\[ +(OK|FAILED|SKIPPED) +\] test_|^skip:' <<<"$out" |
		sed "s/^/$label.$t: /"
	# cmocka names a failed or skipped case twice (then, and in a summary).
	count() { grep -E "^\[ +$1 +\] test_" <<<"$out" | sort -u | wc -l; }
	pass=$((pass + $(count OK)))
	fail=$((fail + $(count FAILED)))
	failures+=$(grep -E '^\[ +FAILED +\] test_' <<<"$out" | sort -u |
		sed "s/^\[ *FAILED *\] /  $label.$t: /;s/$/\\\\n/" | tr -d '\n')
	skip=$((skip + $(count SKIPPED)))
	# Why: each failed case's own lines, from its RUN to its FAILED, which
	# end with cmocka's reasons; of a binary that died, its tail. Never
	# the listeners' warnings.
	local f
	for f in $(grep -E '^\[ +FAILED +\] test_' <<<"$out" | sort -u |
		sed 's/^\[ *FAILED *\] //'); do
		if grep -qE "^\[ RUN +\] $f\$" <<<"$out"; then
			sed -n "/^\[ RUN *\] $f\$/,/^\[ *FAILED *\] $f\$/p" <<<"$out"
		else
			grep -vE '^\[ +(RUN|OK) ' <<<"$out"
		fi | grep -v 'with neither auth.key_file' | tail -25 |
			sed 's/^/    | /'
	done
}

# passed NAME [WHAT] / failed NAME [FILE...]: one line, counted; a failure
# shows the files that say why.
passed() { echo "$1: [ OK ]${2:+ $2}"; pass=$((pass + 1)); }
failed() {
	echo "$1: [ FAILED ]"
	failures+="  $1\n"
	shift
	cat "$@"
	fail=$((fail + 1))
}
# The summary, last: the failed names again, so a log's tail says which.
summary() {
	[ -z "$failures" ] || printf "failed:\n$failures"
	echo "$pass passed, $fail failed, $skip skipped"
}

if [ "$what" = conformance ]; then
	shift 2
	# The two devices' files run side by side, each device's output kept
	# apart and said in turn: one at a time, the guest's two vCPUs were
	# busy 1.2 of 2 (its binaries wait on handshakes, peers and timers).
	tally=$(mktemp -d)
	for dev in rxe0 siw0; do
		addr=$RDMX_RXE_ADDR
		[ $dev = siw0 ] && addr=${RDMX_SIW_ADDR:-}
		if [ -z "$addr" ]; then
			echo "verbs.$dev: skip: no siw here: Debian 12's kernels (6.1, 6.12) are built without CONFIG_RDMA_SIW"
			skip=$((skip + 1))
			continue
		fi
		(
			pass=0 fail=0 skip=0 failures=""
			for t in "$@"; do
				suite "verbs.$dev" "$t" RDMX_TRANSPORT=verbs \
					RDMX_VERBS_DEVICE=$dev RDMX_TEST_ADDR=$addr
			done
			echo "$pass $fail $skip" >"$tally/$dev.n"
			printf '%s' "$failures" >"$tally/$dev.failed"
		) >"$tally/$dev.out" 2>&1 &
	done
	wait
	for dev in rxe0 siw0; do
		[ -f "$tally/$dev.out" ] || continue
		cat "$tally/$dev.out"
		if read -r p f s <"$tally/$dev.n"; then
			pass=$((pass + p)) fail=$((fail + f)) skip=$((skip + s))
			failures+=$(cat "$tally/$dev.failed")
		else # the device's runner itself died
			failures+="  verbs.$dev: its runner ended early\\n"
			fail=$((fail + 1))
		fi
	done
	rm -rf "$tally"
	summary
	[ $fail -eq 0 ]
	exit
fi

if [ "$what" = netem ]; then
	shift 2
	# va (10.99.2.1, rxe1) and vb (10.99.2.2, rxe2): servers on va, each
	# pair's client on vb. rxe sends out of its own netdev; tcp between
	# two local addresses would take lo, so policy routing sends what
	# this host makes from one end to the other out of the veth.
	ip route add 10.99.2.1 dev vb table 102 &&
		ip route add 10.99.2.2 dev va table 101 &&
		ip rule add pref 10 iif lo from 10.99.2.2 to 10.99.2.1 lookup 102 &&
		ip rule add pref 11 iif lo from 10.99.2.1 to 10.99.2.2 lookup 101 &&
		ip rule add pref 100 lookup local && ip rule del pref 0 &&
		tc qdisc add dev va root netem delay 5ms loss 1% &&
		tc qdisc add dev vb root netem delay 5ms loss 1% ||
		{ echo "netem: cannot set up the lossy link"; exit 1; }
	for t in "$@"; do
		suite "netem.tcp" "$t" RDMX_TRANSPORT=tcp RDMX_TEST_ADDR=10.99.2.1 \
			RDMX_TEST_PEER_ADDR=10.99.2.2 RDMX_TEST_LOSSY=1
		# A lost NAK leaves rxe's requester waiting: the watchdog ends
		# it after verbs.request_timeout, 30 s. test_read_sizes skips
		# its 16 MiB READ here: rxe ends it with a device error now
		# and then.
		suite "netem.rxe" "$t" RDMX_TRANSPORT=verbs RDMX_VERBS_DEVICE=rxe1 \
			RDMX_TEST_ADDR=10.99.2.1 RDMX_TEST_PEER_ADDR=10.99.2.2 \
			RDMX_TEST_PEER_DEVICE=rxe2 RDMX_TEST_LOSSY=1
	done
	# The link did what it was told: packets crossed it and some were lost.
	for d in va vb; do
		tc -s qdisc show dev $d >/tmp/qdisc.$d
		read -r sent dropped < <(sed -n \
			's/.*Sent [0-9]* bytes \([0-9]*\) pkt (dropped \([0-9]*\),.*/\1 \2/p' \
			/tmp/qdisc.$d)
		if [ "${sent:-0}" -gt 1000 ] && [ "${dropped:-0}" -gt 0 ]; then
			passed "netem.$d" "$sent packets sent, $dropped dropped"
		else
			failed "netem.$d" /tmp/qdisc.$d
		fi
	done
	summary
	[ $fail -eq 0 ]
	exit
fi

# The port a server printed in FILE, waiting for it (TCG is slow).
port_of() { # file
	local p
	for _ in $(seq 100); do
		p=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$1")
		[ -n "$p" ] && { echo "$p"; return 0; }
		sleep 0.1
	done
	return 1
}

echo "== rdmx info in the guest"
RDMX_TRANSPORT=verbs "$rdmx" info

echo "== demo between rxe1 (10.99.2.1) and rxe2 (10.99.2.2) over a veth pair"
RDMX_VERBS_DEVICE=rxe1 "$rdmx" demo write :0 --once >/tmp/demo-srv 2>&1 &
srv=$!
port=$(port_of /tmp/demo-srv)
for mode in write; do
	if RDMX_VERBS_DEVICE=rxe2 RDMX_CONN_SOURCE_ADDR=10.99.2.2 \
		"$rdmx" demo $mode "10.99.2.1:$port" -s 4k -n 200 | tee /tmp/demo-cli &&
		grep -q "verbs .*ok, bytes verified" /tmp/demo-cli && wait $srv; then
		passed "verbs.veth.demo" "demo $mode rxe2 -> rxe1"
	else
		failed "verbs.veth.demo" /tmp/demo-srv
	fi
done
RDMX_VERBS_DEVICE=rxe2 RDMX_CONN_SOURCE_ADDR=10.99.2.2 RDMX_LOG_LEVEL=error \
	"$rdmx" info --peer "10.99.2.1:$port" 2>/dev/null || true

echo "== demo lambda over verbs: the result RDMA-written into the client's buffer"
RDMX_TRANSPORT=verbs RDMX_LAMBDA_TIME_LIMIT=60s "$rdmx" demo lambda :0 \
	--metrics 127.0.0.1:0 >/tmp/l-srv 2>&1 &
lsrv=$!
lport=$(port_of /tmp/l-srv)
lcall() { RDMX_TRANSPORT=verbs "$rdmx" demo lambda "$RDMX_RXE_ADDR:$lport" "$@"; }
if [ "$(lcall -f examples/lambda/primes.lua -i 10000 2>&1)" = 1229 ] &&
	lcall -f examples/lambda/limits/forever.lua 2>&1 | grep -q "instruction budget" &&
	[ "$(lcall -e 'return ("v"):rep(100000)' -r 200k 2>&1 | wc -c)" = 100000 ] &&
	mport=$(sed -n 's|.*metrics on http://127.0.0.1:\([0-9]*\)/.*|\1|p' /tmp/l-srv) &&
	exec 3<>"/dev/tcp/127.0.0.1/$mport" && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 &&
	cat <&3 >/tmp/l-metrics && grep -q '^rdmx_connections_total{transport="verbs"} 3' /tmp/l-metrics &&
	grep -q '^rdmx_op_latency_seconds_count{op="write"} 2' /tmp/l-metrics; then
	passed "verbs.lambda" "primes, a runaway stopped, a 100 KB result; metrics say verbs"
else
	failed "verbs.lambda" /tmp/l-srv
fi
kill -TERM $lsrv 2>/dev/null
wait $lsrv

echo "== verbs.gid_index picks the GID; one without an address is refused"
RDMX_TRANSPORT=verbs "$rdmx" bench :0 >/tmp/g-srv 2>&1 &
gsrv=$!
gport=$(port_of /tmp/g-srv)
if RDMX_VERBS_GID_INDEX=1 "$rdmx" info --peer "$RDMX_RXE_ADDR:$gport" 2>&1 |
	tee /tmp/g1 | grep -q "transport verbs: .*gid 1 ::ffff:$RDMX_RXE_ADDR" &&
	! RDMX_VERBS_GID_INDEX=0 "$rdmx" info --peer "$RDMX_RXE_ADDR:$gport" \
		>/tmp/g0 2>&1 && grep -q "carries no IPv4 address" /tmp/g0 &&
	sleep 1 && kill -0 $gsrv && # a refused peer does not end the server
	RDMX_TRANSPORT=verbs "$rdmx" bench "$RDMX_RXE_ADDR:$gport" -n 20 >/dev/null; then
	passed "verbs.gid_index" "$(cat /tmp/g1)"
else
	failed "verbs.gid_index" /tmp/g1 /tmp/g0 /tmp/g-srv
fi
kill -TERM $gsrv 2>/dev/null
wait $gsrv

echo "== verbs.mtu: both sides take the smaller wish; data moves at it"
RDMX_TRANSPORT=verbs RDMX_VERBS_MTU=512 "$rdmx" bench :0 >/tmp/m-srv 2>&1 &
msrv=$!
mport=$(port_of /tmp/m-srv)
mcli() { RDMX_TRANSPORT=verbs RDMX_VERBS_MTU=$1 "$rdmx" "${@:2}"; }
if mcli auto info --peer "$RDMX_RXE_ADDR:$mport" 2>&1 | tee /tmp/m1 | grep -q ", mtu 512$" &&
	mcli 256 info --peer "$RDMX_RXE_ADDR:$mport" 2>&1 | tee /tmp/m2 | grep -q ", mtu 256$" &&
	mcli 256 bench "$RDMX_RXE_ADDR:$mport" --op write -s 4k -n 50 >/tmp/m3 2>&1 &&
	mcli 256 bench "$RDMX_RXE_ADDR:$mport" --op read -s 64k -n 20 >>/tmp/m3 2>&1 &&
	mcli 256 bench "$RDMX_RXE_ADDR:$mport" --op send -s 5000 -n 20 >>/tmp/m3 2>&1; then
	passed "verbs.mtu" "server 512 + client auto: 512; + client 256: 256, write/read/send move"
else
	failed "verbs.mtu" /tmp/m1 /tmp/m2 /tmp/m3 /tmp/m-srv
fi
kill -TERM $msrv 2>/dev/null
wait $msrv

echo "== a registration over RLIMIT_MEMLOCK says the limit and the fix"
RDMX_TRANSPORT=verbs "$rdmx" bench :0 --once >/tmp/ml-srv 2>&1 &
mport=$(port_of /tmp/ml-srv)
# Root may lock any amount (CAP_IPC_LOCK): ask as nobody, with 64 KiB.
setpriv --reuid=65534 --regid=65534 --clear-groups bash -c \
	"ulimit -l 64; RDMX_TRANSPORT=verbs $rdmx bench $RDMX_RXE_ADDR:$mport -s 1m -n 5" \
	>/tmp/ml-cli 2>&1
if grep -q "locked memory is limited to 65536 bytes.*ulimit -l unlimited" /tmp/ml-cli; then
	passed "verbs.memlock" "$(grep -o 'locked memory is limited[^;]*' /tmp/ml-cli)"
else
	failed "verbs.memlock" /tmp/ml-cli
fi
wait

echo "== perftest beside rdmx bench on rxe0 (TCG: a path check, not a figure)"
perf() { # tool
	"$1" -d rxe0 -x 1 -n 500 -s 8 >/tmp/pt-srv 2>&1 &
	sleep 1
	"$1" -d rxe0 -x 1 -n 500 -s 8 "$RDMX_RXE_ADDR" 2>&1 | awk '/^ *8 /{print "  " tool ": t_min " $3 " us, t_typical " $5 " us"}' tool="$1"
	wait
}
perf ib_write_lat
perf ib_read_lat
for op in write read; do
	: >/tmp/b-srv # not the port of the run before (tests/cli/common.sh)
	RDMX_TRANSPORT=verbs "$rdmx" bench :0 --once >/tmp/b-srv 2>&1 &
	bport=$(port_of /tmp/b-srv)
	RDMX_TRANSPORT=verbs "$rdmx" bench "$RDMX_RXE_ADDR:$bport" --op $op -s 8 -n 500 --json |
		python3 -c 'import json,sys
d = json.load(sys.stdin); l = d["lat_us"]
print("  rdmx bench %s over %s: min %.2f us, median %.2f us" % (d["op"], d["transport"], l["min"], l["median"]))'
	wait
done

echo "== registration cost with rxe0 (rdmx_mr_reg calls ibv_reg_mr inside)"
reg_ok=1
: >/tmp/reg
: >/tmp/reg.err
for sz in 4k 1m; do
	RDMX_VERBS_DEVICE=rxe0 "$rdmx" bench --op reg -s $sz -n 200 --json \
		>>/tmp/reg 2>>/tmp/reg.err || reg_ok=0
done
if [ $reg_ok = 1 ] && python3 -c 'import json,sys
for line in open("/tmp/reg"):
	d = json.loads(line); l = d["lat_us"]
	print("  rdmx bench --op reg -s %d: min %.2f us, median %.2f us" % (d["size"], l["min"], l["median"]))'; then
	passed "verbs.reg" "registration and deregistration per size"
else
	failed "verbs.reg" /tmp/reg /tmp/reg.err
fi

summary
[ $fail -eq 0 ]
