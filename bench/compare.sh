#!/usr/bin/env bash
# rdmx beside its peers on this host, in one run, with ratios:
#   shm: rdmx shm  vs UCX (UCX_TLS=posix,self and cma,posix,self), libfabric shm
#   tcp: rdmx tcp  vs UCX (UCX_TLS=tcp,self), libfabric tcp
# Latency (median and p99, one-way: half the round trip) at 8 B and 4 KiB for
# two-sided messages (rdmx send / ucx tag_lat / fi_pingpong) and one-sided
# writes (rdmx write / ucx ucp_put_lat); bandwidth (GB/s, 1e9 bytes) of
# one-sided writes at 64 KiB and 1 MiB (rdmx write --bw / ucx ucp_put_bw).
# ucx_perftest takes its percentiles (-R) from its last 2048 iterations
# only (its timing queue): rdmx's figures in the rows beside UCX are the
# same, from rdmx bench --last 2048. rdmx's over the whole run come in a
# section of their own at the end.
# Every tool spins. Servers run on CPU 0, clients on CPU 1, inside a network
# namespace that holds only loopback (the peers bind the wildcard address).
# fi_pingpong reports averages only; its columns say "avg". rdmx's buffers
# come from rdmx_mem_alloc (bench's default): over shm the initiator maps
# the target's and does one-sided requests itself. Bandwidth runs, as
# perftest's and ucx_perftest's, reuse one buffer.
#
# After those rows, in the same run: READ 4 KiB (rdmx read / ucp_get) and
# fetch-add (rdmx atomic / ucp_fadd) with p99.9; READ bandwidth at 64 KiB
# and 1 MiB (rdmx read --bw / ucp_get), and over tcp qperf's tcp_bw at
# 1 MiB, the stream limit of this host, beside rdmx's READ and WRITE; shm
# with heap buffers (malloc: the target's engine serves each request); the
# limits of this host, measured by the project's own programs (build/bench:
# a spinning shared cache line ping-pong, spinning and blocking TCP
# ping-pongs, memcpy); and
# sleeping waiters: rdmx's READ with the measuring side asleep (in
# rdmx_cq_wait, or in poll on rdmx_cq_fd) beside a blocking TCP ping-pong,
# where each message costs a cross-core wake-up, and the tcp ones again
# beside a raw round trip whose client sleeps (their floor). Rows say "spin"
# or "sleep"; then rdmx's latency rows beside UCX again, over all their
# samples; then shm's small requests beside UCX by vCPU placement: each
# run between two of the host's line ping-pongs, and the runs made while
# the two vCPUs shared a cache ("near") apart from the others ("far").
#
# The whole table is measured RUNS times (5 by default, as PEERS.md takes
# its peers'; 1 with QUICK=1) and each figure is the median of its runs:
# single runs swing by 20% and more here, and this host changes its pace
# for seconds to minutes at a time (its own shm line ping-pong reads 0.04,
# 0.07 or 0.25 us), so the tools take turns, a run of each per pass, and
# rdmx's runs and its peers' meet the same host. A run that printed
# nothing is left out of its median.
#
# usage: bench/compare.sh [--json] [--svg FILE]   (QUICK=1 for a short pass,
#                                                  RUNS=N for N passes)
#   --json  the table on stderr, and on stdout one JSON object: every row
#           with its section, label, rdmx figure, peers' figures and ratios
#   --svg   also WRITE latency against message size (8 B .. 256 KiB), rdmx
#           and UCX (ucp_put_lat), one panel per transport, drawn to FILE
# Needs root (unshare). Installs ucx-utils and libfabric-bin, builds rdmx.
set -euo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$0")/.."

if [ -z "${RDMX_BENCH_INNER:-}" ]; then
	[ "$(id -u)" -eq 0 ] || { echo "compare.sh: needs root (unshare --net)" >&2; exit 1; }
	for p in ucx-utils libfabric-bin qperf util-linux; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null
	done
	make -s build >/dev/null
	RDMX_BENCH_INNER=1 exec unshare --net -- "$SELF" "$@"
fi
JSON=0 SVG=""
while [ $# -gt 0 ]; do
	case $1 in
	--json) JSON=1 ;;
	--svg) SVG=$(realpath -m "${2:?--svg FILE}"); shift ;;
	*) echo "usage: bench/compare.sh [--json] [--svg FILE]" >&2; exit 2 ;;
	esac
	shift
done
# With --json the table goes to stderr; stdout carries the JSON alone.
[ $JSON = 1 ] && exec 3>&1 1>&2

ip link set lo up
RDMX=build/apps/rdmx
QUICK=${QUICK:-0}
RUNS=${RUNS:-$([ "$QUICK" = 1 ] && echo 1 || echo 5)}
PY=/usr/bin/python3
[ -x $PY ] || PY=python3

# draw_svg CURVE_TSV FILE CAPTION: WRITE latency against size, from the
# lines "transport size rdmx_us ucx_us" of CURVE_TSV.
draw_svg() {
	$PY - "$1" "$2" "$3" <<'PY'
import math, sys
pts = {}
for line in open(sys.argv[1]):
    tr, size, r, u = line.split("\t")
    for who, v in (("rdmx", r), ("ucx", u)):
        try:
            pts.setdefault(tr, {}).setdefault(who, []).append((int(size), float(v)))
        except ValueError:
            pass
W, H, PW, PH, L, T = 900, 380, 380, 280, 60, 40
out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
       'font-family="sans-serif" font-size="12">' % (W, H),
       '<rect width="100%" height="100%" fill="white"/>']
colors = {"rdmx": "#d62728", "ucx": "#1f77b4"}
for k, tr in enumerate(("shm", "tcp")):
    ox = L + k * (PW + 70)
    series = pts.get(tr, {})
    vals = [v for s in series.values() for _, v in s if v > 0] or [1]
    lo = math.floor(math.log10(min(vals)))
    hi = math.ceil(math.log10(max(vals)))
    hi = hi if hi > lo else lo + 1
    xs = (math.log2(8), math.log2(262144))
    X = lambda s: ox + (math.log2(s) - xs[0]) / (xs[1] - xs[0]) * PW
    Y = lambda v: T + PH - (math.log10(v) - lo) / (hi - lo) * PH
    out.append('<text x="%d" y="%d" font-size="14">%s: WRITE latency, median, '
               'one-way (us)</text>' % (ox, T - 15, tr))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" '
               'stroke="#888"/>' % (ox, T, PW, PH))
    for e in range(lo, hi + 1):
        y = Y(10 ** e)
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/>'
                   % (ox, y, ox + PW, y))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>'
                   % (ox - 5, y + 4, 10 ** e))
    for s in (8, 64, 512, 4096, 32768, 262144):
        lab = "%d B" % s if s < 1024 else "%d KiB" % (s // 1024)
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>'
                   % (X(s), T + PH + 16, lab))
    for i, (who, s) in enumerate(sorted(series.items())):
        s = [(a, v) for a, v in s if v > 0]
        if not s:
            continue
        path = " ".join("%.1f,%.1f" % (X(a), Y(v)) for a, v in s)
        out.append('<polyline points="%s" fill="none" stroke="%s" '
                   'stroke-width="2"/>' % (path, colors[who]))
        for a, v in s:
            out.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>'
                       '%s %s %d B: %.3f us</title></circle>'
                       % (X(a), Y(v), colors[who], tr, who, a, v))
        out.append('<text x="%d" y="%d" fill="%s">%s</text>'
                   % (ox + 10, T + 16 + 14 * i, colors[who], who))
out.append('<text x="%d" y="%d" fill="#555">message size (log); %s; both '
           'sides spin</text>' % (L, H - 10, sys.argv[3]))
out.append("</svg>")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PY
}

footer() { # RUNS
	echo
	echo "ratio = rdmx / peer: at or below 1 is as good or better for latency,"
	echo "at or above 1 for bandwidth. All figures from this one invocation,"
	if [ "$1" -gt 1 ]; then
		echo "each the median of $1 passes over the whole table (the tools take"
		echo "turns, a run each a pass). Every figure spins except the sleeping"
	else
		echo "one pass over the table. Every figure spins except the sleeping"
	fi
	echo "waiters' (rdmx sleeps per completion, its server spins; the"
	echo "tcp-block ping-pong sleeps on both sides)."
	echo "Percentiles beside UCX's are over the last 2048 samples of each run,"
	echo "as ucx_perftest takes its own; \"rdmx, every sample\" has rdmx's over"
	echo "all the samples of the same runs."
}

# RUNS passes: this script again for each (RUNS=1, its rows in JSON), then
# the medians, printed as one pass prints its table.
if [ "$RUNS" -gt 1 ] && [ -z "${COMPARE_PASSES:-}" ]; then
	passes=$(mktemp -d)
	trap 'rm -rf "$passes"' EXIT
	for k in $(seq "$RUNS"); do
		echo "compare.sh: pass $k of $RUNS" >&2
		COMPARE_PASSES=$passes COMPARE_PASS=$k RUNS=1 "$SELF" --json \
			${SVG:+--svg "$passes/pass.svg"} >"$passes/rows.$k.json" \
			2>"$passes/table.$k" || true
	done
	$PY - "$passes" "$RUNS" "$JSON" <<'PY'
import glob, json, os, statistics, sys
d, runs, want_json = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
order, rows = [], {}
for f in sorted(glob.glob(os.path.join(d, "rows.*.json"))):
    try:
        data = json.load(open(f))
    except ValueError:
        continue
    for r in data["rows"]:
        key = (r["section"], r["label"])
        first = "host" if "host" in r else "rdmx"
        if key not in rows:
            order.append(key)
            rows[key] = {"first": first, "vals": [], "peers": {}}
        rows[key]["vals"].append(r[first])
        for p, v in r["peers"].items():
            rows[key]["peers"].setdefault(p, []).append(v)
def med(vs):
    vs = [v for v in vs if v is not None]
    return round(statistics.median(vs), 3) if vs else None
fmt = lambda v: "n/a" if v is None else "%.3f" % v
out, section = [], None
for key in order:
    r = rows[key]
    v = med(r["vals"])
    peers = {p: med(vs) for p, vs in r["peers"].items()}
    if key[0] != section:
        section = key[0]
        print("\n%-26s %9s" % (section, r["first"]) +
              "".join(" %9s %6s" % (p, "ratio") for p in peers))
    ratios = {p: (round(v / pv, 3) if v is not None and pv else None)
              for p, pv in peers.items()}
    print("%-26s %9s" % (key[1], fmt(v)) + "".join(
        " %9s %6s" % (fmt(pv), "-" if ratios[p] is None else "%.2f" % ratios[p])
        for p, pv in peers.items()))
    out.append({"section": key[0], "label": key[1], r["first"]: v,
                "peers": peers, "ratios": ratios})
if want_json:
    with os.fdopen(3, "w") as f:
        json.dump({"runs": runs, "rows": out}, f, indent=1)
        f.write("\n")
PY
	if [ -n "$SVG" ]; then
		# The curve's medians, point by point.
		cat "$passes"/curve.*.tsv 2>/dev/null | $PY -c 'import statistics, sys
pts = {}
for line in sys.stdin:
    tr, size, r, u = line.rstrip("\n").split("\t")
    p = pts.setdefault((tr, int(size)), ([], []))
    for i, v in enumerate((r, u)):
        try: p[i].append(float(v))
        except ValueError: pass
for (tr, size), (r, u) in sorted(pts.items()):
    m = lambda vs: "%.3f" % statistics.median(vs) if vs else "n/a"
    print("%s\t%d\t%s\t%s" % (tr, size, m(r), m(u)))' >"$passes/curve.tsv"
		draw_svg "$passes/curve.tsv" "$SVG" "medians of $RUNS runs of bench/compare.sh"
		echo "wrote $SVG"
	fi
	footer "$RUNS"
	exit 0
fi
NL=20000 NB64=20000 NB1M=1000
LAST=2048 # ucx_perftest's TIMING_QUEUE_SIZE: the samples its -R reads
declare -A whole # rdmx's figure over the whole run, by row label
whole_rows=()
# rdmx's figure in a row beside UCX, into r: KEY (median, p99, p99_9) of
# the last $LAST samples of JSON; the whole run's is kept for the last
# section. Not in a $(...): that would keep nothing.
lastkey() { # KEY LABEL JSON
	whole["$2"]=$(jget "lat_us.$1" <<<"$3")
	whole_rows+=("$2")
	r=$(jget "last.$1" <<<"$3")
}
[ "$QUICK" = 1 ] && NL=4000 NB64=4000 NB1M=300
port=$((21000 + ${COMPARE_PASS:-0} * 500)) # a pass's own: none in TIME_WAIT
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$tmp"' EXIT

next_port() { port=$((port + 1)); }

# Nothing runs beside a measured run: each tool's output goes to a file
# and is read once the run is over. A parser at the end of its pipe starts
# with it, and python3 may be a pyenv shim that takes ~0.5 s of CPU to
# start: a 1 MiB shm WRITE run read 22 GB/s beside it, 43 alone.
# rdmx_run TRANSPORT ARGS... -> the client's JSON line. Buffers from
# rdmx_mem_alloc on both sides (bench's default), or with MEM=malloc from
# the heap on both.
rdmx_run() {
	local t=$1
	shift
	next_port
	RDMX_TRANSPORT=$t taskset -c 0 "$RDMX" bench ":$port" --once \
		--mem "${MEM:-mapped}" >"$tmp/srv" 2>&1 &
	sleep 0.2
	RDMX_TRANSPORT=$t timeout 120 taskset -c 1 "$RDMX" bench "127.0.0.1:$port" --json \
		--mem "${MEM:-mapped}" "$@" >"$tmp/cli" 2>/dev/null || true
	wait 2>/dev/null || true
	cat "$tmp/cli"
}
jget() { $PY -c 'import json,sys
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
		-t "$test" -s "$size" "$@" >"$tmp/cli" 2>/dev/null || true
	wait 2>/dev/null || true
	grep '^Final:' "$tmp/cli" || true
}
# column 3: the -R percentile latency (us); column 7: overall MB/s (MiB)
ucx_lat() { ucx_run "$1" "$2" "$3" -n $NL -w $((NL / 10)) -R "$4" | awk '{print $3}'; }
ucx_bw() { ucx_run "$1" ucp_put_bw "$2" -n "$3" | awk '{ if ($7) printf "%.3f\n", $7 * 1048576 / 1e9 }'; }

# fi PROVIDER EP SIZE -> usec/xfer (average)
fi_lat() {
	next_port
	taskset -c 0 fi_pingpong -e "$2" -p "$1" -B "$port" -I $NL -S "$3" >"$tmp/fsrv" 2>&1 &
	sleep 0.5
	timeout 120 taskset -c 1 fi_pingpong -e "$2" -p "$1" -P "$port" -I $NL -S "$3" 127.0.0.1 \
		>"$tmp/cli" 2>/dev/null || true
	wait 2>/dev/null || true
	awk 'NR == 2 { print $7 }' "$tmp/cli"
}

ratio() { $PY -c 'import sys
try: print(f"{float(sys.argv[1]) / float(sys.argv[2]):.2f}")
except Exception: print("-")' "$1" "$2"; }
v() { [ -n "$1" ] && echo "$1" || echo n/a; }

section=""
first=rdmx
heads=()
# A section's heading: its name, then the peers' column names; the first
# column is rdmx's, or with FIRST=host the host program's own figure.
head_row() { # section peer...
	section=$1
	first=${FIRST:-rdmx}
	shift
	heads=("$@")
	printf '\n%-26s %9s' "$section" "$first"
	for h in "$@"; do printf ' %9s %6s' "$h" ratio; done
	printf '\n'
}
row() { # label rdmx peer1 peer2 ...
	local label=$1 r=$2 i=0
	shift 2
	printf '%-26s %9s' "$label" "$(v "$r")"
	for p in "$@"; do printf ' %9s %6s' "$(v "$p")" "$(ratio "$r" "$p")"; done
	printf '\n'
	# For --json: section, label, then name=value per column.
	{
		printf '%s\t%s\t%s=%s' "$section" "$label" "$first" "$r"
		for p in "$@"; do
			printf '\t%s=%s' "${heads[$i]:-peer$i}" "$p"
			i=$((i + 1))
		done
		printf '\n'
	} >>"$tmp/rows.tsv"
}

for tr in shm tcp; do
	if [ $tr = shm ]; then
		U1=UCX_TLS=posix,self U2=UCX_TLS=cma,posix,self FP=shm FE=rdm
		head_row "shm (one host)" ucx-posix ucx-cma "fi-shm"
	else
		U1="UCX_TLS=tcp,self UCX_NET_DEVICES=lo" U2="" FP=tcp FE=msg
		head_row "tcp (loopback)" ucx-tcp "fi-tcp"
	fi
	for size in 8 4096; do
		j=$(rdmx_run $tr --op send -s $size -n $NL --last $LAST)
		f=$(fi_lat $FP $FE $size)
		for pct in 50 99; do
			key=median
			[ $pct = 99 ] && key=p99
			lastkey $key "$tr send $size B p$pct us" "$j"
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
		j=$(rdmx_run $tr --op write -s $size -n $NL --last $LAST)
		for pct in 50 99; do
			key=median
			[ $pct = 99 ] && key=p99
			lastkey $key "$tr write $size B p$pct us" "$j"
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
		[ $tr = tcp ] && [ $size = 1048576 ] && tcp_w1m=$r # beside qperf
		p1=$(ucx_bw "$U1" $size $n)
		if [ $tr = shm ]; then
			p2=$(ucx_bw "$U2" $size $n)
			row "write $size B GB/s" "$r" "$p1" "$p2"
		else
			row "write $size B GB/s" "$r" "$p1"
		fi
	done
done
# ucx in batch mode: the server runs ucp_get GETK times as many
# iterations, since ucx_perftest 1.13's get responder stops progressing
# after its own -n, and over tcp each get then waits ~1 ms.
GETK=40
ucx_batch() { # ENV ARGS... -> column COL (3) of "Final:" (-R percentile, us)
	local envs=$1
	shift
	next_port
	echo "x $*" >"$tmp/cli.batch"
	echo "x $*" | awk -v k=$GETK '/ucp_get/ { for (i = 1; i <= NF; i++)
		if ($i == "-n") $(i + 1) *= k } { print }' >"$tmp/srv.batch"
	env $envs taskset -c 0 ucx_perftest -p "$port" -b "$tmp/srv.batch" >"$tmp/usrv" 2>&1 &
	local srv=$!
	sleep 0.5
	env $envs timeout 120 taskset -c 1 ucx_perftest 127.0.0.1 -p "$port" \
		-b "$tmp/cli.batch" 2>/dev/null |
		awk -v c="${COL:-3}" '/^Final:/ { print $c }' || true
	kill $srv 2>/dev/null || true
	wait 2>/dev/null || true
}

# peers_for TR SECTION [COLUMN...]: UCX's settings for TR in U1 and U2
# (none over tcp) and the heading "TR: SECTION", UCX's columns, then more.
peers_for() {
	local tr=$1 name=$2
	shift 2
	if [ "$tr" = shm ]; then
		U1=UCX_TLS=posix,self U2=UCX_TLS=cma,posix,self
		head_row "shm: $name" ucx-posix ucx-cma "$@"
	else
		U1="UCX_TLS=tcp,self UCX_NET_DEVICES=lo" U2=""
		head_row "tcp: $name" ucx-tcp "$@"
	fi
}

for tr in shm tcp; do
	peers_for $tr "read and fetch-add"
	for op in read atomic; do
		size=4096 ut=ucp_get extra="-O 1" name="read 4096 B"
		[ $op = atomic ] && size=8 ut=ucp_fadd extra="" name="fadd 8 B"
		j=$(rdmx_run $tr --op $op -s $size -n $NL --last $LAST)
		for pct in 50 99 99.9; do
			key=median
			[ $pct = 99 ] && key=p99
			[ $pct = 99.9 ] && key=p99_9
			lastkey $key "$tr $name p$pct us" "$j"
			# shellcheck disable=SC2086
			p1=$(ucx_batch "$U1" -t $ut -s $size $extra -n $NL -w $((NL / 10)) -R $pct)
			if [ $tr = shm ]; then
				# shellcheck disable=SC2086
				p2=$(ucx_batch "$U2" -t $ut -s $size $extra -n $NL -w $((NL / 10)) -R $pct)
				row "$name p$pct us" "$r" "$p1" "$p2"
			else
				row "$name p$pct us" "$r" "$p1"
			fi
		done
	done
done

# Read bandwidth (rdmx read --bw / ucp_get, MB/s in column 7), and over
# tcp the stream limit of this host: qperf tcp_bw, 1 MiB messages.
gbps() { awk '{ if ($1) printf "%.3f\n", $1 * 1048576 / 1e9 }'; }
qperf_bw() { # SIZE -> GB/s
	next_port
	taskset -c 0 qperf --listen_port "$port" >/dev/null 2>&1 &
	local srv=$!
	sleep 0.3
	timeout 60 taskset -c 1 qperf -lp "$port" -m "$1" -uu 127.0.0.1 tcp_bw \
		>"$tmp/cli" 2>/dev/null || true
	kill $srv 2>/dev/null || true
	wait 2>/dev/null || true
	awk '$1 == "bw" { printf "%.3f\n", $3 / 1e9 }' "$tmp/cli"
}
for tr in shm tcp; do
	# shellcheck disable=SC2046
	peers_for $tr "read bandwidth" $([ $tr = tcp ] && echo qperf)
	for size in 65536 1048576; do
		n=$NB64 depth=64
		[ $size = 1048576 ] && n=$NB1M depth=16
		r=$(rdmx_run $tr --op read --bw -s $size -n $n -t $depth | jget gb_per_s)
		p1=$(COL=7 ucx_batch "$U1" -t ucp_get -s $size -n $n | gbps)
		if [ $tr = shm ]; then
			p2=$(COL=7 ucx_batch "$U2" -t ucp_get -s $size -n $n | gbps)
			row "read $size B GB/s" "$r" "$p1" "$p2"
		elif [ $size = 1048576 ]; then
			q=$(qperf_bw 1M)
			row "read $size B GB/s" "$r" "$p1" "$q"
			row "write $size B GB/s" "${tcp_w1m:-}" "" "$q"
		else
			row "read $size B GB/s" "$r" "$p1" ""
		fi
	done
done

# shm with heap buffers: no mapping, the target's engine serves each
# request (the path of memory from malloc).
head_row "shm: heap buffers (engine)"
j=$(MEM=malloc rdmx_run shm --op read -s 4096 -n $NL)
row "read 4096 B p50 us" "$(jget lat_us.median <<<"$j")"
row "read 4096 B p99 us" "$(jget lat_us.p99 <<<"$j")"
j=$(MEM=malloc rdmx_run shm --op atomic -n $NL)
row "fadd 8 B p50 us" "$(jget lat_us.median <<<"$j")"
j=$(MEM=malloc rdmx_run shm --op write -s 8 -n $NL)
row "write 8 B p50 us" "$(jget lat_us.median <<<"$j")"
j=$(MEM=malloc rdmx_run shm --op write --bw -s 65536 -n $NB64 -t 64)
row "write 65536 B GB/s" "$(jget gb_per_s <<<"$j")"

# The host's limits, by the project's own programs (build/bench), spinning.
BIN=build/bench
tcp_pp() { # SIZE ITERS [CLIENT_FLAG [SERVER_FLAG]] -> its JSON line (one-way)
	next_port
	taskset -c 0 "$BIN/tcp_pingpong" server "$port" ${4-${3:-}} >/dev/null 2>&1 &
	timeout 120 taskset -c 1 "$BIN/tcp_pingpong" client 127.0.0.1 "$port" "$1" "$2" ${3:-} || true
	wait 2>/dev/null || true
}
FIRST=host head_row "host limits (bench/)"
for size in 8 4096; do
	j=$("$BIN/shm_pingpong" $size $((NL * 5)) 0 1 || true)
	row "shm line ping-pong $size B p50" "$(jget lat_us.median <<<"$j")"
	row "shm line ping-pong $size B p99" "$(jget lat_us.p99 <<<"$j")"
	j=$(tcp_pp $size $NL --spin)
	row "tcp ping-pong spin $size B p50" "$(jget lat_us.median <<<"$j")"
	row "tcp ping-pong spin $size B p99" "$(jget lat_us.p99 <<<"$j")"
done
while read -r line; do
	row "memcpy $(sed 's/.*"case":"\([^"]*\)".*/\1/' <<<"$line") GB/s" \
		"$(jget gb_per_s <<<"$line")"
done <<<"$(taskset -c 1 "$BIN/memcpy_bw" 0.3)"

# Sleeping waiters: the measuring side sleeps for each completion (the
# server spins, as a NIC serves a READ), beside a blocking TCP ping-pong
# whose each one-way message is one cross-core wake-up: the goal is one.
# Heap buffers: on mapped ones a shm READ completes as it is posted, and
# nobody sleeps.
head_row "sleeping waiters" "tcp-block"
j=$(tcp_pp 4096 $((NL / 4)))
bm=$(jget lat_us.median <<<"$j") bp=$(jget lat_us.p99 <<<"$j")
declare -A slept
for tr in shm tcp; do
	for w in sleep fd; do
		j=$(MEM=malloc RDMX_PROGRESS_WAIT_SPIN=0 rdmx_run $tr --op read -s 4096 -n $((NL / 4)) --wait $w)
		slept["$tr $w p50"]=$(jget lat_us.median <<<"$j")
		slept["$tr $w p99"]=$(jget lat_us.p99 <<<"$j")
		row "$tr read 4096 B $w p50 us" "${slept["$tr $w p50"]}" "$bm"
		row "$tr read 4096 B $w p99 us" "${slept["$tr $w p99"]}" "$bp"
	done
done

# The tcp rows beside their floor: a raw round trip of 4096 B each way
# whose client sleeps in recv while the server spins, as rdmx's server
# does: one wake-up per READ, as the goal asks. tcp_pingpong reports half
# a round trip; a READ's latency is the whole.
head_row "sleeping, raw round trip" "tcp-rt"
j=$(tcp_pp 4096 $((NL / 4)) "" --spin)
twice() { awk -v x="$1" 'BEGIN { if (x == "n/a") print x; else printf "%.3f\n", 2 * x }'; }
fm=$(twice "$(jget lat_us.median <<<"$j")") fp=$(twice "$(jget lat_us.p99 <<<"$j")")
for w in sleep fd; do
	row "tcp read 4096 B $w p50 us" "${slept["tcp $w p50"]}" "$fm"
	row "tcp read 4096 B $w p99 us" "${slept["tcp $w p99"]}" "$fp"
done

# The rows beside UCX again, rdmx's figure over all its samples (start-up
# included): what rdmx bench reports by default.
head_row "rdmx, every sample"
for label in "${whole_rows[@]}"; do
	row "$label" "${whole[$label]}"
done

# shm's small requests by vCPU placement. On these VMs the hypervisor
# moves the two vCPUs between physical cores every few seconds: this
# host's own line ping-pong reads ~0.08 us while they share a last-level
# cache and ~0.26 while they do not, and every tool's small-request
# latency moves with it. A ratio of two runs made seconds apart then
# compares two placements as often as two libraries (write 8 B once read
# rdmx 0.29 against UCX 0.07 in a pass; in one placement rdmx read
# 0.11-0.14 and UCX 0.06-0.08).
# Here each tool runs PLACED_RUNS times in turn, each run between two line
# ping-pongs (8 B, 20000 round trips, a few ms); a run is "near" when both
# read below the cut between the pass's two clusters of ping-pongs (the
# geometric mean of its lowest and highest, and at least 1.8x the lowest:
# with one cluster, all runs are "near"), else "far"; each figure is the
# median of its runs in that placement (n/a: none met it), and ratio
# compares runs of one placement only. The placement changes within a
# second at times, so a run may straddle two: its ping-pongs then differ,
# and it counts as "far".
PLACED_RUNS=${PLACED_RUNS:-3}
pp_med() { "$BIN/shm_pingpong" 8 20000 0 1 2>/dev/null | jget lat_us.median; }
placed() { # NAME TOOL CMD...: the run's figure between two ping-pongs
	local name=$1 tool=$2 a b f
	shift 2
	a=$(pp_med)
	f=$("$@")
	b=$(pp_med)
	printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$tool" "$f" "$a" "$b" >>"$tmp/placed.tsv"
}
rdmx_last() { rdmx_run shm "$@" --last $LAST | jget last.median; }
U1=UCX_TLS=posix,self
: >"$tmp/placed.tsv"
for k in $(seq "$PLACED_RUNS"); do
	placed "send 8 B p50 us" rdmx rdmx_last --op send -s 8 -n $NL
	placed "send 8 B p50 us" ucx ucx_lat "$U1" tag_lat 8 50
	placed "write 8 B p50 us" rdmx rdmx_last --op write -s 8 -n $NL
	placed "write 8 B p50 us" ucx ucx_lat "$U1" ucp_put_lat 8 50
	placed "read 4096 B p50 us" rdmx rdmx_last --op read -s 4096 -n $NL
	placed "read 4096 B p50 us" ucx ucx_batch "$U1" -t ucp_get -s 4096 -O 1 \
		-n $NL -w $((NL / 10)) -R 50
	placed "fadd 8 B p50 us" rdmx rdmx_last --op atomic -s 8 -n $NL
	placed "fadd 8 B p50 us" ucx ucx_batch "$U1" -t ucp_fadd -s 8 \
		-n $NL -w $((NL / 10)) -R 50
done
head_row "shm by vCPU placement" ucx-posix
# "LABEL, near|far<TAB>RDMX<TAB>UCX" per line, the runs classified as
# above.
while IFS=$'\t' read -r label rv uv; do
	row "$label" "$rv" "$uv"
done < <($PY bench/placement.py "$tmp/placed.tsv")

# --svg: WRITE latency (median, one-way) against size, rdmx and UCX.
if [ -n "$SVG" ]; then
	: >"$tmp/curve.tsv"
	for tr in shm tcp; do
		U1=UCX_TLS=posix,self
		[ $tr = tcp ] && U1="UCX_TLS=tcp,self UCX_NET_DEVICES=lo"
		for size in 8 64 512 4096 32768 262144; do
			n=$((NL / 4))
			r=$(rdmx_run $tr --op write -s $size -n $n | jget lat_us.median)
			u=$(ucx_lat "$U1" ucp_put_lat $size 50)
			printf '%s\t%s\t%s\t%s\n' $tr $size "$r" "$u" >>"$tmp/curve.tsv"
		done
	done
	if [ -n "${COMPARE_PASSES:-}" ]; then # the passes' medians draw it
		cp "$tmp/curve.tsv" "$COMPARE_PASSES/curve.$COMPARE_PASS.tsv"
	else
		draw_svg "$tmp/curve.tsv" "$SVG" "all figures from one run of bench/compare.sh"
		echo "wrote $SVG"
	fi
fi

footer 1

if [ $JSON = 1 ]; then
	$PY - "$tmp/rows.tsv" >&3 <<'PY'
import json, sys
rows = []
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    cols = dict(c.split("=", 1) for c in f[2:])
    def num(v):
        try:
            return float(v)
        except ValueError:
            return None
    first = "host" if "host" in cols else "rdmx"
    r = num(cols.pop(first, ""))
    peers = {k: num(v) for k, v in cols.items()}
    ratios = {k: (round(r / v, 3) if r is not None and v else None)
              for k, v in peers.items()}
    rows.append({"section": f[0], "label": f[1], first: r,
                 "peers": peers, "ratios": ratios})
json.dump({"rows": rows}, sys.stdout, indent=1)
print()
PY
fi
