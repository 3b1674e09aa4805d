# Helpers the command-line tests share; sourced with $rdmx set.
# shellcheck shell=bash
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0
fail=0

ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); sed 's/^/     | /' "$tmp/out" "$tmp/err" 2>/dev/null | head -20; }

# Start a server command in the background, its stderr with its stdout in
# $tmp/server (or in $server_err); sets $server, and $port once it listens.
# The file is emptied here first: the background job's own redirection
# may come after our first look, which then read the port of the server
# before, gone by now (a client refused, seen under load at -j 2).
start() {
	: >"$tmp/server"
	if [ -n "${server_err:-}" ]; then
		"$@" >"$tmp/server" 2>"$server_err" &
	else
		"$@" >"$tmp/server" 2>&1 &
	fi
	server=$!
	port=""
	for _ in $(seq 300); do
		port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$tmp/server")
		[ -n "$port" ] && return 0
		sleep 0.05
	done
	echo "server did not start:"; cat "$tmp/server"
	return 1
}
serve() { start "$rdmx" demo "$@"; }

# wait_grep FILE PATTERN: wait up to 10 s for an extended regex in FILE (a
# server's later lines: it listens before it publishes).
wait_grep() {
	for _ in $(seq 200); do
		grep -qE "$2" "$1" && return 0
		sleep 0.05
	done
	return 1
}

# Is $rdmx an ASan or TSan build (runtime linked in or not)?
sanitized() { grep -qaE '__(a|t)san_init' "$rdmx"; }

# run NAME EXPECTED_RC CMD...: run, keep stdout/stderr, check the exit code.
run() {
	local name=$1 want=$2
	shift 2
	"$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	[ "$rc" -eq "$want" ] || { bad "$name (exit $rc, expected $want)"; return 1; }
}

# fails_one_line NAME PATTERN CMD...: exit 1, and one line that has PATTERN.
fails_one_line() {
	local name=$1 pattern=$2
	shift 2
	run "$name" 1 "$@" && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
		grep -q -- "$pattern" "$tmp/err"
}

# Bad input: exit 1 and exactly one line, which names the problem.
one_line() {
	local name=$1 pattern=$2
	shift 2
	if fails_one_line "$name" "$pattern" "$@"; then
		ok "bad input, one line: $name"
	else
		bad "bad input: $name"
	fi
}

# refused NAME CMD...: CMD reaches no server (nobody listens there): exit 1,
# stdout empty, and two lines: the library's detail, then the command's
# own, which says what to check.
refused() {
	local name=$1
	shift
	if run "refused: $name" 1 "$@" && [ ! -s "$tmp/out" ] &&
		[ "$(wc -l <"$tmp/err")" -eq 2 ] &&
		grep -q "Connection refused" "$tmp/err" &&
		grep -q "is an rdmx server listening there?" "$tmp/err"; then
		ok "$name: connection refused, in two lines that say what to check"
	else
		bad "$name: connection refused"
	fi
}

# finish: the count, and the exit code.
# GET PATH from 127.0.0.1:PORT, headers and body on stdout.
http_get() { # port path
	exec 3<>"/dev/tcp/127.0.0.1/$1" || return 1
	printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$2" >&3
	cat <&3
	exec 3<&-
}

source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/free-port.sh"

# start_etcd: Debian's etcd on two free loopback ports, its data and log in
# $tmp; sets etcd_pid and etcd_url once it answers. A port taken between
# the choice and etcd's bind is tried again with others (three times).
start_etcd() {
	local try
	for try in 1 2 3; do
		etcd_cp=$(free_port)
		etcd_pp=$(free_port)
		[ "$etcd_cp" = "$etcd_pp" ] && continue
		rm -rf "$tmp/etcd"
		run_etcd && return 0
		echo "etcd on $etcd_cp/$etcd_pp did not come up (try $try):"
		tail -5 "$tmp/etcd.log"
	done
	return 1
}

# run_etcd: etcd on $etcd_cp/$etcd_pp and its data in $tmp/etcd (kept:
# after a kill -9, this starts it again as it was); sets $etcd_pid and
# $etcd_url, and returns once it answers.
run_etcd() {
	etcd --name t --data-dir "$tmp/etcd" \
		--listen-client-urls "http://127.0.0.1:$etcd_cp" \
		--advertise-client-urls "http://127.0.0.1:$etcd_cp" \
		--listen-peer-urls "http://127.0.0.1:$etcd_pp" \
		--initial-advertise-peer-urls "http://127.0.0.1:$etcd_pp" \
		--initial-cluster "t=http://127.0.0.1:$etcd_pp" \
		>>"$tmp/etcd.log" 2>&1 &
	etcd_pid=$!
	etcd_url="etcd://127.0.0.1:$etcd_cp"
	for _ in $(seq 200); do
		kill -0 "$etcd_pid" 2>/dev/null || break
		"$rdmx" registry ls "$etcd_url/ping" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	kill "$etcd_pid" 2>/dev/null
	wait "$etcd_pid" 2>/dev/null
	return 1
}

finish() {
	echo "$pass passed, $fail failed"
	[ "$fail" -eq 0 ]
}
