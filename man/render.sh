#!/usr/bin/env bash
# render.sh SRC OUT - the man pages of SRC (NAME.SECTION.md, pandoc's
# Markdown) as roff in OUT/manSECTION/NAME.SECTION, with a symbolic link
# for every other name the page's NAME section gives ("rdmx_mr_reg,
# rdmx_mr_dereg - ..." links rdmx_mr_dereg.3 to rdmx_mr_reg.3).
set -eu
src=${1:?usage: render.sh SRC OUT}
out=${2:?}
rm -rf "$out"
for md in "$src"/*.md; do
	page=$(basename "$md" .md) # rdmx_mr_reg.3
	section=${page##*.}
	name=${page%.*}
	mkdir -p "$out/man$section"
	pandoc --fail-if-warnings -s -f markdown -t man "$md" -o "$out/man$section/$page"
	# The names: the NAME section's lines up to " - ".
	names=$(sed -n '/^# NAME/,/^# /{/^# /d;p}' "$md" | tr '\n' ' ' |
		sed 's/ - .*//; s/,/ /g')
	for n in $names; do
		[ "$n" = "$name" ] || ln -s "$page" "$out/man$section/$n.$section"
	done
done
