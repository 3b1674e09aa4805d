#!/usr/bin/env bash
# Description: every configuration row appears under RUNTIME PARAMETERS in
# the transport page with its variable and default, and the page names no
# key the table lacks.
set -u
rdmx=${1:?usage: test_docs.sh path/to/rdmx page.7.md}
page=${2:?}
pass=0
fail=0
params=$(sed -n '/^# RUNTIME PARAMETERS/,/^# /p' "$page")
rows=$(env -u RDMX_CONFIG "$rdmx" info --config | tail -n +2)
while read -r key _ dfl _ env _; do
	[ "$dfl" = "-" ] && dfl=empty
	if grep -qF "$key ($env), default $dfl" <<<"$params"; then
		pass=$((pass + 1))
	else
		echo "FAIL $page lacks '$key ($env), default $dfl'"
		fail=$((fail + 1))
	fi
done <<<"$rows"
for key in $(grep -oE '^[a-z_.]+ \(RDMX_' <<<"$params" | cut -d' ' -f1); do
	if grep -qE "^$key " <<<"$rows"; then
		pass=$((pass + 1))
	else
		echo "FAIL $page documents '$key', which rdmx info --config lacks"
		fail=$((fail + 1))
	fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
