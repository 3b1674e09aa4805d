# free_port: a loopback TCP port no socket uses now, in any state, below
# the kernel's ephemeral range (32768 up), where the clients of a test or
# benchmark take theirs while it runs. Sourced by the scripts that start
# servers on ports they choose (scripts/cluster-demo.sh, tests/cli,
# bench/kv-vs-redis.sh).
# shellcheck shell=bash
free_port() {
	local p
	while :; do
		p=$((10000 + RANDOM % 20000))
		ss -Htan "sport = :$p" | grep -q . || { echo "$p"; return; }
	done
}
