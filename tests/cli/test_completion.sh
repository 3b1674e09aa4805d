#!/usr/bin/env bash
# Description: bash completion (contrib/bash-completion/rdmx) offers what
# the rdmx at hand has: its commands, each command's modes and options (read
# from its --help), the values of --op, --transport and the like, files
# after --config.
set -u
rdmx=${1:?usage: test_completion.sh path/to/rdmx completion-file}
completion=${2:?}
source "$(dirname "$0")/common.sh"
source "$completion"

# complete LINE: COMPREPLY for the last word of LINE, one line.
complete_line() {
	read -r -a COMP_WORDS <<<"$1"
	[[ $1 == *" " ]] && COMP_WORDS+=("")
	COMP_WORDS[0]=$rdmx
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	_rdmx
	printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ' | sed 's/ $//'
}
expect() { # LINE WANT: the completions are exactly WANT
	local got
	got=$(complete_line "$1")
	if [ "$got" = "$2" ]; then ok "'$1' -> $2"; else
		echo "FAIL '$1': got '$got', want '$2'"
		fail=$((fail + 1))
	fi
}
has() { # LINE WORD: WORD is among the completions
	if grep -qw -- "$2" <<<"$(complete_line "$1")"; then ok "'$1' offers $2"; else
		echo "FAIL '$1' does not offer $2: $(complete_line "$1")"
		fail=$((fail + 1))
	fi
}

expect "rdmx " "bench demo info kv page registry version"
expect "rdmx d" "demo"
expect "rdmx demo " "lambda read send write"
expect "rdmx kv " "bench del get put serve"
expect "rdmx page " "bench serve"
expect "rdmx registry " "get ls publish watch"
expect "rdmx bench --op " "atomic read reg send write"
expect "rdmx page bench 127.0.0.1/mem --transport s" "shm"
expect "rdmx kv serve --evict " "lru noeviction"
has "rdmx bench --" "--tx-depth"
has "rdmx bench --" "--cpu"
has "rdmx demo lambda --" "--native"
has "rdmx kv bench 127.0.0.1 --" "--pipeline"
has "rdmx info --" "--peer"
touch "$tmp/my.yaml"
expect "rdmx bench -c $tmp/my" "$tmp/my.yaml"
expect "rdmx demo send 127.0.0.1 " ""

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
