#!/usr/bin/env bash
# A soak: bench clients against a bench server on every software transport
# for MINUTES (fractions allowed: 0.5), the server's resident memory, open
# descriptors and CPU sampled each second. Fails when they grow: any
# descriptor more at the end than after the warm-up, or resident memory up
# by more than 4 MiB + 10%; the end is the least of the 5 s after the last
# client, so a session still closing is not counted. make test runs one
# minute.
#   scripts/soak.sh MINUTES [path/to/rdmx]
set -euo pipefail
minutes=${1:?usage: scripts/soak.sh MINUTES [path/to/rdmx]}
rdmx=${2:-build/apps/rdmx}
out=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$out"' EXIT
secs=$(awk -v m="$minutes" 'BEGIN { s = int(m * 60); print s < 20 ? 20 : s }')
warm=$((secs / 6))
transports="tcp shm"

# The server's port once it listens.
port_of() {
	for _ in $(seq 200); do
		sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$1" | grep . && return
		sleep 0.05
	done
	echo "soak: the server did not start:" >&2
	cat "$1" >&2
	return 1
}

# One line a second: seconds, resident KiB, descriptors, CPU ticks; on
# past the clients' end, until the script stops it.
sample() { # pid file
	local t=0 rss fds ticks
	while kill -0 "$1" 2>/dev/null && [ $t -lt $((secs + 30)) ]; do
		rss=$(awk '{ print $2 * 4 }' "/proc/$1/statm")
		fds=$(ls "/proc/$1/fd" | wc -l)
		ticks=$(awk '{ print $14 + $15 }' "/proc/$1/stat")
		echo "$t $rss $fds $ticks" >>"$2"
		sleep 1
		t=$((t + 1))
	done
}

# Clients one after another, each a new connection, every operation.
clients() { # transport port
	local end=$((SECONDS + secs)) n=0 ops=(send write read atomic)
	while [ $SECONDS -lt $end ]; do
		op=${ops[$((n % 4))]}
		if ! "$rdmx" bench "127.0.0.1:$2" --transport "$1" --op "$op" \
			-s 8 -D 2 --json >>"$out/clients-$1" 2>>"$out/errors-$1"; then
			echo "soak: a $op client over $1 failed:" >&2
			tail -5 "$out/errors-$1" >&2
			return 1
		fi
		n=$((n + 1))
	done
	echo "$n" >"$out/sessions-$1"
}

for t in $transports; do
	"$rdmx" bench :0 --transport "$t" >"$out/server-$t" 2>&1 &
	pids+=($!)
	echo $! >"$out/pid-$t"
done
for t in $transports; do
	port=$(port_of "$out/server-$t")
	sample "$(cat "$out/pid-$t")" "$out/samples-$t" &
	pids+=($!)
	clients "$t" "$port" &
	pids+=($!)
	echo $! >"$out/cpid-$t"
done
fail=0
for t in $transports; do
	wait "$(cat "$out/cpid-$t")" || fail=1
done
# A session the server is still closing is not growth; what persists is:
# the end figures are the smallest of the 5 s after the last client.
sleep 5
echo "soak: $secs s per transport, warm-up $warm s; the server's figures:"
for t in $transports; do
	s=$out/samples-$t
	# After the warm-up, and the least of the last 5 s.
	read -r rss0 fds0 < <(awk -v w="$warm" '$1 == w { print $2, $3 }' "$s")
	read -r rss1 fds1 ticks1 < <(tail -5 "$s" | awk 'NR == 1 || $2 < r { r = $2 }
		NR == 1 || $3 < f { f = $3 } { t = $4 } END { print r, f, t }')
	rssmax=$(awk -v w="$warm" '$1 >= w && $2 > m { m = $2 } END { print m }' "$s")
	ticks0=$(awk -v w="$warm" '$1 == w { print $4 }' "$s")
	n=$(cat "$out/sessions-$t" 2>/dev/null || echo 0)
	cpu=$(awk -v a="$ticks0" -v b="$ticks1" -v s="$((secs - warm))" \
		'BEGIN { printf "%.2f", (b - a) / 100 / (s > 0 ? s : 1) }')
	echo "  $t: $n sessions; resident $rss0 -> $rss1 KiB (peak $rssmax);" \
		"descriptors $fds0 -> $fds1; CPU $cpu cores"
	if [ "$fds1" -gt "$fds0" ] ||
		[ "$rss1" -gt $((rss0 + 4096 + rss0 / 10)) ]; then
		echo "soak: the $t server grew" >&2
		fail=1
	fi
done
[ $fail -eq 0 ] && echo "soak: no growth"
exit $fail
