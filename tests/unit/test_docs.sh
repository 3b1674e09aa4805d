#!/usr/bin/env bash
# Description: the man pages' RUNTIME PARAMETERS agree with the config table:
# rdmx.7.md lists every key with its variable and default, rdmx_<x>.7.md the
# keys of section <x>, and no page names a key the table lacks.
set -u
rdmx=${1:?usage: test_docs.sh path/to/rdmx man-dir}
man=${2:?}
pass=0
fail=0

params() { sed -n '/^# RUNTIME PARAMETERS/,/^# SEE ALSO/p' "$1"; }

check() { # page key env default
	if grep -qF "$2 ($3), default $4" <<<"$(params "$1")"; then
		pass=$((pass + 1))
	else
		echo "FAIL $(basename "$1") lacks '$2 ($3), default $4'"
		fail=$((fail + 1))
	fi
}

rows=$(env -u RDMX_CONFIG "$rdmx" info --config | tail -n +2)
while read -r key _ dfl _ env _; do
	[ "$dfl" = "-" ] && dfl=empty
	check "$man/rdmx.7.md" "$key" "$env" "$dfl"
	section=${key%%.*}
	[ -f "$man/rdmx_$section.7.md" ] && check "$man/rdmx_$section.7.md" "$key" "$env" "$dfl"
done <<<"$rows"
for page in "$man"/rdmx*.7.md; do
	for key in $(params "$page" | grep -oE '^[a-z_.]+ \(RDMX_' | cut -d' ' -f1); do
		if grep -qE "^$key " <<<"$rows"; then
			pass=$((pass + 1))
		else
			echo "FAIL $(basename "$page") documents '$key', which rdmx info --config lacks"
			fail=$((fail + 1))
		fi
	done
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
