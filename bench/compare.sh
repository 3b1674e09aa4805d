#!/usr/bin/env bash
# rdmx beside its peers on this host, in one run, with ratios:
#   shm: rdmx shm  vs UCX (UCX_TLS=posix,self and cma,posix,self), libfabric shm
#   tcp: rdmx tcp  vs UCX (UCX_TLS=tcp,self), libfabric tcp
# Latency (median and p99, one-way: half the round trip) at 8 B and 4 KiB for
# two-sided messages (rdmx send / ucx tag_lat / fi_pingpong) and one-sided
# writes (rdmx write / ucx ucp_put_lat); bandwidth (GB/s, 1e9 bytes) of
# one-sided writes at 64 KiB and 1 MiB (rdmx write --bw / ucx ucp_put_bw).
# Every tool spins. Servers run on CPU 0, clients on CPU 1, inside a network
# namespace that holds only loopback (the peers bind the wildcard address).
# fi_pingpong reports averages only; its columns say "avg".
#
# usage: bench/compare.sh          (QUICK=1 for a short pass)
# Needs root (unshare). Installs ucx-utils and libfabric-bin, builds rdmx.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${RDMX_BENCH_INNER:-}" ]; then
	[ "$(id -u)" -eq 0 ] || { echo "compare.sh: needs root (unshare --net)" >&2; exit 1; }
	for p in ucx-utils libfabric-bin util-linux; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null
	done
	make -s build >/dev/null
	RDMX_BENCH_INNER=1 exec unshare --net -- "$0" "$@"
fi

ip link set lo up
RDMX=build/apps/rdmx
QUICK=${QUICK:-0}
NL=20000 NB64=20000 NB1M=1000
[ "$QUICK" = 1 ] && NL=4000 NB64=4000 NB1M=300
port=21000
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT

next_port() { port=$((port + 1)); }

# rdmx TRANSPORT ARGS... -> the client's JSON line
rdmx_run() {
	local t=$1
	shift
	next_port
	RDMX_TRANSPORT=$t taskset -c 0 "$RDMX" bench ":$port" --once >"$tmp/srv" 2>&1 &
	sleep 0.2
	RDMX_TRANSPORT=$t timeout 120 taskset -c 1 "$RDMX" bench "127.0.0.1:$port" --json "$@" 2>/dev/null || true
	wait 2>/dev/null || true
}
jget() { python3 -c 'import json,sys
try:
    d=json.loads(sys.stdin.read()); v=d
    for k in sys.argv[1].split("."): v=v[k]
    print(f"{v:.3f}")
except Exception: print("n/a")' "$1"; }

# ucx ENV TEST SIZE EXTRA... -> the "Final:" line
ucx_run() {
	local envs=$1 test=$2 size=$3
	shift 3
	next_port
	env $envs taskset -c 0 ucx_perftest -p "$port" >"$tmp/usrv" 2>&1 &
	sleep 0.5
	env $envs timeout 120 taskset -c 1 ucx_perftest 127.0.0.1 -p "$port" \
		-t "$test" -s "$size" "$@" 2>/dev/null | grep '^Final:' || true
	wait 2>/dev/null || true
}
# column 3: the -R percentile latency (us); column 7: overall MB/s (MiB)
ucx_lat() { ucx_run "$1" "$2" "$3" -n $NL -w $((NL / 10)) -R "$4" | awk '{print $3}'; }
ucx_bw() { ucx_run "$1" ucp_put_bw "$2" -n "$3" | awk '{ if ($7) printf "%.3f\n", $7 * 1048576 / 1e9 }'; }

# fi PROVIDER EP SIZE -> usec/xfer (average)
fi_lat() {
	next_port
	taskset -c 0 fi_pingpong -e "$2" -p "$1" -B "$port" -I $NL -S "$3" >"$tmp/fsrv" 2>&1 &
	sleep 0.5
	timeout 120 taskset -c 1 fi_pingpong -e "$2" -p "$1" -P "$port" -I $NL -S "$3" 127.0.0.1 2>/dev/null |
		awk 'NR == 2 { print $7 }' || true
	wait 2>/dev/null || true
}

ratio() { python3 -c 'import sys
try: print(f"{float(sys.argv[1]) / float(sys.argv[2]):.2f}")
except Exception: print("-")' "$1" "$2"; }
v() { [ -n "$1" ] && echo "$1" || echo n/a; }

row() { # label rdmx peer1 peer2 ...
	local label=$1 r=$2
	shift 2
	printf '%-26s %9s' "$label" "$(v "$r")"
	for p in "$@"; do printf ' %9s %6s' "$(v "$p")" "$(ratio "$r" "$p")"; done
	printf '\n'
}

for tr in shm tcp; do
	if [ $tr = shm ]; then
		U1=UCX_TLS=posix,self U2=UCX_TLS=cma,posix,self FP=shm FE=rdm
		printf '\n%-26s %9s %9s %6s %9s %6s %9s %6s\n' "shm (one host)" rdmx \
			ucx-posix ratio ucx-cma ratio "fi-shm" ratio
	else
		U1="UCX_TLS=tcp,self UCX_NET_DEVICES=lo" U2="" FP=tcp FE=msg
		printf '\n%-26s %9s %9s %6s %9s %6s\n' "tcp (loopback)" rdmx ucx-tcp \
			ratio "fi-tcp" ratio
	fi
	for size in 8 4096; do
		j=$(rdmx_run $tr --op send -s $size -n $NL)
		f=$(fi_lat $FP $FE $size)
		for pct in 50 99; do
			key=median
			[ $pct = 99 ] && key=p99
			r=$(jget "lat_us.$key" <<<"$j")
			p1=$(ucx_lat "$U1" tag_lat $size $pct)
			fcol="$f"
			[ $pct = 99 ] && fcol=""
			if [ $tr = shm ]; then
				p2=$(ucx_lat "$U2" tag_lat $size $pct)
				row "send $size B p$pct us (fi avg)" "$r" "$p1" "$p2" "$fcol"
			else
				row "send $size B p$pct us (fi avg)" "$r" "$p1" "$fcol"
			fi
		done
		j=$(rdmx_run $tr --op write -s $size -n $NL)
		for pct in 50 99; do
			key=median
			[ $pct = 99 ] && key=p99
			r=$(jget "lat_us.$key" <<<"$j")
			p1=$(ucx_lat "$U1" ucp_put_lat $size $pct)
			if [ $tr = shm ]; then
				p2=$(ucx_lat "$U2" ucp_put_lat $size $pct)
				row "write $size B p$pct us" "$r" "$p1" "$p2"
			else
				row "write $size B p$pct us" "$r" "$p1"
			fi
		done
	done
	for size in 65536 1048576; do
		n=$NB64 depth=64
		[ $size = 1048576 ] && n=$NB1M depth=16
		r=$(rdmx_run $tr --op write --bw -s $size -n $n -t $depth | jget gb_per_s)
		p1=$(ucx_bw "$U1" $size $n)
		if [ $tr = shm ]; then
			p2=$(ucx_bw "$U2" $size $n)
			row "write $size B GB/s" "$r" "$p1" "$p2"
		else
			row "write $size B GB/s" "$r" "$p1"
		fi
	done
done
echo
echo "ratio = rdmx / peer: at or below 1 is as good or better for latency,"
echo "at or above 1 for bandwidth. All figures from this one run."
