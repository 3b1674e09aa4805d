#!/usr/bin/env bash
# Description: the man pages as people read them: every function librdmx
# exports (src/rdmx.map) has a page or a link in section 3, every rendered
# page is read by man without a warning and gives whatis a line, every link
# leads to a page, and every rdmx page a SEE ALSO names exists.
set -u
roff=${1:?usage: test_manpages.sh ROFF_DIR SRC_DIR}
src=${2:?}
if [ ! -d "$roff/man3" ]; then
	echo "skip: no rendered pages in $roff (pandoc missing at build time)"
	exit 77
fi
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }

for sym in $(grep -oE '^[[:space:]]+rdmx_[a-z0-9_]+;' "$src/src/rdmx.map" | tr -d ' \t;'); do
	[ -e "$roff/man3/$sym.3" ] && ok || bad "$sym has no page (man/*.3.md NAME)"
done
pages=0
for f in "$roff"/man*/*.[0-9]; do
	if [ -L "$f" ]; then
		[ -e "$f" ] && ok || bad "$(basename "$f") links to a missing page"
		continue
	fi
	pages=$((pages + 1))
	warnings=$(LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 \
		man --warnings -E UTF-8 -l -Tutf8 -Z "$f" 2>&1 >/dev/null)
	[ -z "$warnings" ] && ok || bad "$(basename "$f") renders with warnings: $warnings"
	lexgrog "$f" >/dev/null 2>&1 && ok || bad "$(basename "$f"): whatis cannot parse NAME"
done
[ "$pages" -ge 20 ] && ok || bad "only $pages pages rendered"
for md in "$src"/man/*.md; do
	for ref in $(grep -oE '\*\*rdmx[a-z_-]*\*\*\([0-9]\)' "$md" | tr -d '*'); do
		name=${ref%(*}
		sec=${ref#*(}
		sec=${sec%)}
		[ -e "$roff/man$sec/$name.$sec" ] && ok ||
			bad "$(basename "$md") refers to $ref, which has no page"
	done
done
echo "$pass passed, $fail failed ($pages pages)"
[ "$fail" -eq 0 ]
