#!/usr/bin/env bash
# Description: contrib/grafana/rdmx.json asks only for what rdmx serves.
# Starts a bench server and a kv server with --metrics, puts traffic
# through them, scrapes both /metrics, and checks that every metric each
# panel's query names exists there, with every label the query filters or
# groups by; and that the JSON is a dashboard (panels, unique ids, one
# data source variable).
set -u
rdmx=${1:?usage: test_grafana.sh path/to/rdmx dashboard.json}
dash=${2:?}
source "$(dirname "$0")/common.sh"

if jq -e '.panels | length > 10' "$dash" >/dev/null 2>&1; then
	ok "the dashboard parses, $(jq '.panels | length' "$dash") panels"
else
	bad "the dashboard is not JSON with panels"
	exit 1
fi
[ "$(jq '[.panels[].id] | length' "$dash")" = "$(jq '[.panels[].id] | unique | length' "$dash")" ] &&
	ok "panel ids are unique" || bad "panel ids repeat"
others=$(jq -r '[.. | objects | select(has("datasource")) | .datasource |
	select(type == "object") | .uid] | unique | map(select(. != "${datasource}")) | join(" ")' "$dash")
[ -z "$others" ] && ok "every query uses the \${datasource} variable" ||
	bad "queries name other data sources: $others"
jq -r '.panels[] | select(.targets) | .targets[].expr' "$dash" >"$tmp/exprs"
[ -s "$tmp/exprs" ] && ok "$(wc -l <"$tmp/exprs") queries" || bad "no queries"

# Live metrics: a bench server used over tcp and shm, a kv server used.
start "$rdmx" bench :0 --metrics 127.0.0.1:0 || exit 1
bench_port=$port
bench_m=$(sed -n 's|.*metrics on http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$tmp/server")
"$rdmx" bench "127.0.0.1:$bench_port" --op write -n 200 --transport tcp >/dev/null 2>&1
"$rdmx" bench "127.0.0.1:$bench_port" --op read -n 200 --transport shm >/dev/null 2>&1
start "$rdmx" kv serve :0 --memory-mb 8 --metrics 127.0.0.1:0 || exit 1
kv_m=$(sed -n 's|.*metrics on http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$tmp/server")
"$rdmx" kv put "127.0.0.1:$port" k v >/dev/null 2>&1
"$rdmx" kv get "127.0.0.1:$port" k >/dev/null 2>&1
{ http_get "$bench_m" /metrics; http_get "$kv_m" /metrics; } | tr -d '\r' |
	grep '^rdmx_' >"$tmp/metrics"
grep -q '^rdmx_served_ops_total{transport="tcp",op="write"} [1-9]' "$tmp/metrics" &&
	ok "the live metrics have traffic in them" || bad "no traffic in the live metrics"

# Every metric a query names, and every label it matches or groups by.
while read -r expr; do
	for m in $(grep -oE 'rdmx_[a-z0-9_]+' <<<"$expr" | sort -u); do
		if ! grep -qE "^$m[{ ]" "$tmp/metrics"; then
			bad "no metric $m on /metrics (query: $expr)"
			continue
		fi
		# Labels matched inside this metric's braces.
		labels=$(grep -oE "$m\{[^}]*\}" <<<"$expr" | grep -oE '[a-z_]+(=~|!=|=)"' |
			grep -oE '^[a-z_]+' | grep -vE '^(job|instance)$')
		for l in $labels; do
			grep -qE "^$m\{([^}]*,)?$l=" "$tmp/metrics" && ok "$m has label $l" ||
				bad "$m has no label $l (query: $expr)"
		done
		ok "$m is served"
	done
	# by (...) labels: on every metric of the query that the sum covers.
	for l in $(grep -oE 'by \([a-z_, ]+\)' <<<"$expr" | tr -d '(),' | sed 's/^by//'); do
		[ "$l" = le ] && continue
		grep -qE "^rdmx_[a-z0-9_]+\{([^}]*,)?$l=" "$tmp/metrics" && ok "grouped by $l" ||
			bad "no metric has label $l (query: $expr)"
	done
done <"$tmp/exprs"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
