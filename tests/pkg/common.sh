# Helpers the packaging tests share; sourced. A temporary $tmp and the
# background $pids go at exit, after pkg_cleanup if the test defines one.
# shellcheck shell=bash
tmp=$(mktemp -d)
pids=()
pass=0
fail=0
cleanup() {
	[ "$(type -t pkg_cleanup)" = function ] && pkg_cleanup
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
check() { # name command...
	local name=$1
	shift
	if "$@" >"$tmp/out" 2>&1; then ok "$name"; else
		bad "$name"
		tail -20 "$tmp/out"
	fi
}

# run_pair NAME TRANSPORT SERVER CLIENT PATTERN: SERVER -l on a loopback
# port, CLIENT against it, over TRANSPORT; ok when the client's output has
# PATTERN and both exit 0. Example programs (examples/basic) take these
# arguments.
run_pair() {
	local name=$1 t=$2 server=$3 client=$4 pattern=$5 port="" spid
	# Port 0: the kernel's choice, which no other test's socket holds.
	# The file emptied first, or a look before the job's redirection
	# reads the port of the pair before (start in tests/cli/common.sh).
	: >"$tmp/srv"
	RDMX_TRANSPORT=$t timeout 60 "$server" -l "127.0.0.1:0" >"$tmp/srv" 2>&1 &
	spid=$!
	pids+=("$spid")
	for _ in $(seq 200); do
		port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$tmp/srv")
		[ -n "$port" ] && break
		sleep 0.05
	done
	if RDMX_TRANSPORT=$t timeout 30 "$client" "127.0.0.1:$port" >"$tmp/cli" 2>&1 &&
		grep -q "over $t" "$tmp/cli" && grep -q -- "$pattern" "$tmp/cli" &&
		wait "$spid"; then
		ok "$t: $name$(grep -o ': [0-9.]* us each' "$tmp/cli")"
	else
		bad "$t: $name"
		cat "$tmp/srv" "$tmp/cli"
		kill "$spid" 2>/dev/null
	fi
	wait "$spid" 2>/dev/null
}

finish() {
	echo "$pass passed, $fail failed"
	[ "$fail" -eq 0 ]
}
